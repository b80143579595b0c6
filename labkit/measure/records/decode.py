"""Record kinds of the decode step and its launches: ``launch_overhead``, ``decode_<preset>``
(and ``compile_times_<preset>``), ``timeline_<preset>``, ``dispatcher_<preset>``,
``compile_<preset>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from labkit.measure.records.derived import ratio
from labkit.measure.records.fields import (
    _check_stored, _checks, _dict, _Fail, _int, _ints, _list, _num, _opt, _opt_int, _req,
    _same_length, _stats, _str, _strs, _Timed, _times,
)
from labkit.timing import Stats


# ----------------------------------------------------------------------------- launch_overhead


@dataclass(frozen=True)
class SweepPoint:
    """One point of the work-per-kernel sweep: time per kernel (µs) eager and replayed."""

    numel: int
    eager: Stats
    graph: Stats | None

    @classmethod
    def from_data(cls, v: Any, where: str) -> "SweepPoint":
        d = _dict(v, where)
        return cls(numel=_req(d, "numel", where, _int),
                   eager=_req(d, "eager", where, _stats),
                   graph=_opt(d, "graph", where, _stats))


@dataclass(frozen=True)
class LaunchOverhead:
    """``launch_overhead``: what one kernel launch costs (µs), and the work-per-kernel sweep.
    CUDA-only figures are ``None`` when measured without CUDA."""

    RECORD = "launch_overhead"  # the record name(s) of this kind

    device: str
    host_per_launch: Stats | None
    launch_sync: Stats | None
    gpu_per_eager_kernel: Stats | None
    gpu_per_graph_node: Stats | None
    n_kernels: int
    sweep: list[SweepPoint]
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "LaunchOverhead":
        return cls(device=_req(d, "device", where, _str),
                   host_per_launch=_opt(d, "host_per_launch", where, _stats),
                   launch_sync=_opt(d, "launch_sync", where, _stats),
                   gpu_per_eager_kernel=_opt(d, "gpu_per_eager_kernel", where, _stats),
                   gpu_per_graph_node=_opt(d, "gpu_per_graph_node", where, _stats),
                   n_kernels=_req(d, "n_kernels", where, _int),
                   sweep=[SweepPoint.from_data(p, f"{where}.sweep[{i}]")
                          for i, p in enumerate(_req(d, "sweep", where, _list))],
                   notes=_opt(d, "notes", where, _strs, []))


# ----------------------------------------------------------------------------- decode


@dataclass(frozen=True)
class Decode(_Timed):
    """``decode_<preset>``: decode-step time per method and batch size. ``times[method]`` holds
    one :class:`Stats` (µs per step) per entry of ``batch_sizes``, or ``None`` where that
    method was not measured (a compile column merged in at fewer sizes). ``kernels_per_step``:
    GPU operations of one eager step (:data:`GPU_OPS_COUNTED`); ``gpu_ops_counted`` is
    :data:`GPU_OPS_SCOPE` when it counted the step alone (empty in older records)."""

    RECORD = "decode_<preset>"  # the record name(s) of this kind

    preset: str
    dtype: str
    batch_sizes: list[int]
    times: dict[str, list[Stats | None]]
    checks: dict[str, bool | float]
    kernels_per_step: int | None = None
    config: dict = field(default_factory=dict)
    compile_s: float | None = None
    cudagraph_skips: list[str] = field(default_factory=list)
    compile_batch_sizes: list[int] | None = None
    gpu_ops_counted: str = ""

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Decode":
        sizes = _req(d, "batch_sizes", where, _ints)
        out = cls(preset=_req(d, "preset", where, _str), dtype=_opt(d, "dtype", where, _str, ""),
                  batch_sizes=sizes,
                  times=_times(_req(d, "times", where, _dict), f"{where}.times", sizes,
                               f"{where}.batch_sizes"),
                  checks=_opt(d, "checks", where, _checks, {}),
                  kernels_per_step=_opt(d, "kernels_per_step", where, _int),
                  config=_opt(d, "config", where, _dict, {}),
                  compile_s=_opt(d, "compile_s", where, _num),
                  cudagraph_skips=_opt(d, "cudagraph_skips", where, _strs, []),
                  compile_batch_sizes=_opt(d, "compile_batch_sizes", where, _ints),
                  gpu_ops_counted=_opt(d, "gpu_ops_counted", where, _str, ""))
        _check_stored(d, where, "tokens_per_s", out.tokens_per_s, out.methods)
        if "eager" in out.times:
            _check_stored(d, where, "speedup_vs_eager", out.speedup_vs_eager, out.methods)
        return out


# ----------------------------------------------------------------------------- timeline


@dataclass(frozen=True)
class TimelineEvent:
    """One profiler event: ``lane`` ``"CPU"`` (a launch call) or ``"GPU"`` (a kernel, copy or
    set), start (µs from the first event) and duration (µs)."""

    lane: str
    name: str
    start_us: float
    dur_us: float

    @classmethod
    def from_data(cls, v: Any, where: str) -> "TimelineEvent":
        d = _dict(v, where)
        lane = _req(d, "lane", where, _str)
        if lane not in ("CPU", "GPU"):
            raise _Fail(f"{where}.lane", f"must be 'CPU' or 'GPU', got {lane!r}")
        return cls(lane, _opt(d, "name", where, _str, ""), _req(d, "start_us", where, _num),
                   _req(d, "dur_us", where, _num))


@dataclass(frozen=True)
class TimelineMethod:
    """The events of a few steps of one method, and the time per step (µs)."""

    events: list[TimelineEvent]
    step_us: float | None

    @classmethod
    def from_data(cls, v: Any, where: str) -> "TimelineMethod":
        d = _dict(v, where)
        return cls([TimelineEvent.from_data(e, f"{where}.events[{i}]")
                    for i, e in enumerate(_req(d, "events", where, _list))],
                   _opt(d, "step_us", where, _num))


@dataclass(frozen=True)
class Timeline:
    """``timeline_<preset>``: ``methods[name]`` (``"eager"``, ``"graph"``) from a profiler."""

    RECORD = "timeline_<preset>"  # the record name(s) of this kind

    methods: dict[str, TimelineMethod]

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Timeline":
        if not d:
            raise _Fail(where, "must hold at least one method (e.g. 'eager')")
        return cls({m: TimelineMethod.from_data(v, f"{where}.{m}") for m, v in d.items()})

    def __getitem__(self, method: str) -> TimelineMethod:
        if method not in self.methods:
            raise KeyError(f"the timeline record has no method {method!r}; it has "
                           f"{sorted(self.methods)}")
        return self.methods[method]


# ----------------------------------------------------------------------------- dispatcher


@dataclass(frozen=True)
class Dispatcher(_Timed):
    """``dispatcher_<preset>``: per batch size, eager vs an exact graph (``graph_exact``,
    ``None`` above the largest captured size) vs the padding dispatcher; µs per step.
    ``counters`` are :class:`labkit.dispatch.DispatchCounters` as stored."""

    RECORD = "dispatcher_<preset>"  # the record name(s) of this kind

    preset: str
    dtype: str
    capture_sizes: list[int]
    batch_sizes: list[int]
    padded_to: list[int | None]
    times: dict[str, list[Stats | None]]
    counters: dict
    checks: dict[str, bool | float]

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Dispatcher":
        sizes = _req(d, "batch_sizes", where, _ints)
        padded = _opt(d, "padded_to", where, _list, [None] * len(sizes))
        padded = [_opt_int(p, f"{where}.padded_to[{i}]") for i, p in enumerate(padded)]
        _same_length(padded, sizes, f"{where}.padded_to", f"{where}.batch_sizes")
        out = cls(preset=_opt(d, "preset", where, _str, ""),
                  dtype=_opt(d, "dtype", where, _str, ""),
                  capture_sizes=_req(d, "capture_sizes", where, _ints), batch_sizes=sizes,
                  padded_to=padded,
                  times=_times(_req(d, "times", where, _dict), f"{where}.times", sizes,
                               f"{where}.batch_sizes"),
                  counters=_opt(d, "counters", where, _dict, {}),
                  checks=_opt(d, "checks", where, _checks, {}))
        for m in ("eager", "dispatcher"):
            if m not in out.times:
                raise _Fail(f"{where}.times.{m}", "is missing")
        _check_stored(d, where, "tokens_per_s", out.tokens_per_s, out.methods)
        return out

    def dispatcher_over_graph(self) -> list[float | None]:
        """Dispatcher time over the exact graph's replay per batch size (:func:`ratio`)."""
        graph = self.median_us("graph_exact") if "graph_exact" in self.times else \
            [None] * len(self.batch_sizes)
        return [ratio(d, g) for d, g in zip(self.median_us("dispatcher"), graph)]


# ----------------------------------------------------------------------------- compile


@dataclass(frozen=True)
class Compile(_Timed):
    """``compile_<preset>``: manual graphs vs ``torch.compile(mode="reduce-overhead")``: µs per
    step per method and batch size, set-up seconds, pool bytes (``None``: not measured), GPU
    operations per step (``-1`` or ``None``: not measured)."""

    RECORD = "compile_<preset>"  # the record name(s) of this kind

    preset: str
    dtype: str
    batch_sizes: list[int]
    times: dict[str, list[Stats | None]]
    compile_s: float
    capture_s: float
    graph_pool_bytes: int | None
    compile_pool_bytes: int | None
    kernels_per_step: dict[str, int | None]
    checks: dict[str, bool | float]
    cudagraph_skips: list[str] = field(default_factory=list)

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Compile":
        sizes = _req(d, "batch_sizes", where, _ints)
        mem = _opt(d, "memory", where, _dict, {})
        kernels = _opt(d, "kernels_per_step", where, _dict, {})
        return cls(preset=_opt(d, "preset", where, _str, ""),
                   dtype=_opt(d, "dtype", where, _str, ""),
                   batch_sizes=sizes,
                   times=_times(_req(d, "times", where, _dict), f"{where}.times", sizes,
                                f"{where}.batch_sizes"),
                   compile_s=_req(d, "compile_s", where, _num),
                   capture_s=_req(d, "capture_s", where, _num),
                   graph_pool_bytes=_opt(mem, "graph_pool_bytes", f"{where}.memory", _int),
                   compile_pool_bytes=_opt(mem, "compile_pool_bytes", f"{where}.memory", _int),
                   kernels_per_step={k: _opt_int(v, f"{where}.kernels_per_step.{k}")
                                     for k, v in kernels.items()},
                   checks=_opt(d, "checks", where, _checks, {}),
                   cudagraph_skips=_opt(d, "cudagraph_skips", where, _strs, []))
