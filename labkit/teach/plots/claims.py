"""Chart of notebook 09: eager and graph step times against the claimed speed-up."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from labkit.measure.records import Decode, view
from labkit.teach.plots import color, finish, plotly_go, provenances, stats_bar


def speedup_vs_claim(records: Mapping[str, Any], claimed: tuple[float, float]):
    """Eager and graph-replay step time per model and batch size, the speed-up on each bar."""
    fig = plotly_go().Figure()
    for i, (name, rec) in enumerate(sorted(records.items())):
        d = view(rec, Decode)
        x = [f"{name.removeprefix('decode_')} bs {b}" for b in d.batch_sizes]
        for m in ("eager", "graph"):
            fig.add_trace(stats_bar(
                x, d.times[m], m, color(m), showlegend=i == 0, textposition="outside",
                text=None if m == "eager" else [f"{s:.1f}×" for s in d.speedup_vs_eager(m)]))
    if not fig.data:
        raise ValueError("no decode record with eager and graph times")
    fig.update_layout(barmode="group")
    return finish(fig, f"Eager vs graph replay (claimed: {claimed[0]:g}–{claimed[1]:g}× faster)",
                  "model and batch size", "decode step (µs, log)", log_y=True,
                  subtitle=provenances([records[n] for n in sorted(records)]))
