"""Charts and tables of ``compile_<preset>`` records: manual CUDA graphs vs torch.compile."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

from labkit.measure.records import Compile, view
from labkit.teach.lessons.fairness import compare, fair_compile_size
from labkit.teach.plots import check_methods, color, finish, label, plotly_go, stats_bar


def step_rows(record: Any) -> list[dict]:
    """Per batch size: compile shapes, each method's µs (p10–p90), compile's verdicts."""
    d = view(record, Compile)
    rows = []
    for i, b in enumerate(d.batch_sizes):
        row: dict[str, Any] = {"batch": b, "compile shapes": "static" if b == fair_compile_size(
            record) else "dynamic recompile (or graphs skipped)"}
        row.update({f"{m} µs (p10–p90)": f"{s.median:,.1f} ({s.p10:,.1f}–{s.p90:,.1f})"
                    for m in d.methods for s in [d.times[m][i]] if s is not None})
        row.update({f"compile vs {o}": compare(record, "compile", o, b).word
                    for o in ("dispatcher", "graph")})
        rows.append(row)
    return rows


def step_time_bars(record: Any, *, methods: Sequence[str] | None = None,
                   subtitle: str | None = None, log_y: bool = False):
    """Median decode-step time per batch size, one bar per method (p10–p90 whiskers)."""
    d = view(record, Compile)
    methods = list(methods or d.methods)
    check_methods("compile", methods, d.times)
    fig = plotly_go().Figure([stats_bar(d.batch_sizes, d.times[m], label(m), color(m),
                                        texttemplate="%{y:,.0f} µs", textposition="outside")
                              for m in methods])
    fig.update_layout(barmode="group")
    return finish(fig, f"Decode step: manual graphs vs torch.compile ({d.preset})", "batch size",
                  "µs per step (median)", log_y=log_y, subtitle=subtitle, record=record)


def break_even_steps(record: Any, batch: int) -> float:
    """Steps until compile's extra set-up is paid back by its saving over the graph at ``batch``."""
    d = view(record, Compile)
    if batch not in d.batch_sizes:
        raise ValueError(f"batch {batch} was not measured; the record has {d.batch_sizes}")
    extra_s = d.compile_s - d.capture_s
    saving_s = (d.at("graph", batch) - d.at("compile", batch)) * 1e-6
    return 0.0 if extra_s <= 0 else float("inf") if saving_s <= 0 else extra_s / saving_s


def total_time_chart(record: Any, batch: int, max_steps: int = 10 ** 6, *,
                     subtitle: str | None = None):
    """Wall time to serve ``n`` decode steps at ``batch``, set-up included (log axes)."""
    go = plotly_go()
    d = view(record, Compile)
    be = break_even_steps(d, batch)  # checks the batch
    if max_steps < 10:
        raise ValueError(f"max_steps must be at least 10, got {max_steps}")
    steps = [k * 10 ** e for e in range(9) for k in (1, 2, 5) if k * 10 ** e <= max_steps]
    fig = go.Figure()
    for m, setup in (("eager", 0.0), ("graph", d.capture_s), ("compile", d.compile_s)):
        per = d.at(m, batch) * 1e-6
        fig.add_trace(go.Scatter(x=steps, y=[setup + k * per for k in steps], name=label(m),
                                 mode="lines", line=dict(color=color(m))))
    if 0 < be <= max_steps:
        fig.add_vline(x=be, line_dash="dot", line_color=color("compile"),
                      annotation_text=f"compile pays off after {be:,.0f} steps")
    return finish(fig, f"Time to serve n steps at batch {batch}, set-up included", "decode steps",
                  "seconds", log_x=True, log_y=True, subtitle=subtitle, record=record)
