"""Charts for choosing capture sizes (notebook 06): a trace's sizes, the Pareto front."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from labkit.teach.plots import COLORS, base_layout, plotly_go

MiB = 2**20
SET_COLORS = ["#ff7f0e", "#2ca02c", "#9467bd", "#1f77b4", "#8c564b", "#e377c2", "#17becf"]


def trace_histogram(dist: Mapping[int, float], capture_sets: Mapping[str, Sequence[int]]
                    | None = None, *, title: str = "Decode batch sizes in the trace",
                    subtitle: str = "", max_x: int | None = None):
    """Share of steps per batch size over a row of ticks per named capture-size list."""
    go = plotly_go()
    from plotly.subplots import make_subplots

    if not dist:
        raise ValueError("empty distribution; pass labkit.sizes.to_distribution(trace)")
    sets, xs = dict(capture_sets or {}), sorted(dist)
    hi = max_x or max(xs + [max(s) for s in sets.values() if s])
    rows = 2 if sets else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        row_heights=[0.7, 0.3] if sets else [1.0])
    fig.add_trace(go.Bar(x=xs, y=[100 * dist[x] for x in xs], marker_color=COLORS["cpu"],
                         showlegend=False,
                         hovertemplate="batch %{x}: %{y:.2f}% of steps<extra></extra>"), 1, 1)
    for i, (name, sizes) in enumerate(sets.items()):
        shown = [s for s in sorted(sizes) if s <= hi]
        fig.add_trace(go.Scatter(x=shown, y=[name] * len(shown), mode="markers", showlegend=False,
                                 marker=dict(symbol="line-ns-open", size=14, line_width=2,
                                             color=SET_COLORS[i % len(SET_COLORS)]),
                                 hovertemplate=f"{name}: capture size %{{x}}<extra></extra>"),
                      2, 1)
    base_layout(fig, title, "", "% of decode steps", subtitle=subtitle)
    fig.update_layout(bargap=0.1, height=420 + 30 * len(sets))
    fig.update_xaxes(range=[0, hi + 1])
    fig.update_xaxes(title_text="batch size (rows per decode step)", row=rows, col=1)
    if sets:
        fig.update_yaxes(autorange="reversed", row=2, col=1)
    return fig


def pareto_chart(front: Sequence, *, chosen=None, named: Mapping[str, tuple[float, float]]
                 | None = None, budget: float | None = None,
                 title: str = "Graph memory vs expected decode step time",
                 subtitle: str = ""):
    """The Pareto front as a step line, ``chosen`` a star, ``named`` points, ``budget`` a line."""
    go = plotly_go()
    if not front:
        raise ValueError("empty Pareto front; compute it with labkit.sizes.pareto_front")
    fig = go.Figure(go.Scatter(
        x=[p.memory / MiB for p in front], y=[p.expected_cost for p in front],
        mode="lines+markers", line_shape="hv", name="Pareto front (optimal sets)",
        line=dict(color=COLORS["graph"]), marker=dict(size=7),
        text=[f"k={p.k}: {list(p.sizes)}" for p in front],
        hovertemplate="%{text}<br>%{x:.2f} MiB, %{y:.1f} µs<extra></extra>"))
    for i, (name, (mem, cost)) in enumerate((named or {}).items()):
        fig.add_trace(go.Scatter(x=[mem / MiB], y=[cost], mode="markers+text", name=name,
                                 text=[name], textposition="top center",
                                 marker=dict(size=11, symbol="diamond",
                                             color=SET_COLORS[i % len(SET_COLORS)])))
    if chosen is not None:
        fig.add_trace(go.Scatter(x=[chosen.memory / MiB], y=[chosen.expected_cost],
                                 mode="markers", name=f"chosen: {list(chosen.sizes)}",
                                 marker=dict(size=20, symbol="star", color=COLORS["dispatcher"],
                                             line=dict(color="black", width=1))))
    if budget is not None:
        fig.add_vline(x=budget / MiB, line_dash="dash", line_color="#444",
                      annotation_text="memory budget", annotation_position="bottom right")
    fig.update_layout(margin=dict(t=110))
    return base_layout(fig, title, "graph memory (MiB)", "expected step time (µs)",
                       subtitle=subtitle)
