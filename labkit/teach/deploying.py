"""Notebook 16: what deploying graphs costs: memory budgets, lazy capture, numerics.

One module per notebook topic: its lessons (pure: records and numbers to rows) and its
charts (plotly figures from records).
"""

from __future__ import annotations

from collections.abc import Sequence
import itertools
import math
import statistics
from typing import Any

from labkit.measure.records import Lazy, MemoryBudget, Numerics, view
from labkit.sizes.engines import vllm_graph_estimate


# ---------------------------------------------------------------------- lessons budget
# The memory budget (notebook 16) as table rows: the KV cache an engine sizes with the ...

MiB = 2**20


def _mib(v: float | None) -> float | None:
    return None if v is None else round(v / MiB, 1)


def budget_rows(record: Any) -> list[dict]:
    """Per capture list, ``max_seq`` and pool mode: the graphs' MiB measured and as vLLM
    estimates them (its second sample read as the pool's growth, and as the drop in free
    device memory vLLM reads), the estimate over the measured, the KV blocks each way leaves,
    the blocks and requests (of the point's context) the estimate loses, and the MiB left on
    the GPU once the graphs are captured after a KV cache that ignored them (< 0: out of
    memory)."""
    rec = view(record, MemoryBudget)
    rows = []
    for p in rec.points:
        blocks = {w: (p.ways[w].kv_blocks if w in p.ways else None) for w in p.WAYS}
        error = p.estimate_error()
        ignored = p.ways["ignored"].headroom_left_bytes
        device = (None if p.second_device_bytes is None else vllm_graph_estimate(
            [p.sample_bytes[0], max(p.second_device_bytes, 0)], len(p.sizes)))
        rows.append({"list": p.size_list, "sizes": len(p.sizes), "max_seq": p.max_seq,
                     "pool": p.pool, "capture out of memory": p.oom is not None,
                     "graphs measured (MiB)": _mib(p.measured_bytes),
                     "vLLM estimate (MiB)": _mib(p.estimate_bytes),
                     "vLLM estimate, second read as free memory (MiB)": _mib(device),
                     "estimate / measured": None if error is None else round(error, 2),
                     **{f"KV blocks, {w}": b for w, b in blocks.items()},
                     "blocks lost to the estimate": p.lost("estimate"),
                     f"requests of {p.context} tokens, measured": (
                         p.ways["measured"].requests if "measured" in p.ways else None),
                     "requests lost to the estimate": p.lost("estimate", "requests"),
                     "left after capture, graphs ignored (MiB)": _mib(ignored)})
    return rows


def startup_rows(record: Any, pool: str = "shared") -> list[dict]:
    """Per capture list and ``max_seq`` in ``pool`` mode: the sizes, the eager start-up (every
    size warmed up and captured, wall clock) against lazy capture, where only a size's first
    request waits its warm-up + capture (median and largest wait)."""
    rec = view(record, MemoryBudget)
    rows = []
    for p in rec.points:
        if p.pool != pool or p.startup_s is None:
            continue
        waits = list(p.lazy_first_request_s().values())
        rows.append({"list": p.size_list, "max_seq": p.max_seq, "sizes": len(p.sizes),
                     "eager start-up (s)": round(p.startup_s, 3),
                     "warm-up + capture, summed (s)": round(sum(waits), 3),
                     "lazy: median first-request wait (ms)": round(
                         statistics.median(waits) * 1e3, 2),
                     "lazy: largest first-request wait (ms)": round(max(waits) * 1e3, 2)})
    return rows


def startup_inversions(record: Any, pool: str = "shared") -> list[dict[str, Any]]:
    """Pairs of capture lists at one ``max_seq`` where the list with fewer sizes took longer to
    capture at start-up than one with more (from :func:`startup_rows`): what a rule "start-up
    grows with the number of sizes" would have to explain."""
    rows = startup_rows(record, pool)
    return [{"max_seq": a["max_seq"], "fewer": a["list"], "fewer sizes": a["sizes"],
             "fewer (s)": a["eager start-up (s)"], "more": b["list"], "more sizes": b["sizes"],
             "more (s)": b["eager start-up (s)"]}
            for a in rows for b in rows
            if a["max_seq"] == b["max_seq"] and a["sizes"] < b["sizes"]
            and a["eager start-up (s)"] > b["eager start-up (s)"]]


def estimate_errors(record: Any) -> dict[tuple[str, int, str], float | None]:
    """(list, ``max_seq``, pool) -> vLLM's estimate over the measured graph memory."""
    rec = view(record, MemoryBudget)
    return {(p.size_list, p.max_seq, p.pool): p.estimate_error() for p in rec.points}


def lazy_rows(record: Any) -> list[dict[str, Any]]:
    """Per size of a ``lazy_<preset>`` record captured on first use: its warm-up + capture
    (ms); then the start-up capture of every size and the lazy run's median step."""
    d = view(record, Lazy)
    lazy = d.runs["lazy"]
    rows: list[dict[str, Any]] = [{"what": f"size {b}: warm-up + capture on first use",
                                   "ms": round(v * 1e3, 1)}
                                  for b, v in lazy["lazy_capture_s"].items()]
    rows.append({"what": f"start-up: all {len(d.sizes)} sizes captured before serving",
                 "ms": round(d.runs["startup"]["built_s"] * 1e3, 1)})
    rows += [{"what": f"lazy run: step {i + 1} by length (includes a capture)",
              "ms": round(s * 1e3, 1)}
             for i, s in enumerate(lazy["longest_steps_s"][:len(lazy["lazy_capture_s"])])]
    rows.append({"what": "lazy run: median step", "ms": round(lazy["median_step_s"] * 1e3, 2)})
    return rows


# ---------------------------------------------------------------------- lessons numerics
# Numerics under graphs and baked decisions (notebook 16): tables from the ...

#: margin bin edges (logit units) of :func:`flip_rows`
MARGIN_BINS = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0, math.inf)


def flip_rate_by_margin(margins: Sequence[float], flipped: Sequence[bool],
                        bins: Sequence[float] = MARGIN_BINS) -> list[dict[str, Any]]:
    """Per margin bin ``[bins[i], bins[i+1])``: steps, flips and the flip rate (``None`` for
    an empty bin). ``margins[j]``: step ``j``'s top-2 margin; ``flipped[j]``: its argmax
    flipped. Margins outside every bin are counted in none."""
    if len(margins) != len(flipped):
        raise ValueError(f"margins has {len(margins)} steps and flipped {len(flipped)}; give "
                         "one margin and one flag per step")
    edges = [float(b) for b in bins]
    if len(edges) < 2 or any(a >= b for a, b in itertools.pairwise(edges)):
        raise ValueError(f"bins must be at least two increasing edges, got {list(bins)}")
    rows = []
    for lo, hi in itertools.pairwise(edges):
        hits = [bool(f) for m, f in zip(margins, flipped) if lo <= m < hi]
        rows.append({"margin from": lo, "to": hi, "steps": len(hits), "flips": sum(hits),
                     "flip rate": sum(hits) / len(hits) if hits else None})
    return rows


def margins_and_flips(record: Any, dtype: str = "bfloat16") -> tuple[list[float], list[bool]]:
    """Every step of every padded size above 1 of ``dtype``: size 1's margin and whether the
    argmax flipped (one sample per step and size, for :func:`flip_rate_by_margin`)."""
    d = view(record, Numerics).dtypes[dtype]
    sizes = [b for b in d.flipped if b != 1]
    return ([m for _ in sizes for m in d.margins],
            [f for b in sizes for f in d.flipped[b]])


def flip_rows(record: Any, dtype: str = "bfloat16",
              bins: Sequence[float] = MARGIN_BINS) -> list[dict[str, Any]]:
    """:func:`flip_rate_by_margin` of :func:`margins_and_flips`."""
    return flip_rate_by_margin(*margins_and_flips(record, dtype), bins)


def flipped_steps(record: Any, dtype: str = "bfloat16") -> list[dict[str, Any]]:
    """Every step whose argmax flipped at some padded size: the size, the step, size 1's top-2
    margin and that step's largest |Δlogit| (a flip needs a logit to move by at least half the
    margin), smallest margin first."""
    d = view(record, Numerics).dtypes[dtype]
    rows = [{"padded size": b, "step": j, "margin": d.margins[j],
             "max |Δlogit|": d.step_max_abs_diff[b][j]}
            for b, flags in d.flipped.items() for j, f in enumerate(flags) if f]
    return sorted(rows, key=lambda r: (r["margin"], r["padded size"]))


def size_rows(record: Any, dtype: str = "bfloat16") -> list[dict[str, Any]]:
    """Per padded size of ``dtype``: max |Δlogit| against size 1, argmax flips of all steps,
    the first free-running token that differs, graph = eager (CUDA), fused against readable,
    max |Δlogit| with reduced-precision reductions off (bf16), replay median and its cost
    against the natural size's when every step is padded to the largest size."""
    r = view(record, Numerics)
    d = r.dtypes[dtype]
    fixed = d.replay[r.fixed_size].median
    rows = []
    for b in r.sizes:
        off = d.reduced_precision_off.get(b)
        rows.append({"padded size": b, "max |Δlogit| vs 1": d.max_abs_diff(b),
                     "flips": f"{d.flips(b)}/{r.steps}",
                     "first different token": d.first_divergence[b],
                     "graph = eager": d.graph_equals_eager.get(b),
                     "fused max |Δlogit|": d.fused_max_abs_diff[b],
                     "fused flips": d.fused_flips[b],
                     "reduced-precision off max |Δlogit|": None if off is None else max(off),
                     "replay (µs)": round(d.replay[b].median, 1),
                     f"padded to {r.fixed_size} / natural": round(fixed / d.replay[b].median, 2)})
    return rows


def recapture_rows(record: Any) -> list[dict[str, Any]]:
    """Per capture of the same step: replay median (p10–p90), kernels per replay, GPU µs of
    its kernels and the rest of the replay (gaps between kernels), whether its kernels and
    operand alignments equal capture 0's, its stream, cuBLAS handle and pool bytes."""
    rc = view(record, Numerics).recaptures
    if rc is None:
        raise ValueError("this numerics record has no recaptures (measured on a CPU); load "
                         "the H200 reference")
    rows = []
    for i, (t, ks) in enumerate(zip(rc.replay, rc.kernels)):
        key = [(c["op"], c["shapes"], c["alignment"]) for c in rc.operands[i]]
        key0 = [(c["op"], c["shapes"], c["alignment"]) for c in rc.operands[0]]
        counts = {k: v["count"] for k, v in ks.items()}
        rows.append({"capture": i, "replay (µs)": f"{t.median:.1f} ({t.p10:.1f}–{t.p90:.1f})",
                     "kernels": round(sum(counts.values())),
                     "kernel GPU µs": round(sum(v["us"] for v in ks.values()), 1),
                     "gaps (µs)": round(t.median - sum(v["us"] for v in ks.values()), 1),
                     "same kernels as 0": counts == {k: v["count"]
                                                     for k, v in rc.kernels[0].items()},
                     "same operand alignment as 0": key == key0,
                     "stream": hex(rc.streams[i]), "cuBLAS handle": hex(rc.blas_handles[i]),
                     "pool bytes": rc.pools[i]["reserved_bytes"]})
    return rows


def kernel_diff_rows(record: Any, min_us: float = 0.5) -> list[dict[str, Any]]:
    """The kernels the captures differ in: each kernel held by some but not all graphs, or
    whose GPU µs per replay spans more than ``min_us`` across them; its count and µs per
    capture, largest spread first."""
    rc = view(record, Numerics).recaptures
    if rc is None:
        raise ValueError("this numerics record has no recaptures (measured on a CPU); load "
                         "the H200 reference")
    names = sorted({n for ks in rc.kernels for n in ks})
    rows = []
    for n in names:
        got = [ks.get(n) for ks in rc.kernels]
        us = [g["us"] if g else 0.0 for g in got]
        if any(g is None for g in got) or max(us) - min(us) > min_us:
            rows.append({"kernel": n[:90], "count": [g["count"] if g else 0 for g in got],
                         "µs per replay": [round(u, 2) for u in us],
                         "spread (µs)": round(max(us) - min(us), 2)})
    return sorted(rows, key=lambda r: -r["spread (µs)"])
