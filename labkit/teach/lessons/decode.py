"""Decode-step numbers for notebooks 00–03: the KV cache's size, a decode record's table."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import torch

from labkit.measure.records import Decode, view
from labkit.model import GPTConfig


def kv_cache_bytes(cfg: GPTConfig) -> int:
    """Bytes of a :class:`TinyGPT`'s static K and V caches: ``2 × n_layer × (max_batch + 1)
    × n_head × max_seq × head_dim × element`` (``+ 1``: the slot padded rows write to)."""
    element = torch.empty((), dtype=cfg.torch_dtype).element_size()
    return (2 * cfg.n_layer * (cfg.max_batch + 1) * cfg.n_head * cfg.max_seq * cfg.head_dim
            * element)


def decode_rows(record: Any, methods: Sequence[str] | None = None) -> list[dict]:
    """A rounded row per batch size: µs, tokens/s, speed-up, eager µs per GPU op."""
    dec = view(record, Decode)
    eager = dec.median_us("eager") if "eager" in dec.methods else None
    rows = []
    for i, bs in enumerate(dec.batch_sizes):
        row: dict = {"batch": bs}
        for m, t in ((m, dec.median_us(m)[i]) for m in methods or dec.methods):
            row.update({f"{m} µs": t and round(t, 1), f"{m} tok/s": t and round(bs * 1e6 / t)})
            if m != "eager" and eager is not None:
                row[f"{m} speed-up"] = t and round(eager[i] / t, 2)
        if eager is not None and dec.kernels_per_step:
            row["eager µs per GPU op"] = round(eager[i] / dec.kernels_per_step, 1)
        rows.append(row)
    return rows
