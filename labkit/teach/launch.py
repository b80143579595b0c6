"""Notebooks 01-03 (and the host cost beside later ones): what a kernel launch costs, operation
counts per step, the launch-bound regime, and their charts.

One module per notebook topic: its lessons (pure: records and numbers to rows) and its
charts (plotly figures from records).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
import math
from typing import Any

from labkit.checks import as_number
from labkit.measure.records import LaunchOverhead, Timeline, view
from labkit.teach.lessons import record_data, stat
from labkit.teach.plots import (
    check_methods, color, finish, label, plotly_go, stats_bar, stats_error_bars,
)
from labkit.teach.widgets import pow2_label


# ---------------------------------------------------------------------- lessons launch
# Launch-overhead arithmetic over ``launch_overhead`` and ``timeline_<preset>`` records (01–03).

MEET_RATIO = 1.1  # eager/graph time ratio at or below which the two "meet"
SWEEP_BYTES_PER_ELEMENT = 8  # x.mul_(c) on float32 reads and writes 4 bytes per element


def expected_replay_us(n_kernels: int, gpu_per_node_us: float) -> float:
    """Replay time of a graph of ``n_kernels`` tiny nodes (µs): a lower bound."""
    return (as_number(n_kernels, "n_kernels", minimum=0)
            * as_number(gpu_per_node_us, "gpu_per_node_us", minimum=0))


def sweep_rows(sweep: Any, meet_ratio: float = MEET_RATIO) -> list[dict]:
    """The sweep by numel, with MB per kernel, medians, ratio, GB/s and a verdict."""
    if not (isinstance(sweep, Sequence) and not isinstance(sweep, (str, bytes))):
        sweep = view(sweep, LaunchOverhead).sweep
    rows = []
    for p in sweep:
        p = dict(p) if isinstance(p, Mapping) else {"numel": p.numel, "eager": p.eager,
                                                     "graph": p.graph}
        n, e, g = int(p["numel"]), stat(p["eager"]), stat(p.get("graph"))
        r = e / g if e is not None and g else None
        rows.append({**p, "numel": n, "mb": n * SWEEP_BYTES_PER_ELEMENT / 1e6, "eager_us": e,
                     "graph_us": g, "ratio": r, "gbs": n * SWEEP_BYTES_PER_ELEMENT / g / 1e3
                     if g else None, "verdict": "unknown" if r is None else
                     "bandwidth-bound" if r <= meet_ratio else "launch-bound"})
    return sorted(rows, key=lambda p: p["numel"])


def crossover_point(sweep: Any, meet_ratio: float = MEET_RATIO) -> dict | None:
    """The first sweep row where eager is within ``meet_ratio`` of graph, or ``None``."""
    if meet_ratio < 1:
        raise ValueError(f"meet_ratio must be >= 1 (eager is never faster than replay), "
                         f"got {meet_ratio}")
    return next((p for p in sweep_rows(sweep, meet_ratio) if p["verdict"] == "bandwidth-bound"),
                None)


def crossover_numel(sweep: Any, meet_ratio: float = MEET_RATIO) -> int | None:
    """Elements per kernel at :func:`crossover_point` (``None`` if eager and graph never meet)."""
    return (crossover_point(sweep, meet_ratio) or {}).get("numel")


def point_at(sweep: Any, numel: int) -> dict:
    """The sweep row whose numel is closest to ``numel`` on a log scale."""
    rows = sweep_rows(sweep)
    if not rows or numel < 1:
        raise ValueError(f"need a non-empty sweep and numel >= 1, got {len(rows)} points, "
                         f"numel {numel}")
    return min(rows, key=lambda p: abs(math.log(p["numel"] / numel)))


def timeline_stats(method: Mapping) -> dict:
    """One method of a ``timeline_<preset>`` record: events, span, GPU busy and idle."""
    ev = [(float(e["start_us"]), float(e["start_us"]) + float(e["dur_us"]), e.get("lane"))
          for e in method.get("events", [])]
    if any(lane not in ("CPU", "GPU") for *_, lane in ev):
        raise ValueError("timeline event lanes must be 'CPU' or 'GPU'")
    span = max(e for _, e, _ in ev) - min(s for s, _, _ in ev) if ev else 0.0
    busy, end = 0.0, -math.inf
    for s, e, _ in sorted(x for x in ev if x[2] == "GPU"):
        busy, end = busy + max(0.0, e - max(s, end)), max(end, e)
    return {"n_cpu": sum(x[2] == "CPU" for x in ev), "n_gpu": sum(x[2] == "GPU" for x in ev),
            "span_us": span, "gpu_busy_us": busy, "step_us": method.get("step_us"),
            "gpu_idle_fraction": 1 - busy / span if span > 0 else float("nan")}


def step_model_us(kernels: int, host_us: float, gpu_us: float) -> dict[str, float]:
    """The overlap model of one step (notebook 03): eager ≈ ``max(kernels × host_us, gpu_us)``
    (the host issues while the GPU works); a replay, one launch, ≈ ``gpu_us``."""
    host = as_number(kernels, "kernels", minimum=0) * as_number(host_us, "host_us", minimum=0)
    gpu_us = as_number(gpu_us, "gpu_us", minimum=0)
    eager = max(host, gpu_us)
    return {"host_issue_us": host, "eager_us": eager, "graph_us": gpu_us,
            "speedup": eager / gpu_us if gpu_us > 0 else float("nan")}


def model_vs_measured(decode: Any, launch_record: Any) -> list[dict]:
    """:func:`step_model_us` beside a ``decode_<preset>`` record, per batch size."""
    d = getattr(decode, "data", decode)
    host_us = stat(view(launch_record, LaunchOverhead).host_per_launch)
    if host_us is None:
        raise ValueError("the launch_overhead record has no host_per_launch median")
    kernels = int(d["kernels_per_step"])
    rows = []
    for i, bs in enumerate(d["batch_sizes"]):
        gpu, eager = stat(d["times"]["graph"][i]), stat(d["times"]["eager"][i])
        m = step_model_us(kernels, host_us, gpu)
        rows.append({"batch": bs, "kernels": kernels, "host_issue_us": m["host_issue_us"],
                     "gpu_us": gpu, "eager_model_us": m["eager_us"], "eager_measured_us": eager,
                     "measured_over_model": eager / m["eager_us"],
                     "host_us_per_kernel_implied": eager / kernels})
    return rows


#: the environment fields that must agree for two records to come from one machine set-up
SAME_HOST_FIELDS = ("cpu", "cpu_count", "platform", "gpu_name", "driver", "torch", "python")


def _when(record: Any) -> datetime | None:
    stamp = (getattr(record, "env", None) or {}).get("date") or getattr(record, "created", None)
    try:
        return datetime.fromisoformat(stamp) if stamp else None
    except ValueError:
        return None


def host_cost_beside(record: Any, launch_record: Any) -> dict:
    """The host µs per kernel launch of ``launch_record`` to show beside a speed-up over eager
    measured in ``record`` (eager decode follows the host CPU), with where it comes from:
    ``same_commit``, ``same_host`` (the :data:`SAME_HOST_FIELDS` of both ``env`` blocks agree),
    ``minutes_apart`` (``launch_record`` minus ``record``; ``None`` without dates) and both
    host load averages."""
    host = view(launch_record, LaunchOverhead).host_per_launch
    if host is None:
        raise ValueError("the launch_overhead record has no host_per_launch (measured without "
                         "CUDA?): measure it on the GPU that measured the speed-up")
    env, lenv = getattr(record, "env", None) or {}, getattr(launch_record, "env", None) or {}
    a, b = _when(record), _when(launch_record)
    commit = env.get("git_commit")
    return {"host_us": host.median, "host_p10": host.p10, "host_p90": host.p90,
            "same_commit": bool(commit) and commit == lenv.get("git_commit"),
            "same_host": all(env.get(k) is not None and env.get(k) == lenv.get(k)
                             for k in SAME_HOST_FIELDS),
            "minutes_apart": None if a is None or b is None else (b - a).total_seconds() / 60,
            "load_avg": env.get("load_avg_1m"), "launch_load_avg": lenv.get("load_avg_1m")}


def host_launch_beside(record: Any, launch_record: Any) -> dict[str, float] | None:
    """:func:`host_cost_beside` when both records come from one host at one commit:
    ``host_us`` and ``minutes_before`` (how long before ``record`` the launch record was made);
    else None (the speed-up is then told with a note that its run did not measure it)."""
    if record is None or launch_record is None:
        return None
    try:
        cost = host_cost_beside(record, launch_record)
    except ValueError:
        return None
    if not (cost["same_commit"] and cost["same_host"]) or cost["minutes_apart"] is None:
        return None
    return {"host_us": cost["host_us"], "minutes_before": -cost["minutes_apart"]}


# ---------------------------------------------------------------------- lessons counts
# GPU operations per decode step as ``labkit.measure.bench.count_step_ops`` counts them.

def gpu_ops_per_step(record: Any, method: str = "eager") -> int:
    """GPU operations per step of ``method`` (``eager`` or ``compile``) in a record."""
    if method not in ("eager", "compile"):
        raise ValueError(f"method must be one of ['compile', 'eager'], got {method!r}")
    d = record_data(record)
    value = d.get("kernels_per_step", d.get("gpu_ops_per_step"))
    if isinstance(value, Mapping) or method != "eager":
        value = value.get(method) if isinstance(value, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{getattr(record, 'name', 'the record')} holds no GPU operation count "
                         f"for method {method!r} (fields kernels_per_step / gpu_ops_per_step); "
                         "pass a decode_, compile_ or modes_ record")
    return value


# ---------------------------------------------------------------------- lessons regime
# Launching a decode step's kernels vs reading its weights at batch 1 (notebooks 00, 01).

#: the published Llama-2-7B shape (Touvron et al. 2023): 32 layers, width 4096, SwiGLU MLP
LLAMA2_7B = {"name": "Llama-2-7B shape", "n_layer": 32, "d_model": 4096, "d_ff": 11008,
             "vocab_size": 32000, "gated": True}


def sweep_bandwidth(record: Any) -> float:
    """Bytes/s the sweep's largest kernel moved when replayed from a graph."""
    rows = [r for r in sweep_rows(record) if r["gbs"]]
    if not rows:
        raise ValueError("the launch_overhead record has no graph column in its sweep "
                         "(it was measured without CUDA); use the H200 reference record")
    return rows[-1]["gbs"] * 1e9


def weight_bytes(n_layer: int, d_model: int, vocab_size: int, *, d_ff: int | None = None,
                 bytes_per_param: int = 2, gated: bool = False) -> int:
    """Bytes of the matrices a decode step reads: per layer ``4 d²`` and ``2 d·d_ff`` (``3``
    gated), plus the head ``vocab × d`` (embeddings, norms, biases left out)."""
    d_ff = 4 * d_model if d_ff is None else d_ff
    for name, v in (("n_layer", n_layer), ("d_model", d_model), ("vocab_size", vocab_size),
                    ("d_ff", d_ff), ("bytes_per_param", bytes_per_param)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{name} must be a number > 0, got {v!r}")
    return int((n_layer * (4 * d_model ** 2 + (3 if gated else 2) * d_model * d_ff)
                + vocab_size * d_model) * bytes_per_param)


def regime_rows(launch_record: Any, decodes: Mapping[str, Any],
                big: Mapping[str, Any] | None = LLAMA2_7B) -> list[dict]:
    """Kernels, weight bytes, launch, read and floor µs per ``decodes`` record, then for the
    shape ``big`` (its count fitted per layer through the first two records: an estimate)."""
    lo = view(launch_record, LaunchOverhead)
    host, node = stat(lo.host_per_launch), stat(lo.gpu_per_graph_node)
    bw = sweep_bandwidth(launch_record)
    shapes: list[list[Any]] = []  # [name, kernels, kernels per layer (fitted) or None, shape]
    for name, rec in decodes.items():
        c = record_data(rec)["config"]
        shapes.append([name, gpu_ops_per_step(rec), None, dict(
            n_layer=c["n_layer"], d_model=c["d_model"], vocab_size=c["vocab_size"],
            bytes_per_param={"float32": 4}.get(c["dtype"], 2))])
    if big is not None:
        (_, k1, _, s1), (_, k2, _, s2) = shapes[:2]
        if s1["n_layer"] == s2["n_layer"]:
            raise ValueError("fitting operations per layer needs two records of different "
                             f"layer counts, got {s1['n_layer']} and {s2['n_layer']}")
        per = (k2 - k1) / (s2["n_layer"] - s1["n_layer"])
        shape = {k: v for k, v in big.items() if k != "name"}
        shapes.append([big.get("name", "shape"), k1 + per * (shape["n_layer"] - s1["n_layer"]),
                       per, shape])
    rows = []
    for name, k, per, shape in shapes:
        wb = weight_bytes(**shape)
        read = wb / bw * 1e6
        rows.append({"name": name, "kernels": k, "counted": per is None, "per_layer": per,
                     "weight_bytes": wb, "launch_us": k * host, "read_us": read,
                     "floor_us": read + k * node, "read_share": read / (read + k * node)})
    return rows


# ---------------------------------------------------------------------- plots timing
# Charts of ``launch_overhead`` and ``timeline_<preset>`` records (notebooks 01–03).

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
