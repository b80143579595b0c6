"""Notebook 14: tensor parallelism under graphs, and the charts.

One module per notebook topic: its lessons (pure: records and numbers to rows) and its
charts (plotly figures from records).
"""

from __future__ import annotations

from typing import Any

from labkit.checks import as_int
from labkit.measure.records import TPAllReduce, TPDecode, view
from labkit.measure.tp import TARGET_ALLREDUCE_BYTES
from labkit.teach.plots import base_layout, plotly_go, series_colors
from labkit.teach.verdicts import compare_stats, Difference


# ---------------------------------------------------------------------- lessons tp
# Notebook 14 (tensor parallelism): a Megatron-style split's arithmetic, rows of TP records.

#: the all-reduce of a batch-8 gpt2 decode step: 8 rows of 768 values in bf16 (12 KB)
DECODE_BYTES = TARGET_ALLREDUCE_BYTES
METHOD_LABELS = {
    "pg_eager": "NCCL, eager", "pg_graph": "NCCL, in a CUDA graph",
    "one_shot_eager": "symm_mem one-shot, eager", "one_shot_graph": "symm_mem one-shot, graph",
    "two_shot_eager": "symm_mem two-shot, eager", "two_shot_graph": "symm_mem two-shot, graph"}


def decode_label(method: str) -> str:
    """``tp2_graph_noop`` -> ``TP=2 graph, no-op all-reduce``."""
    head, _, rest = method.partition("_")
    words = {"eager_noop": "eager, no-op all-reduce", "graph_noop": "graph, no-op all-reduce",
             "graph_symm_mem": "graph, symm_mem all-reduce"}.get(rest, rest)
    return f"TP={head[2:]} {words}"


def allreduces_per_step(n_layer: int, *, vocab_parallel_embedding: bool = False) -> int:
    """All-reduces of a TP decode step: projection and MLP-out per layer, plus one for a
    vocabulary-split embedding (vLLM's ``VocabParallelEmbedding``)."""
    return 2 * as_int(n_layer, "n_layer", minimum=1) + bool(vocab_parallel_embedding)


def shard_shapes(d_model: int, n_head: int, world_size: int) -> dict[str, tuple[int, int]]:
    """Weight shapes ``(out, in)`` of one rank: QKV, MLP-in by rows; proj, MLP-out by columns."""
    if n_head % world_size:
        raise ValueError(f"n_head={n_head} is not divisible by world_size={world_size}: each "
                         "rank must hold whole heads")
    d, w = d_model, world_size
    return {"qkv": (3 * d // w, d), "proj": (d, d // w), "fc": (4 * d // w, d),
            "fc_out": (d, 4 * d // w)}


def rank_weight_share(n_layer: int, d_model: int, vocab_size: int, world_size: int) -> float:
    """The share of the one-GPU matmul weights one rank of ``world_size`` holds (and reads per
    step) when the layers' QKV, projection and MLP weights (``12 d_model²`` per layer) are split
    and the vocabulary head (``vocab_size × d_model``) stays whole on every rank, as in
    labkit's TP model: ``(head + layers / N) / (head + layers)``."""
    n_layer = as_int(n_layer, "n_layer", minimum=1)
    d, v = as_int(d_model, "d_model", minimum=1), as_int(vocab_size, "vocab_size", minimum=1)
    n = as_int(world_size, "world_size", minimum=1)
    head, layers = v * d, n_layer * 12 * d * d
    return (head + layers / n) / (head + layers)


def versus(record: Any, a: str, b: str, key: int) -> Difference:
    """``compare_stats`` of ``a`` and ``b`` at batch or bytes ``key`` (not interleaved)."""
    rec = getattr(record, "record", record)
    rec = rec if isinstance(rec, TPAllReduce) else view(rec, TPDecode)
    i = (rec.sizes_bytes if isinstance(rec, TPAllReduce) else rec.batch_sizes).index(key)
    return compare_stats(rec.times[a][i], rec.times[b][i], interleaved=False)


def tp_table(record: Any) -> list[dict]:
    """Per batch: every method's step µs and TP=1 / TP=N with graphs and eager, rounded."""
    rec = view(record, TPDecode)
    rows = []
    for b in rec.batch_sizes:
        row = {"batch": b, **{f"{decode_label(m)} (µs)": rec.at(m, b) and round(rec.at(m, b))
                              for m in rec.methods}}
        for mode in ("graph", "eager"):
            one, many = rec.at(f"tp1_{mode}", b), rec.at(rec.tp(mode), b)
            row[f"TP=1 / TP={rec.world_size}, {mode}"] = round(one / many, 2) if one and many \
                else None
        rows.append(row)
    return rows


def crossover(record: Any, mode: str = "graph") -> int | None:
    """The smallest batch from which TP=N stays faster than TP=1 in ``mode`` (or ``None``)."""
    rec = view(record, TPDecode)
    one = "tp1_eager" if mode == "eager" else "tp1_graph"
    t = [(rec.at(one, b), rec.at(rec.tp(mode), b)) for b in rec.batch_sizes]
    wins = [None if None in p else p[1] < p[0] for p in t]
    return next((b for i, b in enumerate(rec.batch_sizes)
                 if wins[i] and all(w is not False for w in wins[i:])), None)


def comm_split(record: Any, graph: bool = True) -> list[dict]:
    """Per batch: the TP=N step, its compute (no-op all-reduces), communication, its share."""
    rec, mode = view(record, TPDecode), "graph" if graph else "eager"
    return [{"batch": b, "step_us": s, "compute_us": rec.at(rec.tp(f"{mode}_noop"), b),
             "comm_us": c, "comm_share": c / s if c is not None and s else None}
            for b in rec.batch_sizes
            for s, c in [(rec.at(rec.tp(mode), b), rec.comm_us(b, graph=graph))]]


# ---------------------------------------------------------------------- plots tp
# Charts of notebook 14 (tensor parallelism) from ``tp_allreduce`` / ``tp_decode_<preset>``.

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
