"""Count the operations one call launches, name by name, with ``torch.profiler``.

* ``device="cuda"``: every GPU event of the call (kernels, memory copies and fills), by
  kernel name -- what a CUDA graph of the same call would hold as nodes. This is the count
  behind every "GPU operations per step" in labkit
  (:func:`labkit.measure.bench.count_gpu_ops` is its total).
* ``device="cpu"``: the ATen operators the call dispatches (:func:`count_dispatched_ops`,
  the counter of notebook 02, views and allocations left out), by operator name: the CPU
  stand-in, so a test without a GPU can still see that a step issues fewer operations.

:func:`compare_counts` turns two counts into a before/after table.
"""

from __future__ import annotations

from collections import Counter
from typing import Any
from collections.abc import Callable, Mapping

import torch

DEVICES: tuple[str, ...] = ("cuda", "cpu")

# Allocations launch no kernel either (the fused step allocates an int32 buffer and fills it
# with an ``out=`` operator, which is counted).
_ALLOCATIONS = frozenset({"empty", "empty_strided", "empty_like", "new_empty",
                          "new_empty_strided", "resize_"})


def count_dispatched_ops(fn: Callable[[], Any], *, include_views: bool = False) -> Counter:
    """Count the ATen operators ``fn()`` dispatches (views excluded by default: they launch
    no kernel). On a GPU most non-view ops launch one kernel, so the total approximates the
    kernels per step; some launch none or several, so it is an estimate, not a kernel count."""
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


def gpu_op_profile(fn: Callable[[], object], warmup: int = 1) -> dict[str, dict[str, float]]:
    """``{kernel name: {"count": n, "us": summed GPU time}}`` of one call of ``fn`` in a
    profiler trace (kernels, copies and fills), after ``warmup`` calls. The summed times say
    where the GPU works; a step takes longer than their sum by the gaps between kernels."""
    _check_args(fn, "cuda", warmup)
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    dev = torch.autograd.DeviceType.CUDA
    out: dict[str, dict[str, float]] = {}
    for e in prof.events():
        if e.device_type == dev:
            d = out.setdefault(e.name, {"count": 0, "us": 0.0})
            d["count"] += 1
            d["us"] += float(e.time_range.elapsed_us())
    return out


def op_counts(fn: Callable[[], object], device: str = "cuda", warmup: int = 1) -> dict[str, int]:
    """``{name: count}`` of the operations one call of ``fn`` launches on ``device`` (see the
    module docstring), after ``warmup`` calls outside the profiler."""
    _check_args(fn, device, warmup)
    if device == "cuda":
        return {k: int(v["count"]) for k, v in gpu_op_profile(fn, warmup).items()}
    for _ in range(warmup):
        fn()
    return {k: v for k, v in count_dispatched_ops(fn).items() if k not in _ALLOCATIONS}


def compare_counts(before: Mapping[str, int], after: Mapping[str, int],
                   labels: tuple[str, str] = ("readable", "fused")) -> list[dict]:
    """Rows ``{"name", labels[0], labels[1], "change"}`` for every name in either count,
    most frequent first, then a ``"total"`` row."""
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
