"""Chart of notebook 11 (paged KV cache): step time per layout of a ``paged_<preset>`` record."""

from __future__ import annotations

from typing import Any

from labkit.measure.records import Paged, view
from labkit.teach.plots import TWO_LINE_TITLE_TOP, base_layout, plotly_go, series_colors

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
