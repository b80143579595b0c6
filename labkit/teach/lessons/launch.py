"""Launch-overhead arithmetic for notebooks 01–03.

Pure functions over the ``launch_overhead`` and ``timeline_<preset>`` record schemas
(see ``labkit.measure.bench``): the eager step time a launch cost predicts, where a work-per-kernel
sweep stops being launch-bound, a one-line verdict per sweep point, and timeline statistics
(how much of a step the GPU actually computes).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from labkit.measure.records import LaunchOverhead, view
from labkit.teach.lessons import median

#: eager/graph time ratio at or below which the two are said to "meet"
MEET_RATIO = 1.1
#: ``x.mul_(c)`` on float32 reads and writes 4 bytes per element
SWEEP_BYTES_PER_ELEMENT = 8


def _check_count(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0 \
            or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def expected_eager_step_us(n_kernels: int, host_per_launch_us: float) -> float:
    """Eager step time if the host's launch cost were the only cost:
    ``n_kernels × host_per_launch_us`` (µs). A lower bound: real steps add Python and
    framework overhead around each launch."""
    _check_count("n_kernels", n_kernels)
    _check_count("host_per_launch_us", host_per_launch_us)
    return float(n_kernels) * float(host_per_launch_us)


def expected_replay_us(n_kernels: int, gpu_per_node_us: float) -> float:
    """Replay time of a graph of ``n_kernels`` tiny nodes: ``n_kernels × gpu_per_node_us``.
    A lower bound for real kernels, which do more work than a one-element add."""
    _check_count("n_kernels", n_kernels)
    _check_count("gpu_per_node_us", gpu_per_node_us)
    return float(n_kernels) * float(gpu_per_node_us)


def _sweep(sweep_or_record: Any) -> list[dict]:
    if isinstance(sweep_or_record, Sequence) and not isinstance(sweep_or_record, (str, bytes)):
        points = list(sweep_or_record)
    else:
        points = view(sweep_or_record, LaunchOverhead).sweep
    out = []
    for p in points:
        p = dict(p) if isinstance(p, Mapping) else {"numel": p.numel, "eager": p.eager,
                                                     "graph": p.graph}  # timing.WorkPoint
        out.append(p)
    return sorted(out, key=lambda p: p["numel"])


def ratio(point: Mapping) -> float | None:
    """eager / graph time per kernel at one sweep point (``None`` without a graph column)."""
    e, g = median(point.get("eager")), median(point.get("graph"))
    if e is None or g is None or g <= 0:
        return None
    return e / g


def crossover_point(sweep: Any, meet_ratio: float = MEET_RATIO) -> dict | None:
    """The first sweep point (smallest numel) where eager is within ``meet_ratio`` of graph,
    i.e. where the kernel's own work hides the launch cost. ``None`` if they never meet
    (or the sweep has no graph column, e.g. measured on CPU)."""
    if meet_ratio < 1:
        raise ValueError(f"meet_ratio must be >= 1 (eager is never faster than replay), "
                         f"got {meet_ratio}")
    for p in _sweep(sweep):
        r = ratio(p)
        if r is not None and r <= meet_ratio:
            return p
    return None


def crossover_numel(sweep: Any, meet_ratio: float = MEET_RATIO) -> int | None:
    """Elements per kernel at :func:`crossover_point` (``None`` if eager and graph never meet)."""
    p = crossover_point(sweep, meet_ratio)
    return None if p is None else int(p["numel"])


def point_at(sweep: Any, numel: int) -> dict:
    """The sweep point whose numel is closest to ``numel`` (on a log scale)."""
    points = _sweep(sweep)
    if not points:
        raise ValueError("the sweep is empty")
    if numel < 1:
        raise ValueError(f"numel must be >= 1, got {numel}")
    return min(points, key=lambda p: abs(math.log(p["numel"]) - math.log(numel)))


def verdict(point: Mapping, meet_ratio: float = MEET_RATIO) -> str:
    """``"launch-bound"`` (eager clearly slower than replay), ``"bandwidth-bound"`` (they
    meet: the kernel's own memory traffic dominates) or ``"unknown"`` (no graph column)."""
    r = ratio(point)
    if r is None:
        return "unknown"
    return "bandwidth-bound" if r <= meet_ratio else "launch-bound"


def bandwidth_gbs(numel: int, us: float, bytes_per_element: int = SWEEP_BYTES_PER_ELEMENT) -> float:
    """Memory bandwidth (GB/s) a kernel touching ``numel`` elements in ``us`` µs achieves."""
    if us <= 0:
        raise ValueError(f"time must be > 0 µs, got {us}")
    return numel * bytes_per_element / (us * 1e-6) / 1e9


def describe_point(point: Mapping, meet_ratio: float = MEET_RATIO) -> str:
    """One sentence on a sweep point: times per kernel, ratio, verdict, bandwidth."""
    n = int(point["numel"])
    e, g = median(point.get("eager")), median(point.get("graph"))
    size = (f"{n:,} element{'s' if n != 1 else ''} per kernel "
            f"({n * SWEEP_BYTES_PER_ELEMENT / 1e6:.3g} MB moved)")
    if g is None:
        return f"{size}: eager {e:.2f} µs per op; no graph column (measured without CUDA)"
    r = e / g
    v = verdict(point, meet_ratio)
    text = (f"{size}: eager {e:.2f} µs vs graph {g:.2f} µs per kernel ({r:.2f}×) → {v}")
    if v == "launch-bound":
        text += ": the GPU waits for the CPU to launch the next kernel"
    else:
        text += (f": the kernel's own memory traffic dominates "
                 f"({bandwidth_gbs(n, g):,.0f} GB/s achieved)")
    return text


def describe_overhead(record: Any) -> str:
    """The launch_overhead record's headline numbers, one per line."""
    data = view(record, LaunchOverhead)
    rows = [("host time per launch", "host_per_launch"), ("launch + sync", "launch_sync"),
            ("GPU time per eager kernel", "gpu_per_eager_kernel"),
            ("GPU time per graph node", "gpu_per_graph_node")]
    out = [f"device: {data.device}, {data.n_kernels} kernels per burst"]
    for label, key in rows:
        m = median(getattr(data, key))
        out.append(f"{label:26s}: " + ("n/a" if m is None else f"{m:.2f} µs (median)"))
    return "\n".join(out)


# ---------------------------------------------------------------------------------- timelines


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def timeline_stats(method: Mapping) -> dict:
    """Statistics of one method of a ``timeline_<preset>`` record (``record.data["eager"]``).

    Returns ``n_cpu``, ``n_gpu`` (events per lane), ``span_us`` (first start to last end),
    ``gpu_busy_us`` (union of GPU kernel intervals), ``gpu_idle_fraction`` (share of the
    span the GPU computes nothing) and ``step_us`` (as recorded).
    """
    events = list(method.get("events", []))
    for ev in events:
        if ev.get("lane") not in ("CPU", "GPU"):
            raise ValueError(f"timeline event lane must be 'CPU' or 'GPU', got {ev.get('lane')!r}")
    gpu = [(float(e["start_us"]), float(e["start_us"]) + float(e["dur_us"]))
           for e in events if e["lane"] == "GPU"]
    if events:
        start = min(float(e["start_us"]) for e in events)
        stop = max(float(e["start_us"]) + float(e["dur_us"]) for e in events)
        span = stop - start
    else:
        span = 0.0
    busy = _union_us(gpu)
    return {
        "n_cpu": sum(e["lane"] == "CPU" for e in events),
        "n_gpu": len(gpu),
        "span_us": span,
        "gpu_busy_us": busy,
        "gpu_idle_fraction": (1 - busy / span) if span > 0 else float("nan"),
        "step_us": method.get("step_us"),
    }


def step_model_us(kernels: int, host_us: float, gpu_us: float) -> dict[str, float]:
    """The overlap model of one decode step: the host issues kernels while the GPU runs them,
    so a step takes about ``max(host issue time, GPU time)``.

    Eager: host issue ≈ ``kernels × host_us`` (host time per launch), GPU time ≈ ``gpu_us``
    (the replayed graph's step time: the same kernels with no gaps). Replay: one launch, so
    ≈ ``gpu_us``. Returns ``eager_us``, ``graph_us``, ``host_issue_us`` and ``speedup``
    (``eager_us / graph_us``, ``nan`` when ``gpu_us`` is 0).
    """
    _check_count("kernels", kernels)
    _check_count("host_us", host_us)
    _check_count("gpu_us", gpu_us)
    host = float(kernels) * float(host_us)
    eager = max(host, float(gpu_us))
    return {"host_issue_us": host, "eager_us": eager, "graph_us": float(gpu_us),
            "speedup": eager / gpu_us if gpu_us > 0 else float("nan")}


def what_if(kernels: int, host_us: float, gpu_us: float) -> str:
    """The overlap model in one line: eager ≈ max(kernels × host µs per launch, GPU time),
    replay ≈ GPU time (``gpu_us``, the replayed step)."""
    m = step_model_us(kernels, host_us, gpu_us)
    bound = "host-bound" if m["host_issue_us"] > m["graph_us"] else "GPU-bound"
    text = (f"{kernels} kernels × {host_us:.2f} µs = {m['host_issue_us']:,.0f} µs of host issue; "
            f"GPU time {m['graph_us']:,.0f} µs → eager ≈ {m['eager_us']:,.0f} µs ({bound}), "
            f"replay ≈ {m['graph_us']:,.0f} µs")
    if gpu_us > 0:
        text += f" → speed-up ≈ {m['speedup']:.1f}×"
    return text


def model_vs_measured(decode: Any, launch_record: Any, *, host_key: str = "host_per_launch"
                      ) -> list[dict]:
    """The overlap model next to a ``decode_<preset>`` record, one row per batch size.

    Host time per launch from ``launch_record`` (``launch_overhead``), kernels per step and
    the replayed step (the GPU time) from ``decode``. Each row: ``batch``, ``kernels``,
    ``host_issue_us``, ``gpu_us``, ``eager_model_us``, ``eager_measured_us``,
    ``measured_over_model`` and ``host_us_per_kernel_implied`` (measured eager / kernels: the
    host cost per kernel a decode step really pays).
    """
    d = decode.data if hasattr(decode, "data") else decode
    lo = view(launch_record, LaunchOverhead)
    host_us = median(getattr(lo, host_key))
    if host_us is None:
        raise ValueError(f"the launch_overhead record has no {host_key!r} median; record it "
                         "with labkit.measure.bench.measure_launch_overhead")
    times = d.get("times", {})
    if "eager" not in times or "graph" not in times:
        raise ValueError(f"the decode record needs eager and graph times, got "
                         f"{sorted(times)}; measure it with methods=('eager', 'graph')")
    kernels = int(d["kernels_per_step"])
    rows = []
    for i, bs in enumerate(d["batch_sizes"]):
        gpu = median(times["graph"][i])
        eager = median(times["eager"][i])
        m = step_model_us(kernels, host_us, gpu)
        rows.append({"batch": bs, "kernels": kernels, "host_issue_us": m["host_issue_us"],
                     "gpu_us": gpu, "eager_model_us": m["eager_us"],
                     "eager_measured_us": eager, "measured_over_model": eager / m["eager_us"],
                     "host_us_per_kernel_implied": eager / kernels})
    return rows


def describe_model_rows(name: str, rows: Sequence[Mapping]) -> str:
    """One line per row of :func:`model_vs_measured`: the model's eager step next to the
    measured one."""
    out = []
    for r in rows:
        out.append(f"{name} batch {r['batch']:>3}: model eager ≈ max({r['host_issue_us']:,.0f}, "
                   f"{r['gpu_us']:,.0f}) = {r['eager_model_us']:,.0f} µs, measured "
                   f"{r['eager_measured_us']:,.0f} µs ({r['measured_over_model']:.1f}× the model; "
                   f"{r['host_us_per_kernel_implied']:.1f} µs of host time per kernel)")
    return "\n".join(out)


def bench_vs_model(bench: Any, launch_record: Any, kernels: Mapping[str, int]) -> list[dict]:
    """The overlap model next to the ``bench`` record's eager and graph columns.

    ``kernels`` maps each model name of the bench rows to its kernels per step (from the
    ``decode_<preset>`` records). Rows as :func:`model_vs_measured`, plus ``model``.
    """
    rows_in = (bench.data if hasattr(bench, "data") else bench)["rows"]
    host_us = median(view(launch_record, LaunchOverhead).host_per_launch)
    if host_us is None:
        raise ValueError("the launch_overhead record has no host_per_launch median")
    out = []
    for r in rows_in:
        if r["model"] not in kernels:
            continue
        k = int(kernels[r["model"]])
        m = step_model_us(k, host_us, r["graph_us"])
        out.append({"model": r["model"], "batch": r["batch"], "kernels": k,
                    "host_issue_us": m["host_issue_us"], "gpu_us": r["graph_us"],
                    "eager_model_us": m["eager_us"], "eager_measured_us": r["eager_us"],
                    "measured_over_model": r["eager_us"] / m["eager_us"],
                    "host_us_per_kernel_implied": r["eager_us"] / k})
    return out
