"""The record kinds (except serving's, :mod:`.serving`): one frozen dataclass per kind, its
fields once, with their types and units; derived values and cross-field checks beside them.
Times in µs (every :class:`Stats`), memory in bytes (``*_bytes``), set-up work in s (``*_s``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from labkit.roofline import stepcost
from labkit.measure.records.derived import ratio, speedup
from labkit.measure.records.fields import (
    Checks, Kind, _Fail, _fail, _require, _scalar, _Timed, parse_kind,
    parse_value, src,
)
from labkit.timing import Stats

Times = dict[str, list[Stats | None]]
PAGED_LAYOUTS = ("slot_in_place", "slot_gather", "paged")
FUSED_STEPS: tuple[Literal["readable", "fused"], ...] = ("readable", "fused")
MULTISTEP_METHODS = ("host_sync", "one_step_graphs", "multistep")
#: controls of ``multistep_<preset>`` (newer records), each one difference between one-step
#: graphs and the N-step graph taken away: the one-step graph captured a second time; the
#: N-step graph with its positions held still (as the one-step graph replayed N times keeps
#: them); the N-step graph captured first into a pool of its own
MULTISTEP_CONTROLS = ("one_step_recaptured", "multistep_fixed_positions", "multistep_own_pool")
#: what ``dispatcher_overhead`` times per batch size, cheapest first: the dispatcher's graph
#: replayed bare; device inputs copied in + replay; host inputs staged + replay; ``step`` with
#: device metadata and ``check=False``; ``step`` with host metadata (checked); that + a copy of
#: the logits (``copy_outputs=True``): :func:`labkit.measure.bench.measure_dispatcher_overhead`
OVERHEAD_METHODS = ("replay", "copy_replay", "stage_replay", "step_device", "step_host",
                    "step_host_copy")


@dataclass(frozen=True, kw_only=True)
class _Run(_Timed):
    """The fields most timed kinds share."""
    preset: str = ""
    dtype: str = ""
    batch_sizes: list[int]
    times: Times
    checks: Checks = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class SweepPoint(Kind):
    """One point of the work-per-kernel sweep: time per kernel eager and replayed."""
    numel: int
    eager: Stats
    graph: Stats | None = None


@dataclass(frozen=True, kw_only=True)
class LaunchOverhead(Kind):
    """``launch_overhead``: what one kernel launch costs (``None`` without CUDA)."""
    RECORD = "launch_overhead"
    device: str
    host_per_launch: Stats | None = None
    launch_sync: Stats | None = None
    gpu_per_eager_kernel: Stats | None = None
    gpu_per_graph_node: Stats | None = None
    n_kernels: int
    sweep: list[SweepPoint]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Decode(_Run):
    """``decode_<preset>``: µs per step per method and batch size; ``kernels_per_step``
    counted as ``gpu_ops_counted`` says (:data:`GPU_OPS_SCOPE`; empty in older records)."""
    RECORD = "decode_<preset>"
    ALSO = ("compile_times_<preset>",)
    STORED = ("tokens_per_s", "speedup_vs_eager")
    preset: str = field()  # required here
    kernels_per_step: int | None = None
    config: dict = field(default_factory=dict)
    compile_s: float | None = None
    cudagraph_skips: list[str] = field(default_factory=list)
    compile_batch_sizes: list[int] | None = None
    gpu_ops_counted: str = ""


@dataclass(frozen=True, kw_only=True)
class TimelineEvent(Kind):
    """One profiler event (a CPU launch or a GPU kernel/copy/set), µs from the first."""
    lane: Literal["CPU", "GPU"]
    name: str = ""
    start_us: float
    dur_us: float


@dataclass(frozen=True, kw_only=True)
class TimelineMethod(Kind):
    """The events of a few steps of one method, and the time per step."""
    events: list[TimelineEvent]
    step_us: float | None = None


@dataclass(frozen=True)
class Timeline(Kind):
    """``timeline_<preset>``: ``methods[name]`` (``"eager"``, ``"graph"``) from a profiler."""
    RECORD = "timeline_<preset>"
    methods: dict[str, TimelineMethod]

    @classmethod
    def from_data(cls, data: Any, where: str = "data") -> Timeline:
        if not data:
            raise _Fail(where, "must hold at least one method (e.g. 'eager')")
        return cls(parse_value(dict[str, TimelineMethod], data, where))

    def __getitem__(self, method: str) -> TimelineMethod:
        if method not in self.methods:
            raise KeyError(f"the timeline record has no method {method!r}; it has "
                           f"{sorted(self.methods)}")
        return self.methods[method]


@dataclass(frozen=True, kw_only=True)
class Dispatcher(_Run):
    """``dispatcher_<preset>``: µs per step of eager, an exact graph and the padding
    dispatcher; ``counters`` as :class:`labkit.runner.StepCounters` stores them."""
    RECORD = "dispatcher_<preset>"
    METHODS = ("eager", "dispatcher")
    PER_SIZE = ("times", "padded_to")
    STORED = ("tokens_per_s",)
    capture_sizes: list[int]
    padded_to: list[int | None] | None = None
    counters: dict = field(default_factory=dict)

    def validate(self, data: Mapping, where: str) -> None:
        if self.padded_to is None:
            object.__setattr__(self, "padded_to", [None] * len(self.batch_sizes))
        super().validate(data, where)


@dataclass(frozen=True, kw_only=True)
class OverheadRun(_Run):
    """One model of ``dispatcher_overhead``: µs per step of each of :data:`OVERHEAD_METHODS`."""
    METHODS = OVERHEAD_METHODS
    preset: str = field()  # required here


@dataclass(frozen=True, kw_only=True)
class DispatcherOverhead(Kind):
    """``dispatcher_overhead``: the dispatcher's time over a bare replay of its own graph, by
    part, per model: ``repeats`` interleaved samples of ``inner`` steps, nothing padded."""
    RECORD = "dispatcher_overhead"
    dtype: str = ""
    repeats: int
    inner: int
    runs: list[OverheadRun]

    def validate(self, data: Mapping, where: str) -> None:
        if not self.runs:
            raise _Fail(f"{where}.runs", "must hold at least one model")


@dataclass(frozen=True, kw_only=True)
class Compile(_Run):
    """``compile_<preset>``: manual graphs vs ``torch.compile(mode="reduce-overhead")``
    (``None``/``-1``: not measured)."""
    RECORD = "compile_<preset>"
    compile_s: float
    capture_s: float
    graph_pool_bytes: int | None = src("memory", "graph_pool_bytes", default=None)
    compile_pool_bytes: int | None = src("memory", "compile_pool_bytes", default=None)
    kernels_per_step: dict[str, int | None] = field(default_factory=dict)
    cudagraph_skips: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class PoolLayout(Kind):
    """One way of holding the graphs; per batch size a private pool's bytes or a shared
    pool's size after each capture (``growth_bytes``)."""
    total_bytes: int
    per_size_bytes: dict[int, int] = field(default_factory=dict)
    growth_bytes: dict[int, int] = field(default_factory=dict)
    capture_s: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PoolAtMaxSeq(Kind):
    """One shared pool captured largest-first at one ``max_seq``: its bytes and the KV
    cache's (``in_place``: the cache read in place, else the old whole-row gather)."""
    max_seq: int
    shared_largest_first_bytes: int
    kv_cache_bytes: int | None = None
    in_place: bool = True


def _by_max_seq(v: Any, where: str) -> dict[int, PoolAtMaxSeq]:
    return {m: parse_kind(PoolAtMaxSeq, x, f"{where}.{m}", max_seq=m)
            for m, x in parse_value(dict[int, dict], v, where).items()}


@dataclass(frozen=True, kw_only=True)
class PoolMemory(Kind):
    """``pool_memory_<preset>``: graph-pool bytes for ``sizes`` of each of :data:`LAYOUTS`;
    optionally the logits (outside the pool), the shared pool per ``max_seq`` and the old
    whole-row gather path."""
    RECORD = "pool_memory_<preset>"
    LAYOUTS = ("private", "shared_largest_first", "shared_smallest_first")
    preset: str = ""
    private: PoolLayout
    shared_largest_first: PoolLayout
    shared_smallest_first: PoolLayout
    sizes: list[int]
    #: default: the largest of ``private.per_size_bytes``
    largest_private_bytes: int | None = None
    dtype: str = ""
    max_seq: int | None = None
    logits_bytes: int | None = None
    by_max_seq: dict[int, PoolAtMaxSeq] = src(parse=_by_max_seq, default_factory=dict)
    gather: PoolAtMaxSeq | None = src(
        parse=lambda v, w: parse_kind(PoolAtMaxSeq, v, w, in_place=False), default=None)

    def validate(self, data: Mapping, where: str) -> None:
        if self.largest_private_bytes is None:
            object.__setattr__(self, "largest_private_bytes",
                               max(self.private.per_size_bytes.values(), default=0))

    def layout(self, name: str) -> PoolLayout:
        """``private``, ``shared_largest_first`` or ``shared_smallest_first``."""
        if name not in self.LAYOUTS:
            raise KeyError(f"no pool layout {name!r}; layouts: {self.LAYOUTS}")
        return getattr(self, name)

    def total_bytes(self) -> dict[str, int]:
        """Total bytes of each layout, in :data:`LAYOUTS` order."""
        return {n: self.layout(n).total_bytes for n in self.LAYOUTS}


@dataclass(frozen=True, kw_only=True)
class OverwriteFix(Kind):
    """One fix of ``pool_overwrite``: B's output after A's replay (``ok``: B's value kept)."""
    values_after_replay_a: list[float]
    ok: bool
    a_temporary_ptr: int | None = None
    b_output_ptr: int | None = None
    same_block: bool | None = None


def _fix(key: str) -> Any:
    """A parser of an :class:`OverwriteFix` whose values sit under ``key``."""
    def run(v: Any, where: str) -> OverwriteFix:
        d = _scalar(dict, v, where)
        _require(d, [key], where)
        return parse_kind(OverwriteFix, d, where, values_after_replay_a=parse_value(
            list[float], d[key], f"{where}.{key}"))
    return run


@dataclass(frozen=True, kw_only=True)
class PoolOverwrite(Kind):
    """``pool_overwrite``: graphs A then B in one shared pool, A's freed temporary given to B's
    output (``same_block``): B's output after each replay, and two fixes."""
    RECORD = "pool_overwrite"
    device: str = ""
    torch: str = ""
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
    fix_clone: OverwriteFix = src(parse=_fix("copy_after_replay_a"))
    fix_keep_a_temporary: OverwriteFix = src(parse=_fix("b_after_replay_a"))
    fixed: bool


@dataclass(frozen=True, kw_only=True)
class Pitfall(Kind):
    """One capture pitfall reproduced (``error``: the first error seen)."""
    name: str
    rule: str = ""
    what: str = ""
    error: str | None = None
    fix: str = ""
    fixed_ok: bool
    details: dict = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Pitfalls(Kind):
    """``pitfalls``: the capture pitfalls, the address demonstration and the torch.compile
    pitfall (``None``: not run)."""
    RECORD = "pitfalls"
    device: str = ""
    torch: str = ""
    pitfalls: list[Pitfall]
    address_demo: dict = field(default_factory=dict)
    compiled: Pitfall | None = None


@dataclass(frozen=True, kw_only=True)
class BenchRow(Kind):
    """One row of the bench table (:func:`bench_row`)."""
    model: str
    batch: int
    eager_us: float | None = None
    graph_us: float | None = None
    dispatcher_us: float | None = None
    compile_us: float | None = None
    graph_speedup: float | None = None
    dispatcher_over_graph: float | None = None
    dispatcher_over_compile: float | None = None

    def get(self, key: str) -> Any:
        """A column by name (``None`` when absent), as the table writers ask for it."""
        return getattr(self, key, None)


def bench_row(model: str, batch: int, medians_us: Mapping[str, float]) -> dict:
    """The bench table's row for one model and batch size: ``<method>_us`` and the ratios
    ``graph_speedup``, ``dispatcher_over_graph``, ``dispatcher_over_compile`` (each only when
    both of its timings exist)."""
    t = dict(medians_us)
    row: dict = {"model": model, "batch": batch, **{f"{m}_us": t[m] for m in t}}
    for key, a, b, fn in (("graph_speedup", "eager", "graph", speedup),
                          ("dispatcher_over_graph", "dispatcher", "graph", ratio),
                          ("dispatcher_over_compile", "dispatcher", "compile", ratio)):
        if a in t and b in t:
            row[key] = fn(t[a], t[b])
    return row


@dataclass(frozen=True, kw_only=True)
class BenchTarget(Kind):
    """A benchmark target and whether it passed."""
    target: str
    value: float
    passed: bool = src("pass")


@dataclass(frozen=True, kw_only=True)
class BenchPool(Kind):
    """Graph-pool memory of one layout, in MiB."""
    layout: str
    total_MiB: float


@dataclass(frozen=True, kw_only=True)
class Bench(Kind):
    """``bench``: the table of ``labkit bench``, its targets, pool memory and checks."""
    RECORD = "bench"
    rows: list[BenchRow]
    targets: list[BenchTarget]
    pool: list[BenchPool]
    checks: Checks = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)

    def pool_mib(self) -> dict[str, float]:
        return {p.layout: p.total_MiB for p in self.pool}


@dataclass(frozen=True, kw_only=True)
class PagedRun(_Timed):
    """One ``max_seq`` of ``paged_<preset>``: replay µs and KV-cache bytes per layout."""
    METHODS = PAGED_LAYOUTS
    SIZES_AT = "data.batch_sizes"
    max_seq: int
    batch_sizes: list[int]
    times: Times
    cache_bytes: dict[str, int]


@dataclass(frozen=True, kw_only=True)
class Paged(Kind):
    """``paged_<preset>``: graph replay of each of :data:`PAGED_LAYOUTS` per ``max_seq``."""
    RECORD = "paged_<preset>"
    preset: str = ""
    dtype: str = ""
    block_size: int
    batch_sizes: list[int]
    runs: list[PagedRun] = src(parse=lambda v, w: parse_value(list[dict], v, w))
    checks: Checks = field(default_factory=dict)

    def validate(self, data: Mapping, where: str) -> None:
        if not self.runs:  # the runs take the record's batch sizes
            raise _Fail(f"{where}.runs", "must hold at least one max_seq")
        object.__setattr__(self, "runs", [
            parse_kind(PagedRun, r, f"{where}.runs[{i}]", batch_sizes=list(self.batch_sizes))
            for i, r in enumerate(self.runs)])

    @property
    def max_seqs(self) -> list[int]:
        return [r.max_seq for r in self.runs]


@dataclass(frozen=True, kw_only=True)
class Modes(_Run):
    """``modes_<preset>``: µs per step per capture mode (``eager`` = NONE, ``piecewise``,
    ``full``, ``attention_only``)."""
    RECORD = "modes_<preset>"
    METHODS = ("eager",)
    BY_METHOD = ("graphs_per_step", "pool_bytes")
    STORED = ("tokens_per_s",)
    n_layer: int
    graphs_per_step: dict[str, int | None]
    pool_bytes: dict[str, int | None]
    capture_s: dict[str, float] = field(default_factory=dict)
    gpu_ops_per_step: int | None = None
    graph_launches_counted: dict[str, int | None] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class _Steps(_Run):
    """A comparison of decode steps (``STEPS``), each replayed in a FULL graph; GPU operations
    by kernel at ``count_batch`` (``ops``) and in total per batch size (``ops_total``)."""
    STEPS: ClassVar[tuple[str, ...]] = FUSED_STEPS
    PER_SIZE: ClassVar[tuple[str, ...]] = ("times", "ops_total", "kernel_us")
    STORED = ("tokens_per_s",)
    preset: str = field()  # required here
    count_batch: int
    ops: dict[str, dict[str, int]]
    ops_total: dict[str, list[int]]
    agreement: dict[str, float]
    op_us: dict[str, dict[str, float]] = field(default_factory=dict)
    kernel_us: dict[str, list[float]] = field(default_factory=dict)

    def validate(self, data: Mapping, where: str) -> None:
        for key in ("times", "ops", "ops_total"):
            _require(getattr(self, key), self.STEPS, f"{where}.{key}")
        super().validate(data, where)
        for step, counts in self.ops.items():
            for k, n in counts.items():
                if n < 0:
                    raise _fail(f"{where}.ops.{step}.{k}", "a count >= 0", n)
        if self.count_batch in self.batch_sizes:
            i = self.batch_sizes.index(self.count_batch)
            for step in self.STEPS:
                if sum(self.ops[step].values()) != self.ops_total[step][i]:
                    raise _Fail(f"{where}.ops_total.{step}[{i}]",
                                f"is {self.ops_total[step][i]} but {where}.ops.{step} sums to "
                                f"{sum(self.ops[step].values())}")

    def ops_at(self, step: str, batch: int) -> int | None:
        """GPU operations of one ``step`` at ``batch`` (``None``: not counted)."""
        if step not in self.ops_total or batch not in self.batch_sizes:
            return None
        return self.ops_total[step][self.batch_sizes.index(batch)]


@dataclass(frozen=True, kw_only=True)
class Fused(_Steps):
    """``fused_<preset>``: the readable and the fused step (:mod:`labkit.fused`)."""
    RECORD = "fused_<preset>"
    n_layer: int

    def ops_per_layer(self, step: str, batch: int | None = None) -> float | None:
        """GPU operations per layer of ``step`` at ``batch`` (default ``count_batch``)."""
        n = self.ops_at(step, self.count_batch if batch is None else batch)
        return None if n is None else n / self.n_layer


@dataclass(frozen=True, kw_only=True)
class RooflineVariant(Kind):
    """One step variant of ``roofline_<preset>`` (``None``: not measured)."""
    sizes: list[int] = field(default_factory=list)
    setup_s: float | None = None
    pool_bytes: int | None = None
    gpu_ops: int | None = None
    graph_launches: int | None = None
    profiled_batch: int | None = None
    cudagraph_skips: int | None = None
    error: str | None = None
    max_batch: int | None = None
    cache_bytes: int | None = None

    @property
    def graphs_used(self) -> bool | None:
        """True when a step launched at least one CUDA graph and none was skipped."""
        if self.graph_launches is None:
            return None
        return self.graph_launches >= 1 and not self.cudagraph_skips


@dataclass(frozen=True, kw_only=True)
class Roofline(_Run):
    """``roofline_<preset>``: µs per step per variant, every row attending to ``context``
    positions; copy bandwidth (GB/s, read + write), bf16 matmul rate and the floors
    (:mod:`labkit.roofline.stepcost`)."""
    RECORD = "roofline_<preset>"
    BY_METHOD = ("variants",)
    config: dict
    context: int
    compile_sizes: list[int] = field(default_factory=list)
    bandwidth_gbps: float = src("bandwidth", "gbps")
    matmul_tflops: float = src("matmul", "tflops")
    variants: dict[str, RooflineVariant]

    def validate(self, data: Mapping, where: str) -> None:
        try:
            stepcost.config_fields(self.config)
        except (TypeError, ValueError) as exc:
            raise _Fail(f"{where}.config", f"is not a model config ({exc})") from None
        super().validate(data, where)
        if self.bandwidth_gbps <= 0 or self.matmul_tflops <= 0:
            raise _Fail(f"{where}.bandwidth", "and matmul rates must be positive")
        if not 1 <= self.context <= int(self.config["max_seq"]):
            raise _Fail(f"{where}.context", f"must lie in [1, max_seq={self.config['max_seq']}]")

    def step_bytes(self) -> list[int]:
        """Bytes one step moves at each batch size (:func:`labkit.roofline.stepcost.step_bytes`)."""
        return [stepcost.step_bytes(self.config, b, self.context).total
                for b in self.batch_sizes]

    def roofline_us(self) -> list[float]:
        """The larger of the bandwidth and the compute floor at each batch size."""
        return [stepcost.roofline_floor_us(self.config, b, self.context, self.bandwidth_gbps,
                                           self.matmul_tflops) for b in self.batch_sizes]

    def over_floor(self, method: str) -> list[float | None]:
        """Step time of ``method`` over the roofline floor per batch size (:func:`ratio`)."""
        return [ratio(t, f) for t, f in zip(self.median_us(method), self.roofline_us())]


@dataclass(frozen=True, kw_only=True)
class Multistep(_Run):
    """``multistep_<preset>``: µs per step of ``n_steps`` steps in each of
    :data:`MULTISTEP_METHODS`; the conditional nodes this PyTorch offers (free-form)."""
    RECORD = "multistep_<preset>"
    METHODS = MULTISTEP_METHODS
    STORED = ("tokens_per_s",)
    n_steps: int
    conditional: dict = field(default_factory=dict)
    #: per graph way, per size: GPU µs per step in kernels (``kernel_us``), first kernel to
    #: last (``span_us``), kernels per step, and µs per kernel name (newer records)
    gpu_split: dict = field(default_factory=dict)

    def validate(self, data: Mapping, where: str) -> None:
        super().validate(data, where)
        if self.n_steps < 1:
            raise _Fail(f"{where}.n_steps", "must be >= 1")

    def gain(self, method: str = "multistep", over: str = "one_step_graphs"
             ) -> list[float | None]:
        """How many times faster per token ``method`` is than ``over`` (:func:`speedup`)."""
        return [speedup(o, m) for o, m in zip(self.median_us(over), self.median_us(method))]


#: ``{method: [[median per rank] per size]}``
RankMedians = dict[str, list[list[float | None]]]


@dataclass(frozen=True, kw_only=True)
class _TP(_Timed):
    """A tensor-parallel record over ``world_size`` ranks."""
    world_size: int
    dtype: str = ""
    times: Times
    checks: Checks = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    rank_medians: RankMedians = field(default_factory=dict)
    shutdown: dict = field(default_factory=dict)
    device: str = ""


@dataclass(frozen=True, kw_only=True)
class TPAllReduce(_TP):
    """``tp_allreduce``: µs per all-reduce per message size and method: ``pg_eager``/``pg_graph``
    (``dist.all_reduce`` over ``backend``, ``graph_ops`` per graph), ``one_shot_*``/
    ``two_shot_*`` (``torch.ops.symm_mem``)."""
    RECORD = "tp_allreduce"
    SIZES = "sizes_bytes"
    backend: str
    sizes_bytes: list[int]
    graph_ops: int | None = None


@dataclass(frozen=True, kw_only=True)
class TPDecode(_TP):
    """``tp_decode_<preset>``: µs per step on one GPU (``tp1_*``) and over ``world_size``
    (``tpN_*``: eager; FULL graph with NCCL inside; ``_noop``: no all-reduce, the compute
    alone; ``_graph_symm_mem``: one-shot symmetric memory in the graph)."""
    RECORD = "tp_decode_<preset>"
    preset: str
    batch_sizes: list[int]
    config: dict = field(default_factory=dict)

    def tp(self, suffix: str) -> str:
        """The method name ``tp<world_size>_<suffix>`` (e.g. ``tp('graph')``)."""
        return f"tp{self.world_size}_{suffix}"

    def comm_us(self, batch: int, graph: bool = True) -> float | None:
        """Communication µs per step at ``batch``: the step minus the same step with no-op
        all-reduces (``None`` when either was not measured)."""
        mode = "graph" if graph else "eager"
        full, noop = self.at(self.tp(mode), batch), self.at(self.tp(f"{mode}_noop"), batch)
        return None if full is None or noop is None else full - noop


@dataclass(frozen=True, kw_only=True)
class Triton(_Steps):
    """``triton_<preset>``: the readable, fused and Triton steps (:mod:`labkit.kernels.step`);
    the bytes a step must move and its floor at the measured copy bandwidth."""
    RECORD = "triton_<preset>"
    STEPS = ("readable", "fused", "triton")
    PER_SIZE = ("times", "ops_total", "kernel_us", "step_bytes", "floor_us", "graph_ops")
    context: int
    steps: list[str]
    interleaved: bool = False
    #: per batch size, the bytes a step must move by part (weights, kv_read, ..., total)
    step_bytes: list[dict[str, int]]
    floor_us: list[float]
    graph_ops: dict[str, list[int]]
    triton_kernels_per_step: int

    def over_floor(self, step: str) -> list[float | None]:
        """Replay median over the floor at each batch size."""
        return [None if t is None else t.median / f
                for t, f in zip(self.times[step], self.floor_us)]


@dataclass(frozen=True, kw_only=True)
class Mixed(Kind):
    """``mixed_<preset>``: a uniform decode step through today's FULL dispatcher and the
    token-flattened runner, each beside its own graph's bare replay (``uniform``, per batch
    size); mixed batches (``shapes``: decode rows, prefill chunk) PIECEWISE against eager."""
    RECORD = "mixed_<preset>"
    preset: str
    dtype: str
    repeats: int
    inner: int
    batch_sizes: list[int]
    uniform: dict[str, list[Stats]]
    shapes: list[list[int]]
    mixed_tokens: list[int]
    mixed_modes: list[str]
    mixed: dict[str, list[Stats]]
    token_sizes: list[int]
    checks: Checks = field(default_factory=dict)

    def ratio(self, table: str, a: str, b: str) -> list[float]:
        """Median of ``a`` over median of ``b`` in ``table`` (``uniform`` or ``mixed``)."""
        times = getattr(self, table)
        return [x.median / y.median for x, y in zip(times[a], times[b])]


@dataclass(frozen=True, kw_only=True)
class SpecVerify(Kind):
    """``spec_verify_<preset>``: the FULL-graph step of R requests of ``1 + k`` tokens each,
    per k (``k0``: the decode step), per R."""
    RECORD = "spec_verify_<preset>"
    preset: str
    dtype: str
    repeats: int
    inner: int
    ks: list[int]
    batch_sizes: list[int]
    times: dict[str, list[Stats]]


@dataclass(frozen=True, kw_only=True)
class Spec(Kind):
    """``spec_<name>``: speculative decoding with n-gram drafts on the corpus against plain
    greedy FULL-graph decoding: per arm the seconds of each interleaved round, and the
    drafter's stats."""
    RECORD = "spec_<name>"
    ks: list[int]
    n_prompts: int
    prompt_len: int
    new_tokens: int
    repeats: int
    seconds: dict[str, list[float]]
    stats: dict[str, dict[str, float]]
    checks: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Chunked(Kind):
    """``chunked_<preset>``: a trace served per step mode without chunked prefill and with
    each token budget, interleaved; per arm TTFT/TPOT/ITL p50/p90/p99 (ms) of every repeat
    (:func:`labkit.measure.serve.measure_chunked`)."""
    RECORD = "chunked_<preset>"
    trace: str
    clock: str
    device: str
    modes: list[str]
    budgets: list[int]
    repeats: int
    arms: dict[str, dict[str, Any]]

    def percentile(self, arm: str, metric: str, p: str = "p99") -> list[float]:
        """``metric`` (``ttft``, ``tpot``, ``itl``) percentile ``p`` of ``arm``, per repeat."""
        return [row[f"{metric}_ms"][p] for row in self.arms[arm]["latency"]]


@dataclass(frozen=True, kw_only=True)
class BudgetWay(Kind):
    """One way of counting graph memory before the KV cache is sized (``measured``, vLLM's
    ``estimate``, ``ignored``): the bytes it reserves, the KV bytes, blocks and requests left,
    and the bytes free once the real graphs are captured (< 0: out of memory; ``None``: the
    real graphs are unknown) (:func:`labkit.sizes.engines.kv_plan`)."""
    reserved_bytes: int
    kv_bytes: int
    kv_blocks: int
    requests: int
    headroom_left_bytes: int | None = None


@dataclass(frozen=True, kw_only=True)
class BudgetPoint(Kind):
    """One capture list at one ``max_seq`` and pool mode of ``memory_budget_<preset>``: every
    size captured (pool bytes from the allocator, ``device_bytes`` the free-memory drop, seconds
    per size; ``oom`` the capture's out-of-memory error), vLLM's two samples (captured in the
    same pool mode; ``second_device_bytes``: the second as free device memory reads it) and
    its estimate, and the KV cache each way leaves (``ways``)."""
    WAYS: ClassVar[tuple[str, ...]] = ("measured", "estimate", "ignored")
    size_list: str
    max_seq: int
    pool: Literal["shared", "private"]
    context: int
    sizes: list[int]
    measured_bytes: int | None = None
    device_bytes: int | None = None
    oom: str | None = None
    capture_s: dict[int, float] = field(default_factory=dict)
    warmup_s: dict[int, float] = field(default_factory=dict)
    startup_s: float | None = None
    sample_sizes: list[int]
    sample_bytes: list[int] = field(default_factory=list)
    second_device_bytes: int | None = None
    sample_oom: str | None = None
    estimate_bytes: int | None = None
    ways: dict[str, BudgetWay]

    def validate(self, data: Mapping, where: str) -> None:
        want = [w for w, b in zip(self.WAYS, (self.measured_bytes, self.estimate_bytes, 0))
                if b is not None]
        if sorted(self.ways) != sorted(want):
            raise _Fail(f"{where}.ways", f"must hold {want} (a way per known graph size), got "
                                         f"{sorted(self.ways)}")

    def lost(self, way: str, what: str = "kv_blocks") -> int | None:
        """``kv_blocks`` (or ``requests``) the measured way has over ``way`` (< 0: ``way``
        promises more than fits); ``None`` when either is unknown."""
        if "measured" not in self.ways or way not in self.ways:
            return None
        return int(getattr(self.ways["measured"], what) - getattr(self.ways[way], what))

    def estimate_error(self) -> float | None:
        """vLLM's estimate over the measured graph memory (``None``: either unknown)."""
        if not self.measured_bytes or self.estimate_bytes is None:
            return None
        return self.estimate_bytes / self.measured_bytes

    def lazy_first_request_s(self) -> dict[int, float]:
        """Per size, what its first request waits under lazy capture: warm-up + capture."""
        return {b: self.warmup_s.get(b, 0.0) + s for b, s in self.capture_s.items()}


@dataclass(frozen=True, kw_only=True)
class MemoryBudget(Kind):
    """``memory_budget_<preset>``: the paged KV cache sized as an engine sizes it, from the
    GPU's total (``total_bytes``), ``utilization``, per ``max_seq`` the weights and the peak of
    one eager dummy step at ``activation_batch`` rows, and each way of counting graph memory,
    per capture list, ``max_seq`` and pool mode (``points``); ``graph_update``: what torch
    offers to update a graph instead of capturing it again
    (:func:`labkit.measure.memory_budget.measure_memory_budget`)."""
    RECORD = "memory_budget_<preset>"
    preset: str
    dtype: str
    device: str = ""
    total_bytes: int
    utilization: float
    block_size: int
    kv_block_bytes: int
    weights_bytes: dict[int, int]
    activation_batch: int
    activation_bytes: dict[int, int]
    size_lists: dict[str, list[int]]
    max_seqs: list[int]
    pools: list[str]
    points: list[BudgetPoint]
    graph_update: dict = field(default_factory=dict)

    def point(self, size_list: str, max_seq: int, pool: str) -> BudgetPoint:
        """The point of capture list ``size_list`` at ``max_seq`` in ``pool`` mode."""
        for p in self.points:
            if (p.size_list, p.max_seq, p.pool) == (size_list, max_seq, pool):
                return p
        raise KeyError(f"no point ({size_list!r}, {max_seq}, {pool!r}); lists "
                       f"{list(self.size_lists)}, max_seq {self.max_seqs}, pools {self.pools}")


@dataclass(frozen=True, kw_only=True)
class NumericsDtype(Kind):
    """One dtype of ``numerics_<preset>``: per padded size, each step's largest |Δlogit|
    against size 1 and whether its argmax flipped (every size fed size 1's tokens), size 1's
    top-2 margin per step, graph against eager and fused against readable at the same size,
    reduced-precision reductions off (bf16), the replay per size."""
    margins: list[float]
    step_max_abs_diff: dict[int, list[float]]
    flipped: dict[int, list[bool]]
    #: the first step where free-running greedy tokens leave size 1's (None: never)
    first_divergence: dict[int, int | None]
    graph_equals_eager: dict[int, bool] = field(default_factory=dict)
    graph_eager_max_abs_diff: dict[int, float] = field(default_factory=dict)
    fixed_size_invariant: bool
    replay: dict[int, Stats]
    fused_max_abs_diff: dict[int, float]
    fused_flips: dict[int, int]
    reduced_precision_off: dict[int, list[float]] = field(default_factory=dict)

    def max_abs_diff(self, size: int) -> float:
        """The largest |Δlogit| against size 1 over all steps."""
        return max(self.step_max_abs_diff[size])

    def flips(self, size: int) -> int:
        """Steps whose argmax differs from size 1's."""
        return sum(self.flipped[size])

    def validate(self, data: Mapping, where: str) -> None:
        n = len(self.margins)
        for name in ("step_max_abs_diff", "flipped", "reduced_precision_off"):
            for b, xs in getattr(self, name).items():
                if len(xs) != n:
                    raise _Fail(f"{where}.{name}.{b}", f"has {len(xs)} steps, margins {n}")


@dataclass(frozen=True, kw_only=True)
class Recaptures(Kind):
    """The same step (batch 1) captured ``captures`` times in one process: per graph its
    interleaved replay, kernels (name -> count, GPU µs per replay), GEMM and attention
    operands at capture, stream and cuBLAS handle, pool; the workspace settings."""
    preset: str
    dtype: str
    captures: int
    repeats: int
    inner: int
    outputs_equal: bool
    replay: list[Stats]
    kernels: list[dict[str, dict[str, float]]]
    operands: list[list[dict[str, Any]]]
    streams: list[int]
    blas_handles: list[int]
    pools: list[dict[str, Any]]
    workspace: dict[str, Any]

    def same_kernels(self) -> bool:
        """Every graph holds the same kernels, as many times each."""
        return all({k: v["count"] for k, v in g.items()}
                   == {k: v["count"] for k, v in self.kernels[0].items()} for g in self.kernels)

    def same_operands(self) -> bool:
        """Every capture's GEMM and attention operands had the same shapes and alignments."""
        key = [[(c["op"], c["shapes"], c["alignment"]) for c in calls]
               for calls in self.operands]
        return all(k == key[0] for k in key)


@dataclass(frozen=True, kw_only=True)
class Numerics(Kind):
    """``numerics_<preset>``: one request padded to each size (``other_rows``), per dtype
    (:class:`NumericsDtype`), and the same step captured several times (``recaptures``,
    CUDA only): :mod:`labkit.measure.numerics`."""
    RECORD = "numerics_<preset>"
    preset: str
    device: str
    steps: int
    prompt_len: int
    seed: int
    sizes: list[int]
    other_rows: str
    graphs: bool
    fixed_size: int
    repeats: int
    inner: int
    dtypes: dict[str, NumericsDtype]
    recaptures: Recaptures | None = None


@dataclass(frozen=True, kw_only=True)
class Lazy(Kind):
    """``lazy_<preset>``: a trace served with graphs captured at start-up and with each size
    captured on first use (:func:`labkit.measure.memory_budget.measure_lazy`), one run each:
    per run ``built_s``, ``lazy_capture_s`` (size -> s), the median and longest steps (s),
    TTFT and ITL percentiles (ms)."""
    RECORD = "lazy_<preset>"
    preset: str
    dtype: str
    trace: str
    sizes: list[int]
    requests: int
    runs: dict[str, dict[str, Any]]


# ------------------------------------------------------------------ notebooks 17 and 18

#: the Triton step's schedules ``past_launch_<preset>`` gates and times
PAST_LAUNCH_STEPS = ("triton", "triton_pdl", "triton_persistent")


@dataclass(frozen=True, kw_only=True)
class PastLaunch(_Timed):
    """``past_launch_<preset>``: the Triton step's three schedules against the floor
    (:func:`labkit.measure.past_launch.measure_past_launch`). ``fidelity``: the gate per step
    (agreement, KL, float32 tokens equal, passes); ``timed``: the steps that passed and were
    timed (the persistent step also as ``triton_persistent@<k>`` programs per SM);
    ``kernels`` / ``kernel_us``: the profiler's count and summed GPU µs per step."""
    RECORD = "past_launch_<preset>"
    PER_SIZE = ("times", "floor_us", "kernels", "kernel_us")
    BY_METHOD = ("kernels", "kernel_us")
    preset: str
    dtype: str
    context: int
    batch_sizes: list[int]
    steps: list[str]
    timed: list[str]
    interleaved: bool = False
    repeats: int
    inner: int
    times: Times
    floor_us: list[float]
    sm_count: int
    programs_per_sm: list[int]
    cooperative: bool
    cooperative_error: str | None = None
    refused: dict[str, str] = field(default_factory=dict)
    kernels: dict[str, list[int]]
    kernel_us: dict[str, list[float]]
    fidelity: dict[str, dict]
    checks: Checks = field(default_factory=dict)
    device: str = ""

    def validate(self, data: Mapping, where: str) -> None:
        super().validate(data, where)
        unknown = sorted(set(self.timed) - set(self.steps))
        if unknown:
            raise _Fail(f"{where}.timed", f"names {unknown}, which {where}.steps lacks")
        failed = [s for s in self.timed if not self.fidelity.get(s, {}).get("passes")]
        if failed:
            raise _Fail(f"{where}.timed", f"holds {failed}, which did not pass the fidelity gate")
        _require(self.times, self.timed, f"{where}.times")


#: the steps ``persistent_stages_<preset>`` replays in turn
PERSISTENT_STAGE_STEPS = ("triton", "triton_persistent", "triton_persistent_stamped")


@dataclass(frozen=True, kw_only=True)
class PersistentStages(_Timed):
    """``persistent_stages_<preset>``: the persistent step stage by stage, from the clock
    stamps of its programs (:func:`labkit.measure.past_launch.measure_persistent_stages`).
    ``times``: the plain kernels, the persistent step and the stamped one replayed in turn;
    per batch size ``stages`` (per stage: ``persistent_us``, the span on the critical path,
    ``late_us``, the last arrival at its barrier minus the median one, and ``kernel_us``,
    the plain step's kernel for the same work), ``gaps_us`` between layer launches,
    ``ramp_us`` (last program's start minus the first's), the plain step's LM head and
    summed kernels (µs); ``clock_ns``: the smallest step between two stamps seen."""
    RECORD = "persistent_stages_<preset>"
    PER_SIZE = ("times", "stages", "gaps_us", "ramp_us", "head_us", "plain_kernels_us")
    preset: str
    dtype: str
    context: int
    batch_sizes: list[int]
    steps: list[str]
    interleaved: bool = False
    repeats: int
    inner: int
    times: Times
    stamped_steps: int
    stages: list[list[dict]]
    gaps_us: list[float]
    ramp_us: list[float]
    head_us: list[float]
    plain_kernels_us: list[float]
    clock_ns: int | None = None
    programs: int
    cooperative: bool
    cooperative_error: str | None = None
    checks: Checks = field(default_factory=dict)
    device: str = ""

    def validate(self, data: Mapping, where: str) -> None:
        super().validate(data, where)
        _require(self.times, PERSISTENT_STAGE_STEPS, f"{where}.times")
        for i, rows in enumerate(self.stages):
            if len(rows) != 5:
                raise _Fail(f"{where}.stages[{i}]", f"has {len(rows)} rows, not the 5 stages")


#: how ``while_decode_<preset>`` decodes until a stop token
WHILE_METHODS = ("host_loop", "multistep", "while_node")


@dataclass(frozen=True, kw_only=True)
class WhileDecode(_Timed):
    """``while_decode_<preset>``: µs per whole decode (tokens on the host) of each of
    :data:`WHILE_METHODS`, one entry per case (``batch_sizes``, ``max_steps``, ``stop``);
    the WHILE node's support, and without a route the verdict (nothing timed)
    (:func:`labkit.measure.while_decode.measure_while_decode`)."""
    RECORD = "while_decode_<preset>"
    PER_SIZE = ("times", "max_steps", "stop", "stop_tokens", "steps_run")
    preset: str
    dtype: str = ""
    max_seq: int
    batch_sizes: list[int]
    max_steps: list[int]
    stop: list[str]
    stop_tokens: list[list[int]]
    steps_run: list[int]
    times: Times
    checks: Checks = field(default_factory=dict)
    timed: bool
    route: str | None = None
    verdict: str | None = None
    support: dict = field(default_factory=dict)
    device: str = ""

    def validate(self, data: Mapping, where: str) -> None:
        super().validate(data, where)
        if self.timed != (self.route is not None) or (self.verdict is None) != self.timed:
            raise _Fail(f"{where}.timed", "must be true exactly when a route was found and no "
                        "verdict given")
        if self.timed:
            _require(self.times, WHILE_METHODS, f"{where}.times")


@dataclass(frozen=True, kw_only=True)
class Breakable(_Timed):
    """``breakable_<preset>``: the readable step as FULL, breakable graphs with each of
    ``break_counts`` breaks and the hand-cut PIECEWISE, µs per step per batch size; capture
    seconds per variant (``build_s``, ``capture_s``: Stats in s); ``gc``: capture time of a
    size list with the collector frozen or running, over synthetic heaps
    (:func:`labkit.measure.breakable.measure_breakable`)."""
    RECORD = "breakable_<preset>"
    preset: str
    dtype: str
    context: int
    batch_sizes: list[int]
    n_layer: int
    break_counts: list[int]
    variants: list[str]
    segments_per_step: dict[str, int]
    timed: list[str]
    interleaved: bool = False
    repeats: int
    inner: int
    times: Times
    build_s: dict
    capture_s: dict
    gc: dict
    checks: Checks = field(default_factory=dict)
    device: str = ""

    def validate(self, data: Mapping, where: str) -> None:
        super().validate(data, where)
        _require(self.times, self.timed, f"{where}.times")
        _require(self.segments_per_step, self.variants, f"{where}.segments_per_step")


#: what ``lora_graphs_<preset>`` times: the plain graph, the LoRA graph with no adapter
#: active, the LoRA graph with adapters active
LORA_STEPS = ("plain", "lora_idle", "lora_active")


@dataclass(frozen=True, kw_only=True)
class LoRAGraphs(_Timed):
    """``lora_graphs_<preset>``: plain and LoRA decode graphs (keyed by ``has_lora``) in one
    pool: µs per step of :data:`LORA_STEPS` per batch size, pool bytes of the plain graphs,
    the LoRA graphs and both (``pool_bytes``), the adapters' own bytes
    (:func:`labkit.measure.lora_graphs.measure_lora_graphs`)."""
    RECORD = "lora_graphs_<preset>"
    METHODS = LORA_STEPS
    preset: str
    dtype: str
    batch_sizes: list[int]
    max_loras: int
    rank: int
    targets: list[str]
    interleaved: bool = False
    repeats: int
    inner: int
    times: Times
    pool_bytes: dict[str, dict[str, int]]
    adapter_bytes: int
    checks: Checks = field(default_factory=dict)
    device: str = ""


@dataclass(frozen=True, kw_only=True)
class GraphMemory(Kind):
    """``graph_memory_<preset>``: the graph pool of each capture list and ``max_seq`` measured
    in one shared pool against vLLM's estimate and labkit's (``points``, ``repeats`` runs
    each), and the estimates sampled against a small cache (``small_cache``)
    (:func:`labkit.measure.graph_memory.measure_graph_memory`)."""
    RECORD = "graph_memory_<preset>"
    preset: str
    dtype: str
    device: str = ""
    pool: str
    order: str
    block_size: int
    repeats: int
    size_lists: dict[str, list[int]]
    max_seqs: list[int]
    points: list[dict]
    vllm_error_pct_span: list[float | None] = field(default_factory=list)
    labkit_error_pct_span: list[float | None] = field(default_factory=list)
    labkit_worst_abs_error_pct: float | None = None
    small_cache: dict = field(default_factory=dict)

    def validate(self, data: Mapping, where: str) -> None:
        for i, point in enumerate(self.points):
            runs = point.get("runs")
            if not isinstance(runs, list) or len(runs) != self.repeats:
                raise _Fail(f"{where}.points[{i}].runs", f"must hold {self.repeats} runs "
                            f"(repeats), got {runs!r:.60}")
