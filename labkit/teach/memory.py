"""Notebook 04: graph pools, their memory and its model, and the pool charts.

One module per notebook topic: its lessons (pure: records and numbers to rows) and its
charts (plotly figures from records).
"""

from __future__ import annotations

from typing import Any

import torch

from labkit.measure.records import PoolMemory, view
from labkit.model import preset
from labkit.teach.plots import base_layout, color, COLORS, label, plotly_go


# ---------------------------------------------------------------------- lessons memory
# Graph-pool memory (notebook 04) of a record, and the caching allocator's segment sizes.

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


# ---------------------------------------------------------------------- plots memory
# Charts of graph-pool memory (notebooks 04 and 09) from a ``pool_memory_<preset>`` record.



def pool_totals(data: Any, *, subtitle: str = ""):
    """Private pools stacked per size vs one shared pool in each order; the largest dotted."""
    go = plotly_go()
    pool = view(data, PoolMemory)
    sizes, n, fig = list(pool.sizes), len(pool.sizes), go.Figure()
    for i, bs in enumerate(sizes):  # orange shades, light (small sizes) to dark
        f, y = i / max(n - 1, 1), (pool.private.per_size_bytes.get(bs) or 0) / MiB
        fig.add_trace(go.Bar(x=[label("private")], y=[y], name=f"bs {bs}", legendgroup="private",
                             marker_color=f"rgb({255 - 89 * f},{214 - 142 * f},{170 - 170 * f})",
                             hovertemplate=f"private pool of batch size {bs}: %{{y:.1f}} MiB"))
    fig.add_annotation(x=label("private"), y=pool.private.total_bytes / MiB, showarrow=False,
                       text=f"{pool.private.total_bytes / MiB:.0f} MiB", yshift=12)
    for mode in ("shared_largest_first", "shared_smallest_first"):
        fig.add_trace(go.Bar(x=[label(mode)], y=[pool.layout(mode).total_bytes / MiB],
                             name=label(mode), marker_color=color(mode),
                             texttemplate="%{y:.0f} MiB", textposition="outside"))
    if pool.largest_private_bytes:
        fig.add_hline(y=pool.largest_private_bytes / MiB, line_dash="dot", line_color="#444",
                      annotation_position="top right", annotation_text=f"largest single pool "
                      f"({pool.largest_private_bytes / MiB:.0f} MiB)")
    fig.update_layout(barmode="stack", showlegend=False)
    return base_layout(fig, f"Graph pool memory for {n} batch sizes ({sizes[0]}…{sizes[-1]})",
                       "", "pool memory (MiB)", subtitle=subtitle)


def pool_growth(data: Any, *, subtitle: str = ""):
    """The shared pool after each capture in both orders, and the private pools' running sum."""
    go = plotly_go()
    pool = view(data, PoolMemory)
    sizes, fig = sorted(pool.sizes), go.Figure()
    x = list(range(1, len(sizes) + 1))
    for mode, seq in (("shared_largest_first", sizes[::-1]), ("shared_smallest_first", sizes)):
        grown = [pool.layout(mode).growth_bytes.get(bs) for bs in seq]
        ys = [y for y in grown if y is not None]
        if len(ys) == len(grown):
            fig.add_trace(go.Scatter(x=x, y=[y / MiB for y in ys], name=label(mode),
                                     mode="lines+markers+text", text=[str(b) for b in seq],
                                     textposition="top center", line=dict(color=color(mode))))
    per = [(pool.private.per_size_bytes.get(bs) or 0) / MiB for bs in sizes[::-1]]
    fig.add_trace(go.Scatter(x=x, y=[sum(per[:i + 1]) for i in range(len(per))], mode="lines",
                             name="private pools (running sum, largest first)",
                             line=dict(color=COLORS["private"], dash="dash")))
    fig.update_layout(margin=dict(t=110))
    return base_layout(fig, "How the pool grows as graphs are captured (labels: batch size)",
                       "graphs captured so far", "pool memory (MiB)", subtitle=subtitle)
