"""The Triton step's kernel table: what each kernel fuses, how often a step launches it, and
the bytes it must move -- so the floor of each kernel, and of the step, is plain to see.

Pure arithmetic on a model config (a :class:`labkit.model.GPTConfig` or a record's
``config`` dict), no Triton and no torch needed. The byte classes are those of
:func:`labkit.roofline.stepcost.step_bytes` (weights, embedding rows, keys and values read and
written, logits), so the table's compulsory bytes add up to the step's bandwidth floor;
``activations`` are the small intermediates (q, partial softmax, hidden rows, residual) that
one kernel writes and the next reads, which the floor leaves out (they stay in L2 at these
sizes; a program that re-reads its rows reads them from L2 too, and is not counted again).
"""

from __future__ import annotations

from typing import Any

from labkit.checks import as_int
from labkit.kernels.step import kernels_per_step
from labkit.roofline.stepcost import DTYPE_BYTES, config_fields

__all__ = ["KERNELS", "kernel_plan", "kernels_per_step", "plan_totals"]

#: kernel name (the ``@triton.jit`` function, as the profiler names it) -> what it fuses
KERNELS: dict[str, str] = {
    "ln_qkv_kernel": "LN1 + QKV projection + bias + k/v cache write (layer 0: + embeddings)",
    "attention_split_kernel": "attention over the cache in place, one partial softmax per "
                              "sequence split",
    "attn_out_kernel": "split combine + output projection + bias + residual add",
    "ln_linear_kernel": "LN2 + MLP up-projection + bias + GELU; once more as final "
                        "LayerNorm + LM head",
    "linear_residual_kernel": "MLP down-projection + bias + residual add",
}

def _row(kernel: str, role: str, launches: int, **bytes_: int) -> dict:
    row: dict[str, Any] = {"kernel": kernel, "role": role, "launches": launches,
           **dict.fromkeys(("weights", "embedding_rows", "kv_read", "kv_write", "logits_write",
                            "activations"), 0)}
    row.update(bytes_)
    row["compulsory"] = sum(row[k] for k in ("weights", "embedding_rows", "kv_read",
                                             "kv_write", "logits_write"))
    return row


def kernel_plan(cfg: Any, batch: int, context: int, splits: int = 1) -> list[dict]:
    """One row per kernel role of a Triton step of ``batch`` rows, each attending to
    ``context`` positions, the attention cut into ``splits`` splits: ``kernel``, ``role``,
    ``launches`` per step, and the bytes of all its launches in a step (``weights``,
    ``embedding_rows``, ``kv_read``, ``kv_write``, ``logits_write``, their sum
    ``compulsory``, and ``activations``)."""
    d = config_fields(cfg)
    b = as_int(batch, "batch", minimum=1, fix="give the decode batch size")
    c = as_int(context, "context", minimum=1, maximum=int(d["max_seq"]),
               fix="give the positions each row attends to, at most max_seq")
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
        _row("attention_split_kernel", "attention partials", L,
             kv_read=L * 2 * b * c * dm * e,
             activations=L * (b * dm * e + partials)),
        _row("attn_out_kernel", "combine + out-proj + residual", L,
             weights=L * (dm * dm + dm) * e,
             activations=L * (partials + 2 * b * dm * e)),
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
    """The plan's sums: ``launches`` (kernels per step), every byte class and ``compulsory``
    (what :func:`labkit.roofline.stepcost.step_bytes` calls ``total``)."""
    keys = ("launches", "weights", "embedding_rows", "kv_read", "kv_write", "logits_write",
            "compulsory", "activations")
    return {k: sum(int(r[k]) for r in plan) for k in keys}
