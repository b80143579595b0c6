"""Notebook 14 (tensor parallelism), pure: records ``tp_allreduce`` / ``tp_decode_<preset>`` in,
rows, ratios, crossovers and sentences out; plus the arithmetic of a Megatron-style split.

Nothing here runs a model or times anything (that is :mod:`labkit.measure.tp`).
"""

from __future__ import annotations

from typing import Any, Sequence

from labkit.measure.records import TPAllReduce, TPDecode, view
from labkit.measure.tp import TARGET_ALLREDUCE_BYTES

#: the message size the issue's target is stated at: 8 rows of gpt2 (768) in bf16
TARGET_BYTES = TARGET_ALLREDUCE_BYTES

METHOD_LABELS = {
    "pg_eager": "NCCL, eager", "pg_graph": "NCCL, in a CUDA graph",
    "one_shot_eager": "symm_mem one-shot, eager", "one_shot_graph": "symm_mem one-shot, graph",
    "two_shot_eager": "symm_mem two-shot, eager", "two_shot_graph": "symm_mem two-shot, graph",
}


def decode_label(method: str) -> str:
    """A readable name for a ``tp_decode`` method (``tp2_graph_noop`` -> ``TP=2 graph, no-op
    all-reduce``)."""
    head, _, rest = method.partition("_")
    n = head[2:]
    words = {"eager": "eager", "graph": "graph", "eager_noop": "eager, no-op all-reduce",
             "graph_noop": "graph, no-op all-reduce",
             "graph_symm_mem": "graph, symm_mem all-reduce"}.get(rest, rest)
    return f"TP={n} {words}"


def allreduces_per_step(n_layer: int) -> int:
    """All-reduces in one tensor-parallel decode step: two per layer (attention output
    projection and MLP-out, both row-parallel); the replicated vocabulary head adds none."""
    if isinstance(n_layer, bool) or not isinstance(n_layer, int) or n_layer < 1:
        raise ValueError(f"n_layer must be a positive int, got {n_layer!r}")
    return 2 * n_layer


def allreduce_bytes(batch: int, d_model: int, bytes_per_value: int = 2) -> int:
    """Bytes of one decode-step all-reduce: the ``(batch, d_model)`` hidden state."""
    for name, v in (("batch", batch), ("d_model", d_model), ("bytes_per_value", bytes_per_value)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    return batch * d_model * bytes_per_value


def shard_shapes(d_model: int, n_head: int, world_size: int) -> dict[str, tuple[int, int]]:
    """Weight shapes ``(out, in)`` one rank holds of a block, Megatron-style: QKV and MLP-in
    split by output rows (column-parallel), projection and MLP-out by input columns
    (row-parallel). A clear error when the heads do not split evenly."""
    if n_head % world_size:
        raise ValueError(f"n_head={n_head} is not divisible by world_size={world_size}: each "
                         "rank must hold whole heads")
    d, w = d_model, world_size
    return {"qkv": (3 * d // w, d), "proj": (d, d // w), "fc": (4 * d // w, d),
            "fc_out": (d, 4 * d // w)}


def allreduce_rows(record: Any) -> list[dict]:
    """One row per message size: KB and µs per all-reduce per method (``None``: not run)."""
    rec = view(record, TPAllReduce)
    rows = []
    for i, b in enumerate(rec.sizes_bytes):
        row: dict[str, Any] = {"size_kb": b / 1024}
        for m in rec.methods:
            row[m] = rec.median_us(m)[i]
        rows.append(row)
    return rows


def graph_over_eager(record: Any, nbytes: int = TARGET_BYTES, kind: str = "pg") -> float | None:
    """``<kind>_graph / <kind>_eager`` at ``nbytes`` (``None``: either missing). The issue's
    target: at most 0.5 for NCCL at 12 KB."""
    rec = view(record, TPAllReduce)
    g, e = rec.at(f"{kind}_graph", nbytes), rec.at(f"{kind}_eager", nbytes)
    return None if g is None or e is None or e == 0 else g / e


def fastest_allreduce(record: Any, nbytes: int) -> tuple[str, float] | None:
    """(method, µs) of the fastest all-reduce at ``nbytes``; ``None`` when none was timed."""
    rec = view(record, TPAllReduce)
    timed = [(m, rec.at(m, nbytes)) for m in rec.methods]
    timed = [(m, t) for m, t in timed if t is not None]
    return min(timed, key=lambda mt: mt[1]) if timed else None


def tp_table(record: Any) -> list[dict]:
    """The TP=1 vs TP=N table: per batch size the step µs of each method, and the speed-up of
    TP=N over TP=1 with graphs (``> 1``: splitting pays) and eager."""
    rec = view(record, TPDecode)
    rows = []
    for b in rec.batch_sizes:
        row: dict[str, Any] = {"batch": b}
        for m in rec.methods:
            row[m] = rec.at(m, b)
        for mode in ("graph", "eager"):
            one, many = rec.at(f"tp1_{mode}", b), rec.at(rec.tp(mode), b)
            row[f"speedup_{mode}"] = None if one is None or many is None else one / many
        sm = rec.at(rec.tp("graph_symm_mem"), b)
        one = rec.at("tp1_graph", b)
        row["speedup_graph_symm_mem"] = None if sm is None or one is None else one / sm
        rows.append(row)
    return rows


def tp_table_display(record: Any) -> list[dict]:
    """:func:`tp_table` as text for a table: µs rounded, speed-ups as ``1.23x``, ``-`` where
    not measured, methods named in words."""
    rec = view(record, TPDecode)
    out = []
    for row in tp_table(rec):
        shown: dict[str, str] = {"batch": str(row["batch"])}
        for k, v in row.items():
            if k == "batch":
                continue
            name = (f"TP={rec.world_size} / TP=1 speed-up, {k[len('speedup_'):].replace('_', ' ')}"
                    if k.startswith("speedup_") else f"{decode_label(k)} (µs)")
            shown[name] = "-" if v is None else (f"{v:.2f}x" if k.startswith("speedup_")
                                                 else f"{v:,.0f}")
        out.append(shown)
    return out


def crossover(record: Any, mode: str = "graph") -> int | None:
    """The smallest recorded batch size from which TP=N is faster than TP=1 in ``mode``
    (``graph``, ``eager`` or ``graph_symm_mem``) at every larger recorded size too; ``None``
    when it never pays (or nothing was measured)."""
    rec = view(record, TPDecode)
    one_mode = "graph" if mode == "graph_symm_mem" else mode
    wins = []
    for b in rec.batch_sizes:
        one, many = rec.at(f"tp1_{one_mode}", b), rec.at(rec.tp(mode), b)
        wins.append(None if one is None or many is None else many < one)
    for i, b in enumerate(rec.batch_sizes):
        rest = [w for w in wins[i:] if w is not None]
        if rest and all(rest) and wins[i]:
            return b
    return None


def comm_split(record: Any, graph: bool = True) -> list[dict]:
    """Per batch size: the TP=N step (``step_us``), its compute alone (the same step with
    no-op all-reduces, ``compute_us``), the difference (``comm_us``) and its share."""
    rec = view(record, TPDecode)
    mode = "graph" if graph else "eager"
    rows = []
    for b in rec.batch_sizes:
        step, compute = rec.at(rec.tp(mode), b), rec.at(rec.tp(f"{mode}_noop"), b)
        comm = rec.comm_us(b, graph=graph)
        rows.append({"batch": b, "step_us": step, "compute_us": compute, "comm_us": comm,
                     "comm_share": None if comm is None or not step else comm / step})
    return rows


def per_allreduce_us(record: Any, batch: int, n_layer: int,
                     suffix: str = "graph") -> float | None:
    """Communication µs per all-reduce inside the graph at ``batch``: the step's
    communication (the ``tp<N>_<suffix>`` step, default the NCCL graph, minus the same graph
    with no-op all-reduces) divided by the all-reduces of a step."""
    rec = view(record, TPDecode)
    step, noop = rec.at(rec.tp(suffix), batch), rec.at(rec.tp("graph_noop"), batch)
    if step is None or noop is None:
        return None
    return (step - noop) / allreduces_per_step(n_layer)


def _fmt(v: float | None, unit: str = "µs") -> str:
    return "not measured" if v is None else f"{v:,.1f} {unit}"


def allreduce_sentence(record: Any, nbytes: int = TARGET_BYTES) -> str:
    """One sentence: eager vs graph NCCL and the symmetric-memory one-shot at ``nbytes``."""
    rec = view(record, TPAllReduce)
    r = graph_over_eager(rec, nbytes)
    parts = [f"At {nbytes / 1024:g} KB an all-reduce over {rec.world_size} ranks took "
             f"{_fmt(rec.at('pg_eager', nbytes))} eager with {rec.backend.upper()} and "
             f"{_fmt(rec.at('pg_graph', nbytes))} inside a CUDA graph"]
    if r is not None:
        parts.append(f" ({r:.2f}x of eager: the target is at most 0.5x, "
                     f"{'met' if r <= 0.5 else 'NOT met'})")
    one = rec.at("one_shot_graph", nbytes)
    if one is not None:
        parts.append(f"; the symmetric-memory one-shot kernel in a graph took {_fmt(one)}")
    elif "one_shot_graph" in {**rec.errors, **rec.skipped}:
        why = {**rec.skipped, **rec.errors}["one_shot_graph"].split(" | ")[0]
        parts.append(f"; the symmetric-memory one-shot did not run ({why})")
    return "".join(parts) + "."


def tp_sentence(record: Any) -> str:
    """One sentence on where TP=N pays with graphs, from the record."""
    rec = view(record, TPDecode)
    n = rec.world_size
    c = crossover(rec)
    rows = tp_table(rec)
    sp = {r["batch"]: r["speedup_graph"] for r in rows}
    shown = ", ".join(f"B={b}: {v:.2f}x" for b, v in sp.items() if v is not None)
    if not shown:
        return f"No TP=1 vs TP={n} graph step times were recorded."
    where = (f"TP={n} pays from batch {c} on" if c is not None else
             f"TP={n} never beats one GPU at the recorded batch sizes")
    return f"With FULL graphs, TP=1 time / TP={n} time is {shown}: {where}."


def symm_step_sentence(record: Any, n_layer: int) -> str | None:
    """Does the faster all-reduce make the step faster? Per batch size: the TP=N graph step
    with the symmetric-memory all-reduce over the same step with NCCL, and what one all-reduce
    costs inside each step (step minus the no-op step, over the step's all-reduces).
    ``None`` when the record has no symmetric-memory step."""
    rec = view(record, TPDecode)
    parts = []
    for b in rec.batch_sizes:
        symm, nccl = rec.at(rec.tp("graph_symm_mem"), b), rec.at(rec.tp("graph"), b)
        per_nccl = per_allreduce_us(rec, b, n_layer)
        per_symm = per_allreduce_us(rec, b, n_layer, "graph_symm_mem")
        if per_nccl is None or per_symm is None:
            continue
        parts.append(f"B={b}: {symm / nccl:.3f}x ({per_nccl:.1f} vs {per_symm:.1f} µs per "
                     "all-reduce)")
    if not parts:
        return None
    return (f"TP={rec.world_size} graph step with the symmetric-memory all-reduce over the same "
            f"step with NCCL, and one all-reduce inside the step (NCCL vs symmetric memory): "
            + "; ".join(parts) + ".")


def methods_recorded(rec: TPAllReduce | TPDecode, methods: Sequence[str]) -> list[str]:
    """Those of ``methods`` with at least one measured value in the typed record ``rec``."""
    if not isinstance(rec, (TPAllReduce, TPDecode)):
        raise TypeError(f"rec must be a TPAllReduce or TPDecode record (records.view), got "
                        f"{type(rec).__name__}")
    return [m for m in methods if m in rec.times and any(s is not None for s in rec.times[m])]
