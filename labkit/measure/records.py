"""The result records labkit writes, as typed data: one place for their fields, derived values
and default measurement parameters.

A record file (see :mod:`labkit.measure.results`) holds ``{"schema", "name", "created",
"params", "env", "data"}``; this module describes ``data``, by record kind:

=========================  ======================  ==========================================
record name                kind                    written by
=========================  ======================  ==========================================
``launch_overhead``        :class:`LaunchOverhead` ``bench.measure_launch_overhead``
``decode_<preset>``        :class:`Decode`         ``bench.measure_decode``
``compile_times_<preset>`` :class:`Decode`         ``bench.measure_decode`` (``labkit bench``)
``timeline_<preset>``      :class:`Timeline`       ``bench.measure_timeline``
``pool_memory_<preset>``   :class:`PoolMemory`     ``bench.measure_pool_memory``
``dispatcher_<preset>``    :class:`Dispatcher`     ``bench.measure_dispatcher``
``compile_<preset>``       :class:`Compile`        ``bench.measure_compile``
``pitfalls``               :class:`Pitfalls`       ``pitfalls.run_all_pitfalls``
``bench``                  :class:`Bench`          ``labkit bench`` (``suite.bench_cli``)
``modes_<preset>``         :class:`Modes`          ``modes.measure_modes``
``paged_<preset>``         :class:`Paged`          ``paged.measure_paged``
``serve_<name>``           :class:`Serve`          ``labkit serve`` (``serve.measure_serving``)
``serving_load_<preset>``  :class:`ServeLoad`      ``serve_load.measure_load_curve``
``pool_overwrite``         :class:`PoolOverwrite`  ``pool_overwrite.measure_pool_overwrite``
``fused_<preset>``         :class:`Fused`          ``fused_bench.measure_fused``
``roofline_<preset>``      :class:`Roofline`       ``roofline.measure_roofline``
``multistep_<preset>``     :class:`Multistep`      ``roofline.measure_multistep``
``tp_allreduce``           :class:`TPAllReduce`    ``labkit tp`` (``measure.tp.measure_tp``)
``tp_decode_<preset>``     :class:`TPDecode`       ``labkit tp`` (``measure.tp.measure_tp``)
=========================  ======================  ==========================================

* :func:`parse` turns a record's ``data`` into its kind (checking required fields and their
  types; extra fields are kept in ``data`` and ignored here); :func:`kind_of` says which kind
  a record name has (``None``: a record this module does not describe, checked only as JSON).
* Derived values (tokens/s, speed-up over eager, dispatcher over graph, ...) are computed by
  :func:`tokens_per_s`, :func:`speedup` and :func:`ratio` only: the writers store them with
  these functions and the readers recompute them with the same ones.
* :data:`DEFAULTS` says with which parameters each reference record is measured.

Times are in microseconds (``*_us``, and every :class:`Stats` with ``unit == "us"``), memory in
bytes (``*_bytes``), durations of set-up work in seconds (``*_s``).

To add a kind: write a dataclass with a ``from_data(data, where)`` classmethod (use the
``_req`` / ``_opt`` helpers), and add ``(name pattern, class)`` to :data:`KINDS` and, if it
is measured with parameters, its defaults to :data:`DEFAULTS`.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, TypeVar

from labkit import stepcost
from labkit.timing import Stats

__all__ = [
    "SchemaError", "Stats", "LaunchOverhead", "SweepPoint", "Decode", "Timeline",
    "TimelineMethod", "TimelineEvent", "PoolMemory", "PoolLayout", "PoolAtMaxSeq", "Dispatcher",
    "Compile", "Pitfalls", "Pitfall", "Bench", "BenchRow", "BenchTarget", "BenchPool", "Paged",
    "PagedRun", "KINDS",
    "DEFAULTS", "kind_of", "parse", "view", "tokens_per_s", "speedup", "ratio",
    "default_params", "measure_kwargs", "bench_row", "Modes", "Serve", "ServeRequest",
    "ServeStep", "PoolOverwrite", "OverwriteFix", "GPU_OPS_COUNTED", "GPU_OPS_SCOPE", "Fused",
    "Roofline", "RooflineVariant", "Multistep", "MULTISTEP_METHODS",
    "ServeLoad", "ServeLoadPoint", "SERVE_RECORDS",
    "TPAllReduce", "TPDecode",
]


class SchemaError(ValueError):
    """A result record (file or dict) is not what its kind requires: a field is missing or
    has the wrong type, or the file is not a labkit result of this schema version."""


# ----------------------------------------------------------------------------- derived values


def tokens_per_s(batch_size: int, step_us: float | None) -> float | None:
    """Tokens per second of a decode step of ``batch_size`` rows taking ``step_us`` µs
    (every step makes one token per row); ``None`` when the step was not timed."""
    if step_us is None:
        return None
    return batch_size / (step_us * 1e-6)


def speedup(eager_us: float | None, method_us: float | None) -> float | None:
    """How many times faster than eager: ``eager_us / method_us`` (``None`` if either is
    missing)."""
    if eager_us is None or method_us is None:
        return None
    return eager_us / method_us


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` for two timings of one batch size (e.g. dispatcher over graph); ``None``
    when either is missing."""
    if a is None or b is None:
        return None
    return a / b


# ----------------------------------------------------------------------------- GPU op counts

#: what a record's GPU operation count (``kernels_per_step``, ``gpu_ops_per_step``) counts,
#: said once: :func:`labkit.measure.bench.count_step_ops` makes every such count
GPU_OPS_COUNTED = ("kernels plus memory copies and fills of one decode step at batch 1, its "
                   "inputs already on the GPU, counted by torch.profiler")
#: the ``gpu_ops_counted`` field of a record whose count counted the step alone; records
#: without the field were made before it existed (``decode_<preset>`` records of that time
#: also counted the three host-to-device copies of the step's inputs)
GPU_OPS_SCOPE = "decode_step"


# ----------------------------------------------------------------------------- field checks


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class _Fail(Exception):
    """Internal: a field check failed at ``where`` with ``problem``."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(where, problem)
        self.where, self.problem = where, problem


def _fail(where: str, expected: str, value: Any) -> _Fail:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return _Fail(where, f"must be {expected}, got {_type_name(value)} {shown}")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _num(v: Any, where: str) -> float:
    if not _is_num(v):
        raise _fail(where, "a number", v)
    return float(v)


def _opt_num(v: Any, where: str) -> float | None:
    return None if v is None else _num(v, where)


def _int(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(where, "an integer", v)
    return v


def _opt_int(v: Any, where: str) -> int | None:
    return None if v is None else _int(v, where)


def _str(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise _fail(where, "a string", v)
    return v


def _bool(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise _fail(where, "true or false", v)
    return v


def _dict(v: Any, where: str) -> dict:
    if not isinstance(v, Mapping):
        raise _fail(where, "an object", v)
    return dict(v)


def _list(v: Any, where: str) -> list:
    if not isinstance(v, (list, tuple)):
        raise _fail(where, "a list", v)
    return list(v)


def _ints(v: Any, where: str) -> list[int]:
    return [_int(x, f"{where}[{i}]") for i, x in enumerate(_list(v, where))]


def _strs(v: Any, where: str) -> list[str]:
    return [_str(x, f"{where}[{i}]") for i, x in enumerate(_list(v, where))]


def _req(data: Mapping, key: str, where: str, check: Callable[[Any, str], Any]) -> Any:
    """``check(data[key])``; a missing key fails with the field's path."""
    path = f"{where}.{key}"
    if key not in data:
        raise _Fail(path, "is missing")
    return check(data[key], path)


def _opt(data: Mapping, key: str, where: str, check: Callable[[Any, str], Any],
         default: Any = None) -> Any:
    """``check(data[key])`` when present and not null, else ``default``."""
    value = data.get(key)
    if value is None:
        return copy.copy(default)
    return check(value, f"{where}.{key}")


def _int_keyed(check: Callable[[Any, str], Any]) -> Callable[[Any, str], dict[int, Any]]:
    """A checker for an object keyed by batch size (JSON keys are strings: ``"64"``)."""

    def run(v: Any, where: str) -> dict[int, Any]:
        out = {}
        for k, x in _dict(v, where).items():
            try:
                size = int(k)
            except (TypeError, ValueError):
                raise _Fail(f"{where}.{k}", "must be keyed by a batch size (an integer)") \
                    from None
            out[size] = check(x, f"{where}.{k}")
        return out

    return run


def _same_length(items: Sequence, sizes: Sequence, where: str, sizes_field: str) -> None:
    if len(items) != len(sizes):
        raise _Fail(where, f"must hold one entry per batch size ({len(sizes)} in "
                           f"{sizes_field}), got {len(items)}")


# ----------------------------------------------------------------------------- Stats


def _stats(v: Any, where: str) -> Stats:
    """A stored :class:`labkit.timing.Stats`: ``median``, ``p10``, ``p90``, ``mean`` in
    ``unit`` (``"us"``: microseconds), over ``n`` samples."""
    d = _dict(v, where)
    return Stats(median=_req(d, "median", where, _num), p10=_req(d, "p10", where, _num),
                 p90=_req(d, "p90", where, _num),
                 mean=_opt(d, "mean", where, _num, d.get("median")),
                 n=_req(d, "n", where, _int), unit=_opt(d, "unit", where, _str, "us"))


def _opt_stats(v: Any, where: str) -> Stats | None:
    return None if v is None else _stats(v, where)


def _median(s: Stats | None) -> float | None:
    return None if s is None else s.median


def _times(v: Any, where: str, sizes: Sequence[int], sizes_field: str
           ) -> dict[str, list[Stats | None]]:
    """``{method: [Stats or null per batch size]}``."""
    out = {}
    for m, col in _dict(v, where).items():
        items = _list(col, f"{where}.{m}")
        _same_length(items, sizes, f"{where}.{m}", sizes_field)
        out[m] = [_opt_stats(s, f"{where}.{m}[{i}]") for i, s in enumerate(items)]
    return out


def _checks(v: Any, where: str) -> dict[str, bool | float]:
    """Correctness checks: ``true``/``false``, or a share (e.g. token agreement)."""
    out = {}
    for k, x in _dict(v, where).items():
        if not (isinstance(x, bool) or _is_num(x)):
            raise _fail(f"{where}.{k}", "true, false or a number", x)
        out[k] = x
    return out


class _Timed:
    """Shared helpers of records with ``batch_sizes`` and ``times[method]``."""

    batch_sizes: list[int]
    times: dict[str, list[Stats | None]]

    @property
    def methods(self) -> list[str]:
        """The methods timed, in record order."""
        return list(self.times)

    def _column(self, method: str) -> list[Stats | None]:
        if method not in self.times:
            raise KeyError(f"the record has no method {method!r}; it has {self.methods}")
        return self.times[method]

    def median_us(self, method: str) -> list[float | None]:
        """Median step time (µs) of ``method`` per batch size (``None``: not timed)."""
        return [_median(s) for s in self._column(method)]

    def at(self, method: str, batch: int) -> float | None:
        """Median step time (µs) of ``method`` at ``batch`` (``None``: not measured)."""
        if batch not in self.batch_sizes or method not in self.times:
            return None
        return _median(self.times[method][self.batch_sizes.index(batch)])

    def tokens_per_s(self, method: str) -> list[float | None]:
        """Tokens per second of ``method`` per batch size (:func:`tokens_per_s`)."""
        return [tokens_per_s(b, t) for b, t in zip(self.batch_sizes, self.median_us(method))]

    def speedup_vs_eager(self, method: str) -> list[float | None]:
        """Speed-up of ``method`` over eager per batch size (:func:`speedup`)."""
        eager = self.median_us("eager")
        return [speedup(e, t) for e, t in zip(eager, self.median_us(method))]


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


def _check_stored(d: Mapping, where: str, key: str, derive: Callable[[str], list],
                  methods: Sequence[str]) -> None:
    """A stored derived column (``tokens_per_s``, ``speedup_vs_eager``) must agree with the
    value derived here from ``times``: a record whose copies disagree cannot be trusted."""
    stored = d.get(key)
    if stored is None:
        return
    stored = _dict(stored, f"{where}.{key}")
    for m, col in stored.items():
        path = f"{where}.{key}.{m}"
        if m not in methods:
            raise _Fail(path, f"has no timings in {where}.times to be derived from")
        values = _list(col, path)
        want = derive(m)
        _same_length(values, want, path, f"{where}.batch_sizes")
        for i, (got, exp) in enumerate(zip(values, want)):
            if got is None and exp is None:
                continue
            if not _is_num(got) or exp is None or not math.isclose(got, exp, rel_tol=1e-6):
                raise _Fail(f"{path}[{i}]", f"is {got!r} but {where}.times gives {exp!r}")


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


# ----------------------------------------------------------------------------- pool memory


@dataclass(frozen=True)
class PoolLayout:
    """One way of holding the graphs: ``total_bytes`` reserved; for private pools the bytes
    of each size's pool, for a shared pool its size after each capture (``growth_bytes``);
    capture seconds per size. Keys are batch sizes."""

    total_bytes: int
    per_size_bytes: dict[int, int] = field(default_factory=dict)
    growth_bytes: dict[int, int] = field(default_factory=dict)
    capture_s: dict[int, float] = field(default_factory=dict)

    @classmethod
    def from_data(cls, v: Any, where: str) -> "PoolLayout":
        d = _dict(v, where)
        return cls(total_bytes=_req(d, "total_bytes", where, _int),
                   per_size_bytes=_opt(d, "per_size_bytes", where, _int_keyed(_int), {}),
                   growth_bytes=_opt(d, "growth_bytes", where, _int_keyed(_int), {}),
                   capture_s=_opt(d, "capture_s", where, _int_keyed(_num), {}))


@dataclass(frozen=True)
class PoolAtMaxSeq:
    """One shared pool captured largest-first at one ``max_seq``: its bytes and the KV
    cache's (``in_place``: the cache read in place, else the old whole-row gather)."""

    max_seq: int
    shared_largest_first_bytes: int
    kv_cache_bytes: int | None = None
    in_place: bool = True

    @classmethod
    def from_data(cls, v: Any, where: str, max_seq: int | None = None,
                  in_place: bool = True) -> "PoolAtMaxSeq":
        d = _dict(v, where)
        if max_seq is None:
            max_seq = _req(d, "max_seq", where, _int)
        return cls(max_seq=max_seq,
                   shared_largest_first_bytes=_req(d, "shared_largest_first_bytes", where, _int),
                   kv_cache_bytes=_opt(d, "kv_cache_bytes", where, _int), in_place=in_place)


def _pools_by_max_seq(v: Any, where: str) -> dict[int, PoolAtMaxSeq]:
    raw = _int_keyed(_dict)(v, where)
    return {m: PoolAtMaxSeq.from_data(x, f"{where}.{m}", max_seq=m) for m, x in raw.items()}


@dataclass(frozen=True)
class PoolMemory:
    """``pool_memory_<preset>``: graph-pool bytes for ``sizes``, private pools vs one shared
    pool captured largest-first and smallest-first. Optional (newer records): ``max_seq`` of
    the three layouts, ``logits_bytes`` (the static logits buffer outside the pool),
    ``by_max_seq`` (max_seq -> :class:`PoolAtMaxSeq`, cache read in place) and ``gather``
    (one :class:`PoolAtMaxSeq` of the old whole-row gather path)."""

    RECORD = "pool_memory_<preset>"  # the record name(s) of this kind

    preset: str
    sizes: list[int]
    private: PoolLayout
    shared_largest_first: PoolLayout
    shared_smallest_first: PoolLayout
    largest_private_bytes: int
    dtype: str = ""
    max_seq: int | None = None
    logits_bytes: int | None = None
    by_max_seq: dict[int, PoolAtMaxSeq] = field(default_factory=dict)
    gather: PoolAtMaxSeq | None = None

    LAYOUTS = ("private", "shared_largest_first", "shared_smallest_first")

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "PoolMemory":
        private = _req(d, "private", where, PoolLayout.from_data)
        largest = _opt(d, "largest_private_bytes", where, _int)
        if largest is None:
            largest = max(private.per_size_bytes.values(), default=0)
        return cls(preset=_opt(d, "preset", where, _str, ""), sizes=_req(d, "sizes", where, _ints),
                   private=private,
                   shared_largest_first=_req(d, "shared_largest_first", where,
                                             PoolLayout.from_data),
                   shared_smallest_first=_req(d, "shared_smallest_first", where,
                                              PoolLayout.from_data),
                   largest_private_bytes=largest, dtype=_opt(d, "dtype", where, _str, ""),
                   max_seq=_opt(d, "max_seq", where, _int),
                   logits_bytes=_opt(d, "logits_bytes", where, _int),
                   by_max_seq=_opt(d, "by_max_seq", where, _pools_by_max_seq, {}),
                   gather=_opt(d, "gather", where,
                               lambda v, w: PoolAtMaxSeq.from_data(v, w, in_place=False)))

    def layout(self, name: str) -> PoolLayout:
        """``private``, ``shared_largest_first`` or ``shared_smallest_first``."""
        if name not in self.LAYOUTS:
            raise KeyError(f"no pool layout {name!r}; layouts: {self.LAYOUTS}")
        return getattr(self, name)

    def total_bytes(self) -> dict[str, int]:
        """Total bytes of each layout, in :data:`LAYOUTS` order."""
        return {n: self.layout(n).total_bytes for n in self.LAYOUTS}


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


# ----------------------------------------------------------------------------- pitfalls


@dataclass(frozen=True)
class Pitfall:
    """One capture pitfall reproduced: the rule, what happened (``error``: the first error
    seen, ``None`` if none), the fix and whether the fixed version ran (``fixed_ok``).
    ``details`` is free-form per pitfall."""

    name: str
    rule: str
    what: str
    error: str | None
    fix: str
    fixed_ok: bool
    details: dict

    @classmethod
    def from_data(cls, v: Any, where: str) -> "Pitfall":
        d = _dict(v, where)
        return cls(name=_req(d, "name", where, _str), rule=_opt(d, "rule", where, _str, ""),
                   what=_opt(d, "what", where, _str, ""), error=_opt(d, "error", where, _str),
                   fix=_opt(d, "fix", where, _str, ""),
                   fixed_ok=_req(d, "fixed_ok", where, _bool),
                   details=_opt(d, "details", where, _dict, {}))


@dataclass(frozen=True)
class Pitfalls:
    """``pitfalls``: the pitfalls shown on ``device``, the address demonstration (free-form;
    ``{"error": ...}`` when it failed) and the torch.compile pitfall (``None``: not run)."""

    RECORD = "pitfalls"  # the record name(s) of this kind

    device: str
    torch: str
    pitfalls: list[Pitfall]
    address_demo: dict
    compiled: Pitfall | None

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Pitfalls":
        return cls(device=_opt(d, "device", where, _str, ""),
                   torch=_opt(d, "torch", where, _str, ""),
                   pitfalls=[Pitfall.from_data(p, f"{where}.pitfalls[{i}]")
                             for i, p in enumerate(_req(d, "pitfalls", where, _list))],
                   address_demo=_opt(d, "address_demo", where, _dict, {}),
                   compiled=_opt(d, "compiled", where, Pitfall.from_data))

    def by_name(self) -> dict[str, Pitfall]:
        return {p.name: p for p in self.pitfalls}


# ----------------------------------------------------------------------------- bench


@dataclass(frozen=True)
class BenchRow:
    """One row of the bench table: median µs per method at one model and batch size, and the
    ratios (:func:`bench_row` derives them)."""

    model: str
    batch: int
    eager_us: float | None = None
    graph_us: float | None = None
    dispatcher_us: float | None = None
    compile_us: float | None = None
    graph_speedup: float | None = None
    dispatcher_over_graph: float | None = None
    dispatcher_over_compile: float | None = None

    NUMBERS = ("eager_us", "graph_us", "dispatcher_us", "compile_us", "graph_speedup",
               "dispatcher_over_graph", "dispatcher_over_compile")

    @classmethod
    def from_data(cls, v: Any, where: str) -> "BenchRow":
        d = _dict(v, where)
        return cls(model=_req(d, "model", where, _str), batch=_req(d, "batch", where, _int),
                   **{k: _opt(d, k, where, _num) for k in cls.NUMBERS})

    def get(self, key: str) -> Any:
        """A column by name (``None`` when absent), as the table writers ask for it."""
        return getattr(self, key, None)


def bench_row(model: str, batch: int, medians_us: Mapping[str, float]) -> dict:
    """The bench table's row for one model and batch size, with its ratios derived here:
    ``{"model", "batch", "<method>_us"..., "graph_speedup", "dispatcher_over_graph",
    "dispatcher_over_compile"}`` (a ratio only when both of its timings exist)."""
    t = dict(medians_us)
    row: dict = {"model": model, "batch": batch, **{f"{m}_us": t[m] for m in t}}
    if "eager" in t and "graph" in t:
        row["graph_speedup"] = speedup(t["eager"], t["graph"])
    if "dispatcher" in t and "graph" in t:
        row["dispatcher_over_graph"] = ratio(t["dispatcher"], t["graph"])
    if "dispatcher" in t and "compile" in t:
        row["dispatcher_over_compile"] = ratio(t["dispatcher"], t["compile"])
    return row


@dataclass(frozen=True)
class BenchTarget:
    """A benchmark target: its sentence, the measured value and whether it passed."""

    target: str
    value: float
    passed: bool

    @classmethod
    def from_data(cls, v: Any, where: str) -> "BenchTarget":
        d = _dict(v, where)
        return cls(_req(d, "target", where, _str), _req(d, "value", where, _num),
                   _req(d, "pass", where, _bool))


@dataclass(frozen=True)
class BenchPool:
    """Graph-pool memory of one layout, in MiB."""

    layout: str
    total_MiB: float

    @classmethod
    def from_data(cls, v: Any, where: str) -> "BenchPool":
        d = _dict(v, where)
        return cls(_req(d, "layout", where, _str), _req(d, "total_MiB", where, _num))


@dataclass(frozen=True)
class Bench:
    """``bench``: the table of ``labkit bench``, its targets, pool memory, the correctness
    checks (``"<model>.<check>"``) and the measurements that failed."""

    RECORD = "bench"  # the record name(s) of this kind

    rows: list[BenchRow]
    targets: list[BenchTarget]
    pool: list[BenchPool]
    checks: dict[str, bool | float]
    failed: list[str]

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Bench":
        def items(key: str, kind: Any) -> list:
            return [kind.from_data(x, f"{where}.{key}[{i}]")
                    for i, x in enumerate(_req(d, key, where, _list))]

        return cls(rows=items("rows", BenchRow), targets=items("targets", BenchTarget),
                   pool=items("pool", BenchPool), checks=_opt(d, "checks", where, _checks, {}),
                   failed=_opt(d, "failed", where, _strs, []))

    def pool_mib(self) -> dict[str, float]:
        return {p.layout: p.total_MiB for p in self.pool}


# ----------------------------------------------------------------------------- paged


PAGED_LAYOUTS = ("slot_in_place", "slot_gather", "paged")


@dataclass(frozen=True)
class PagedRun(_Timed):
    """One ``max_seq`` of a ``paged_<preset>`` record: graph-replay µs per decode step per
    layout and batch size, and the KV-cache bytes of each layout (``slot``: every slot's full
    row; ``paged``: the block pool, pad block included)."""

    max_seq: int
    batch_sizes: list[int]
    times: dict[str, list[Stats | None]]
    cache_bytes: dict[str, int]

    @classmethod
    def from_data(cls, v: Any, where: str, sizes: list[int] | None = None) -> "PagedRun":
        d = _dict(v, where)
        sizes = sizes or []
        times = _times(_req(d, "times", where, _dict), f"{where}.times", sizes,
                       "data.batch_sizes")
        for m in PAGED_LAYOUTS:
            if m not in times:
                raise _Fail(f"{where}.times.{m}", "is missing")
        mem = _req(d, "cache_bytes", where, _dict)
        return cls(max_seq=_req(d, "max_seq", where, _int), batch_sizes=list(sizes),
                   times=times,
                   cache_bytes={k: _int(x, f"{where}.cache_bytes.{k}") for k, x in mem.items()})


@dataclass(frozen=True)
class Paged:
    """``paged_<preset>``: decode-step graph replay (µs) with the slot layout read in place,
    the slot layout gathering each row per layer, and the paged layout gathering through the
    block table, per ``max_seq`` (:class:`PagedRun`) and batch size; the correctness checks
    (paged tokens = slot tokens, graph tokens = eager tokens) and the block size."""

    RECORD = "paged_<preset>"  # the record name(s) of this kind

    preset: str
    dtype: str
    block_size: int
    batch_sizes: list[int]
    runs: list[PagedRun]
    checks: dict[str, bool | float]

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Paged":
        sizes = _req(d, "batch_sizes", where, _ints)
        runs = [PagedRun.from_data(r, f"{where}.runs[{i}]", sizes)
                for i, r in enumerate(_req(d, "runs", where, _list))]
        if not runs:
            raise _Fail(f"{where}.runs", "must hold at least one max_seq")
        return cls(preset=_opt(d, "preset", where, _str, ""),
                   dtype=_opt(d, "dtype", where, _str, ""),
                   block_size=_req(d, "block_size", where, _int), batch_sizes=sizes,
                   runs=runs, checks=_opt(d, "checks", where, _checks, {}))

    @property
    def max_seqs(self) -> list[int]:
        return [r.max_seq for r in self.runs]

    def run(self, max_seq: int) -> PagedRun:
        """The run at ``max_seq`` (``KeyError`` naming the ones recorded)."""
        for r in self.runs:
            if r.max_seq == max_seq:
                return r
        raise KeyError(f"no run at max_seq={max_seq}; recorded: {self.max_seqs}")

# ----------------------------------------------------------------------------- capture modes


def _opt_int_map(v: Any, where: str) -> dict[str, int | None]:
    return {k: _opt_int(x, f"{where}.{k}") for k, x in _dict(v, where).items()}


def _num_map(v: Any, where: str) -> dict[str, float]:
    return {k: _num(x, f"{where}.{k}") for k, x in _dict(v, where).items()}


@dataclass(frozen=True)
class Modes(_Timed):
    """``modes_<preset>``: decode-step time (µs) per CUDA-graph capture mode (``eager`` =
    NONE, ``piecewise``, ``full``, ``attention_only``) and batch size; graph launches per
    step (by construction, and as counted by the profiler), GPU operations of one eager step,
    pool bytes (``None``: no pool) and capture seconds per mode, token checks."""

    RECORD = "modes_<preset>"  # the record name(s) of this kind

    preset: str
    dtype: str
    n_layer: int
    batch_sizes: list[int]
    times: dict[str, list[Stats | None]]
    graphs_per_step: dict[str, int | None]
    pool_bytes: dict[str, int | None]
    capture_s: dict[str, float]
    checks: dict[str, bool | float]
    gpu_ops_per_step: int | None = None
    graph_launches_counted: dict[str, int | None] = field(default_factory=dict)

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Modes":
        sizes = _req(d, "batch_sizes", where, _ints)
        out = cls(preset=_opt(d, "preset", where, _str, ""),
                  dtype=_opt(d, "dtype", where, _str, ""),
                  n_layer=_req(d, "n_layer", where, _int), batch_sizes=sizes,
                  times=_times(_req(d, "times", where, _dict), f"{where}.times", sizes,
                               f"{where}.batch_sizes"),
                  graphs_per_step=_req(d, "graphs_per_step", where, _opt_int_map),
                  pool_bytes=_req(d, "pool_bytes", where, _opt_int_map),
                  capture_s=_opt(d, "capture_s", where, _num_map, {}),
                  checks=_opt(d, "checks", where, _checks, {}),
                  gpu_ops_per_step=_opt(d, "gpu_ops_per_step", where, _int),
                  graph_launches_counted=_opt(d, "graph_launches_counted", where,
                                              _opt_int_map, {}))
        if "eager" not in out.times:
            raise _Fail(f"{where}.times.eager", "is missing")
        for key in ("graphs_per_step", "pool_bytes"):
            extra = sorted(set(getattr(out, key)) - set(out.times))
            if extra:
                raise _Fail(f"{where}.{key}", f"names modes {extra} that {where}.times lacks")
        _check_stored(d, where, "tokens_per_s", out.tokens_per_s, out.methods)
        return out


# ----------------------------------------------------------------------------- serving


def _nums(v: Any, where: str) -> list[float]:
    return [_num(x, f"{where}[{i}]") for i, x in enumerate(_list(v, where))]


@dataclass(frozen=True)
class ServeRequest:
    """One request of a ``serve_<name>`` run: arrival, lengths and the time (s from the start)
    of each generated token."""

    arrival_s: float
    prompt_len: int
    output_len: int
    token_times_s: list[float]

    @classmethod
    def from_data(cls, v: Any, where: str) -> "ServeRequest":
        d = _dict(v, where)
        out = cls(arrival_s=_req(d, "arrival_s", where, _num),
                  prompt_len=_req(d, "prompt_len", where, _int),
                  output_len=_req(d, "output_len", where, _int),
                  token_times_s=_req(d, "token_times_s", where, _nums))
        if len(out.token_times_s) > out.output_len:
            raise _Fail(f"{where}.token_times_s", f"has {len(out.token_times_s)} times for "
                        f"output_len={out.output_len}")
        return out


@dataclass(frozen=True)
class ServeStep:
    """One decode step of a ``serve_<name>`` run: start/end (s), rows, rows computed,
    runtime mode and whether a graph served it."""

    start_s: float
    end_s: float
    batch: int
    padded: int
    runtime: str
    graph: bool

    @classmethod
    def from_data(cls, v: Any, where: str) -> "ServeStep":
        d = _dict(v, where)
        out = cls(start_s=_req(d, "start_s", where, _num), end_s=_req(d, "end_s", where, _num),
                  batch=_req(d, "batch", where, _int), padded=_req(d, "padded", where, _int),
                  runtime=_req(d, "runtime", where, _str), graph=_req(d, "graph", where, _bool))
        if out.padded < out.batch:
            raise _Fail(f"{where}.padded", f"({out.padded}) is below batch ({out.batch})")
        return out


@dataclass(frozen=True)
class Serve:
    """``serve_<name>``: a continuous-batching run of a request trace (:mod:`labkit.serving`)
    in one step ``mode``: every request's token times, every decode step, and the metrics of
    :func:`labkit.measure.serving_metrics.run_metrics` (TTFT/TPOT/ITL/E2EL in ms, ...)."""

    RECORD = "serve_<name>"  # the record name(s) of this kind

    mode: str
    trace: str
    clock: str
    requests: list[ServeRequest]
    steps: list[ServeStep]
    metrics: dict
    #: every recorded run's metrics (``measure_serving(repeats=...)``); [] in older records
    repeats: list[dict] = field(default_factory=list)

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Serve":
        return cls(mode=_req(d, "mode", where, _str), trace=_opt(d, "trace", where, _str, ""),
                   clock=_opt(d, "clock", where, _str, ""),
                   requests=[ServeRequest.from_data(r, f"{where}.requests[{i}]")
                             for i, r in enumerate(_req(d, "requests", where, _list))],
                   steps=[ServeStep.from_data(s, f"{where}.steps[{i}]")
                          for i, s in enumerate(_req(d, "steps", where, _list))],
                   metrics=_req(d, "metrics", where, _dict),
                   repeats=[_dict(m, f"{where}.repeats[{i}]") for i, m in
                            enumerate(_opt(d, "repeats", where, _list, []))])


@dataclass(frozen=True)
class ServeLoadPoint:
    """One point of a latency–load curve: step ``mode``, request ``rate`` (req/s) and the
    run's metrics (:func:`labkit.measure.serving_metrics.run_metrics`)."""

    mode: str
    rate: float
    metrics: dict

    @classmethod
    def from_data(cls, v: Any, where: str) -> "ServeLoadPoint":
        d = _dict(v, where)
        return cls(mode=_req(d, "mode", where, _str), rate=_req(d, "rate", where, _num),
                   metrics=_req(d, "metrics", where, _dict))


# ----------------------------------------------------------------------------- pool overwrite


def _floats(v: Any, where: str) -> list[float]:
    return [_num(x, f"{where}[{i}]") for i, x in enumerate(_list(v, where))]


@dataclass(frozen=True)
class OverwriteFix:
    """One fix of a ``pool_overwrite`` record: B's output (its distinct values) after A's
    replay, ``ok`` when it kept B's value; and, for the keep-alive fix, the two pointers."""

    values_after_replay_a: list[float]
    ok: bool
    a_temporary_ptr: int | None = None
    b_output_ptr: int | None = None
    same_block: bool | None = None

    @classmethod
    def from_data(cls, v: Any, where: str, key: str) -> "OverwriteFix":
        d = _dict(v, where)
        return cls(values_after_replay_a=_req(d, key, where, _floats),
                   ok=_req(d, "ok", where, _bool),
                   a_temporary_ptr=_opt(d, "a_temporary_ptr", where, _int),
                   b_output_ptr=_opt(d, "b_output_ptr", where, _int),
                   same_block=_opt(d, "same_block", where, _bool))


@dataclass(frozen=True)
class PoolOverwrite:
    """``pool_overwrite``: graph A then graph B captured into one shared pool, A's temporary
    freed during its capture and B's output given that block (``same_block``: the pointers
    are equal). B's output (its distinct float32 values) read right after A, B (capture
    order), after B's replay and after A's replay (``overwritten``), and the two fixes:
    ``fix_clone`` (B's output copied before A replays) and ``fix_keep_a_temporary``."""

    RECORD = "pool_overwrite"  # the record name(s) of this kind

    device: str
    torch: str
    numel: int
    a_temporary_value: float
    b_expected_value: float
    a_temporary_ptr: int
    b_output_ptr: int
    same_block: bool
    b_in_capture_order: list[float]
    b_after_replay_b: list[float]
    b_after_replay_a: list[float]
    overwritten: bool
    fix_clone: OverwriteFix
    fix_keep_a_temporary: OverwriteFix
    fixed: bool

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "PoolOverwrite":
        return cls(device=_opt(d, "device", where, _str, ""),
                   torch=_opt(d, "torch", where, _str, ""),
                   numel=_req(d, "numel", where, _int),
                   a_temporary_value=_req(d, "a_temporary_value", where, _num),
                   b_expected_value=_req(d, "b_expected_value", where, _num),
                   a_temporary_ptr=_req(d, "a_temporary_ptr", where, _int),
                   b_output_ptr=_req(d, "b_output_ptr", where, _int),
                   same_block=_req(d, "same_block", where, _bool),
                   b_in_capture_order=_req(d, "b_in_capture_order", where, _floats),
                   b_after_replay_b=_req(d, "b_after_replay_b", where, _floats),
                   b_after_replay_a=_req(d, "b_after_replay_a", where, _floats),
                   overwritten=_req(d, "overwritten", where, _bool),
                   fix_clone=_req(d, "fix_clone", where, lambda v, w: OverwriteFix.from_data(
                       v, w, "copy_after_replay_a")),
                   fix_keep_a_temporary=_req(
                       d, "fix_keep_a_temporary", where,
                       lambda v, w: OverwriteFix.from_data(v, w, "b_after_replay_a")),
                   fixed=_req(d, "fixed", where, _bool))


# ----------------------------------------------------------------------------- fused step

FUSED_STEPS = ("readable", "fused")


def _count_map(v: Any, where: str) -> dict[str, int]:
    out = {}
    for k, x in _dict(v, where).items():
        n = _int(x, f"{where}.{k}")
        if n < 0:
            raise _fail(f"{where}.{k}", "a count >= 0", x)
        out[k] = n
    return out


# ----------------------------------------------------------------------------- tensor parallel


def _str_map(v: Any, where: str) -> dict[str, str]:
    return {k: _str(x, f"{where}.{k}") for k, x in _dict(v, where).items()}


def _opt_num_rows(v: Any, where: str) -> dict[str, list[list[float | None]]]:
    """``{method: [[median per rank] per size]}``."""
    out = {}
    for m, rows in _dict(v, where).items():
        out[m] = [[_opt_num(x, f"{where}.{m}[{i}][{j}]") for j, x in
                   enumerate(_list(row, f"{where}.{m}[{i}]"))]
                  for i, row in enumerate(_list(rows, f"{where}.{m}"))]
    return out


@dataclass(frozen=True)
class Fused(_Timed):
    """``fused_<preset>``: the readable and the fused decode step (:mod:`labkit.fused`) side
    by side: FULL-graph replay time (µs) per batch size, GPU operations of one eager step by
    kernel name at ``count_batch`` (``ops[step]``) and in total per batch size
    (``ops_total[step]``), the bf16 agreement of the fused step with the readable one
    (``agreement``: tokens, equal, fraction, max_logit_diff) and the checks (float32 tokens
    equal, graph tokens equal eager); optionally the summed GPU µs by kernel (``op_us``) and
    of a whole eager step (``kernel_us``), from the same profiler trace."""

    RECORD = "fused_<preset>"  # the record name(s) of this kind

    preset: str
    dtype: str
    n_layer: int
    batch_sizes: list[int]
    times: dict[str, list[Stats | None]]
    count_batch: int
    ops: dict[str, dict[str, int]]
    ops_total: dict[str, list[int]]
    agreement: dict[str, float]
    checks: dict[str, bool | float]
    #: summed GPU µs by kernel name at ``count_batch`` (profiled eager step), per step
    op_us: dict[str, dict[str, float]] = field(default_factory=dict)
    #: summed GPU µs of all kernels of one eager step, per step and batch size
    kernel_us: dict[str, list[float]] = field(default_factory=dict)

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Fused":
        sizes = _req(d, "batch_sizes", where, _ints)
        times = _times(_req(d, "times", where, _dict), f"{where}.times", sizes,
                       f"{where}.batch_sizes")
        ops = {k: _count_map(v, f"{where}.ops.{k}")
               for k, v in _req(d, "ops", where, _dict).items()}
        totals = {}
        for k, v in _req(d, "ops_total", where, _dict).items():
            col = _ints(v, f"{where}.ops_total.{k}")
            _same_length(col, sizes, f"{where}.ops_total.{k}", f"{where}.batch_sizes")
            totals[k] = col
        for key, got in (("times", times), ("ops", ops), ("ops_total", totals)):
            for step in FUSED_STEPS:
                if step not in got:
                    raise _Fail(f"{where}.{key}.{step}", "is missing")
        agree = {k: _num(x, f"{where}.agreement.{k}")
                 for k, x in _req(d, "agreement", where, _dict).items()}
        count_batch = _req(d, "count_batch", where, _int)
        if count_batch in sizes:
            i = sizes.index(count_batch)
            for step in FUSED_STEPS:
                if sum(ops[step].values()) != totals[step][i]:
                    raise _Fail(f"{where}.ops_total.{step}[{i}]",
                                f"is {totals[step][i]} but {where}.ops.{step} sums to "
                                f"{sum(ops[step].values())}")
        op_us = {k: _num_map(v, f"{where}.op_us.{k}")
                 for k, v in _opt(d, "op_us", where, _dict, {}).items()}
        kernel_us = {}
        for k, v in _opt(d, "kernel_us", where, _dict, {}).items():
            col = _nums(v, f"{where}.kernel_us.{k}")
            _same_length(col, sizes, f"{where}.kernel_us.{k}", f"{where}.batch_sizes")
            kernel_us[k] = col
        out = cls(preset=_req(d, "preset", where, _str), dtype=_opt(d, "dtype", where, _str, ""),
                  n_layer=_req(d, "n_layer", where, _int), batch_sizes=sizes, times=times,
                  count_batch=count_batch, ops=ops, ops_total=totals, agreement=agree,
                  checks=_opt(d, "checks", where, _checks, {}), op_us=op_us,
                  kernel_us=kernel_us)
        _check_stored(d, where, "tokens_per_s", out.tokens_per_s, out.methods)
        return out

    def ops_at(self, step: str, batch: int) -> int | None:
        """GPU operations of one ``step`` at ``batch`` (``None``: not counted)."""
        if step not in self.ops_total or batch not in self.batch_sizes:
            return None
        return self.ops_total[step][self.batch_sizes.index(batch)]

    def ops_per_layer(self, step: str, batch: int | None = None) -> float | None:
        """GPU operations per layer (total / layers) of ``step`` at ``batch`` (default:
        ``count_batch``)."""
        n = self.ops_at(step, self.count_batch if batch is None else batch)
        return None if n is None else n / self.n_layer


# ----------------------------------------------------------------------------- roofline


@dataclass(frozen=True)
class RooflineVariant:
    """What one step variant of a ``roofline_<preset>`` record cost to set up and what one
    step launches: capture or compile seconds, pool bytes, GPU operations and graph launches
    per step (profiler, at ``profiled_batch``), CUDA graphs Inductor skipped, the cache slots
    and KV-cache bytes of the model it ran on, and the error when the variant failed (then it
    has no times). ``None``: not measured."""

    sizes: list[int]
    setup_s: float | None = None
    pool_bytes: int | None = None
    gpu_ops: int | None = None
    graph_launches: int | None = None
    profiled_batch: int | None = None
    cudagraph_skips: int | None = None
    error: str | None = None
    #: cache slots and KV-cache bytes of the model this variant ran on
    max_batch: int | None = None
    cache_bytes: int | None = None

    @classmethod
    def from_data(cls, v: Any, where: str) -> "RooflineVariant":
        d = _dict(v, where)
        return cls(sizes=_opt(d, "sizes", where, _ints, []),
                   setup_s=_opt(d, "setup_s", where, _num),
                   pool_bytes=_opt(d, "pool_bytes", where, _int),
                   gpu_ops=_opt(d, "gpu_ops", where, _int),
                   graph_launches=_opt(d, "graph_launches", where, _int),
                   profiled_batch=_opt(d, "profiled_batch", where, _int),
                   cudagraph_skips=_opt(d, "cudagraph_skips", where, _int),
                   error=_opt(d, "error", where, _str),
                   max_batch=_opt(d, "max_batch", where, _int),
                   cache_bytes=_opt(d, "cache_bytes", where, _int))

    @property
    def graphs_used(self) -> bool | None:
        """True when a step launched at least one CUDA graph and none was skipped."""
        if self.graph_launches is None:
            return None
        return self.graph_launches >= 1 and not self.cudagraph_skips


@dataclass(frozen=True)
class Roofline(_Timed):
    """``roofline_<preset>``: decode-step µs per step variant (``eager``, ``graph``,
    ``compile_*``, ...) and batch size with every row attending to ``context`` positions; the
    measured copy bandwidth (GB/s, read + write counted) and bf16 matmul rate (TFLOP/s); per
    variant its :class:`RooflineVariant`. The bytes a step moves and the floors are derived
    here from the stored model ``config`` (:mod:`labkit.stepcost`)."""

    RECORD = "roofline_<preset>"  # the record name(s) of this kind

    preset: str
    dtype: str
    config: dict
    context: int
    batch_sizes: list[int]
    compile_sizes: list[int]
    bandwidth_gbps: float
    matmul_tflops: float
    times: dict[str, list[Stats | None]]
    variants: dict[str, RooflineVariant]
    checks: dict[str, bool | float]

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Roofline":
        sizes = _req(d, "batch_sizes", where, _ints)
        config = _req(d, "config", where, _dict)
        try:
            stepcost.config_fields(config)
        except (TypeError, ValueError) as exc:
            raise _Fail(f"{where}.config", f"is not a model config ({exc})") from None
        bw = _req(d, "bandwidth", where, _dict)
        mm = _req(d, "matmul", where, _dict)
        variants = _req(d, "variants", where, _dict)
        out = cls(preset=_opt(d, "preset", where, _str, ""),
                  dtype=_opt(d, "dtype", where, _str, ""),
                  config=dict(config), context=_req(d, "context", where, _int),
                  batch_sizes=sizes,
                  compile_sizes=_opt(d, "compile_sizes", where, _ints, []),
                  bandwidth_gbps=_req(bw, "gbps", f"{where}.bandwidth", _num),
                  matmul_tflops=_req(mm, "tflops", f"{where}.matmul", _num),
                  times=_times(_req(d, "times", where, _dict), f"{where}.times", sizes,
                               f"{where}.batch_sizes"),
                  variants={k: RooflineVariant.from_data(v, f"{where}.variants.{k}")
                            for k, v in variants.items()},
                  checks=_opt(d, "checks", where, _checks, {}))
        if out.bandwidth_gbps <= 0 or out.matmul_tflops <= 0:
            raise _Fail(f"{where}.bandwidth", "and matmul rates must be positive")
        if not 1 <= out.context <= int(config["max_seq"]):
            raise _Fail(f"{where}.context", f"must lie in [1, max_seq={config['max_seq']}]")
        extra = sorted(set(out.variants) - set(out.times))
        if extra:
            raise _Fail(f"{where}.variants", f"names variants {extra} that {where}.times lacks")
        return out

    def step_bytes(self) -> list[int]:
        """Bytes one step moves at each batch size (:func:`labkit.stepcost.step_bytes`)."""
        return [stepcost.step_bytes(self.config, b, self.context).total
                for b in self.batch_sizes]

    def floor_us(self) -> list[float]:
        """The bandwidth floor (µs) at each batch size: bytes / measured copy bandwidth."""
        return [stepcost.floor_us(n, self.bandwidth_gbps) for n in self.step_bytes()]

    def roofline_us(self) -> list[float]:
        """The larger of the bandwidth and the compute floor (µs) at each batch size."""
        return [stepcost.roofline_floor_us(self.config, b, self.context, self.bandwidth_gbps,
                                           self.matmul_tflops) for b in self.batch_sizes]

    def over_floor(self, method: str) -> list[float | None]:
        """Step time of ``method`` over the roofline floor per batch size (:func:`ratio`)."""
        return [ratio(t, f) for t, f in zip(self.median_us(method), self.roofline_us())]


MULTISTEP_METHODS = ("host_sync", "one_step_graphs", "multistep")


@dataclass(frozen=True)
class Multistep(_Timed):
    """``multistep_<preset>``: µs per decode step (one token per row) when ``n_steps`` steps
    run as one-step graphs with a host round trip per step (``host_sync``), as one-step graphs
    fed back on the device (``one_step_graphs``), or as one graph of ``n_steps`` steps
    (``multistep``); the token check; what this PyTorch offers of conditional nodes
    (``conditional``, free-form: :func:`labkit.conditional.conditional_support`)."""

    RECORD = "multistep_<preset>"  # the record name(s) of this kind

    preset: str
    dtype: str
    batch_sizes: list[int]
    n_steps: int
    times: dict[str, list[Stats | None]]
    checks: dict[str, bool | float]
    conditional: dict = field(default_factory=dict)

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Multistep":
        sizes = _req(d, "batch_sizes", where, _ints)
        out = cls(preset=_opt(d, "preset", where, _str, ""),
                  dtype=_opt(d, "dtype", where, _str, ""), batch_sizes=sizes,
                  n_steps=_req(d, "n_steps", where, _int),
                  times=_times(_req(d, "times", where, _dict), f"{where}.times", sizes,
                               f"{where}.batch_sizes"),
                  checks=_opt(d, "checks", where, _checks, {}),
                  conditional=_opt(d, "conditional", where, _dict, {}))
        for m in MULTISTEP_METHODS:
            if m not in out.times:
                raise _Fail(f"{where}.times.{m}", "is missing")
        if out.n_steps < 1:
            raise _Fail(f"{where}.n_steps", "must be >= 1")
        _check_stored(d, where, "tokens_per_s", out.tokens_per_s, out.methods)
        return out

    def gain(self, method: str = "multistep", over: str = "one_step_graphs"
             ) -> list[float | None]:
        """How many times faster per token ``method`` is than ``over`` (:func:`speedup`)."""
        return [speedup(o, m) for o, m in zip(self.median_us(over), self.median_us(method))]


@dataclass(frozen=True)
class ServeLoad:
    """``serving_load_<preset>``: the latency–load curve (:mod:`labkit.measure.serve_load`):
    one :class:`ServeLoadPoint` per step mode and request rate."""

    RECORD = "serving_load_<preset>"  # the record name(s) of this kind

    modes: list[str]
    rates: list[float]
    points: list[ServeLoadPoint]

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "ServeLoad":
        out = cls(modes=_req(d, "modes", where, _strs), rates=_req(d, "rates", where, _nums),
                  points=[ServeLoadPoint.from_data(p, f"{where}.points[{i}]")
                          for i, p in enumerate(_req(d, "points", where, _list))])
        for i, p in enumerate(out.points):
            if p.mode not in out.modes or p.rate not in out.rates:
                raise _Fail(f"{where}.points[{i}]", f"has mode {p.mode!r} at rate {p.rate} "
                            f"outside modes {out.modes} / rates {out.rates}")
        return out

    def series(self, mode: str, key: str) -> list[float | None]:
        """Metric ``key`` (dotted, e.g. ``'ttft_ms.p99'``) of ``mode`` at each rate."""
        by_rate = {p.rate: p.metrics for p in self.points if p.mode == mode}
        out: list[float | None] = []
        for r in self.rates:
            v: Any = by_rate.get(r)
            for part in key.split("."):
                v = v.get(part) if isinstance(v, Mapping) else None
            out.append(v)
        return out


@dataclass(frozen=True)
class TPAllReduce:
    """``tp_allreduce``: µs per all-reduce of ``world_size`` ranks per message size
    (``sizes_bytes``) and method: ``pg_eager`` / ``pg_graph`` (``dist.all_reduce`` over
    ``backend``, one by one or ``graph_ops`` of them captured in one graph), ``one_shot_*`` /
    ``two_shot_*`` (``torch.ops.symm_mem`` kernels on a symmetric buffer). ``None`` where a
    method did not run: ``errors`` says why (``skipped``: not applicable on this backend). ``rank_medians``: every rank's median."""

    RECORD = "tp_allreduce"  # the record name(s) of this kind

    backend: str
    world_size: int
    dtype: str
    sizes_bytes: list[int]
    times: dict[str, list[Stats | None]]
    checks: dict[str, bool | float]
    errors: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    graph_ops: int | None = None
    rank_medians: dict[str, list[list[float | None]]] = field(default_factory=dict)
    shutdown: dict = field(default_factory=dict)
    device: str = ""

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "TPAllReduce":
        sizes = _req(d, "sizes_bytes", where, _ints)
        return cls(backend=_req(d, "backend", where, _str),
                   world_size=_req(d, "world_size", where, _int),
                   dtype=_opt(d, "dtype", where, _str, ""), sizes_bytes=sizes,
                   times=_times(_req(d, "times", where, _dict), f"{where}.times", sizes,
                                f"{where}.sizes_bytes"),
                   checks=_opt(d, "checks", where, _checks, {}),
                   errors=_opt(d, "errors", where, _str_map, {}),
                   skipped=_opt(d, "skipped", where, _str_map, {}),
                   graph_ops=_opt(d, "graph_ops", where, _int),
                   rank_medians=_opt(d, "rank_medians", where, _opt_num_rows, {}),
                   shutdown=_opt(d, "shutdown", where, _dict, {}),
                   device=_opt(d, "device", where, _str, ""))

    @property
    def methods(self) -> list[str]:
        """The methods recorded, in record order."""
        return list(self.times)

    def median_us(self, method: str) -> list[float | None]:
        """Median µs per all-reduce of ``method`` per size (``None``: not measured)."""
        if method not in self.times:
            raise KeyError(f"the record has no method {method!r}; it has {self.methods}")
        return [_median(s) for s in self.times[method]]

    def at(self, method: str, nbytes: int) -> float | None:
        """Median µs of ``method`` at ``nbytes`` (``None``: not measured there)."""
        if method not in self.times or nbytes not in self.sizes_bytes:
            return None
        return _median(self.times[method][self.sizes_bytes.index(nbytes)])


@dataclass(frozen=True)
class TPDecode(_Timed):
    """``tp_decode_<preset>``: decode-step µs per method and batch size on one GPU
    (``tp1_*``) and split over ``world_size`` GPUs (``tpN_*``: eager; FULL graph with NCCL
    inside; ``_noop``: the all-reduces replaced by nothing, the compute alone;
    ``_graph_symm_mem``: one-shot symmetric-memory all-reduce in the graph). ``checks`` hold
    ``tp_tokens_equal_tp1`` (every mode); ``errors`` say why a method is ``None``."""

    RECORD = "tp_decode_<preset>"  # the record name(s) of this kind

    preset: str
    dtype: str
    world_size: int
    batch_sizes: list[int]
    times: dict[str, list[Stats | None]]
    checks: dict[str, bool | float]
    errors: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    rank_medians: dict[str, list[list[float | None]]] = field(default_factory=dict)
    shutdown: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    device: str = ""

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "TPDecode":
        sizes = _req(d, "batch_sizes", where, _ints)
        return cls(preset=_req(d, "preset", where, _str), dtype=_opt(d, "dtype", where, _str, ""),
                   world_size=_req(d, "world_size", where, _int), batch_sizes=sizes,
                   times=_times(_req(d, "times", where, _dict), f"{where}.times", sizes,
                                f"{where}.batch_sizes"),
                   checks=_opt(d, "checks", where, _checks, {}),
                   errors=_opt(d, "errors", where, _str_map, {}),
                   skipped=_opt(d, "skipped", where, _str_map, {}),
                   rank_medians=_opt(d, "rank_medians", where, _opt_num_rows, {}),
                   shutdown=_opt(d, "shutdown", where, _dict, {}),
                   config=_opt(d, "config", where, _dict, {}),
                   device=_opt(d, "device", where, _str, ""))

    def tp(self, suffix: str) -> str:
        """The method name ``tp<world_size>_<suffix>`` (e.g. ``tp('graph')``)."""
        return f"tp{self.world_size}_{suffix}"

    def comm_us(self, batch: int, graph: bool = True) -> float | None:
        """Communication µs per step at ``batch``: the step minus the same step with
        no-op all-reduces (``None`` when either was not measured)."""
        mode = "graph" if graph else "eager"
        full, noop = self.at(self.tp(mode), batch), self.at(self.tp(f"{mode}_noop"), batch)
        if full is None or noop is None:
            return None
        return full - noop


# ----------------------------------------------------------------------------- the registry

#: (record-name pattern, kind), first match wins; later issues append their kinds here
KINDS: list[tuple[str, type]] = [
    (r"launch_overhead", LaunchOverhead),
    (r"decode_[A-Za-z0-9][A-Za-z0-9_.-]*", Decode),
    (r"compile_times_[A-Za-z0-9][A-Za-z0-9_.-]*", Decode),
    (r"timeline_[A-Za-z0-9][A-Za-z0-9_.-]*", Timeline),
    (r"pool_memory_[A-Za-z0-9][A-Za-z0-9_.-]*", PoolMemory),
    (r"dispatcher_[A-Za-z0-9][A-Za-z0-9_.-]*", Dispatcher),
    (r"compile_[A-Za-z0-9][A-Za-z0-9_.-]*", Compile),
    (r"pitfalls", Pitfalls),
    (r"bench", Bench),
    (r"modes_[A-Za-z0-9][A-Za-z0-9_.-]*", Modes),
    (r"paged_[A-Za-z0-9][A-Za-z0-9_.-]*", Paged),
    (r"serve_[A-Za-z0-9][A-Za-z0-9_.-]*", Serve),
    (r"pool_overwrite", PoolOverwrite),
    (r"fused_[A-Za-z0-9][A-Za-z0-9_.-]*", Fused),
    (r"roofline_[A-Za-z0-9][A-Za-z0-9_.-]*", Roofline),
    (r"multistep_[A-Za-z0-9][A-Za-z0-9_.-]*", Multistep),
    (r"serving_load_[A-Za-z0-9][A-Za-z0-9_.-]*", ServeLoad),
    (r"tp_allreduce", TPAllReduce),
    (r"tp_decode_[A-Za-z0-9][A-Za-z0-9_.-]*", TPDecode),
]


def kind_of(name: str) -> type | None:
    """The record kind of record name ``name`` (``None``: not a kind this module knows)."""
    for pattern, kind in KINDS:
        if re.fullmatch(pattern, name):
            return kind
    return None


_RERECORD = ("re-record it with this labkit (`labkit run` or `labkit bench --record`), or read "
             "it with the labkit version that wrote it (its env.labkit field)")


def parse(name: str, data: Mapping, *, source: str | None = None, fix: str = _RERECORD) -> Any:
    """``data`` of record ``name`` as its kind (``data`` itself, as a dict, for a name no kind
    matches). Raises :class:`SchemaError` naming ``source`` (a file, or the record name), the
    field at fault and ``fix`` (what to do about it)."""
    where_from = source or f"record {name!r}"
    if not isinstance(data, Mapping):
        raise SchemaError(f"{where_from}: field 'data' must be an object, got "
                          f"{_type_name(data)}")
    kind = kind_of(name)
    if kind is None:
        return dict(data)
    return _parse_as(kind, data, where_from, name, fix)


def _parse_as(kind: type, data: Mapping, where_from: str, name: str,
              fix: str = _RERECORD) -> Any:
    try:
        return kind.from_data(data, "data")
    except _Fail as exc:
        what = f"labkit.measure.records.{kind.__name__}"
        if name != kind.RECORD:
            what = f"a {name} record is a {what}"
        raise SchemaError(f"{where_from}: field '{exc.where}' {exc.problem} ({what}); "
                          f"{fix}") from None


K = TypeVar("K")


def view(record: Any, kind: type[K]) -> K:
    """``record`` as ``kind``: a typed record is returned as it is; a
    :class:`labkit.measure.results.Result` or a ``data`` dict is parsed (a Result's name must
    be of that kind). Raises :class:`SchemaError` when the fields do not fit, ``TypeError``
    for anything else."""
    if isinstance(record, kind):
        return record
    data = getattr(record, "data", record)
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a {kind.__name__} record (a labkit Result, its data dict, "
                        f"or a labkit.measure.records.{kind.__name__}), got "
                        f"{type(record).__name__}")
    name = getattr(record, "name", None)
    where_from = f"record {name!r}" if name else f"{kind.RECORD} record (a dict)"
    return _parse_as(kind, data, where_from, name or kind.RECORD,
                     "pass a record of that kind (e.g. load_reference of that name)")


# ----------------------------------------------------------------------------- default parameters

_POOL_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
_SERVE = {"preset": "gpt2", "trace": "synthetic_requests_poisson", "dtype": "bfloat16",
          "max_batch": 16, "max_requests": 80, "seed": 0, "clock": "real",
          "warmup_requests": 8, "window_s": 0.5, "keep_timeline": False}
_DECODE = {"batch_sizes": [1, 8, 64], "methods": ["eager", "graph"], "dtype": "bfloat16",
           "repeats": 30}

# notebook 12 measures these live on the GPU tier in about two minutes: the compiles dominate
# (~10 s each for small, ~15 s for gpt2), so each preset compiles at batch 1 only and gpt2 shows
# the full-cache column where small shows Inductor's kernels in labkit's capture
_ROOFLINE = {"batch_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256], "compile_sizes": [1],
             "context": 128, "max_seq": 256, "dtype": "bfloat16", "repeats": 20}
_MULTISTEP = {"batch_sizes": [1, 8, 64], "n_steps": 8, "max_seq": 256, "dtype": "bfloat16",
              "repeats": 20}

#: record name -> (measurement function, parameters as recorded in the file's ``params``);
#: the function is a name in :mod:`labkit.measure.bench` (``run_all_pitfalls``: in
#: :mod:`labkit.measure.pitfalls`; ``measure_paged``: in :mod:`labkit.measure.paged`;
#: ``measure_pool_overwrite``: in :mod:`labkit.measure.pool_overwrite`;
#: ``measure_fused``: in :mod:`labkit.measure.fused_bench`;
#: ``measure_roofline``, ``measure_multistep``: in :mod:`labkit.measure.roofline`;
#: ``measure_serving``: :mod:`labkit.measure.serve`; ``measure_load_curve``:
#: :mod:`labkit.measure.serve_load`).
#: ``preset`` is passed as the function's ``preset_name``.
DEFAULTS: dict[str, tuple[str, dict]] = {
    "launch_overhead": ("measure_launch_overhead",
                        {"numels": [1, 2**10, 2**14, 2**16, 2**18, 2**20, 2**22, 2**24],
                         "n_kernels": 200, "repeats": 50}),
    "decode_small": ("measure_decode", {"preset": "small", **_DECODE}),
    "decode_gpt2": ("measure_decode", {"preset": "gpt2", **_DECODE}),
    "timeline_small": ("measure_timeline", {"preset": "small", "batch_size": 1, "steps": 3}),
    "pool_memory_small": ("measure_pool_memory",
                          {"preset": "small", "sizes": _POOL_SIZES, "dtype": "bfloat16"}),
    "pool_memory_gpt2": ("measure_pool_memory",
                         {"preset": "gpt2", "sizes": _POOL_SIZES, "dtype": "bfloat16"}),
    "dispatcher_small": ("measure_dispatcher",
                         {"preset": "small", "capture_sizes": [1, 2, 4, 8, 16, 32, 64, 128],
                          "batch_sizes": [1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128,
                                          129, 160],
                          "dtype": "bfloat16"}),
    "compile_small": ("measure_compile",
                      {"preset": "small", "batch_sizes": [1, 8], "dtype": "bfloat16"}),
    "pitfalls": ("run_all_pitfalls", {"include_compile": True}),
    "paged_gpt2": ("measure_paged", {"preset": "gpt2", "batch_sizes": [1, 8, 64],
                                     "max_seqs": [256, 1024], "block_size": 16,
                                     "dtype": "bfloat16", "repeats": 30}),
    "modes_small": ("measure_modes", {"preset": "small", "batch_sizes": [1, 8, 64],
                                      "dtype": "bfloat16", "repeats": 20}),
    "modes_gpt2": ("measure_modes", {"preset": "gpt2", "batch_sizes": [1, 8, 64],
                                     "dtype": "bfloat16", "repeats": 20}),
    "pool_overwrite": ("measure_pool_overwrite", {"numel": 1 << 20}),
    "fused_gpt2": ("measure_fused", {"preset": "gpt2", "batch_sizes": [1, 8, 64],
                                     "dtype": "bfloat16", "repeats": 30}),
    "roofline_small": ("measure_roofline", {"preset": "small", **_ROOFLINE, "variants": [
        "eager", "graph", "compile_reduce_overhead", "compile_manual_graph"]}),
    "roofline_gpt2": ("measure_roofline", {"preset": "gpt2", **_ROOFLINE, "variants": [
        "eager", "graph", "compile_reduce_overhead", "compile_full_cache"]}),
    "multistep_small": ("measure_multistep", {"preset": "small", **_MULTISTEP}),
    "multistep_gpt2": ("measure_multistep", {"preset": "gpt2", **_MULTISTEP}),
    # serving (notebook 13, ``labkit serve --record``): the first 80 requests (3.3-4.1 s of
    # arrivals) of the shipped traces in each step mode; the bursty trace with capture sizes
    # below max_batch (graph misses under load) without and with the circuit breaker
    "serve_eager": ("measure_serving", {**_SERVE, "mode": "eager", "repeats": 3}),
    "serve_exact": ("measure_serving", {**_SERVE, "mode": "exact", "repeats": 3}),
    "serve_full": ("measure_serving", {**_SERVE, "mode": "full",
                                       "capture_sizes": [1, 2, 4, 8, 16], "repeats": 3}),
    "serve_piecewise": ("measure_serving", {**_SERVE, "mode": "piecewise",
                                            "capture_sizes": [1, 2, 4, 8, 16], "repeats": 1}),
    "serve_capped": ("measure_serving", {**_SERVE, "trace": "synthetic_requests_bursty",
                                         "mode": "full", "capture_sizes": [1, 2, 4, 8],
                                         "repeats": 1}),
    "serve_breaker": ("measure_serving", {**_SERVE, "trace": "synthetic_requests_bursty",
                                          "mode": "full", "capture_sizes": [1, 2, 4, 8],
                                          "repeats": 1, "breaker": {"window": 32,
                                                                    "threshold": 0.5,
                                                                    "cooldown_s": 1.0}}),
    "serving_load_gpt2": ("measure_load_curve", {"preset": "gpt2", "modes": ["eager", "full"],
                                                 "rates": [20.0, 40.0, 80.0, 160.0, 320.0],
                                                 "n_requests": 40, "dtype": "bfloat16",
                                                 "max_batch": 16,
                                                 "capture_sizes": [1, 2, 4, 8, 16],
                                                 "seed": 0, "trace_seed": 7,
                                                 "warmup_requests": 8}),
}

#: the serving records ``labkit serve --record`` measures, in order
SERVE_RECORDS: tuple[str, ...] = ("serve_eager", "serve_exact", "serve_full",
                                  "serve_piecewise", "serve_capped", "serve_breaker",
                                  "serving_load_gpt2")


def default_params(name: str) -> dict:
    """The parameters record ``name`` is measured with by default (a fresh copy)."""
    if name not in DEFAULTS:
        raise KeyError(f"no default parameters for record {name!r}; known: {sorted(DEFAULTS)}")
    return copy.deepcopy(DEFAULTS[name][1])


def measure_kwargs(params: Mapping) -> dict:
    """Keyword arguments of the measurement function for recorded ``params``
    (``preset`` becomes ``preset_name``)."""
    out = copy.deepcopy(dict(params))
    if "preset" in out:
        out["preset_name"] = out.pop("preset")
    return out
