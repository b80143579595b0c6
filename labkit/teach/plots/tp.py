"""Charts of notebook 14 (tensor parallelism), from ``tp_allreduce`` / ``tp_decode_<preset>``.

* :func:`allreduce_chart` — µs per all-reduce vs message size, one line per method (log-log);
* :func:`tp_step_chart` — decode-step µs per batch size: TP=1 vs TP=N, eager and graph;
* :func:`comm_split_chart` — the TP=N graph step split into compute (no-op all-reduces) and
  communication (the rest), stacked per batch size.
"""

from __future__ import annotations

from typing import Any

from labkit.measure.records import TPAllReduce, TPDecode, view
from labkit.teach.lessons.tp import METHOD_LABELS, TARGET_BYTES, comm_split, decode_label
from labkit.teach.plots import base_layout, register_template

AR_COLORS = {"pg_eager": "#d62728", "pg_graph": "#1f77b4", "one_shot_eager": "#ff9896",
             "one_shot_graph": "#2ca02c", "two_shot_eager": "#c5b0d5",
             "two_shot_graph": "#9467bd"}
STEP_COLORS = {"tp1_eager": "#ff9896", "tp1_graph": "#d62728", "eager": "#aec7e8",
               "graph": "#1f77b4", "graph_symm_mem": "#2ca02c", "eager_noop": "#c7c7c7",
               "graph_noop": "#7f7f7f"}


def allreduce_chart(record: Any, *, subtitle: str = ""):
    """Median µs per all-reduce vs message size per method (both axes log); a dotted line
    marks the 12 KB of the issue's target. Methods that did not run are left out."""
    register_template()
    import plotly.graph_objects as go

    rec = view(record, TPAllReduce)
    fig = go.Figure()
    x = [b / 1024 for b in rec.sizes_bytes]
    for m in rec.methods:
        ys = rec.median_us(m)
        if all(y is None for y in ys):
            continue
        fig.add_trace(go.Scatter(x=x, y=ys, name=METHOD_LABELS.get(m, m), mode="lines+markers",
                                 line=dict(color=AR_COLORS.get(m, "#444"),
                                           dash="dot" if m.endswith("eager") else "solid")))
    fig.add_vline(x=TARGET_BYTES / 1024, line_dash="dot", line_color="#999")
    return base_layout(fig, f"All-reduce latency, {rec.world_size} ranks ({rec.dtype})",
                       "message size (KB)", "µs per all-reduce (median)", subtitle=subtitle,
                       log_x=True, log_y=True)


def tp_step_chart(record: Any, *, subtitle: str = ""):
    """Decode-step µs per batch size: TP=1 and TP=N, eager and FULL graph (and the graph with
    the symmetric-memory all-reduce when recorded); grouped bars."""
    register_template()
    import plotly.graph_objects as go

    rec = view(record, TPDecode)
    x = [str(b) for b in rec.batch_sizes]
    fig = go.Figure()
    for m in ("tp1_eager", "tp1_graph", rec.tp("eager"), rec.tp("graph"),
              rec.tp("graph_symm_mem")):
        ys = rec.median_us(m) if m in rec.times else []
        if not ys or all(y is None for y in ys):
            continue
        key = m if m.startswith("tp1_") else m.partition("_")[2]
        fig.add_trace(go.Bar(x=x, y=ys, name=decode_label(m),
                             marker_color=STEP_COLORS.get(key, "#444"),
                             texttemplate="%{y:,.0f}", textposition="outside"))
    fig.update_layout(barmode="group")
    return base_layout(fig, f"Decode step, {rec.preset} ({rec.dtype}): one GPU vs "
                       f"{rec.world_size}", "batch size", "µs per step (median)",
                       subtitle=subtitle)


def comm_split_chart(record: Any, *, graph: bool = True, subtitle: str = ""):
    """The TP=N step per batch size, stacked: compute (the step with no-op all-reduces) and
    communication (the difference)."""
    register_template()
    import plotly.graph_objects as go

    rec = view(record, TPDecode)
    rows = comm_split(rec, graph=graph)
    x = [str(r["batch"]) for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=x, y=[r["compute_us"] for r in rows], name="compute",
                         marker_color="#7f7f7f", texttemplate="%{y:,.0f}"))
    fig.add_trace(go.Bar(x=x, y=[r["comm_us"] for r in rows], name="communication",
                         marker_color="#1f77b4", texttemplate="%{y:,.0f}"))
    fig.update_layout(barmode="stack")
    mode = "FULL graph" if graph else "eager"
    return base_layout(fig, f"TP={rec.world_size} step ({mode}): compute vs communication",
                       "batch size", "µs per step (median)", subtitle=subtitle)
