"""Record kinds of what is left after capture (notebook 12): ``fused_<preset>``,
``roofline_<preset>`` and ``multistep_<preset>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from labkit import stepcost
from labkit.measure.records.derived import ratio, speedup
from labkit.measure.records.fields import (
    _check_stored, _checks, _dict, _Fail, _fail, _int, _ints, _num, _num_map, _nums, _opt, _req,
    _same_length, _str, _Timed, _times,
)
from labkit.timing import Stats


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
