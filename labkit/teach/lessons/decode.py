"""Decode-step helpers for notebooks 00–03: KV cache size, tokens per second and record
tables. The live runs (eager timing, op counting, the cached-versus-full check, the copy-in
replay step) are in :mod:`labkit.measure.lesson_runs`."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from labkit.measure.records import Decode, view
from labkit.model import GPTConfig


def kv_cache_bytes(cfg: GPTConfig) -> int:
    """Bytes of the static K and V caches of a :class:`TinyGPT` built from ``cfg``:
    ``2 × n_layer × (max_batch + 1) × n_head × max_seq × head_dim × bytes per element``
    (the ``+ 1`` is the scratch slot padded rows write to)."""
    element = torch.empty((), dtype=cfg.torch_dtype).element_size()
    return (2 * cfg.n_layer * (cfg.max_batch + 1) * cfg.n_head * cfg.max_seq * cfg.head_dim
            * element)


def tokens_per_s(batch_size: int, step_us: float) -> float:
    """Decode throughput: every step produces one token per row."""
    if step_us <= 0:
        raise ValueError(f"step time must be > 0 µs, got {step_us}")
    return batch_size * 1e6 / step_us


def decode_rows(record: Any, methods: Sequence[str] | None = None) -> list[dict]:
    """One row per batch size of a ``decode_<preset>`` record: median step time (µs),
    tokens/s and speed-up over eager of each method, ready for :func:`labkit.teach.plots.table`."""
    dec = view(record, Decode)
    methods = list(methods or dec.methods)
    has_eager = "eager" in dec.methods
    cols = {m: (dec.median_us(m), dec.tokens_per_s(m),
                dec.speedup_vs_eager(m) if has_eager else [None] * len(dec.batch_sizes))
            for m in methods}
    rows = []
    for i, bs in enumerate(dec.batch_sizes):
        row: dict = {"batch": bs}
        for m in methods:
            t, tps, sp = (col[i] for col in cols[m])
            row[f"{m} µs"] = None if t is None else round(t, 1)
            row[f"{m} tok/s"] = None if tps is None else round(tps)
            if m != "eager":
                row[f"{m} speed-up"] = None if sp is None else round(sp, 2)
        rows.append(row)
    return rows
