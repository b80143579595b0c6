"""The Triton step's kernel table: how often a step launches each kernel and the bytes it must
move, pure arithmetic on a model config.

The byte classes are :func:`labkit.roofline.stepcost.step_bytes`'s, so the compulsory bytes add
up to the step's bandwidth floor; ``activations`` are the small intermediates one kernel
writes and the next reads (they stay in L2 at these sizes), which the floor leaves out.
"""

from __future__ import annotations

from typing import Any

from labkit.checks import as_int
from labkit.kernels.step import kernels_per_step
from labkit.roofline.stepcost import DTYPE_BYTES, check_point, config_fields

__all__ = ["kernel_plan", "kernels_per_step", "plan_totals"]


#: the byte classes of :func:`labkit.roofline.stepcost.step_bytes`
_CLASSES = ("weights", "embedding_rows", "kv_read", "kv_write", "logits_write")


def _row(kernel: str, role: str, launches: int, **bytes_: int) -> dict:
    row: dict[str, Any] = {"kernel": kernel, "role": role, "launches": launches,
                           **dict.fromkeys(_CLASSES, 0), "activations": 0, **bytes_}
    row["compulsory"] = sum(row[k] for k in _CLASSES)
    return row


def kernel_plan(cfg: Any, batch: int, context: int, splits: int = 1) -> list[dict]:
    """One row per kernel role of a step of ``batch`` rows at ``context`` positions in
    ``splits`` attention splits: ``kernel``, ``role``, ``launches`` and the bytes of all its
    launches by class (:data:`_CLASSES`), their sum ``compulsory`` and ``activations``."""
    d = config_fields(cfg)
    b, c = check_point(d, batch, context)
    s = as_int(splits, "splits", minimum=1, fix="give the number of attention splits (1: none)")
    e = DTYPE_BYTES[d["dtype"]]
    dm, L, V = int(d["d_model"]), int(d["n_layer"]), int(d["vocab_size"])
    if "n_head" not in d:
        raise ValueError("the model config lacks n_head; pass model.cfg or a record's "
                         "data['config']")
    heads = as_int(d["n_head"], "config n_head", minimum=1)
    hd = dm // heads
    partials = b * heads * s * (hd + 2) * 4  # float32 m, l and acc per (row, head, split)
    return [
        _row("ln_qkv_kernel", "LN1 + QKV + cache write", L,
             weights=L * (2 * dm + 3 * dm * dm + 3 * dm) * e,
             embedding_rows=2 * b * dm * e, kv_write=L * 2 * b * dm * e,
             # reads x (layers 1..L-1), writes q; layer 0 also writes the residual stream
             activations=((L - 1) * b * dm + L * b * dm + b * dm) * e),
        # the partials are written and read back once (by each (row, head)'s last split)
        _row("attention_split_kernel", "attention + split combine", L,
             kv_read=L * 2 * b * c * dm * e,
             activations=L * (2 * b * dm * e + 2 * partials)),
        _row("linear_residual_kernel", "out-proj + residual", L,
             weights=L * (dm * dm + dm) * e,
             activations=L * 3 * b * dm * e),
        _row("ln_linear_kernel", "LN2 + up-proj + GELU", L,
             weights=L * (2 * dm + 4 * dm * dm + 4 * dm) * e,
             activations=L * (b * dm + 4 * b * dm) * e),
        _row("linear_residual_kernel", "down-proj + residual", L,
             weights=L * (4 * dm * dm + dm) * e,
             activations=L * (4 * b * dm + 2 * b * dm) * e),
        _row("ln_linear_kernel", "final LN + LM head", 1,
             weights=(2 * dm + V * dm) * e, logits_write=b * V * e,
             activations=b * dm * e),
    ]


def plan_totals(plan: list[dict]) -> dict:
    """The plan's sums: launches, every byte class, ``compulsory`` and ``activations``."""
    return {k: sum(int(r[k]) for r in plan)
            for k in ("launches", *_CLASSES, "compulsory", "activations")}
