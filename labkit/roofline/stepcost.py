"""What one decode step must move and compute: the arithmetic behind the roofline (notebook 12).

A step reads every block weight and the head once (of the embeddings only the rows it looks
up), the keys and values each row attends to, and writes this step's keys, values and logits:
those bytes over the memory bandwidth are the *bandwidth floor*; its flops over the peak
matmul rate the *compute floor*. Pure arithmetic on a config (or a record's stored config).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from labkit.checks import as_int, as_number

__all__ = ["StepBytes", "step_bytes", "step_flops", "floor_us", "compute_floor_us",
           "roofline_floor_us", "ridge_batch", "DTYPE_BYTES", "config_fields"]

#: bytes per element of the model dtypes labkit supports
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

_NEEDED = ("vocab_size", "n_layer", "d_model", "max_seq", "dtype")


def config_fields(cfg: Any) -> dict:
    """The fields of a model config (a ``GPTConfig`` or a record's dict), checked."""
    if isinstance(cfg, Mapping):
        d = dict(cfg)
    elif hasattr(cfg, "to_dict"):
        d = cfg.to_dict()
    else:
        raise TypeError(f"cfg must be a GPTConfig or a dict of its fields, got "
                        f"{type(cfg).__name__}; pass model.cfg or a record's data['config']")
    missing = [k for k in _NEEDED if k not in d]
    if missing:
        raise ValueError(f"the model config lacks {missing}; pass model.cfg or a record's "
                         "data['config'] (it holds every GPTConfig field)")
    if d["dtype"] not in DTYPE_BYTES:
        raise ValueError(f"config dtype {d['dtype']!r} is not one of {sorted(DTYPE_BYTES)}")
    for k in ("vocab_size", "n_layer", "d_model", "max_seq"):
        as_int(d[k], f"config {k}", minimum=1, fix="give the model's sizes as whole numbers")
    return d


@dataclass(frozen=True)
class StepBytes:
    """Bytes one decode step moves, by what they are."""

    weights: int         # blocks, final LayerNorm and head: once per step whatever the batch
    embedding_rows: int  # the token and position rows the batch looks up
    kv_read: int         # keys and values of every attended position, every layer
    kv_write: int        # this step's keys and values, every layer
    logits_write: int    # the logits (B, V)

    @property
    def total(self) -> int:
        """All of the above: what the bandwidth floor divides."""
        return sum(getattr(self, f.name) for f in fields(self))

    def to_dict(self) -> dict:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "total": self.total}


def check_point(d: dict, batch: int, context: int) -> tuple[int, int]:
    """``batch`` and ``context`` checked against the config fields ``d``."""
    batch = as_int(batch, "batch", minimum=1, fix="give the decode batch size (rows per step)")
    context = as_int(context, "context", minimum=1, maximum=int(d["max_seq"]),
                     fix="give the number of positions each row attends to (its position + 1), "
                         "at most the cache's max_seq")
    return batch, context


def block_params(d_model: int) -> int:
    """Parameters of one block: two LayerNorms, qkv, proj, fc, fc_out (weights and biases)."""
    d = d_model
    return 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)


def step_bytes(cfg: Any, batch: int, context: int) -> StepBytes:
    """Bytes one step of ``batch`` rows moves, each attending to ``context`` positions."""
    d = config_fields(cfg)
    batch, context = check_point(d, batch, context)
    e = DTYPE_BYTES[d["dtype"]]
    dm, layers, vocab = int(d["d_model"]), int(d["n_layer"]), int(d["vocab_size"])
    weights = (layers * block_params(dm) + 2 * dm + vocab * dm) * e
    return StepBytes(weights=weights,
                     embedding_rows=2 * batch * dm * e,
                     kv_read=layers * batch * context * 2 * dm * e,
                     kv_write=layers * batch * 2 * dm * e,
                     logits_write=batch * vocab * e)


def all_weight_bytes(cfg: Any) -> int:
    """Bytes of every parameter, both embedding tables whole (what a checkpoint holds)."""
    d = config_fields(cfg)
    dm, layers, vocab = int(d["d_model"]), int(d["n_layer"]), int(d["vocab_size"])
    params = layers * block_params(dm) + 2 * dm + 2 * vocab * dm + int(d["max_seq"]) * dm
    return params * DTYPE_BYTES[d["dtype"]]


def step_flops(cfg: Any, batch: int, context: int) -> int:
    """Flops of one decode step: two per weight per row, plus attention's q·k and p·v."""
    d = config_fields(cfg)
    batch, context = check_point(d, batch, context)
    dm, layers, vocab = int(d["d_model"]), int(d["n_layer"]), int(d["vocab_size"])
    gemm = 2 * batch * (layers * 12 * dm * dm + vocab * dm)
    attention = layers * batch * context * 4 * dm
    return gemm + attention


def floor_us(nbytes: float, bandwidth_gbps: float) -> float:
    """The bandwidth floor in µs: ``nbytes`` at ``bandwidth_gbps`` GB/s (10⁹ bytes/s)."""
    nbytes = as_number(nbytes, "nbytes", minimum=0, fix="give a byte count")
    bw = as_number(bandwidth_gbps, "bandwidth_gbps", minimum=1e-9,
                   fix="give the measured bandwidth in GB/s (e.g. 4000 for 4 TB/s)")
    return nbytes / (bw * 1e3)


def compute_floor_us(flops: float, tflops: float) -> float:
    """The compute floor in µs: ``flops`` at ``tflops`` (10¹² flop/s)."""
    flops = as_number(flops, "flops", minimum=0, fix="give a flop count")
    rate = as_number(tflops, "tflops", minimum=1e-9,
                     fix="give the measured matmul rate in TFLOP/s")
    return flops / (rate * 1e6)


def roofline_floor_us(cfg: Any, batch: int, context: int, bandwidth_gbps: float,
                      tflops: float | None = None) -> float:
    """The larger of the bandwidth floor and (when ``tflops`` is given) the compute floor."""
    mem = floor_us(step_bytes(cfg, batch, context).total, bandwidth_gbps)
    if tflops is None:
        return mem
    return max(mem, compute_floor_us(step_flops(cfg, batch, context), tflops))


def ridge_batch(cfg: Any, context: int, bandwidth_gbps: float, tflops: float,
                max_batch: int = 65536) -> int | None:
    """The smallest compute-bound batch up to ``max_batch`` (``None`` if there is none)."""
    max_batch = as_int(max_batch, "max_batch", minimum=1)
    lo, hi = 1, max_batch

    def compute_bound(b: int) -> bool:
        return (compute_floor_us(step_flops(cfg, b, context), tflops)
                >= floor_us(step_bytes(cfg, b, context).total, bandwidth_gbps))

    if not compute_bound(hi):
        return None
    while lo < hi:  # both floors grow linearly in the batch: the first crossing is unique
        mid = (lo + hi) // 2
        if compute_bound(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
