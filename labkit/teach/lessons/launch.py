"""Launch-overhead arithmetic over ``launch_overhead`` and ``timeline_<preset>`` records (01–03)."""

from __future__ import annotations

import datetime as _dt
import math
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


#: environment fields two records must share to come from one host at one commit
SAME_HOST_FIELDS = ("gpu_name", "cpu", "cpu_count", "driver", "platform")


def _same_commit(a: Any, b: Any) -> bool:
    a, b = str(a or ""), str(b or "")
    return bool(a) and bool(b) and (a.startswith(b) or b.startswith(a))


def host_launch_beside(record: Any, launch_record: Any) -> dict[str, float] | None:
    """The host µs per kernel launch of the run that made ``record``: ``launch_record``'s
    ``host_per_launch`` median (``host_us``) and how many minutes before ``record`` it was made
    (``minutes_before``), when both come from one host (:data:`SAME_HOST_FIELDS`) at one commit;
    else None. An eager step follows the host, so a speed-up over eager is only told with the
    host µs per launch of its own run (or a note that the run did not measure it)."""
    if record is None or launch_record is None:
        return None
    env, lenv = getattr(record, "env", None) or {}, getattr(launch_record, "env", None) or {}
    if not _same_commit(env.get("git_commit"), lenv.get("git_commit")) or any(
            env.get(k) is None or env.get(k) != lenv.get(k) for k in SAME_HOST_FIELDS):
        return None
    host_us = stat(view(launch_record, LaunchOverhead).host_per_launch)
    if host_us is None:
        return None
    try:
        t = _dt.datetime.fromisoformat(str(getattr(record, "created", None) or env["date"]))
        t0 = _dt.datetime.fromisoformat(str(getattr(launch_record, "created", None)
                                            or lenv["date"]))
    except (KeyError, ValueError):
        return None
    return {"host_us": host_us, "minutes_before": (t - t0).total_seconds() / 60}
