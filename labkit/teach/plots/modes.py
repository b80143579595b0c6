"""Chart of a ``modes_<preset>`` record: decode-step time per capture mode and batch size."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

from labkit.measure.records import Modes, view
from labkit.teach.lessons import modes as lm
from labkit.teach.plots import check_methods, color, finish, plotly_go, series_colors, stats_bar

MODE_COLORS: dict[str, str] = {"eager": color("eager"), "piecewise": "#ff7f0e",
                               "full": color("graph"), "attention_only": "#8c564b"}


def step_time_bars(record: Any, *, modes: Sequence[str] | None = None,
                   subtitle: str | None = None, log_y: bool = False):
    """Median µs per step and batch size, one bar per mode (p10–p90, × over eager)."""
    d = view(record, Modes)
    modes = list(modes or lm.modes_of(d))
    check_methods("modes", modes, d.times, "mode")
    fig, colours = plotly_go().Figure(), series_colors(modes, MODE_COLORS)
    for m in modes:
        text = ["" if t is None else f"{t:,.0f} µs" + (f"<br>{x:.1f}×" if x and m != "eager"
                                                       else "")
                for t, x in zip(d.median_us(m), d.speedup_vs_eager(m))]
        fig.add_trace(stats_bar(d.batch_sizes, d.times[m], lm.MODE_LABELS.get(m, m),
                                colours[m], text=text,
                                textposition="outside"))
    fig.update_layout(barmode="group")
    return finish(fig, f"Decode step per capture mode ({d.preset}, {d.n_layer} layers)",
                  "batch size", "µs per step (median)", log_y=log_y,
                  subtitle=subtitle, record=record)
