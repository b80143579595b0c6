"""Charts of notebook 14 (tensor parallelism) from ``tp_allreduce`` / ``tp_decode_<preset>``."""

from __future__ import annotations

from typing import Any

from labkit.measure.records import TPAllReduce, TPDecode, view
from labkit.teach.lessons.tp import DECODE_BYTES, METHOD_LABELS, comm_split, decode_label
from labkit.teach.plots import base_layout, plotly_go, series_colors

AR_COLORS = {"pg_eager": "#d62728", "pg_graph": "#1f77b4", "one_shot_eager": "#ff9896",
             "one_shot_graph": "#2ca02c", "two_shot_eager": "#c5b0d5", "two_shot_graph": "#9467bd"}
STEP_COLORS = {"tp1_eager": "#ff9896", "tp1_graph": "#d62728", "eager": "#aec7e8",
               "graph": "#1f77b4", "graph_symm_mem": "#2ca02c"}


def allreduce_chart(record: Any, *, subtitle: str = ""):
    """Median µs per all-reduce vs message size per method; the batch-8 gpt2 message dotted."""
    go, rec = plotly_go(), view(record, TPAllReduce)
    colours = series_colors(list(rec.methods), AR_COLORS)
    fig = go.Figure([go.Scatter(x=[b / 1024 for b in rec.sizes_bytes], y=rec.median_us(m),
                                name=METHOD_LABELS.get(m, m), mode="lines+markers",
                                line=dict(color=colours[m],
                                          dash="dot" if m.endswith("eager") else "solid"))
                     for m in rec.methods if any(y is not None for y in rec.median_us(m))])
    fig.add_vline(x=DECODE_BYTES / 1024, line_dash="dot", line_color="#999")
    return base_layout(fig, f"All-reduce latency, {rec.world_size} ranks ({rec.dtype})",
                       "message size (KB)", "µs per all-reduce (median)", subtitle=subtitle,
                       log_x=True, log_y=True)


def tp_step_chart(record: Any, *, subtitle: str = ""):
    """Decode-step µs per batch size: TP=1 and TP=N, eager and graph (and symm_mem)."""
    go, rec = plotly_go(), view(record, TPDecode)
    ms = [m for m in ("tp1_eager", "tp1_graph", rec.tp("eager"), rec.tp("graph"),
                      rec.tp("graph_symm_mem"))
          if m in rec.times and any(y is not None for y in rec.median_us(m))]
    keys = {m: m if m.startswith("tp1_") else m.partition("_")[2] for m in ms}
    colours = series_colors(list(keys.values()), STEP_COLORS)
    fig = go.Figure([go.Bar(x=[str(b) for b in rec.batch_sizes], y=rec.median_us(m),
                            name=decode_label(m), texttemplate="%{y:,.0f}", textposition="outside",
                            marker_color=colours[keys[m]])
                     for m in ms])
    fig.update_layout(barmode="group")
    return base_layout(fig, f"Decode step, {rec.preset} ({rec.dtype}): one GPU vs {rec.world_size}",
                       "batch size", "µs per step (median)", subtitle=subtitle)


def comm_split_chart(record: Any, *, graph: bool = True, subtitle: str = ""):
    """The TP=N step per batch size, stacked: compute (no-op all-reduces) and communication."""
    go, rec = plotly_go(), view(record, TPDecode)
    rows = comm_split(rec, graph=graph)
    x = [str(r["batch"]) for r in rows]
    fig = go.Figure([go.Bar(x=x, y=[r[k] for r in rows], name=name, marker_color=c,
                            texttemplate="%{y:,.0f}")
                     for k, name, c in (("compute_us", "compute", "#7f7f7f"),
                                        ("comm_us", "communication", "#1f77b4"))])
    fig.update_layout(barmode="stack")
    return base_layout(fig, f"TP={rec.world_size} step ({'FULL graph' if graph else 'eager'}): "
                       "compute vs communication", "batch size", "µs per step (median)",
                       subtitle=subtitle)
