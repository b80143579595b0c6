"""Charts of the padding dispatcher (notebook 05).

* :func:`step_times` / :func:`tokens_per_s` — per batch size, eager vs the exact-size graph
  vs the padding dispatcher, from a ``dispatcher_<preset>`` record, with the captured sizes
  marked and the eager-fallback region (above the largest graph) shaded;
* :func:`dispatcher_overhead` — dispatcher minus raw replay at the captured sizes;
* :func:`padding_table_chart` — real vs padded rows for every batch size of a padding table;
* :func:`hit_waste` — hit rate and padding waste of several capture-size choices.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from labkit.measure.records import Dispatcher, view
from labkit.teach.plots import COLORS, bars, base_layout, color, register_template

_KEYS = {"eager": "eager", "graph_exact": "graph", "dispatcher": "dispatcher"}
_NAMES = {"eager": "eager", "graph_exact": "graph captured at exactly this size",
          "dispatcher": "padding dispatcher"}


def _mark_captures(fig, capture_sizes: Sequence[int], batch_sizes: Sequence[int]) -> None:
    """Dotted lines at the captured sizes, a shaded band above the largest one (eager)."""
    for c in capture_sizes:
        fig.add_vline(x=c, line_dash="dot", line_color="#bbbbbb", line_width=1)
    top = max(capture_sizes)
    above = [b for b in batch_sizes if b > top]
    if above:
        fig.add_vrect(x0=top, x1=max(above) * 1.15,
                      fillcolor=COLORS["eager"], opacity=0.07, line_width=0)
        # annotations on a log axis take log10 coordinates (shapes take data values)
        fig.add_annotation(x=math.log10(top), y=1, xref="x", yref="paper", text="eager fallback →",
                           showarrow=False, xanchor="right", yanchor="top",
                           font=dict(color=COLORS["eager"]))


def _series(disp: Dispatcher, field: str) -> dict[str, list[tuple[int, float]]]:
    """``(batch, value)`` per method: median µs (``field="times"``) or tokens/s."""
    bss = list(disp.batch_sizes)
    out = {}
    for key in ("eager", "graph_exact", "dispatcher"):
        if key not in disp.times:
            continue
        vals = disp.median_us(key) if field == "times" else disp.tokens_per_s(key)
        pts = [(b, v) for b, v in zip(bss, vals) if v is not None]
        if pts:
            out[key] = pts
    return out


def _by_batch(data: Any, field: str, *, title: str, y_title: str, subtitle: str,
              errors: bool):
    import plotly.graph_objects as go

    disp = view(data, Dispatcher)
    fig = go.Figure()
    bss = list(disp.batch_sizes)
    for key, pts in _series(disp, field).items():
        xs = [b for b, _ in pts]
        ys = [y for _, y in pts]
        err = None
        if errors and field == "times":
            full = {b: v for b, v in zip(bss, disp.times[key]) if v is not None}
            err = dict(type="data", symmetric=False,
                       array=[full[b].p90 - full[b].median for b in xs],
                       arrayminus=[full[b].median - full[b].p10 for b in xs])
        fig.add_trace(go.Scatter(
            x=xs, y=ys, name=_NAMES[key], error_y=err,
            mode="markers" if key == "graph_exact" else "lines+markers",
            marker=dict(size=9 if key == "graph_exact" else 6, color=color(_KEYS[key])),
            line=dict(color=color(_KEYS[key]))))
    _mark_captures(fig, disp.capture_sizes, bss)
    base_layout(fig, title, "batch size (dotted: captured sizes)", y_title, subtitle=subtitle,
                log_x=True)
    fig.update_layout(margin=dict(t=110))
    # a log axis takes its range in log10 units
    ticks, last = [], 0.0
    for b in bss:  # skip labels that would overlap their left neighbour
        if not last or b / last > 1.12:
            ticks.append(b)
            last = b
    fig.update_xaxes(tickvals=ticks, ticktext=[str(b) for b in ticks],
                     range=[math.log10(min(bss) * 0.8), math.log10(max(bss) * 1.15)])
    return fig


def step_times(data: Any, *, subtitle: str = "", errors: bool = True):
    """Median decode-step time (µs, p10–p90 bars) vs batch size for each method."""
    register_template()
    return _by_batch(data, "times", title="Decode step time: eager vs graph vs dispatcher",
                     y_title="step time (µs)", subtitle=subtitle, errors=errors)


def tokens_per_s(data: Any, *, subtitle: str = ""):
    """Tokens per second (batch size / step time) vs batch size for each method."""
    register_template()
    return _by_batch(data, "tokens_per_s", title="Decode throughput",
                     y_title="tokens / s", subtitle=subtitle, errors=False)


def dispatcher_overhead(data: Any, *, subtitle: str = ""):
    """Bars at the captured sizes (no padding): dispatcher time minus the raw replay of the
    same graph, i.e. the table lookup, copying inputs into the static buffers and slicing
    (and copying) the output."""
    register_template()

    xs, ys = [], []
    disp = view(data, Dispatcher)
    graph = disp.median_us("graph_exact") if "graph_exact" in disp.times else \
        [None] * len(disp.batch_sizes)
    for b, p, g, d in zip(disp.batch_sizes, disp.padded_to, graph, disp.median_us("dispatcher")):
        if p == b and g is not None and d is not None:
            xs.append(b)
            ys.append(d - g)
    if not xs:
        raise ValueError("the record has no batch size timed both as an exact graph and "
                         "through the dispatcher")
    fig = bars(xs, {"dispatcher": ys}, title="Dispatcher overhead over a raw replay",
               x_title="batch size (a captured size: no padding)", y_title="extra µs per step",
               subtitle=subtitle, text_fmt=".1f")
    return fig


def padding_table_chart(table: Sequence[int], *, title: str = "Padding table",
                        subtitle: str = ""):
    """Stacked bars per batch size ``b``: the ``b`` real rows and the ``table[b] - b`` padded
    rows; batch sizes with ``table[b] == 0`` (no graph large enough) are drawn as eager.
    ``table`` is :func:`labkit.dispatch.build_padding_table` output (index 0 unused)."""
    register_template()
    import plotly.graph_objects as go

    bs = list(range(1, len(table)))
    if not bs:
        raise ValueError("empty padding table; build it with build_padding_table(sizes, max_bs)")
    graph_b = [b for b in bs if table[b]]
    eager_b = [b for b in bs if not table[b]]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=graph_b, y=graph_b, name="real rows (graph)",
                         marker_color=COLORS["graph"],
                         hovertemplate="batch %{x}: %{y} real rows<extra></extra>"))
    fig.add_trace(go.Bar(x=graph_b, y=[table[b] - b for b in graph_b], name="padded rows",
                         marker_color="#c7c7c7",
                         customdata=[table[b] for b in graph_b],
                         hovertemplate="batch %{x} runs graph %{customdata}: %{y} padded rows"
                                       "<extra></extra>"))
    if eager_b:
        fig.add_trace(go.Bar(x=eager_b, y=eager_b, name="eager (no graph large enough)",
                             marker_color=COLORS["eager"]))
    fig.update_layout(barmode="stack", bargap=0.05, margin=dict(t=110))
    return base_layout(fig, title, "batch size", "rows computed", subtitle=subtitle)


def hit_waste(results: Mapping[str, object], *, title: str = "",
              subtitle: str = ""):
    """Grouped bars per capture-size choice: ``hit_rate`` and ``waste`` (shares, shown in %).
    ``results[name]`` is ``{"hit_rate": ..., "waste": ...}`` (``DispatchCounters.to_dict()``)
    or a :class:`labkit.sizes.PaddingReport` (``graph_hit_rate``, ``waste_fraction``)."""
    register_template()
    import plotly.graph_objects as go

    names = list(results)

    def share(r, key: str) -> float:
        if isinstance(r, Mapping):
            return float(r[key])
        return float(getattr(r, {"hit_rate": "graph_hit_rate", "waste": "waste_fraction"}[key]))

    fig = go.Figure()
    for key, col, name in (("hit_rate", COLORS["graph"], "steps served by a graph"),
                           ("waste", "#7f7f7f", "padded rows / rows computed")):
        fig.add_trace(go.Bar(x=names, y=[100 * share(results[n], key) for n in names], name=name,
                             marker_color=col, texttemplate="%{y:.1f}%",
                             textposition="outside"))
    fig.update_layout(barmode="group", margin=dict(t=110))
    fig.update_yaxes(range=[0, 112])
    return base_layout(fig, title or "Hit rate and padding waste", "capture sizes", "%",
                       subtitle=subtitle)

