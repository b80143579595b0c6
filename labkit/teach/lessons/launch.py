"""Launch-overhead arithmetic over ``launch_overhead`` and ``timeline_<preset>`` records (01–03)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any
from collections.abc import Mapping, Sequence

from labkit.checks import as_number
from labkit.measure.records import LaunchOverhead, view
from labkit.teach.lessons import stat

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
