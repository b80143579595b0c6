"""What a profiler trace of decode shows next to CUDA-event timings (notebook 03).

Pure functions over the ``timeline_<preset>`` record (``labkit.measure.bench.measure_timeline``:
a few steps under ``torch.profiler``) and a ``decode_<preset>`` record (CUDA-event medians of
the same steps without the profiler). A trace is not free: the profiler records every
operation on the host, and the first ``cudaGraphLaunch`` after the profiler starts takes far
longer than later ones (the graph is set up again for tracing before it runs). Per-step GPU
spans show what the GPU itself does once that is over.
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping

from labkit.teach.lessons import record_data, stat

#: host calls that put a graph on the GPU's queue
GRAPH_LAUNCH = "cudaGraphLaunch"


def _events(method: Mapping, lane: str) -> list[dict]:
    return [e for e in method.get("events", []) if e.get("lane") == lane]


def step_spans(method: Mapping, steps: int) -> list[dict]:
    """Split the GPU events of one method of a timeline record into ``steps`` equal runs
    (every step launches the same operations) and return, per step, ``start_us``,
    ``span_us`` (first GPU start to last GPU end) and ``busy_us`` (sum of kernel times)."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be an int >= 1 (the record's params.steps), got {steps!r}")
    gpu = sorted(_events(method, "GPU"), key=lambda e: float(e["start_us"]))
    if len(gpu) % steps:
        raise ValueError(f"{len(gpu)} GPU events do not split into {steps} equal steps; pass "
                         "the steps the record was made with (its params.steps)")
    n = len(gpu) // steps
    out = []
    for i in range(steps):
        run = gpu[i * n:(i + 1) * n]
        start = float(run[0]["start_us"]) if run else 0.0
        end = max((float(e["start_us"]) + float(e["dur_us"]) for e in run), default=start)
        out.append({"start_us": start, "span_us": end - start,
                    "busy_us": sum(float(e["dur_us"]) for e in run)})
    return out


def trace_vs_events(timeline: Any, decode: Any, batch_index: int = 0) -> dict[str, dict]:
    """Per method (``eager``, ``graph``): what the trace shows and what CUDA events measured.

    ``profiled_step_us`` is the record's ``step_us`` (trace length / steps, profiler
    included); ``gpu_span_us`` the median per-step GPU span; ``gpu_busy_us`` the median sum of
    kernel times per step; ``launch_us`` the host's launch calls per step (``first_launch_us``
    and ``later_launch_us`` for graph replay); ``event_*`` the CUDA-event median, p10 and p90
    of the decode record at ``batch_index`` (without the profiler).
    """
    tl, dec = record_data(timeline), record_data(decode)
    steps = int(getattr(timeline, "params", {}).get("steps", 0) or 0)
    out: dict[str, dict] = {}
    for name in ("eager", "graph"):
        if name not in tl or name not in dec.get("times", {}):
            continue
        method = tl[name]
        cpu = _events(method, "CPU")
        launches = [float(e["dur_us"]) for e in cpu if e.get("name") == GRAPH_LAUNCH]
        n_steps = steps or (len(launches) if name == "graph" and launches else 1)
        spans = step_spans(method, n_steps)
        ev = dec["times"][name][batch_index]
        row = {"steps": n_steps,
               "profiled_step_us": float(method["step_us"]),
               "gpu_span_us": statistics.median(s["span_us"] for s in spans),
               "gpu_busy_us": statistics.median(s["busy_us"] for s in spans),
               "launch_us": sum(float(e["dur_us"]) for e in cpu) / n_steps,
               "event_median_us": stat(ev, "median"), "event_p10_us": stat(ev, "p10"),
               "event_p90_us": stat(ev, "p90")}
        if launches:
            row["first_launch_us"] = launches[0]
            row["later_launch_us"] = statistics.median(launches[1:]) if len(launches) > 1 else None
        out[name] = row
    return out


def describe_trace_vs_events(rows: Mapping[str, Mapping]) -> list[str]:
    """Sentences that put the trace next to the CUDA-event timings (one per finding)."""
    out = []
    g = rows.get("graph")
    if g and g.get("first_launch_us") is not None:
        later = g.get("later_launch_us")
        out.append(
            f"Graph replay: the first cudaGraphLaunch under the profiler took "
            f"{g['first_launch_us']:.0f} µs"
            + (f", the later ones {later:.0f} µs" if later is not None else "")
            + "; the GPU waits during that first call (the graph is set up again for tracing "
              "when the profiler is on). That wait is "
              f"{g['first_launch_us'] / (g['profiled_step_us'] * g['steps']):.0%} of the "
              f"trace, whose length / {g['steps']} steps is the recorded step time "
              f"({g['profiled_step_us']:.0f} µs).")
        out.append(
            f"Once running, one replay occupies the GPU for {g['gpu_span_us']:.0f} µs "
            f"({g['gpu_busy_us']:.0f} µs of it inside kernels, the rest the short gaps between "
            f"nodes); CUDA events without the profiler measured {g['event_median_us']:.0f} µs "
            f"(p10 {g['event_p10_us']:.0f}, p90 {g['event_p90_us']:.0f}). The picture and the "
            "timing agree once the first launch is set aside.")
    e = rows.get("eager")
    if e:
        out.append(
            f"Eager: a profiled step took {e['profiled_step_us']:.0f} µs against a CUDA-event "
            f"median of {e['event_median_us']:.0f} µs (p10 {e['event_p10_us']:.0f}, p90 "
            f"{e['event_p90_us']:.0f}): the profiler records every operation on the host, so "
            "it slows exactly the part that is already the bottleneck. The GPU itself computed "
            f"for only {e['gpu_busy_us']:.0f} µs of each step.")
    return out


def short_name(name: str, limit: int = 60) -> str:
    """A profiler event name without ``void``, anonymous namespaces, template arguments and
    parameter lists: ``void at::native::(anonymous namespace)::indexSelect<...>(...)`` →
    ``at::native::indexSelect``."""
    text = name.strip()
    if text.startswith("void "):
        text = text[5:]
    text = text.replace("(anonymous namespace)::", "")
    for stop in ("<", "("):
        if stop in text[1:]:
            text = text[: text.index(stop, 1)]
    return text if len(text) <= limit else text[: limit - 1] + "…"
