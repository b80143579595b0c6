"""Charts for the claims notebook: the verdict table and the evidence behind two claims.

Inputs are the dicts of :func:`labkit.teach.claims.evaluate_all` and result records (a
:class:`labkit.measure.results.Result` or its ``data`` dict).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from labkit.measure.records import Decode, PoolMemory, view
from labkit.teach.lessons import record_provenance
from labkit.teach.plots import TEMPLATE, color, register_template
from labkit.teach.plots.timing import finish

VERDICT_COLORS = {"holds": "#c7e9c0", "partly": "#fdd0a2", "false": "#fcbba1",
                  "depends": "#c6dbef", "untested": "#e0e0e0",
                  "cannot be checked here": "#f0f0f0"}


def verdict_table(results: Sequence[Mapping], *, title: str = "The seed articles' claims vs the "
                  "measurements"):
    """A plotly table: claim, verdict (coloured), evidence sentence, records checked."""
    import plotly.graph_objects as go

    if not results:
        raise ValueError("no claim results to show; run labkit.teach.claims.evaluate_all first")
    register_template()
    verdicts = [r["verdict"] for r in results]
    cols = [[r["claim"] for r in results], [v.upper() for v in verdicts],
            [r["explanation"] for r in results],
            [", ".join(r.get("records", [])) or "vLLM source" for r in results]]
    fills = [["white"] * len(results), [VERDICT_COLORS.get(v, "white") for v in verdicts],
             ["white"] * len(results), ["white"] * len(results)]
    fig = go.Figure(go.Table(
        columnwidth=[3, 1, 7, 2],
        header=dict(values=["claim", "verdict", "evidence (from the records)", "checked against"],
                    fill_color="#e8eef7", align="left"),
        cells=dict(values=cols, fill_color=fills, align="left", height=28)))
    fig.update_layout(title=title, template=TEMPLATE, height=140 + 130 * len(results),
                      margin=dict(l=10, r=10, t=50, b=10))
    return fig


def speedup_vs_claim(records: Mapping[str, Any], claimed: tuple[float, float], *,
                     subtitle: str | None = None):
    """Measured graph-replay speed-up per model and batch size, against the claimed band.

    ``records``: ``{"decode_small": rec, "decode_gpt2": rec, ...}``; ``claimed``: the
    article's (low, high).
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    shades = ["#6baed6", "#08519c", "#3182bd", "#9ecae1"]
    subs = []
    for i, (name, rec) in enumerate(sorted(records.items())):
        d = view(rec, Decode)
        if not {"eager", "graph"} <= set(d.methods):
            continue
        sp = d.speedup_vs_eager("graph")
        fig.add_trace(go.Bar(x=[f"bs {b}" for b in d.batch_sizes], y=sp,
                             name=name.removeprefix("decode_"),
                             marker_color=shades[i % len(shades)],
                             texttemplate="%{y:.1f}×", textposition="outside"))
        prov = record_provenance(rec)
        if prov and prov not in subs:
            subs.append(prov)
    if not fig.data:
        raise ValueError("no decode record with a graph speed-up")
    lo, hi = claimed
    fig.add_hrect(y0=lo, y1=hi, fillcolor="#fdae6b", opacity=0.25, line_width=0,
                  annotation_text=f"claimed {lo:g}–{hi:g}×", annotation_position="top left")
    fig.add_hline(y=1, line_dash="dash", line_color=color("eager"),
                  annotation_text="eager = 1×", annotation_position="bottom right")
    fig.update_layout(barmode="group")
    sub = "; ".join(subs) if subtitle is None else subtitle
    return finish(fig, "Claim: replay is 5–8× faster — measured", "batch size",
                  "× faster than eager (median step)", subtitle=sub)


def pool_vs_claim(record: Any, *, subtitle: str | None = None):
    """Sum of private pools, the largest one (the claimed 'max'), and one shared pool in
    both capture orders, in MiB."""
    import plotly.graph_objects as go

    d = view(record, PoolMemory)
    mib = 2 ** 20
    names = ["private pools<br>(sum)", "largest private<br>pool (max)",
             "shared pool,<br>largest first", "shared pool,<br>smallest first"]
    vals = [d.private.total_bytes / mib, d.largest_private_bytes / mib,
            d.shared_largest_first.total_bytes / mib,
            d.shared_smallest_first.total_bytes / mib]
    colors = [color("private"), "#bdbdbd", color("shared_largest_first"),
              color("shared_smallest_first")]
    fig = go.Figure(go.Bar(x=names, y=vals, marker_color=colors, showlegend=False,
                           texttemplate="%{y:.1f} MiB", textposition="outside"))
    fig.add_hline(y=vals[1], line_dash="dot", line_color="#636363",
                  annotation_text="max (the claim)", annotation_position="top right")
    n = len(d.sizes)
    return finish(fig, f"Claim: a shared pool costs the max, not the sum ({n} graphs, "
                  f"{d.preset})", "", "MiB",
                  subtitle=record_provenance(record) if subtitle is None else subtitle)
