"""Graph-pool memory (notebook 04) of a record, and the caching allocator's segment sizes."""

from __future__ import annotations

from typing import Any

import torch

from labkit.measure.records import PoolMemory, view
from labkit.model import preset

MiB = 2**20
MODES = PoolMemory.LAYOUTS
#: PyTorch's caching allocator (``c10/cuda/CUDACachingAllocator.cpp``; ``c10/core/
#: AllocatorConfig.h`` in newer torch): a request up to SMALL_SIZE comes from a SMALL_BUFFER
#: segment, one below MIN_LARGE_ALLOC from a LARGE_BUFFER segment; a larger one gets a segment
#: of its own, rounded up to ROUND_LARGE. A freed block is reused by best fit within its pool.
SMALL_SIZE, SMALL_BUFFER, MIN_LARGE_ALLOC, LARGE_BUFFER, ROUND_LARGE = (
    1 * MiB, 2 * MiB, 10 * MiB, 20 * MiB, 2 * MiB)


def _r(v: float | None, scale: float = 1 / MiB, digits: int = 2) -> float | None:
    return None if v is None else round(v * scale, digits)


def hidden_bytes(data: Any, batch: int) -> int:
    """Bytes of the MLP hidden layer (``batch x 4 d_model``): a step's largest intermediate."""
    pool = view(data, PoolMemory)
    cfg = preset(pool.preset, dtype=pool.dtype or "float32")
    return batch * 4 * cfg.d_model * torch.empty((), dtype=cfg.torch_dtype).element_size()


def pool_memory_summary(data: Any) -> dict:
    """Bytes of each pool layout, capture s per mode, and which shared order ends smaller."""
    pool = view(data, PoolMemory)
    lf, sf = pool.shared_largest_first.total_bytes, pool.shared_smallest_first.total_bytes
    if min(pool.largest_private_bytes, pool.private.total_bytes, lf) <= 0:
        raise ValueError("pool_memory record holds zero-byte pools; it cannot be summarised")
    return {"private_total": pool.private.total_bytes, "shared_largest_first": lf,
            "shared_smallest_first": sf, "largest_private": pool.largest_private_bytes,
            "smaller_order": "tie" if abs(lf - sf) < SMALL_BUFFER else
            "largest_first" if lf < sf else "smallest_first",
            "capture_total_s": {m: float(sum(pool.layout(m).capture_s.values())) for m in MODES}}


def summary_rows(data: Any) -> list[dict]:
    """The three strategies as table rows: total MiB, x the largest private pool, capture s."""
    s = pool_memory_summary(data)
    names = ("private pool per size", "one shared pool, largest first",
             "one shared pool, smallest first")
    return [{"strategy": name, "total (MiB)": _r(s[key], digits=1),
             "x largest single pool": _r(s[key], 1 / s["largest_private"]),
             "capture, all sizes (s)": _r(s["capture_total_s"][mode], 1, 3)}
            for name, key, mode in zip(names, ("private_total", *MODES[1:]), MODES)]


def pool_memory_table(data: Any) -> list[dict]:
    """Per batch size: MLP hidden layer, private and shared pools (MiB), capture ms."""
    pool = view(data, PoolMemory)
    return [{"batch size": bs, "MLP hidden (MiB)": _r(hidden_bytes(pool, bs)),
             "private pool (MiB)": _r(pool.private.per_size_bytes.get(bs)),
             **{f"{o}-first pool after (MiB)": _r(
                 pool.layout(f"shared_{o}_first").growth_bytes.get(bs))
                for o in ("largest", "smallest")},
             **{f"capture {m.removeprefix('shared_')} (ms)": _r(
                 pool.layout(m).capture_s.get(bs), 1e3) for m in MODES}} for bs in pool.sizes]


def max_seq_rows(data: Any) -> list[dict]:
    """Per measured ``max_seq`` (and the gather path): shared pool and KV cache (MiB)."""
    pool = view(data, PoolMemory)
    entries = [pool.by_max_seq[m] for m in sorted(pool.by_max_seq)]
    return [{"max_seq": e.max_seq, "cache read": "in place" if e.in_place else "gathered",
             "shared pool (MiB)": _r(e.shared_largest_first_bytes, digits=1),
             "KV cache (MiB)": _r(e.kv_cache_bytes, digits=1)}
            for e in entries + ([pool.gather] if pool.gather is not None else [])]
