"""Notebook 04 helpers: read a ``pool_memory_<preset>`` record.

The record (``labkit.measure.bench.measure_pool_memory``) holds, for ten batch sizes, the bytes of
each graph's private pool, the size of one shared pool captured largest-first or
smallest-first (and how it grew after each capture), and the capture times. The functions
here turn it into table rows and a summary (of a record, or of the small live version that
:func:`labkit.measure.lesson_runs.live_pool_comparison` measures on a GPU).
"""

from __future__ import annotations

from typing import Mapping

MiB = 2**20
MODES = ("private", "shared_largest_first", "shared_smallest_first")


def mib(n_bytes: float | None) -> float | None:
    """Bytes to MiB (``None`` stays ``None``)."""
    return None if n_bytes is None else n_bytes / MiB


def _check_record(data: Mapping) -> None:
    missing = [k for k in ("sizes", *MODES) if k not in data]
    if missing:
        raise ValueError(f"not a pool_memory record: missing key(s) {missing}; pass "
                         "result.data of a 'pool_memory_<preset>' record")


def _per_size(section: Mapping, key: str, size: int):
    values = section.get(key) or {}
    return values.get(str(size), values.get(size))


def pool_memory_table(data: Mapping) -> list[dict]:
    """One row per batch size: private pool (MiB), capture time (ms) in each mode, and the
    shared pool's size right after that size was captured (MiB), for both orders."""
    _check_record(data)
    rows = []
    for bs in data["sizes"]:
        row = {"batch size": int(bs)}
        priv = _per_size(data["private"], "per_size_bytes", bs)
        row["private pool (MiB)"] = None if priv is None else round(priv / MiB, 2)
        for mode, short in (("shared_largest_first", "largest-first"),
                            ("shared_smallest_first", "smallest-first")):
            grown = _per_size(data[mode], "growth_bytes", bs)
            row[f"{short} pool after (MiB)"] = None if grown is None else round(grown / MiB, 2)
        for mode, short in (("private", "private"), ("shared_largest_first", "largest-first"),
                            ("shared_smallest_first", "smallest-first")):
            t = _per_size(data[mode], "capture_s", bs)
            row[f"capture {short} (ms)"] = None if t is None else round(t * 1e3, 1)
        rows.append(row)
    return rows


def pool_memory_summary(data: Mapping) -> dict:
    """Totals (bytes) and the ratios the notebook discusses.

    Keys: ``private_total``, ``shared_largest_first``, ``shared_smallest_first``,
    ``largest_private``, ``shared_over_largest_private`` (largest-first pool / largest single
    private pool), ``shared_over_private_total``, ``smallest_first_over_largest_first``,
    ``best_order`` (the order whose shared pool is smaller), ``capture_total_s`` per mode.
    """
    _check_record(data)
    private_total = int(data["private"]["total_bytes"])
    lf = int(data["shared_largest_first"]["total_bytes"])
    sf = int(data["shared_smallest_first"]["total_bytes"])
    per = data["private"].get("per_size_bytes") or {}
    largest = int(data.get("largest_private_bytes") or max(per.values(), default=0))
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
        "capture_total_s": {m: float(sum((data[m].get("capture_s") or {}).values()))
                            for m in MODES},
    }


def summary_rows(data: Mapping) -> list[dict]:
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
