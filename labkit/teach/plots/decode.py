"""Charts of ``decode_<preset>`` records: step time per batch size and method or preset."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping, Sequence

from labkit.measure.records import Decode, view
from labkit.teach.plots import (check_methods, color, finish, label, plotly_go, provenances,
                                stats_bar)

PRESET_COLORS = {"small": "#6baed6", "gpt2": "#08519c", "char": "#9ecae1", "test": "#c6dbef"}


def _bar(x: Sequence, stats: Sequence, name: str, colour: str):
    return stats_bar(x, stats, name, colour, texttemplate="%{y:,.0f}", textposition="auto",
                     insidetextanchor="middle")


def step_time_chart(record: Any, *, methods: Sequence[str] | None = None,
                    subtitle: str | None = None, log_y: bool = False):
    """Median decode-step time per batch size, one bar per method (p10–p90 whiskers)."""
    data = view(record, Decode)
    check_methods("decode", methods or (), data.methods)
    fig = plotly_go().Figure([_bar(data.batch_sizes, data.times[m], label(m), color(m))
                              for m in methods or data.methods])
    cfg = data.config
    shape = f" ({cfg['n_layer']} layers, d={cfg['d_model']})" if {"n_layer", "d_model"} <= set(
        cfg) else ""
    fig.update_layout(barmode="group")
    return finish(fig, f"Decode step time: {data.preset}{shape}, {data.dtype}".rstrip(", "),
                  "batch size", "µs per step (median)", log_y=log_y, subtitle=subtitle,
                  record=record)


def eager_step_chart(records: Mapping[str, Any], *, cpu_times: Mapping[int, Any] | None = None,
                     cpu_label: str = "CPU eager (this machine, live)",
                     subtitle: str | None = None):
    """Eager step time per batch size of several presets, beside live CPU ``cpu_times``."""
    fig, cats = plotly_go().Figure(), set()
    for name, rec in records.items():
        data = view(rec, Decode)
        gpu = (getattr(rec, "env", None) or {}).get("gpu_name") or "GPU"
        fig.add_trace(_bar(data.batch_sizes, data.times["eager"], f"{gpu} eager, {name}",
                           PRESET_COLORS.get(name, "#3182bd")))
        cats |= set(data.batch_sizes)
    if cpu_times:
        fig.add_trace(_bar(list(cpu_times), list(cpu_times.values()), cpu_label, color("cpu")))
        cats |= set(cpu_times)
    fig.update_layout(barmode="group")
    fig.update_xaxes(type="category", categoryorder="array",
                     categoryarray=[str(c) for c in sorted(cats)])
    return finish(fig, "Eager decode step time", "batch size", "µs per step (median)",
                  subtitle=provenances(list(records.values())) if subtitle is None else subtitle,
                  log_y=True)
