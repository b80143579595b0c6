"""Charts of the padding dispatcher (notebook 05): step times, padding table, hit rate, waste."""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Mapping, Sequence

from labkit.measure.records import Dispatcher, view
from labkit.teach.plots import COLORS, base_layout, color, plotly_go, stats_error_bars

_LINES = {"eager": ("eager", "eager"),
          "graph_exact": ("graph", "a graph captured at exactly this size (a capture of its own)"),
          "dispatcher": ("dispatcher", "padding dispatcher")}


def step_times(data: Any, *, subtitle: str = ""):
    """Median step time vs batch size per method, captured sizes dotted, eager fallback shaded."""
    go = plotly_go()
    disp, fig = view(data, Dispatcher), go.Figure()
    bss = list(disp.batch_sizes)
    for key, (col, name) in _LINES.items():
        pts = [(b, t) for b, t in zip(bss, disp.times.get(key, [])) if t is not None]
        if not pts:
            continue
        exact = key == "graph_exact"
        fig.add_trace(go.Scatter(x=[b for b, _ in pts], y=[t.median for _, t in pts], name=name,
                                 error_y=stats_error_bars([t for _, t in pts]),
                                 mode="markers" if exact else "lines+markers",
                                 marker=dict(size=9 if exact else 6, color=color(col)),
                                 line=dict(color=color(col))))
    for c in disp.capture_sizes:
        fig.add_vline(x=c, line_dash="dot", line_color="#bbbbbb", line_width=1)
    top, above = max(disp.capture_sizes), [b for b in bss if b > max(disp.capture_sizes)]
    if above:
        fig.add_vrect(x0=top, x1=max(above) * 1.15, fillcolor=COLORS["eager"], opacity=0.07,
                      line_width=0)
        # annotations on a log axis take log10 coordinates (shapes take data values)
        fig.add_annotation(x=math.log10(top), y=1, xref="x", yref="paper", showarrow=False,
                           text="eager fallback →", xanchor="right", yanchor="top",
                           font=dict(color=COLORS["eager"]))
    base_layout(fig, "Decode step time: eager vs graph vs dispatcher",
                "batch size (dotted: captured sizes)", "step time (µs)", subtitle=subtitle,
                log_x=True)
    ticks = [b for i, b in enumerate(bss) if i == 0 or b / bss[i - 1] > 1.12]
    fig.update_xaxes(tickvals=ticks, ticktext=[str(b) for b in ticks],
                     range=[math.log10(min(bss) * 0.8), math.log10(max(bss) * 1.15)])
    return fig.update_layout(margin=dict(t=110))


def padding_table_chart(table: Sequence[int], *, title: str = "Padding table",
                        subtitle: str = ""):
    """Real and padded rows per batch size of a padding table (``0``: drawn as eager)."""
    go = plotly_go()
    bs = list(range(1, len(table)))
    if not bs:
        raise ValueError("empty padding table; build it with build_padding_table(sizes, max_bs)")
    graph_b, eager_b = [b for b in bs if table[b]], [b for b in bs if not table[b]]
    fig = go.Figure([
        go.Bar(x=graph_b, y=graph_b, name="real rows (graph)", marker_color=COLORS["graph"]),
        go.Bar(x=graph_b, y=[table[b] - b for b in graph_b], name="padded rows",
               marker_color="#c7c7c7", customdata=[table[b] for b in graph_b],
               hovertemplate="batch %{x} runs graph %{customdata}: %{y} padded rows"
                             "<extra></extra>")])
    if eager_b:
        fig.add_trace(go.Bar(x=eager_b, y=eager_b, name="eager (no graph large enough)",
                             marker_color=COLORS["eager"]))
    fig.update_layout(barmode="stack", bargap=0.05, margin=dict(t=110))
    return base_layout(fig, title, "batch size", "rows computed", subtitle=subtitle)


def hit_waste(results: Mapping[str, Any], *, title: str = "", subtitle: str = ""):
    """Hit rate and waste (%) per size choice (``StepCounters.to_dict()`` or PaddingReport)."""
    go = plotly_go()
    vals = {n: (r["hit_rate"], r["waste"]) if isinstance(r, Mapping) else
            (r.graph_hit_rate, r.waste_fraction) for n, r in results.items()}
    fig = go.Figure([go.Bar(x=list(vals), y=[100 * v[i] for v in vals.values()], name=name,
                            marker_color=col, texttemplate="%{y:.1f}%", textposition="outside")
                     for i, (col, name) in enumerate(((COLORS["graph"], "steps served by a graph"),
                                                      ("#7f7f7f", "padded rows / rows computed")))])
    fig.update_layout(barmode="group", margin=dict(t=110))
    fig.update_yaxes(range=[0, 112])
    return base_layout(fig, title or "Hit rate and padding waste", "capture sizes", "%",
                       subtitle=subtitle)
