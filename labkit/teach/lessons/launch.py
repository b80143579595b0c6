"""Launch-overhead arithmetic over the ``launch_overhead``, ``timeline_<preset>`` and
``decode_<preset>`` records (notebooks 01–03): where the work-per-kernel sweep stops being
launch-bound, timeline statistics, and the overlap model step ≈ max(host issue, GPU time)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from labkit.measure.records import LaunchOverhead, view
from labkit.teach.lessons import median, record_data

MEET_RATIO = 1.1  # eager/graph time ratio at or below which the two "meet"
SWEEP_BYTES_PER_ELEMENT = 8  # x.mul_(c) on float32 reads and writes 4 bytes per element


def _count(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def expected_eager_step_us(n_kernels: int, host_per_launch_us: float) -> float:
    """Host issue time of ``n_kernels`` launches (µs): a lower bound of an eager step."""
    return _count("n_kernels", n_kernels) * _count("host_per_launch_us", host_per_launch_us)


def expected_replay_us(n_kernels: int, gpu_per_node_us: float) -> float:
    """Replay time of a graph of ``n_kernels`` tiny nodes (µs): a lower bound."""
    return _count("n_kernels", n_kernels) * _count("gpu_per_node_us", gpu_per_node_us)


def sweep_rows(sweep: Any, meet_ratio: float = MEET_RATIO) -> list[dict]:
    """The sweep (a record, or a list of dicts or WorkPoints) by numel, a row per point:
    ``numel``, ``mb`` moved per kernel, ``eager``, ``graph`` (Stats), ``eager_us``,
    ``graph_us``, ``ratio``, ``verdict`` (``launch-bound``; ``bandwidth-bound`` within
    ``meet_ratio``; ``unknown`` without a graph column), ``gbs`` (of the replayed kernel)."""
    if not (isinstance(sweep, Sequence) and not isinstance(sweep, (str, bytes))):
        sweep = view(sweep, LaunchOverhead).sweep
    rows = []
    for p in sweep:
        p = dict(p) if isinstance(p, Mapping) else {"numel": p.numel, "eager": p.eager,
                                                     "graph": p.graph}
        n, e, g = int(p["numel"]), median(p["eager"]), median(p.get("graph"))
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
    p = crossover_point(sweep, meet_ratio)
    return None if p is None else p["numel"]


def point_at(sweep: Any, numel: int) -> dict:
    """The sweep row whose numel is closest to ``numel`` on a log scale."""
    rows = sweep_rows(sweep)
    if not rows or numel < 1:
        raise ValueError(f"need a non-empty sweep and numel >= 1, got {len(rows)} points, "
                         f"numel {numel}")
    return min(rows, key=lambda p: abs(math.log(p["numel"] / numel)))


def timeline_stats(method: Mapping) -> dict:
    """One method of a ``timeline_<preset>`` record (``record.data["eager"]``): ``n_cpu``,
    ``n_gpu`` (events per lane), ``span_us``, ``gpu_busy_us`` (union of GPU intervals),
    ``gpu_idle_fraction`` and ``step_us``."""
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
    """Overlap model: eager ≈ max(kernels × host_us, gpu_us), replay ≈ gpu_us. Returns
    ``host_issue_us``, ``eager_us``, ``graph_us`` and ``speedup``."""
    host, gpu = expected_eager_step_us(kernels, host_us), _count("gpu_us", gpu_us)
    return {"host_issue_us": host, "eager_us": max(host, gpu), "graph_us": gpu,
            "speedup": max(host, gpu) / gpu if gpu > 0 else float("nan")}


def _rows(launch_record: Any, points: Sequence[tuple]) -> list[dict]:
    host = median(view(launch_record, LaunchOverhead).host_per_launch)
    if host is None:
        raise ValueError("the launch_overhead record has no host_per_launch median")
    out = []
    for extra, batch, k, gpu, eager in points:
        m = step_model_us(k, host, gpu)
        out.append({**extra, "batch": batch, "kernels": k, "host_issue_us": m["host_issue_us"],
                    "gpu_us": gpu, "eager_model_us": m["eager_us"], "eager_measured_us": eager,
                    "measured_over_model": eager / m["eager_us"],
                    "host_us_per_kernel_implied": eager / k})
    return out


def model_vs_measured(decode: Any, launch_record: Any) -> list[dict]:
    """The overlap model beside a ``decode_<preset>`` record, per batch size: ``batch``,
    ``kernels``, ``host_issue_us``, ``gpu_us`` (replayed step), ``eager_model_us``,
    ``eager_measured_us``, ``measured_over_model``, ``host_us_per_kernel_implied``."""
    d = record_data(decode)
    t = d.get("times", {})
    if "eager" not in t or "graph" not in t:
        raise ValueError(f"the decode record needs eager and graph times, got {sorted(t)}; "
                         "measure it with methods=('eager', 'graph')")
    return _rows(launch_record, [({}, b, int(d["kernels_per_step"]), median(g), median(e))
                                 for b, e, g in zip(d["batch_sizes"], t["eager"], t["graph"])])


def bench_vs_model(bench: Any, launch_record: Any, kernels: Mapping[str, int]) -> list[dict]:
    """:func:`model_vs_measured` for the ``bench`` rows of the models in ``kernels``."""
    return _rows(launch_record, [({"model": r["model"]}, r["batch"], int(kernels[r["model"]]),
                                  r["graph_us"], r["eager_us"])
                                 for r in record_data(bench)["rows"] if r["model"] in kernels])
