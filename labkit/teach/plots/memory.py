"""Charts of graph-pool memory (notebooks 04 and 09) from a ``pool_memory_<preset>`` record."""

from __future__ import annotations

from typing import Any

from labkit.measure.records import PoolMemory, view
from labkit.teach.plots import COLORS, base_layout, color, label, plotly_go

MiB = 2**20


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
