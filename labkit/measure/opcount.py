"""Count the operations one call launches, name by name, with ``torch.profiler``.

On ``"cuda"``: every GPU event (kernels, copies, fills), what a CUDA graph of the call would
hold; on ``"cpu"``: the ATen operators it dispatches (views and allocations left out).
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any
from collections.abc import Callable, Mapping

import torch

from labkit.checks import as_int

DEVICES: tuple[str, ...] = ("cuda", "cpu")

# allocations launch no kernel either
_ALLOCATIONS = frozenset({"empty", "empty_strided", "empty_like", "new_empty",
                          "new_empty_strided", "resize_"})


def count_dispatched_ops(fn: Callable[[], Any], *, include_views: bool = False) -> Counter:
    """Count the ATen operators ``fn()`` dispatches (views, which launch no kernel, excluded by
    default): an estimate of the kernels per step, not a kernel count."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts: Counter = Counter()

    class _Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if include_views or not getattr(func, "is_view", False):
                counts[str(func.overloadpacket.__name__)] += 1
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), _Count():
        fn()
    return counts


def _check_args(fn: Callable[[], object], device: str, warmup: int) -> None:
    if device not in DEVICES:
        raise ValueError(f"device must be one of {list(DEVICES)}, got {device!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable with no arguments, got {type(fn).__name__}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("counting GPU kernels needs a CUDA GPU (torch.cuda.is_available() "
                           "is False); count ATen operators with device='cpu' instead")


def profiled_events(fn: Callable[[], object], warmup: int = 1) -> list:
    """The profiler events (CPU and CUDA) of one call of ``fn`` after ``warmup`` calls."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return list(prof.events())


def profile_call(fn: Callable[[], object]) -> dict:
    """One call of ``fn`` under the profiler: GPU operations (those a graph replay runs
    included) and graph launches (``cudaGraphLaunch`` on the host)."""
    events = profiled_events(fn)
    gpu = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    return {"gpu_ops": gpu, "graph_launches": sum(1 for e in events if "GraphLaunch" in e.name)}


def gpu_op_profile(fn: Callable[[], object], warmup: int = 1) -> dict[str, dict[str, float]]:
    """``{kernel name: {"count": n, "us": summed GPU time}}`` of one call of ``fn`` after
    ``warmup`` calls."""
    _check_args(fn, "cuda", warmup)
    out: dict[str, dict[str, float]] = {}
    for e in profiled_events(fn, warmup):
        if e.device_type == torch.autograd.DeviceType.CUDA:
            d = out.setdefault(e.name, {"count": 0, "us": 0.0})
            d["count"] += 1
            d["us"] += float(e.time_range.elapsed_us())
    return out


def gpu_busy_split(fn: Callable[[], object], calls: int = 5) -> dict:
    """Where one call of ``fn`` spends its GPU time, medians over ``calls`` profiled calls:
    ``span_us`` (first kernel's start to last kernel's end), ``kernel_us`` (kernel times
    summed: ``span_us - kernel_us`` is the time between kernels), ``kernels`` per call, and
    ``by_kernel`` ``{name: µs}`` (first call)."""
    _check_args(fn, "cuda", 1)
    calls = as_int(calls, "calls", minimum=1, fix="profile at least one call")
    spans: list[float] = []
    busy: list[float] = []
    counts: list[int] = []
    by_kernel: dict[str, float] = {}
    for i in range(calls):
        gpu = [e for e in profiled_events(fn, warmup=1)
               if e.device_type == torch.autograd.DeviceType.CUDA]
        if not gpu:
            raise RuntimeError("the call ran no GPU kernel under the profiler; profile a "
                               "callable that launches CUDA work")
        spans.append(max(e.time_range.end for e in gpu) - min(e.time_range.start for e in gpu))
        busy.append(sum(float(e.time_range.elapsed_us()) for e in gpu))
        counts.append(len(gpu))
        if i == 0:
            for e in gpu:
                by_kernel[e.name] = by_kernel.get(e.name, 0.0) + float(e.time_range.elapsed_us())
    ranked = sorted(by_kernel.items(), key=lambda kv: -kv[1])
    return {"span_us": float(statistics.median(spans)),
            "kernel_us": float(statistics.median(busy)),
            "kernels": int(statistics.median(counts)),
            "by_kernel": {k: round(v, 2) for k, v in ranked}}


def op_counts(fn: Callable[[], object], device: str = "cuda", warmup: int = 1) -> dict[str, int]:
    """``{name: count}`` of the operations one call of ``fn`` launches on ``device``."""
    _check_args(fn, device, warmup)
    if device == "cuda":
        return {k: int(v["count"]) for k, v in gpu_op_profile(fn, warmup).items()}
    for _ in range(warmup):
        fn()
    return {k: v for k, v in count_dispatched_ops(fn).items() if k not in _ALLOCATIONS}


def compare_counts(before: Mapping[str, int], after: Mapping[str, int],
                   labels: tuple[str, str] = ("readable", "fused")) -> list[dict]:
    """Rows ``{"name", labels[0], labels[1], "change"}``, most frequent first, then
    ``"total"``."""
    for label, counts in zip(labels, (before, after)):
        if not isinstance(counts, Mapping) or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in counts.values()):
            raise ValueError(f"the {label} count must map names to ints >= 0, got {counts!r}")
    a, b = labels
    names = sorted(set(before) | set(after),
                   key=lambda n: (-max(before.get(n, 0), after.get(n, 0)), n))
    rows = [{"name": n, a: before.get(n, 0), b: after.get(n, 0),
             "change": after.get(n, 0) - before.get(n, 0)} for n in names]
    ta, tb = sum(before.values()), sum(after.values())
    rows.append({"name": "total", a: ta, b: tb, "change": tb - ta})
    return rows
