"""Charts of notebook 11 (paged KV cache).

* :func:`memory_bars` — slot layout vs paged vs what the tokens fill, from
  :func:`labkit.teach.lessons.paged.cache_memory`;
* :func:`block_size_chart` — internal fragmentation and block-table length per block size,
  from :func:`labkit.teach.lessons.paged.block_size_tradeoff`;
* :func:`speed_chart` — decode-step graph replay per layout, batch size and ``max_seq``, from a
  ``paged_<preset>`` record.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from labkit.measure.records import Paged, view
from labkit.teach.plots import base_layout, register_template

MiB = 2**20
LAYOUT_COLORS = {"slot_in_place": "#1f77b4", "slot_gather": "#d62728", "paged": "#2ca02c",
                 "slot": "#d62728", "used": "#7f7f7f"}
LAYOUT_LABELS = {"slot_in_place": "slot, read in place", "slot_gather": "slot, row gathered",
                 "paged": "paged, gathered through the block table"}


def memory_bars(mem: Mapping[str, Any], *, title: str = "", subtitle: str = ""):
    """KV-cache MiB of the slot layout, the paged layout and the tokens themselves."""
    register_template()
    import plotly.graph_objects as go

    names = [("slot", "slot layout (max_seq per request)", mem["slot_bytes"]),
             ("paged", "paged (whole blocks)", mem["paged_bytes"]),
             ("used", "tokens written", mem["used_bytes"])]
    fig = go.Figure(go.Bar(x=[n for _, n, _ in names], y=[b / MiB for *_, b in names],
                           marker_color=[LAYOUT_COLORS[k] for k, *_ in names],
                           texttemplate="%{y:,.0f} MiB", textposition="outside"))
    return base_layout(fig, title or f"KV cache for {mem['requests']} requests held at once "
                       f"(paged saves {mem['saving']:.1f}x)", "", "KV cache (MiB)",
                       subtitle=subtitle)


def block_size_chart(rows: Sequence[Mapping[str, Any]], *, subtitle: str = ""):
    """Wasted share of the paged bytes (bars) and block-table entries per request (line,
    right axis) per block size."""
    register_template()
    import plotly.graph_objects as go

    x = [str(r["block_size"]) for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=x, y=[100 * r["waste_share"] for r in rows],
                         name="unused tail of last blocks (%)", marker_color="#ff7f0e",
                         texttemplate="%{y:.1f}%", textposition="outside"))
    fig.add_trace(go.Scatter(x=x, y=[r["table_entries_per_request"] for r in rows],
                             name="block-table entries per request", mode="lines+markers",
                             line=dict(color="#1f77b4"), yaxis="y2"))
    fig.update_layout(yaxis2=dict(title="table entries per request", overlaying="y",
                                  side="right", type="log"))
    return base_layout(fig, "Block size: internal fragmentation vs table length",
                       "block size (positions)", "wasted share of paged memory (%)",
                       subtitle=subtitle)


def speed_chart(record: Any, *, subtitle: str = ""):
    """Median µs per decode step (graph replay) per layout vs batch size, one panel per
    ``max_seq``."""
    register_template()
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rec = view(record, Paged)
    fig = make_subplots(rows=1, cols=len(rec.runs), shared_yaxes=True,
                        subplot_titles=[f"max_seq {r.max_seq}" for r in rec.runs])
    x = [str(b) for b in rec.batch_sizes]
    for i, run in enumerate(rec.runs, start=1):
        for m in run.times:
            fig.add_trace(go.Bar(x=x, y=run.median_us(m), name=LAYOUT_LABELS.get(m, m),
                                 marker_color=LAYOUT_COLORS.get(m, "#444"),
                                 texttemplate="%{y:,.0f}", textposition="outside",
                                 legendgroup=m, showlegend=i == 1), row=1, col=i)
        fig.update_xaxes(title_text="batch size", row=1, col=i)
    fig.update_layout(barmode="group")
    return base_layout(fig, f"Decode step (graph replay), {rec.preset} {rec.dtype}, "
                       f"block size {rec.block_size}", "batch size", "µs per step",
                       subtitle=subtitle)
