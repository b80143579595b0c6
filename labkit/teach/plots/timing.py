"""Charts of ``launch_overhead`` and ``timeline_<preset>`` records (notebooks 01–03)."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

from labkit.measure.records import LaunchOverhead, Timeline, view
from labkit.teach.lessons.launch import MEET_RATIO, crossover_point, point_at, sweep_rows
from labkit.teach.plots import (check_methods, color, finish, label, plotly_go, stats_bar,
                                stats_error_bars)
from labkit.teach.widgets import pow2_label

OVERHEAD_BARS = [("host_per_launch", "host time<br>per launch"),
                 ("launch_sync", "launch<br>+ sync"),
                 ("gpu_per_eager_kernel", "GPU time per<br>eager kernel"),
                 ("gpu_per_graph_node", "GPU time per<br>graph node")]


def short_name(name: str, limit: int = 60) -> str:
    """A profiler event name without ``void``, anonymous namespaces, templates and parameters."""
    text = name.strip().removeprefix("void ").replace("(anonymous namespace)::", "")
    for stop in ("<", "("):
        if stop in text[1:]:
            text = text[: text.index(stop, 1)]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def launch_overhead_bars(record: Any, *, cpu: Any = None, subtitle: str | None = None):
    """Launch costs (median, p10–p90), beside a live CPU ``LaunchOverhead``'s dispatch cost."""
    go = plotly_go()
    data = view(record, LaunchOverhead)
    bars = [(lab, getattr(data, k)) for k, lab in OVERHEAD_BARS if getattr(data, k) is not None]
    if not bars:
        raise ValueError("the record holds none of " + ", ".join(k for k, _ in OVERHEAD_BARS))
    name = (getattr(record, "env", None) or {}).get("gpu_name") or data.device or "GPU"
    traces = [(name, color("gpu"), bars)]
    if cpu is not None:
        host = (cpu.to_dict() if hasattr(cpu, "to_dict") else dict(cpu))["host_per_launch"]
        traces.append(("CPU tensor op, live (no kernel launch)", color("cpu"),
                       [("CPU dispatch cost<br>(this machine, CPU tensor)", host)]))
    fig = go.Figure([stats_bar([b[0] for b in bs], [b[1] for b in bs], n, c,
                               texttemplate="%{y:.2f} µs", textposition="auto",
                               insidetextanchor="middle") for n, c, bs in traces])
    fig.update_layout(barmode="group", showlegend=cpu is not None)
    return finish(fig, "What one kernel launch costs", "", "µs (median, p10–p90)",
                  subtitle=subtitle, record=record)


def sweep_chart(record: Any, *, highlight: int | None = None, meet_ratio: float = MEET_RATIO,
                subtitle: str | None = None):
    """Time vs elements per kernel, eager and replay, a star where they meet (log–log)."""
    go = plotly_go()
    sweep = sweep_rows(record)
    if not sweep:
        raise ValueError("the record's sweep is empty")
    fig = go.Figure()
    for m in ("eager", "graph"):
        pts = [p for p in sweep if p.get(m) is not None]
        if pts:
            fig.add_trace(go.Scatter(
                x=[p["numel"] for p in pts], y=[p[f"{m}_us"] for p in pts], name=label(m),
                mode="lines+markers", line=dict(color=color(m)),
                error_y=stats_error_bars([p[m] for p in pts]),
                hovertemplate=f"%{{x:,}} elements: %{{y:.2f}} µs per kernel<extra>{label(m)}"
                              "</extra>"))
    meet = crossover_point(sweep, meet_ratio)
    if meet is not None:
        fig.add_trace(go.Scatter(
            x=[meet["numel"]], y=[meet["eager_us"]], mode="markers+text",
            name=f"eager meets graph (within {meet_ratio:g}×)", textposition="middle left",
            marker=dict(symbol="star", size=18, color="#222222"),
            text=[f"meet at {pow2_label(meet['numel'], show_value=False)}  "]))
    if highlight is not None:
        p = point_at(sweep, highlight)
        ys = [y for y in (p["eager_us"], p["graph_us"]) if y is not None]
        fig.add_trace(go.Scatter(x=[p["numel"]] * len(ys), y=ys, mode="markers",
                                 name="selected size", marker=dict(symbol="circle-open", size=20,
                                                                   color="#ff7f0e")))
    fig.update_xaxes(tickvals=[p["numel"] for p in sweep],
                     ticktext=[pow2_label(p["numel"], show_value=False) for p in sweep])
    return finish(fig, "Work per kernel: when does the launch stop mattering?",
                  "elements per kernel (float32, x.mul_)", "µs per kernel (median)",
                  subtitle=subtitle, record=record,
                  log_x=True, log_y=True)


def timeline_chart(record: Any, *, methods: Sequence[str] = ("eager", "graph"),
                   subtitle: str | None = None, title: str | None = None):
    """CPU launches and GPU kernels on one time axis, two lanes per method, a bar per event."""
    go = plotly_go()
    data = view(record, Timeline)
    check_methods("timeline", methods, sorted(data.methods))
    fig, order = go.Figure(), []
    for method in methods:
        step, c = data[method].step_us, color(method)
        for lane in ("CPU", "GPU"):
            evs = [e for e in data[method].events if e.lane == lane]
            y = f"{label(method)} · {lane} {'launches' if lane == 'CPU' else 'kernels'}" + (
                f"<br><sup>step {step:,.0f} µs</sup>" if step and lane == "GPU" else "")
            order.append(y)
            fig.add_trace(go.Bar(
                y=[y] * len(evs), x=[e.dur_us for e in evs], base=[e.start_us for e in evs],
                orientation="h", name=y, customdata=[[short_name(e.name)] for e in evs],
                marker=dict(color=c, opacity=0.45 if lane == "CPU" else 1.0,
                            line=dict(color=c, width=1)),
                hovertemplate="%{customdata[0]}<br>start %{base:.1f} µs, %{x:.2f} µs"
                              "<extra></extra>"))
    fig.update_layout(barmode="overlay", bargap=0.35, height=170 + 70 * len(order),
                      showlegend=False)
    fig.update_yaxes(categoryorder="array", categoryarray=order[::-1])
    return finish(fig, title or "Decode steps on a timeline: CPU launches vs GPU kernels",
                  "time (µs from the first event)", "", subtitle=subtitle, record=record)
