"""Record kinds that compare ways of running one decode step: the ``bench`` table, the
KV-cache layouts (``paged_<preset>``) and the capture modes (``modes_<preset>``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from labkit.measure.records.derived import ratio, speedup
from labkit.measure.records.fields import (
    _bool, _check_stored, _checks, _dict, _Fail, _int, _ints, _list, _num, _num_map, _opt,
    _opt_int_map, _req, _str, _strs, _Timed, _times,
)
from labkit.timing import Stats


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
