"""Charts of notebook 12: decode-step time against the bandwidth floor per batch size
(``roofline_<preset>``), the bytes a step moves (from a config, no GPU needed), and N decode
steps per graph against one-step graphs (``multistep_<preset>``).

Inputs are records (a :class:`labkit.measure.results.Result` or its ``data`` dict); a Result's
provenance becomes the subtitle unless ``subtitle`` is given.
"""

from __future__ import annotations

from typing import Any, Sequence

from labkit.measure.records import Multistep, Roofline, view
from labkit.teach.lessons import record_provenance
from labkit.teach.lessons import roofline as lr
from labkit.teach.plots import color
from labkit.teach.plots.timing import finish, stats_error_bars

#: one colour per step variant (eager and graph keep the suite's colours)
VARIANT_COLORS: dict[str, str] = {
    "eager": color("eager"), "graph": color("graph"), "fused": "#17becf",
    "compile_reduce_overhead": color("compile"), "compile_manual_graph": "#e377c2",
}
MULTISTEP_COLORS: dict[str, str] = {"host_sync": color("eager"), "one_step_graphs": color("graph"),
                                    "multistep": "#2ca02c"}
FLOOR_COLOR = "#444444"


def _sub(record: Any, subtitle: str | None) -> str:
    return record_provenance(record) if subtitle is None else subtitle


def floor_chart(record: Any, *, variants: Sequence[str] | None = None,
                subtitle: str | None = None):
    """Median step time per batch size (log–log), one line per variant with p10–p90 whiskers,
    and the floor (bytes / measured copy bandwidth, or the compute floor where larger) as a
    dashed line."""
    import plotly.graph_objects as go

    r = view(record, Roofline)
    variants = list(variants or r.methods)
    missing = [v for v in variants if v not in r.times]
    if missing:
        raise KeyError(f"the roofline record has no variant(s) {missing}; it has {r.methods}")
    fig = go.Figure()
    for v in variants:
        xs = [b for b, t in zip(r.batch_sizes, r.median_us(v)) if t is not None]
        st = [s for s in r.times[v] if s is not None]
        fig.add_trace(go.Scatter(x=xs, y=[s.median for s in st], name=lr.variant_label(v),
                                 mode="lines+markers",
                                 line=dict(color=VARIANT_COLORS.get(v, "#17becf")),
                                 error_y=stats_error_bars(st)))
    fig.add_trace(go.Scatter(x=r.batch_sizes, y=r.roofline_us(), mode="lines",
                             name=f"floor ({r.bandwidth_gbps / 1000:.2f} TB/s copy bandwidth)",
                             line=dict(color=FLOOR_COLOR, dash="dash")))
    return finish(fig, f"Decode step against its floor ({r.preset}, {r.config['n_layer']} "
                  f"layers, {r.context} positions per row)", "batch size",
                  "µs per step (median)", subtitle=_sub(record, subtitle), log_x=True,
                  log_y=True)


def bytes_chart(cfg: Any, batch_sizes: Sequence[int], context: int, *, title: str = ""):
    """Stacked bars: MB one step moves per batch size, weights vs KV read vs the rest
    (:func:`labkit.teach.lessons.roofline.bytes_rows`); runs anywhere, no record needed."""
    import plotly.graph_objects as go

    rows = lr.bytes_rows(cfg, batch_sizes, context)
    cats = [str(r["batch"]) for r in rows]
    fig = go.Figure()
    for key, col in (("weights (MB)", color("graph")), ("KV read (MB)", "#ff7f0e"),
                     ("logits + KV write + embeddings (MB)", "#7f7f7f")):
        fig.add_trace(go.Bar(x=cats, y=[r[key] for r in rows], name=key.replace(" (MB)", ""),
                             marker_color=col))
    fig.update_layout(barmode="stack")
    return finish(fig, title or f"Bytes one decode step moves ({context} positions per row)",
                  "batch size", "MB per step")


def multistep_chart(record: Any, *, subtitle: str | None = None):
    """µs per decode step (one token per row) per batch size: a host round trip per step,
    one-step graphs fed on the device, N steps in one graph."""
    import plotly.graph_objects as go

    m = view(record, Multistep)
    cats = [str(b) for b in m.batch_sizes]
    fig = go.Figure()
    for k in m.methods:
        fig.add_trace(go.Bar(x=cats, y=m.median_us(k),
                             name=lr.MULTISTEP_LABELS.get(k, k).replace("N steps",
                                                                        f"{m.n_steps} steps"),
                             marker_color=MULTISTEP_COLORS.get(k, "#444444"),
                             error_y=stats_error_bars(m.times[k])))
    fig.update_layout(barmode="group")
    return finish(fig, f"{m.n_steps} decode steps: per-step time ({m.preset})", "batch size",
                  "µs per step (median)", subtitle=_sub(record, subtitle))
