"""Charts of notebook 12: step time against the floor, and N decode steps per graph."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

from labkit.measure.records import Multistep, Roofline, view
from labkit.teach.lessons import roofline as lr
from labkit.teach.plots import (COLORS as METHOD_COLORS, check_methods, color, finish, plotly_go,
                                series_colors, stats_bar, stats_error_bars)

#: colours of the step variants and the multi-step ways not in the suite's palette
COLORS = {"fused": "#ff7f0e", "compile_reduce_overhead": color("compile"),
          "compile_manual_graph": "#e377c2", "host_sync": color("eager"),
          "one_step_graphs": color("graph"), "multistep": "#2ca02c"}
MULTISTEP = {"host_sync": "one-step graph, tokens to the host and back each step",
             "one_step_graphs": "one-step graph, argmax fed back on the device",
             "multistep": "{n} steps in one graph",
             "one_step_recaptured": "one-step graph, captured a second time",
             "multistep_fixed_positions": "{n} steps in one graph, positions held still",
             "multistep_own_pool": "{n} steps in one graph, captured alone in its own pool"}


def floor_chart(record: Any, *, variants: Sequence[str] | None = None,
                subtitle: str | None = None):
    """Median step time per batch size, one line per variant, and the floor dashed (log–log)."""
    go = plotly_go()
    r = view(record, Roofline)
    variants = list(variants or r.methods)
    check_methods("roofline", variants, r.times, "variant")
    fig, colours = go.Figure(), series_colors(variants, {**METHOD_COLORS, **COLORS})
    for v in variants:
        pts = [(b, s) for b, s in zip(r.batch_sizes, r.times[v]) if s is not None]
        fig.add_trace(go.Scatter(x=[b for b, _ in pts], y=[s.median for _, s in pts],
                                 name=lr.variant_label(v), mode="lines+markers",
                                 line=dict(color=colours[v]),
                                 error_y=stats_error_bars([s for _, s in pts])))
    fig.add_trace(go.Scatter(x=r.batch_sizes, y=r.roofline_us(), mode="lines",
                             name=f"floor ({r.bandwidth_gbps / 1000:.2f} TB/s copy bandwidth)",
                             line=dict(color="#444444", dash="dash")))
    return finish(fig, f"Decode step against its floor ({r.preset}, {r.config['n_layer']} layers,"
                  f" {r.context} positions per row)", "batch size", "µs per step (median)",
                  subtitle=subtitle, record=record,
                  log_x=True, log_y=True)


def multistep_chart(record: Any, *, subtitle: str | None = None):
    """µs per decode step per batch size for each way of running N steps."""
    m = view(record, Multistep)
    colours = series_colors(list(m.methods), {**METHOD_COLORS, **COLORS})
    fig = plotly_go().Figure([stats_bar(m.batch_sizes, m.times[k],
                                        MULTISTEP.get(k, k).format(n=m.n_steps), colours[k])
                              for k in m.methods])
    fig.update_layout(barmode="group")
    return finish(fig, f"{m.n_steps} decode steps: per-step time ({m.preset})", "batch size",
                  "µs per step (median)", subtitle=subtitle, record=record)
