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


def what_if(kernels: int, host_us: float, node_us: float) -> str:
    """The launch-only model of a step in one line: eager needs at least ``kernels × host_us``
    of host time, a replay at least ``kernels × node_us`` of GPU time."""
    eager = expected_eager_step_us(kernels, host_us)
    graph = expected_replay_us(kernels, node_us)
    if graph <= 0:
        return f"{kernels} kernels: eager ≥ {eager:,.0f} µs of launches; replay cost unknown"
    return (f"{kernels} kernels × {host_us:.2f} µs = eager ≥ {eager:,.0f} µs of launches; "
            f"replay ≥ {kernels} × {node_us:.2f} µs = {graph:,.0f} µs of GPU time "
            f"→ at most {eager / graph:.1f}× faster")
