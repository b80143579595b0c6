"""Charts of graph-pool memory (notebook 04), from a ``pool_memory_<preset>`` record.

* :func:`pool_totals` — private pools stacked per batch size next to one shared pool
  captured largest-first and smallest-first, with the largest single pool marked;
* :func:`pool_growth` — how the shared pool grows as graphs are captured, in each order;
* :func:`capture_times` — capture time per batch size in each mode;
* :func:`pool_vs_max_seq` — the pool and the KV cache at two ``max_seq`` values.

Every builder takes the record (``result.data``, the Result, or a
:class:`labkit.measure.records.PoolMemory`) and an optional ``subtitle`` (the provenance line).
"""

from __future__ import annotations

from typing import Any

from labkit.measure.records import PoolMemory, view
from labkit.teach.plots import COLORS, bars, base_layout, color, label, lines, register_template

MiB = 2**20


def _size_shades(n: int) -> list[str]:
    """``n`` shades of the private-pool orange, light (small sizes) to dark (large)."""
    lo, hi = (255, 214, 170), (166, 72, 0)
    if n == 1:
        return [f"rgb{hi}"]
    return ["rgb(%d,%d,%d)" % tuple(round(a + (b - a) * i / (n - 1)) for a, b in zip(lo, hi))
            for i in range(n)]


def pool_totals(data: Any, *, subtitle: str = ""):
    """Private pools stacked per size vs one shared pool (largest-first, smallest-first)."""
    register_template()
    import plotly.graph_objects as go

    pool = view(data, PoolMemory)
    sizes = list(pool.sizes)
    fig = go.Figure()
    priv_x = label("private")
    for bs, shade in zip(sizes, _size_shades(len(sizes))):
        b = pool.private.per_size_bytes.get(bs) or 0
        fig.add_trace(go.Bar(x=[priv_x], y=[b / MiB], name=f"bs {bs}", marker_color=shade,
                             legendgroup="private", showlegend=False,
                             hovertemplate=f"private pool of batch size {bs}: "
                                           "%{y:.1f} MiB<extra></extra>"))
    total = pool.private.total_bytes / MiB
    fig.add_annotation(x=priv_x, y=total, text=f"{total:.0f} MiB", showarrow=False, yshift=12)
    for mode in ("shared_largest_first", "shared_smallest_first"):
        t = pool.layout(mode).total_bytes / MiB
        fig.add_trace(go.Bar(x=[label(mode)], y=[t], name=label(mode), marker_color=color(mode),
                             texttemplate="%{y:.0f} MiB", textposition="outside",
                             showlegend=False,
                             hovertemplate=f"{label(mode)}: %{{y:.1f}} MiB<extra></extra>"))
    largest = pool.largest_private_bytes
    if largest:
        fig.add_hline(y=largest / MiB, line_dash="dot", line_color="#444",
                      annotation_text=f"largest single pool ({largest / MiB:.0f} MiB)",
                      annotation_position="top right")
    fig.update_layout(barmode="stack", showlegend=False)
    base_layout(fig, f"Graph pool memory for {len(sizes)} batch sizes "
                     f"({sizes[0]}…{sizes[-1]})", "", "pool memory (MiB)", subtitle=subtitle)
    return fig


def private_per_size(data: Any, *, subtitle: str = ""):
    """Bar per batch size: bytes of that graph's private pool."""
    register_template()

    pool = view(data, PoolMemory)
    sizes = list(pool.sizes)
    ys = [(pool.private.per_size_bytes.get(bs) or 0) / MiB for bs in sizes]
    return bars(sizes, {"private": ys}, title="Private pool of each graph", x_title="batch size",
                y_title="pool memory (MiB)", subtitle=subtitle, text_fmt=".1f")


def pool_growth(data: Any, *, subtitle: str = ""):
    """Shared pool size after each capture, largest-first vs smallest-first, plus the running
    sum of private pools for comparison. x = number of graphs captured so far."""
    register_template()
    import plotly.graph_objects as go

    pool = view(data, PoolMemory)
    sizes = sorted(pool.sizes)
    fig = go.Figure()
    orders = {"shared_largest_first": sizes[::-1], "shared_smallest_first": sizes}
    for mode, seq in orders.items():
        ys = [pool.layout(mode).growth_bytes.get(bs) for bs in seq]
        if any(y is None for y in ys):
            continue
        fig.add_trace(go.Scatter(
            x=list(range(1, len(seq) + 1)), y=[y / MiB for y in ys], name=label(mode),
            mode="lines+markers+text", text=[str(bs) for bs in seq], textposition="top center",
            line=dict(color=color(mode)),
            hovertemplate="after capturing bs %{text}: %{y:.1f} MiB<extra></extra>"))
    running, acc = [], 0.0
    for bs in sizes[::-1]:
        acc += (pool.private.per_size_bytes.get(bs) or 0) / MiB
        running.append(acc)
    fig.add_trace(go.Scatter(x=list(range(1, len(sizes) + 1)), y=running,
                             name="private pools (running sum, largest first)",
                             mode="lines", line=dict(color=COLORS["private"], dash="dash")))
    base_layout(fig, "How the pool grows as graphs are captured (labels: batch size)",
                "graphs captured so far", "pool memory (MiB)", subtitle=subtitle)
    fig.update_layout(margin=dict(t=110))
    return fig


def capture_times(data: Any, *, subtitle: str = ""):
    """Capture time (ms) of each batch size's graph, one line per mode."""
    register_template()

    pool = view(data, PoolMemory)
    sizes = list(pool.sizes)
    series = {}
    for mode in PoolMemory.LAYOUTS:
        ys = [pool.layout(mode).capture_s.get(bs) for bs in sizes]
        if all(y is not None for y in ys):
            series[mode] = [y * 1e3 for y in ys]
    fig = lines(sizes, series, title="Capture time per graph", x_title="batch size",
                y_title="capture time (ms)", subtitle=subtitle, log_x=True)
    fig.update_xaxes(tickvals=sizes, ticktext=[str(s) for s in sizes])
    fig.update_layout(margin=dict(t=110))
    return fig


def pool_vs_max_seq(data: Any, *, subtitle: str = ""):
    """The shared pool and the KV cache at each recorded ``max_seq`` (and the old gather
    path's pool, when recorded): the cache grows with ``max_seq``, the in-place pool does
    not. Raises ``ValueError`` for a record without ``by_max_seq``."""
    register_template()
    import plotly.graph_objects as go

    pool = view(data, PoolMemory)
    if not pool.by_max_seq:
        raise ValueError("this pool_memory record has no by_max_seq field (it predates the "
                         "in-place cache read); re-measure it with "
                         "labkit.measure.bench.measure_pool_memory")
    seqs = sorted(pool.by_max_seq)
    xs = [f"max_seq {m}" for m in seqs]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=xs, y=[pool.by_max_seq[m].shared_largest_first_bytes / MiB
                                  for m in seqs],
                         name="shared pool (cache read in place)",
                         marker_color=color("shared_largest_first"),
                         texttemplate="%{y:.0f} MiB", textposition="outside"))
    if all(pool.by_max_seq[m].kv_cache_bytes is not None for m in seqs):
        fig.add_trace(go.Bar(x=xs, y=[pool.by_max_seq[m].kv_cache_bytes / MiB for m in seqs],
                             name="KV cache (outside the pool)", marker_color=color("reference"),
                             texttemplate="%{y:.0f} MiB", textposition="outside"))
    if pool.gather is not None:
        fig.add_trace(go.Bar(x=[f"max_seq {pool.gather.max_seq}"],
                             y=[pool.gather.shared_largest_first_bytes / MiB],
                             name="shared pool (old path: gather each row per layer)",
                             marker_color=color("private"),
                             texttemplate="%{y:.0f} MiB", textposition="outside"))
    fig.update_layout(barmode="group")
    # the cache can be a hundred times the pool: a log axis keeps both readable
    base_layout(fig, "Graph pool vs KV cache as max_seq grows", "", "memory (MiB, log scale)",
                subtitle=subtitle, log_y=True)
    return fig
