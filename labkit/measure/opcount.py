"""Count the operations one call launches, name by name, with ``torch.profiler``.

* ``device="cuda"``: every GPU event of the call (kernels, memory copies and fills), by
  kernel name -- what a CUDA graph of the same call would hold as nodes. This is the count
  behind every "GPU operations per step" in labkit
  (:func:`labkit.measure.bench.count_gpu_ops` is its total).
* ``device="cpu"``: the ATen operators that do work (operators with a kernel of their own;
  composite operators such as ``linear`` looked through, views and allocations left out),
  by operator name: the CPU stand-in, so a test without a GPU can still see that a step
  issues fewer operations.

:func:`compare_counts` turns two counts into a before/after table.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping

import torch

DEVICES: tuple[str, ...] = ("cuda", "cpu")

# Operators that only make views or allocate: never counted, never descended into.
_METADATA = frozenset({
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "resize_",
    "as_strided", "detach", "detach_", "alias", "_unsafe_view", "_reshape_alias", "lift_fresh",
    "lift", "resolve_conj", "resolve_neg",
})


def _kind(name: str) -> str:
    """``"meta"`` (a view or an allocation), ``"composite"`` (an operator that only calls
    other operators, e.g. ``linear``, ``layer_norm``, ``reshape``, ``to``), or ``"work"``
    (an operator with a kernel of its own, e.g. ``addmm``, ``native_layer_norm``)."""
    if not name.startswith("aten::"):
        return "composite"
    op = name[len("aten::"):]
    if op in _METADATA:
        return "meta"
    packet = getattr(torch.ops.aten, op, None)
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    for name in (packet.overloads() if packet is not None else ()):
        overload = getattr(packet, name)
        try:  # the first overload registered with the dispatcher speaks for the name
            composite = overload.has_kernel_for_dispatch_key(key)
        except RuntimeError:  # a TorchScript-only overload (aten::add.int ...)
            continue
        if composite:
            return "composite"
        return "meta" if overload.is_view else "work"
    return "work"


def _cpu_counts(events: list) -> Counter:
    """The operators with kernels of their own, outermost first: a composite operator is
    looked through (its callees count), a working operator counts once (what it calls inside
    is part of it), views and allocations never count. What a ``TorchDispatchMode`` would
    see, read from a profiler trace."""
    counts: Counter = Counter()
    kinds: dict[str, str] = {}

    def visit(e: Any) -> None:
        if e.name not in kinds:
            kinds[e.name] = _kind(e.name)
        kind = kinds[e.name]
        if kind == "work":
            counts[e.name] += 1
        elif kind == "composite":
            for c in e.cpu_children:
                visit(c)

    for e in events:
        if e.cpu_parent is None:
            visit(e)
    return counts


def op_counts(fn: Callable[[], object], device: str = "cuda", warmup: int = 1) -> dict[str, int]:
    """``{name: count}`` of the operations one call of ``fn`` launches on ``device`` (see the
    module docstring), after ``warmup`` calls outside the profiler."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {list(DEVICES)}, got {device!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable with no arguments, got {type(fn).__name__}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    from torch.profiler import ProfilerActivity, profile

    cuda = device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise RuntimeError("counting GPU kernels needs a CUDA GPU (torch.cuda.is_available() "
                           "is False); count ATen operators with device='cpu' instead")
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    events = list(prof.events())
    if cuda:
        dev = torch.autograd.DeviceType.CUDA
        return dict(Counter(e.name for e in events if e.device_type == dev))
    return dict(_cpu_counts(events))


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
