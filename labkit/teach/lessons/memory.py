"""Notebook 04 helpers: read a ``pool_memory_<preset>`` record.

The record (``labkit.measure.bench.measure_pool_memory``) holds, for ten batch sizes, the bytes of
each graph's private pool, the size of one shared pool captured largest-first or
smallest-first (and how it grew after each capture), and the capture times. Newer records add
the static logits buffer's bytes (outside the pool), the shared pool and the KV cache at two
``max_seq`` values, and the old whole-row gather path at one (all optional: older records
lack them; :func:`has_max_seq_data` says which kind is at hand). The functions here turn it
into table rows and a summary (of a record, or of the small live version that
:func:`labkit.measure.lesson_runs.live_pool_comparison` measures on a GPU).
"""

from __future__ import annotations

from typing import Any

from labkit.measure.records import PoolMemory, PoolOverwrite, view

MiB = 2**20
MODES = ("private", "shared_largest_first", "shared_smallest_first")


def mib(n_bytes: float | None) -> float | None:
    """Bytes to MiB (``None`` stays ``None``)."""
    return None if n_bytes is None else n_bytes / MiB


def pool_memory_table(data: Any) -> list[dict]:
    """One row per batch size: private pool (MiB), capture time (ms) in each mode, and the
    shared pool's size right after that size was captured (MiB), for both orders.
    ``data``: a ``pool_memory_<preset>`` record (Result, its data, or
    :class:`labkit.measure.records.PoolMemory`)."""
    pool = view(data, PoolMemory)
    rows = []
    for bs in pool.sizes:
        row = {"batch size": int(bs)}
        priv = pool.private.per_size_bytes.get(bs)
        row["private pool (MiB)"] = None if priv is None else round(priv / MiB, 2)
        for mode, short in (("shared_largest_first", "largest-first"),
                            ("shared_smallest_first", "smallest-first")):
            grown = pool.layout(mode).growth_bytes.get(bs)
            row[f"{short} pool after (MiB)"] = None if grown is None else round(grown / MiB, 2)
        for mode, short in (("private", "private"), ("shared_largest_first", "largest-first"),
                            ("shared_smallest_first", "smallest-first")):
            t = pool.layout(mode).capture_s.get(bs)
            row[f"capture {short} (ms)"] = None if t is None else round(t * 1e3, 1)
        rows.append(row)
    return rows


def pool_memory_summary(data: Any) -> dict:
    """Totals (bytes) and the ratios the notebook discusses.

    Keys: ``private_total``, ``shared_largest_first``, ``shared_smallest_first``,
    ``largest_private``, ``shared_over_largest_private`` (largest-first pool / largest single
    private pool), ``shared_over_private_total``, ``smallest_first_over_largest_first``,
    ``best_order`` (the order whose shared pool is smaller), ``capture_total_s`` per mode.
    """
    pool = view(data, PoolMemory)
    private_total = pool.private.total_bytes
    lf = pool.shared_largest_first.total_bytes
    sf = pool.shared_smallest_first.total_bytes
    largest = pool.largest_private_bytes
    if largest <= 0 or private_total <= 0 or lf <= 0:
        raise ValueError("pool_memory record holds zero-byte pools; it cannot be summarised")
    return {
        "private_total": private_total,
        "shared_largest_first": lf,
        "shared_smallest_first": sf,
        "largest_private": largest,
        "shared_over_largest_private": lf / largest,
        "shared_over_private_total": lf / private_total,
        "smallest_first_over_largest_first": sf / lf,
        "best_order": "largest_first" if lf <= sf else "smallest_first",
        "capture_total_s": {m: float(sum(pool.layout(m).capture_s.values())) for m in MODES},
    }


def summary_rows(data: Any) -> list[dict]:
    """The three strategies as table rows: total MiB, × the largest private pool, capture s."""
    s = pool_memory_summary(data)
    names = {"private": "private pool per size", "shared_largest_first":
             "one shared pool, largest first", "shared_smallest_first":
             "one shared pool, smallest first"}
    totals = {"private": s["private_total"], "shared_largest_first": s["shared_largest_first"],
              "shared_smallest_first": s["shared_smallest_first"]}
    return [{"strategy": names[m], "total (MiB)": round(totals[m] / MiB, 1),
             "x largest single pool": round(totals[m] / s["largest_private"], 2),
             "capture, all sizes (s)": round(s["capture_total_s"][m], 3)} for m in MODES]


def has_max_seq_data(data: Any) -> bool:
    """Whether the record carries the newer fields (pool at two ``max_seq`` values)."""
    return len(view(data, PoolMemory).by_max_seq) >= 2


def logits_buffer_bytes(data: Any, vocab_size: int | None = None,
                        bytes_per_element: int = 2) -> int | None:
    """Bytes of the static logits buffer all graphs write into (outside the pool): from the
    record when it holds ``logits_bytes``, else ``largest size x vocab_size x
    bytes_per_element`` when ``vocab_size`` is given, else ``None``."""
    pool = view(data, PoolMemory)
    if pool.logits_bytes is not None:
        return pool.logits_bytes
    if vocab_size is None:
        return None
    return max(pool.sizes) * int(vocab_size) * int(bytes_per_element)


def max_seq_rows(data: Any) -> list[dict]:
    """One row per measured ``max_seq`` (cache read in place), plus the old whole-row gather
    path when recorded: the shared largest-first pool and the KV cache, in MiB."""
    pool = view(data, PoolMemory)
    entries = [pool.by_max_seq[m] for m in sorted(pool.by_max_seq)]
    if pool.gather is not None:
        entries.append(pool.gather)
    return [{"max_seq": e.max_seq,
             "cache read": "in place" if e.in_place else "gather whole row per layer",
             "shared pool (MiB)": round(e.shared_largest_first_bytes / MiB, 1),
             "KV cache (MiB)": None if e.kv_cache_bytes is None
             else round(e.kv_cache_bytes / MiB, 1)} for e in entries]


def max_seq_summary(data: Any) -> dict | None:
    """How the pool and the cache change between the smallest and largest ``max_seq``
    measured (``None`` when the record has fewer than two). Keys: ``lo``, ``hi`` (the two
    max_seq values), ``pool_ratio`` (pool at hi / pool at lo), ``cache_ratio`` (the same for
    the KV cache, ``None`` if not recorded), ``gather_over_in_place`` (the gather path's pool
    over the in-place pool at the same max_seq, ``None`` if not recorded)."""
    pool = view(data, PoolMemory)
    if len(pool.by_max_seq) < 2:
        return None
    lo, hi = min(pool.by_max_seq), max(pool.by_max_seq)
    a, b = pool.by_max_seq[lo], pool.by_max_seq[hi]
    if a.shared_largest_first_bytes <= 0:
        raise ValueError(f"pool_memory record holds a zero-byte pool at max_seq={lo}; "
                         "it cannot be compared")
    cache_ratio = (b.kv_cache_bytes / a.kv_cache_bytes
                   if a.kv_cache_bytes and b.kv_cache_bytes is not None else None)
    g = pool.gather
    same = pool.by_max_seq.get(g.max_seq) if g is not None else None
    return {"lo": lo, "hi": hi,
            "pool_ratio": b.shared_largest_first_bytes / a.shared_largest_first_bytes,
            "cache_ratio": cache_ratio,
            "gather_over_in_place": (g.shared_largest_first_bytes
                                     / same.shared_largest_first_bytes
                                     if same is not None and same.shared_largest_first_bytes
                                     else None)}


# ----------------------------------------------------------------- the shared-pool overwrite

#: what the notebook prints on the CPU tier while no reference has been recorded
NO_OVERWRITE_REFERENCE = ("no H200 reference recorded yet for pool_overwrite: the "
                          "demonstration needs a CUDA GPU (graph pools exist only there); on a "
                          "GPU this cell runs it live")


def _shown(values: list[float]) -> str:
    return f"{values[0]:g}" if len(values) == 1 else "mixed " + ", ".join(f"{v:g}" for v in values)


def overwrite_survived(record: Any) -> bool:
    """Did graph B's kept output survive graph A's replay in the ``pool_overwrite`` record
    (Result, its data, or :class:`labkit.measure.records.PoolOverwrite`)?"""
    return not view(record, PoolOverwrite).overwritten


def overwrite_report(record: Any | None) -> str:
    """Plain-text account of a ``pool_overwrite`` record: the two pointers, B's output after
    each replay, and the two fixes. ``None`` (nothing recorded) gives
    :data:`NO_OVERWRITE_REFERENCE`."""
    if record is None:
        return NO_OVERWRITE_REFERENCE
    r = view(record, PoolOverwrite)
    keep = r.fix_keep_a_temporary
    keep_where = ("a different block" if keep.same_block is False else
                  "THE SAME block" if keep.same_block else "a block not recorded")
    return "\n".join([
        f"A's temporary at {r.a_temporary_ptr:#x}, B's output at {r.b_output_ptr:#x}: "
        f"{'the same block' if r.same_block else 'different blocks'} "
        f"({r.numel} float32 elements each)",
        f"replay A, then B (capture order), read B's output : {_shown(r.b_in_capture_order)}",
        f"replay B, read B's output                         : {_shown(r.b_after_replay_b)}",
        f"then replay A, read the SAME kept tensor          : {_shown(r.b_after_replay_a)} "
        f"(A's temporary holds {r.a_temporary_value:g}) -> "
        f"{'overwritten' if r.overwritten else 'not overwritten'}",
        f"fix 1, B's output copied (.clone()) before A's replay: the copy reads "
        f"{_shown(r.fix_clone.values_after_replay_a)} -> {'kept' if r.fix_clone.ok else 'LOST'}",
        f"fix 2, A's temporary kept alive: B's output gets {keep_where}; after A's replay it "
        f"reads {_shown(keep.values_after_replay_a)} -> {'kept' if keep.ok else 'LOST'}",
    ])


#: the fixes exercise 4.3 offers, by letter: which of them keep B's value through A's replay
OVERWRITE_FIXES = {"A": "keep a Python reference to B's output",
                   "B": "copy B's output (.clone()) right after B's replay",
                   "C": "keep A's temporary alive after its capture",
                   "D": "torch.cuda.synchronize() between B's replay and A's"}


def overwrite_answers(record: Any | None) -> dict:
    """What exercise 4.3 checks against: does B's kept output survive A's replay, and which of
    :data:`OVERWRITE_FIXES` keep B's value. From the ``pool_overwrite`` record when there is
    one (``source``: ``"record"``); else from the rule (an output is valid until the next
    replay of any graph in the pool, unless copied; ``source``: ``"rule"``)."""
    if record is None:
        return {"survives": False, "fixes": {"B", "C"}, "source": "rule"}
    r = view(record, PoolOverwrite)
    fixes = {k for k, ok in (("B", r.fix_clone.ok), ("C", r.fix_keep_a_temporary.ok)) if ok}
    if not r.overwritten:
        fixes |= {"A", "D"}
    return {"survives": not r.overwritten, "fixes": fixes, "source": "record"}
