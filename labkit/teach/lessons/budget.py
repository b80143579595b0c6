"""The memory budget (notebook 16) as table rows: the KV cache an engine sizes with the graphs'
memory measured, estimated as vLLM estimates it, or ignored, and each capture list's start-up,
eager or lazy. The arithmetic (bytes -> blocks -> requests) is
:func:`labkit.sizes.engines.kv_plan`, the one the record was built with."""

from __future__ import annotations

import statistics
from typing import Any

from labkit.measure.records import Lazy, MemoryBudget, view
from labkit.sizes.engines import vllm_graph_estimate

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
