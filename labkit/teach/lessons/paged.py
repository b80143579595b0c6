"""Paged KV-cache arithmetic (notebook 11): slots vs blocks, block sizes, a record's rows."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

from labkit.checks import as_int, as_int_list
from labkit.measure.records import Paged, view

DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2}


def bytes_per_position(n_layer: int, n_head: int, head_dim: int, dtype: str = "bfloat16"
                       ) -> int:
    """KV-cache bytes of one position: a key and a value per layer and head."""
    for name, v in (("n_layer", n_layer), ("n_head", n_head), ("head_dim", head_dim)):
        as_int(v, name, minimum=1, fix="give a positive whole number")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPE_BYTES)}")
    return 2 * n_layer * n_head * head_dim * DTYPE_BYTES[dtype]


def cache_memory(lengths: Sequence[int], *, max_seq: int, block_size: int,
                 bytes_per_pos: int) -> dict:
    """KV-cache bytes of requests of ``lengths`` positions at once, in slots vs blocks."""
    lengths = as_int_list(lengths, "lengths", minimum=0)
    max_seq, bs = as_int(max_seq, "max_seq", minimum=1), as_int(block_size, "block_size", minimum=1)
    if any(n > max_seq for n in lengths):
        raise ValueError(f"{sum(n > max_seq for n in lengths)} request(s) longer than "
                         f"max_seq={max_seq}; raise max_seq or clip the lengths")
    blocks = sum(-(-n // bs) for n in lengths)
    used, paged = sum(lengths) * bytes_per_pos, blocks * bs * bytes_per_pos
    slot = len(lengths) * max_seq * bytes_per_pos
    return {"requests": len(lengths), "blocks": blocks, "slot_bytes": slot, "used_bytes": used,
            "paged_bytes": paged, "paged_waste_bytes": paged - used,
            "saving": slot / paged if paged else float("inf")}


def block_size_tradeoff(lengths: Sequence[int], block_sizes: Sequence[int], *, max_seq: int,
                        bytes_per_pos: int) -> list[dict]:
    """Per block size: blocks, paged bytes, unused tails (bytes, share), table entries."""
    rows = []
    for bs in as_int_list(block_sizes, "block_sizes", minimum=1):
        m = cache_memory(lengths, max_seq=max_seq, block_size=bs, bytes_per_pos=bytes_per_pos)
        rows.append({"block_size": bs, "blocks": m["blocks"], "paged_bytes": m["paged_bytes"],
                     "waste_bytes": m["paged_waste_bytes"],
                     "waste_share": m["paged_waste_bytes"] / (m["paged_bytes"] or 1),
                     "table_entries_per_request": -(-max_seq // bs)})
    return rows


def paged_rows(record: Any) -> list[dict]:
    """Per ``max_seq`` and batch: each layout's median µs, paged / in place, paged / gather."""
    rows = []
    for run in view(record, Paged).runs:
        for b in run.batch_sizes:
            ip, ga, pg = (run.at(m, b) for m in ("slot_in_place", "slot_gather", "paged"))
            rows.append({"max_seq": run.max_seq, "batch": b, "slot_in_place_us": ip,
                         "slot_gather_us": ga, "paged_us": pg,
                         "paged_over_in_place": pg / ip if pg and ip else None,
                         "paged_over_gather": pg / ga if pg and ga else None})
    return rows
