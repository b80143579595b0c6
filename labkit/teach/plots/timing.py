"""Charts for launch overhead: cost bars, the work-per-kernel sweep, CPU/GPU timelines.

Inputs are ``launch_overhead`` and ``timeline_<preset>`` records (a
:class:`labkit.measure.results.Result` or its ``data`` dict); a Result's provenance becomes the
subtitle unless ``subtitle`` is given.
"""

from __future__ import annotations

from typing import Any, Sequence

from labkit.measure.records import LaunchOverhead, Timeline, view
from labkit.teach.lessons import median, record_provenance, stat
from labkit.teach.lessons.launch import MEET_RATIO, crossover_point, point_at
from labkit.teach.lessons.trace import short_name
from labkit.teach.plots import base_layout, color, label, register_template
from labkit.teach.widgets import pow2_label

#: (record key, bar label) of the launch_overhead figures, in display order
OVERHEAD_BARS: list[tuple[str, str]] = [
    ("host_per_launch", "host time<br>per launch"),
    ("launch_sync", "launch<br>+ sync"),
    ("gpu_per_eager_kernel", "GPU time per<br>eager kernel"),
    ("gpu_per_graph_node", "GPU time per<br>graph node"),
]
LANE_LABELS = {"CPU": "CPU launches", "GPU": "GPU kernels"}


def finish(fig, title: str, x: str, y: str, *, subtitle: str = "", **kw):
    """:func:`labkit.teach.plots.base_layout`, plus room above the plot so that a subtitle and the
    horizontal legend do not overlap. Registers the suite's template first."""
    register_template()
    fig = base_layout(fig, title, x, y, subtitle=subtitle, **kw)
    if subtitle:
        fig.update_layout(margin=dict(t=120), legend=dict(y=1.0, yanchor="bottom"))
    return fig


def stats_error_bars(stats: Sequence[Any]) -> dict:
    """Plotly ``error_y`` whiskers from Stats (dicts or objects): p10 below, p90 above the
    median; a missing figure gets no whisker."""
    meds = [stat(s, "median") for s in stats]
    lo = [stat(s, "p10") for s in stats]
    hi = [stat(s, "p90") for s in stats]
    return dict(type="data", symmetric=False,
                array=[(h - m) if None not in (h, m) else 0 for h, m in zip(hi, meds)],
                arrayminus=[(m - low) if None not in (low, m) else 0 for low, m in zip(lo, meds)])


def launch_overhead_bars(record: Any, *, cpu: Any = None, subtitle: str | None = None):
    """Bars of the launch costs in a ``launch_overhead`` record (median, p10–p90 whiskers).

    Figures the record lacks (``None``, e.g. measured without CUDA) are left out.
    ``cpu``: a live :class:`labkit.timing.LaunchOverhead` (or its dict) measured on a CPU,
    added as a grey bar labelled *CPU dispatch cost* — PyTorch's per-op cost with no kernel
    launch at all, not a GPU number.
    """
    import plotly.graph_objects as go

    data = view(record, LaunchOverhead)
    keys = [(k, lab) for k, lab in OVERHEAD_BARS if getattr(data, k) is not None]
    if not keys:
        raise ValueError("the record holds none of " + ", ".join(k for k, _ in OVERHEAD_BARS))
    stats = [getattr(data, k) for k, _ in keys]
    env = getattr(record, "env", None) or {}
    fig = go.Figure(go.Bar(
        x=[lab for _, lab in keys], y=[median(s) for s in stats],
        name=env.get("gpu_name") or data.device or "GPU", marker_color=color("gpu"),
        error_y=stats_error_bars(stats), texttemplate="%{y:.2f} µs", textposition="auto",
        insidetextanchor="middle"))
    if cpu is not None:
        cpu_data = cpu.to_dict() if hasattr(cpu, "to_dict") else dict(cpu)
        host = cpu_data["host_per_launch"]
        fig.add_trace(go.Bar(x=["CPU dispatch cost<br>(this machine, CPU tensor)"], y=[median(host)],
                             name="CPU tensor op, live (no kernel launch)",
                             marker_color=color("cpu"), error_y=stats_error_bars([host]),
                             texttemplate="%{y:.2f} µs", textposition="auto",
                             insidetextanchor="middle"))
    fig.update_layout(barmode="group", showlegend=cpu is not None)
    sub = record_provenance(record) if subtitle is None else subtitle
    return finish(fig, "What one kernel launch costs", "", "µs (median, p10–p90)",
                  subtitle=sub)


def sweep_chart(record: Any, *, highlight: int | None = None, meet_ratio: float = MEET_RATIO,
                subtitle: str | None = None):
    """Time per kernel versus elements per kernel, eager and graph replay, log–log.

    A star marks where eager meets graph (the first size where eager is within
    ``meet_ratio`` of replay: from there on the kernel's own work hides the launch cost);
    ``highlight`` rings the sweep point nearest that numel (for a slider).
    """
    import plotly.graph_objects as go

    sweep = [{"numel": p.numel, "eager": p.eager, "graph": p.graph}
             for p in sorted(view(record, LaunchOverhead).sweep, key=lambda p: p.numel)]
    if not sweep:
        raise ValueError("the record's sweep is empty")
    x = [p["numel"] for p in sweep]
    fig = go.Figure()
    for method in ("eager", "graph"):
        pts = [(p["numel"], p[method]) for p in sweep if p.get(method) is not None]
        if not pts:
            continue
        fig.add_trace(go.Scatter(
            x=[n for n, _ in pts], y=[median(s) for _, s in pts], name=label(method),
            mode="lines+markers", line=dict(color=color(method)),
            error_y=stats_error_bars([s for _, s in pts]),
            hovertemplate="%{x:,} elements: %{y:.2f} µs per kernel<extra>" + label(method)
                          + "</extra>"))
    meet = crossover_point(sweep, meet_ratio)
    if meet is not None:
        fig.add_trace(go.Scatter(
            x=[meet["numel"]], y=[median(meet["eager"])], mode="markers+text",
            name=f"eager meets graph (within {meet_ratio:g}×)",
            marker=dict(symbol="star", size=18, color="#222222"),
            text=[f"meet at {pow2_label(meet['numel'], show_value=False)}  "],
            textposition="middle left"))
    if highlight is not None:
        p = point_at(sweep, highlight)
        ys = [median(p[m]) for m in ("eager", "graph") if p.get(m) is not None]
        fig.add_trace(go.Scatter(
            x=[p["numel"]] * len(ys), y=ys, mode="markers", name="selected size",
            marker=dict(symbol="circle-open", size=20, line=dict(width=3), color="#ff7f0e")))
    fig.update_xaxes(tickvals=x, ticktext=[pow2_label(n, show_value=False) for n in x])
    sub = record_provenance(record) if subtitle is None else subtitle
    return finish(fig, "Work per kernel: when does the launch stop mattering?",
                  "elements per kernel (float32, x.mul_)", "µs per kernel (median)",
                  subtitle=sub, log_x=True, log_y=True)


def timeline_chart(record: Any, *, methods: Sequence[str] = ("eager", "graph"),
                   subtitle: str | None = None, title: str | None = None):
    """CPU launches and GPU kernels on one time axis, two lanes per method, eager above graph.

    Each bar is one profiler event (hover for its name and duration). In eager mode the GPU
    lane is full of gaps: each kernel waits for the CPU to launch it. A replayed graph is one
    CPU launch, then kernels back to back.
    """
    import plotly.graph_objects as go

    data = view(record, Timeline)
    missing = [m for m in methods if m not in data.methods]
    if missing:
        raise KeyError(f"the timeline record has no method(s) {missing}; it has "
                       f"{sorted(data.methods)}")
    fig = go.Figure()
    order = []
    for method in methods:
        step = data[method].step_us
        for lane in ("CPU", "GPU"):
            evs = [e for e in data[method].events if e.lane == lane]
            y = f"{label(method)} · {LANE_LABELS[lane]}" + (
                f"<br><sup>step {step:,.0f} µs</sup>" if step and lane == "GPU" else "")
            order.append(y)
            c = color(method)
            fig.add_trace(go.Bar(
                y=[y] * len(evs), x=[e.dur_us for e in evs],
                base=[e.start_us for e in evs], orientation="h",
                name=y,
                marker=dict(color=c, opacity=0.45 if lane == "CPU" else 1.0,
                            line=dict(color=c, width=1)),
                customdata=[[short_name(e.name)] for e in evs],
                hovertemplate="%{customdata[0]}<br>start %{base:.1f} µs, %{x:.2f} µs"
                              "<extra></extra>"))
    fig.update_layout(barmode="overlay", bargap=0.35, height=170 + 70 * len(order),
                      showlegend=False)
    fig.update_yaxes(categoryorder="array", categoryarray=order[::-1])
    sub = record_provenance(record) if subtitle is None else subtitle
    return finish(fig, title or "Decode steps on a timeline: CPU launches vs GPU kernels",
                  "time (µs from the first event)", "", subtitle=sub)
