"""Charts of notebook 13: the latency–load curve, monitoring series, one metric per run."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from labkit.measure.records import ServeLoad, view
from labkit.teach.lessons import record_data
from labkit.teach.lessons.serving import runs_of
from labkit.teach.plots import base_layout, plotly_go, series_colors

MODE_COLORS = {"eager": "#d62728", "full": "#1f77b4", "exact": "#17becf", "piecewise": "#2ca02c"}
RUN_COLORS = ["#d62728", "#17becf", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def latency_load_chart(load: Any, *, key: str = "ttft_ms.p99", subtitle: str = ""):
    """Latency ``key`` and served requests/s over the offered rate, one line per mode."""
    go = plotly_go()
    from plotly.subplots import make_subplots

    rec = view(load, ServeLoad)
    fig = make_subplots(rows=1, cols=2, subplot_titles=(key.replace("_ms.", " ms "),
                                                        "served requests/s"))
    colours = series_colors(list(rec.modes), MODE_COLORS)
    for mode in rec.modes:
        line = dict(color=colours[mode])
        for col, k in ((1, key), (2, "request_throughput")):
            fig.add_trace(go.Scatter(x=rec.rates, y=rec.series(mode, k), name=mode,
                                     mode="lines+markers", line=line, showlegend=col == 1),
                          row=1, col=col)
    fig.add_trace(go.Scatter(x=rec.rates, y=rec.rates, name="served = offered",
                             mode="lines", line=dict(color="#999999", dash="dot")), row=1, col=2)
    fig.update_xaxes(type="log", title_text="offered rate (requests/s)")
    fig.update_yaxes(type="log", row=1, col=1)
    fig = base_layout(fig, "Latency–load curve", "", "", subtitle=subtitle)
    return fig.update_layout(margin=dict(t=110))  # the panel titles under the two-line title


def monitoring_chart(runs: Mapping[str, Any], *, subtitle: str = ""):
    """Graph hit rate, padding waste and eager fallbacks per window, one line per run."""
    go = plotly_go()
    from plotly.subplots import make_subplots

    if not runs:
        raise ValueError("no runs to chart; pass {label: serve record}")
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("graph hit rate (%)", "padded rows (% of rows computed)",
                                        "eager fallbacks (steps per window)"))
    for i, (name, rec) in enumerate(runs.items()):
        d, c = record_data(rec), RUN_COLORS[i % len(RUN_COLORS)]
        w = d.get("windows") or []
        x = [v["start_s"] for v in w]
        for row, ys in ((1, [100 * v["graph_hit_rate"] for v in w]),
                        (2, [100 * v["padded_waste"] for v in w]),
                        (3, [v["eager_fallbacks"] for v in w])):
            fig.add_trace(go.Scatter(x=x, y=ys, name=name, mode="lines+markers",
                                     line=dict(color=c, shape="hv"), showlegend=row == 1),
                          row=row, col=1)
        if trips := d.get("breaker_trips_s") or []:
            fig.add_trace(go.Scatter(x=trips, y=[0] * len(trips), mode="markers",
                                     name=f"{name}: breaker trips",
                                     marker=dict(symbol="x", size=10, color=c)), row=1, col=1)
    fig.update_xaxes(title_text="time since the start (s)", row=3, col=1)
    fig.update_layout(height=650, margin=dict(t=110))  # the panel titles under the title
    return base_layout(fig, "Monitoring: what a serving dashboard would plot", "", "",
                       subtitle=subtitle)


def runs_chart(sources: Mapping[str, Any], key: str = "ttft_ms.median", *, subtitle: str = ""):
    """``key`` of every recorded run of each source, in the order served (log scale)."""
    go = plotly_go()
    fig = go.Figure()
    for i, (name, src) in enumerate(sources.items()):
        ys = runs_of(src, key)
        fig.add_trace(go.Scatter(x=list(range(1, len(ys) + 1)), y=ys, name=name,
                                 mode="lines+markers",
                                 line=dict(color=RUN_COLORS[i % len(RUN_COLORS)])))
    fig.update_xaxes(dtick=1)
    return base_layout(fig, f"{key.replace('_ms.', ' ms ')} of each recorded run", "run",
                       key.replace("_ms.", " (ms) "), subtitle=subtitle, log_y=True)
