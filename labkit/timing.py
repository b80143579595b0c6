"""Timers: CUDA events after warm-up, host clocks, and the kernel-launch-overhead probe.

All timers return a :class:`Stats` record (median, p10, p90, mean, n) in microseconds.
CUDA-only figures are ``None`` on a machine without CUDA, never zero.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from labkit.checks import as_int, as_int_list, as_number
from labkit.graphs import capture_callable
from labkit.model import as_device


@dataclass(frozen=True)
class Stats:
    """Summary of repeated measurements, in microseconds."""

    median: float
    p10: float
    p90: float
    mean: float
    n: int
    unit: str = "us"

    @classmethod
    def from_samples(cls, samples: Sequence[float], unit: str = "us") -> Stats:
        if isinstance(samples, (str, bytes)) or not hasattr(samples, "__len__"):
            raise TypeError(f"samples must be a list of numbers, got {type(samples).__name__}")
        if not samples:
            raise ValueError("no samples to summarise; give repeats >= 1")
        if not isinstance(unit, str):
            raise TypeError(f"unit must be a str such as 'us', got {unit!r}")
        xs = sorted(as_number(x, f"samples[{i}]", fix="timings are finite numbers")
                    for i, x in enumerate(samples))

        def q(p: float) -> float:
            if len(xs) == 1:
                return xs[0]
            k = p * (len(xs) - 1)
            lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
            return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

        return cls(q(0.5), q(0.1), q(0.9), statistics.fmean(xs), len(xs), unit)

    def per(self, count: int) -> Stats:
        """The same samples divided by ``count`` (a burst of ``count`` launches → one)."""
        count = as_int(count, "count", minimum=1, fix="divide by the number of calls per sample")
        return Stats(self.median / count, self.p10 / count, self.p90 / count,
                     self.mean / count, self.n, self.unit)

    def to_dict(self) -> dict[str, float | int | str]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.median:.2f} {self.unit} (p10 {self.p10:.2f}, p90 {self.p90:.2f}, n={self.n})"


def _check_fn(fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}; "
                        "wrap a call as lambda: f(x)")


def _check_counts(warmup: int, repeats: int, inner: int) -> None:
    """Refuse counts that are not ints (bool included) or have the wrong sign."""
    as_int(warmup, "warmup", minimum=0, fix="warm up 0 or more times")
    as_int(repeats, "repeats", minimum=1, fix="take at least one sample (repeats >= 1)")
    as_int(inner, "inner", minimum=1, fix="make at least one call per sample (inner >= 1)")


def time_host(fn: Callable[[], object], *, warmup: int = 10, repeats: int = 50,
              inner: int = 1) -> Stats:
    """Host wall time per call of ``fn`` (µs), ``inner`` calls per sample."""
    _check_fn(fn)
    _check_counts(warmup, repeats, inner)
    for _ in range(warmup):
        fn()
    return Stats.from_samples([_wall_sample(fn, inner) for _ in range(repeats)])


def _wall_sample(fn: Callable[[], object], inner: int) -> float:
    """Host wall µs per call of ``fn`` over ``inner`` back-to-back calls."""
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) * 1e6 / inner


def _sync() -> None:
    """Wait for the GPU where there is one (nothing to wait for on the CPU)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _issue_sample(fn: Callable[[], object], inner: int) -> float:
    """Host µs to issue one call of ``fn``, over ``inner`` calls from an idle device."""
    _sync()
    return _wall_sample(fn, inner)


def time_host_issue_interleaved(fns: Mapping[str, Callable[[], object]], *, warmup: int = 5,
                                repeats: int = 20, inner: int = 10) -> dict[str, Stats]:
    """Host µs to issue one call of each callable, ``inner`` calls per sample, the device idle
    at each sample's start (synchronized before, not inside: the queue of ``inner`` calls never
    fills, so the host never waits on the GPU). The samples alternate between the callables.
    Beside the GPU time of :func:`time_cuda_interleaved` it says who sets the pace: a step whose
    host time per call reaches its GPU time is bound by the host (Python issuing the work)."""
    _check_fns(fns)
    _check_counts(warmup, repeats, inner)
    got = _interleave(fns, warmup, repeats, inner, _issue_sample)
    _sync()
    return got


def time_cuda(fn: Callable[[], object], *, warmup: int = 10, repeats: int = 50,
              inner: int = 10) -> Stats:
    """GPU µs per call of ``fn`` from CUDA events around ``inner`` calls, after warm-up."""
    _check_fn(fn)
    return _time_events({"fn": fn}, warmup, repeats, inner, "time_cuda")["fn"]


def _event_sample(fn: Callable[[], object], inner: int) -> float:
    """GPU µs per call of ``fn`` over ``inner`` back-to-back calls, from two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(inner):
        fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) * 1e3 / inner


def time_cuda_interleaved(fns: Mapping[str, Callable[[], object]], *, warmup: int = 10,
                          repeats: int = 50, inner: int = 10) -> dict[str, Stats]:
    """:func:`time_cuda` for callables compared as ratios: the samples alternate, so a change
    of GPU clock during the run (on the H200 a 12-layer step at batch 64 moved between ~0.84
    and ~0.93 ms from one series to the next) reaches every callable alike."""
    _check_fns(fns)
    return _time_events(fns, warmup, repeats, inner, "time_cuda_interleaved")


def _check_fns(fns: object) -> None:
    """Refuse anything but a non-empty mapping of name -> callable taking no arguments."""
    if not isinstance(fns, Mapping) or not fns:
        raise TypeError("fns must be a non-empty mapping name -> callable taking no arguments")
    for fn in fns.values():
        _check_fn(fn)


def _interleave(fns: Mapping[str, Callable[[], object]], warmup: int, repeats: int, inner: int,
                sample: Callable[[Callable[[], object], int], float]) -> dict[str, Stats]:
    """Each callable warmed up, then ``sample(fn, inner)`` of each in turn, ``repeats`` rounds."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    _sync()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(sample(fn, inner))
    return {name: Stats.from_samples(v) for name, v in samples.items()}


def _time_events(fns: Mapping[str, Callable[[], object]], warmup: int, repeats: int,
                 inner: int, who: str) -> dict[str, Stats]:
    _check_counts(warmup, repeats, inner)
    if not torch.cuda.is_available():
        raise RuntimeError(f"{who} needs a CUDA GPU (torch.cuda.is_available() is False); use "
                           "time_host on CPU")
    return _interleave(fns, warmup, repeats, inner, _event_sample)


def time_any(fn: Callable[[], object], device: torch.device | str, **kw: Any) -> Stats:
    """``time_cuda`` on a CUDA device, ``time_host`` otherwise."""
    if as_device(device).type == "cuda":
        return time_cuda(fn, **kw)
    kw.pop("inner", None)
    return time_host(fn, **kw)


@dataclass
class LaunchOverhead:
    """Cost of launching tiny kernels. CUDA-only fields are ``None`` without CUDA."""

    device: str
    host_per_launch: Stats            # host time to issue one x.add_(1) (CPU: one op)
    launch_sync: Stats | None         # one launch + synchronize, round trip
    gpu_per_eager_kernel: Stats | None  # GPU time per kernel when launched back-to-back
    gpu_per_graph_node: Stats | None  # GPU time per node of a captured graph of many nodes
    n_kernels: int
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def launch_overhead(device: str | torch.device | None = None, *, n_kernels: int = 200,
                    repeats: int = 50, warmup: int = 5) -> LaunchOverhead:
    """Launch costs of ``x.add_(1)`` on a one-element tensor: host time to issue one launch
    (of a burst of ``n_kernels``), one launch + ``synchronize``, GPU time per eager kernel and
    per node of a graph of ``n_kernels`` nodes."""
    device = as_device(("cuda" if torch.cuda.is_available() else "cpu") if device is None
                       else device)
    n_kernels = as_int(n_kernels, "n_kernels", minimum=1, fix="launch at least one kernel")
    _check_counts(warmup, repeats, 1)
    x = torch.zeros(1, device=device)

    def burst() -> None:
        for _ in range(n_kernels):
            x.add_(1)

    notes: list[str] = []
    if device.type != "cuda":
        host = time_host(burst, warmup=warmup, repeats=repeats).per(n_kernels)
        notes.append("CPU tensor: host figure is PyTorch's per-op dispatch cost; no kernel "
                     "launch, no GPU figures")
        return LaunchOverhead(str(device), host, None, None, None, n_kernels, notes)

    # host time per launch: time only the issuing, queue stays short enough not to block
    samples = []
    for i in range(warmup + repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        burst()
        t1 = time.perf_counter()
        if i >= warmup:
            samples.append((t1 - t0) * 1e6 / n_kernels)
    torch.cuda.synchronize()
    host = Stats.from_samples(samples)

    def one_sync() -> None:
        x.add_(1)
        torch.cuda.synchronize()

    launch_sync = time_host(one_sync, warmup=warmup, repeats=repeats * 4)
    eager_gpu = time_cuda(burst, warmup=warmup, repeats=repeats, inner=1).per(n_kernels)
    captured = capture_callable(lambda t: [t.add_(1) for _ in range(n_kernels)], x, warmup=1)
    node = time_cuda(captured.graph.replay, warmup=warmup, repeats=repeats,
                     inner=5).per(n_kernels)
    notes.append("GPU per eager kernel is bounded below by the host launch rate: when the host "
                 "issues slower than the GPU runs, the GPU waits between kernels")
    del captured
    return LaunchOverhead(str(device), host, launch_sync, eager_gpu, node, n_kernels, notes)


@dataclass
class WorkPoint:
    """Per-kernel time at one size of work (elements per kernel)."""

    numel: int
    eager: Stats
    graph: Stats | None


def launch_bound_sweep(numels: Sequence[int], device: str | torch.device | None = None, *,
                       n_kernels: int = 50, repeats: int = 20) -> list[WorkPoint]:
    """``x.mul_(1.0001)`` per kernel for growing tensors, eager vs graph (CUDA)."""
    device = as_device(("cuda" if torch.cuda.is_available() else "cpu") if device is None
                       else device)
    numels = as_int_list(numels, "numels", minimum=1, maximum=2**31 - 1,
                         fix="give tensor sizes in elements, e.g. [1, 1024, 1048576]")
    n_kernels = as_int(n_kernels, "n_kernels", minimum=1, fix="launch at least one kernel")
    as_int(repeats, "repeats", minimum=1, fix="take at least one sample (repeats >= 1)")
    points = []
    for n in numels:
        x = torch.ones(n, device=device)

        def burst(t: torch.Tensor = x) -> None:
            for _ in range(n_kernels):
                t.mul_(1.0001)

        graph = None
        if device.type == "cuda":
            eager = time_cuda(burst, warmup=3, repeats=repeats, inner=1)
            captured = capture_callable(burst, x, warmup=1)
            graph = time_cuda(captured.graph.replay, warmup=3, repeats=repeats,
                              inner=1).per(n_kernels)
            del captured
        else:
            eager = time_host(burst, warmup=2, repeats=repeats)
        points.append(WorkPoint(int(n), eager.per(n_kernels), graph))
    return points
