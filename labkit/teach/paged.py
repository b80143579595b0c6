"""Notebook 11: the paged KV cache against slots, and the charts.

One module per notebook topic: its lessons (pure: records and numbers to rows) and its
charts (plotly figures from records).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labkit.checks import as_int, as_int_list
from labkit.measure.records import Paged, view
from labkit.teach.plots import base_layout, plotly_go, series_colors, TWO_LINE_TITLE_TOP


# ---------------------------------------------------------------------- lessons paged
# Paged KV-cache arithmetic (notebook 11): slots vs blocks, block sizes, a record's rows.

DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2}


def bytes_per_position(n_layer: int, n_head: int, head_dim: int, dtype: str = "bfloat16"
                       ) -> int:
    """KV-cache bytes of one position: a key and a value per layer and head."""
    for name, v in (("n_layer", n_layer), ("n_head", n_head), ("head_dim", head_dim)):
        as_int(v, name, minimum=1, fix="give a positive whole number")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPE_BYTES)}")
    return 2 * n_layer * n_head * head_dim * DTYPE_BYTES[dtype]


def cache_memory(lengths: Sequence[int], *, max_seq: int, block_size: int,
                 bytes_per_pos: int) -> dict:
    """KV-cache bytes of requests of ``lengths`` positions at once, in slots vs blocks."""
    lengths = as_int_list(lengths, "lengths", minimum=0)
    max_seq, bs = as_int(max_seq, "max_seq", minimum=1), as_int(block_size, "block_size", minimum=1)
    if any(n > max_seq for n in lengths):
        raise ValueError(f"{sum(n > max_seq for n in lengths)} request(s) longer than "
                         f"max_seq={max_seq}; raise max_seq or clip the lengths")
    blocks = sum(-(-n // bs) for n in lengths)
    used, paged = sum(lengths) * bytes_per_pos, blocks * bs * bytes_per_pos
    slot = len(lengths) * max_seq * bytes_per_pos
    return {"requests": len(lengths), "blocks": blocks, "slot_bytes": slot, "used_bytes": used,
            "paged_bytes": paged, "paged_waste_bytes": paged - used,
            "saving": slot / paged if paged else float("inf")}


def block_size_tradeoff(lengths: Sequence[int], block_sizes: Sequence[int], *, max_seq: int,
                        bytes_per_pos: int) -> list[dict]:
    """Per block size: blocks, paged bytes, unused tails (bytes, share), table entries."""
    rows = []
    for bs in as_int_list(block_sizes, "block_sizes", minimum=1):
        m = cache_memory(lengths, max_seq=max_seq, block_size=bs, bytes_per_pos=bytes_per_pos)
        rows.append({"block_size": bs, "blocks": m["blocks"], "paged_bytes": m["paged_bytes"],
                     "waste_bytes": m["paged_waste_bytes"],
                     "waste_share": m["paged_waste_bytes"] / (m["paged_bytes"] or 1),
                     "table_entries_per_request": -(-max_seq // bs)})
    return rows


def paged_rows(record: Any) -> list[dict]:
    """Per ``max_seq`` and batch: each layout's median µs, paged / in place, paged / gather."""
    rows = []
    for run in view(record, Paged).runs:
        for b in run.batch_sizes:
            ip, ga, pg = (run.at(m, b) for m in ("slot_in_place", "slot_gather", "paged"))
            rows.append({"max_seq": run.max_seq, "batch": b, "slot_in_place_us": ip,
                         "slot_gather_us": ga, "paged_us": pg,
                         "paged_over_in_place": pg / ip if pg and ip else None,
                         "paged_over_gather": pg / ga if pg and ga else None})
    return rows


# ---------------------------------------------------------------------- plots paged
# Chart of notebook 11 (paged KV cache): step time per layout of a ``paged_<preset>`` record.

LAYOUT_COLORS = {"slot_in_place": "#1f77b4", "slot_gather": "#d62728", "paged": "#2ca02c"}
LAYOUT_LABELS = {"slot_in_place": "slot, read in place", "slot_gather": "slot, row gathered",
                 "paged": "paged, gathered through the block table"}


def speed_chart(record: Any, *, subtitle: str = ""):
    """Median µs per decode step (graph replay) per layout and batch, a panel per ``max_seq``."""
    go = plotly_go()
    from plotly.subplots import make_subplots

    rec = view(record, Paged)
    fig = make_subplots(rows=1, cols=len(rec.runs), shared_yaxes=True,
                        subplot_titles=[f"max_seq {r.max_seq}" for r in rec.runs])
    colours = series_colors(list(dict.fromkeys(m for run in rec.runs for m in run.times)),
                            LAYOUT_COLORS)
    for i, run in enumerate(rec.runs, start=1):
        for m in run.times:
            fig.add_trace(go.Bar(x=[str(b) for b in rec.batch_sizes], y=run.median_us(m),
                                 name=LAYOUT_LABELS.get(m, m), legendgroup=m,
                                 marker_color=colours[m], showlegend=i == 1,
                                 texttemplate="%{y:,.0f}", textposition="outside"),
                          row=1, col=i)
        fig.update_xaxes(title_text="batch size", row=1, col=i)
    # the panel titles under the title (two lines with a subtitle)
    fig.update_layout(barmode="group", margin=dict(t=(TWO_LINE_TITLE_TOP if subtitle else 70) + 30))
    return base_layout(fig, f"Decode step (graph replay), {rec.preset} {rec.dtype}, "
                       f"block size {rec.block_size}", "batch size", "µs per step",
                       subtitle=subtitle)
