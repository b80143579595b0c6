"""Notebook 04 helpers: read a ``pool_memory_<preset>`` record, and a small live comparison.

The record (``labkit.measure.bench.measure_pool_memory``) holds, for ten batch sizes, the bytes of
each graph's private pool, the size of one shared pool captured largest-first or
smallest-first (and how it grew after each capture), and the capture times. The functions
here turn it into table rows and a summary; :func:`live_pool_comparison` and
:func:`naive_reserved_delta` run a small version of the same measurement on a GPU.
"""

from __future__ import annotations

from typing import Any, Sequence
from labkit.graphs import capture_decode_graphs
from labkit.measure.records import PoolMemory, view

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


# ---------------------------------------------------------------------------- live (GPU only)


def live_pool_comparison(model, sizes: Sequence[int], *, warmup: int = 2) -> dict:
    """Capture ``sizes`` three ways (private pools; one shared pool largest-first; one shared
    pool smallest-first) and return a record shaped like ``pool_memory_<preset>`` (without
    ``growth_bytes``). Each graph set is released before the next. Needs a CUDA GPU."""

    sizes = sorted(set(int(s) for s in sizes))
    out: dict = {"preset": None, "sizes": sizes}
    for mode in MODES:
        pool = "private" if mode == "private" else "shared"
        order = "smallest_first" if mode == "shared_smallest_first" else "largest_first"
        gs = capture_decode_graphs(model, sizes, pool=pool, order=order, warmup=warmup,
                                   progress=False)
        try:
            rep = gs.memory_report()
        finally:
            gs.release()
        section = {"total_bytes": int(rep["total_reserved_bytes"]),
                   "capture_s": {str(k): float(v) for k, v in rep["capture_s"].items()}}
        if mode == "private":
            section["per_size_bytes"] = {str(p["sizes"][0]): int(p["reserved_bytes"])
                                         for p in rep["pools"]}
        out[mode] = section
    out["largest_private_bytes"] = max(out["private"]["per_size_bytes"].values())
    return out


def naive_reserved_delta(model, sizes: Sequence[int], *, warmup: int = 2) -> dict:
    """Capture ``sizes`` into one shared pool and compare two ways of measuring its memory:
    the change of ``torch.cuda.memory_reserved()`` (naive: it also counts the cuBLAS
    workspace the new capture stream gets, and anything else allocated meanwhile) and the
    allocator's per-pool accounting. Needs a CUDA GPU. Bytes."""
    import torch


    torch.cuda.synchronize()
    before = torch.cuda.memory_reserved()
    gs = capture_decode_graphs(model, sizes, pool="shared", order="largest_first",
                               warmup=warmup, progress=False)
    try:
        torch.cuda.synchronize()
        after = torch.cuda.memory_reserved()
        pool = int(gs.memory_report()["total_reserved_bytes"])
    finally:
        gs.release()
    naive = int(after - before)
    return {"naive_delta_bytes": naive, "pool_bytes": pool, "outside_pool_bytes": naive - pool}
