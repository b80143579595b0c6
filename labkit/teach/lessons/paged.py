"""Paged KV cache arithmetic (notebook 11): pure, so it runs on any machine.

* where a row writes: :func:`slot_write_index` (slot layout) and :func:`paged_write_index`
  (through a block table row; ``block * block_size + pos % block_size``);
* what a cache holds: :func:`bytes_per_position` (``2 * layers * heads * head_dim * dtype
  bytes``), :func:`blocks_needed`, :func:`cache_memory` (slot layout vs paged on a list of
  request lengths) and :func:`block_size_tradeoff` (internal fragmentation vs table size);
* what the ``paged_<preset>`` record says: :func:`paged_rows` and :func:`paged_sentences`.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from labkit.checks import as_int, as_int_list
from labkit.measure.records import Paged, view

#: bytes per element of the dtypes the suite uses
DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype`` (a name from :data:`DTYPE_BYTES`)."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def bytes_per_position(n_layer: int, n_head: int, head_dim: int, dtype: str = "bfloat16"
                       ) -> int:
    """KV-cache bytes one token position takes: a key and a value per layer and head,
    ``2 * n_layer * n_head * head_dim * dtype bytes``."""
    for name, v in (("n_layer", n_layer), ("n_head", n_head), ("head_dim", head_dim)):
        as_int(v, name, minimum=1, fix="give a positive whole number")
    return 2 * n_layer * n_head * head_dim * dtype_bytes(dtype)


def blocks_needed(length: int, block_size: int) -> int:
    """Blocks a request of ``length`` positions holds: ``ceil(length / block_size)``."""
    length = as_int(length, "length", minimum=0, fix="give a position count >= 0")
    block_size = as_int(block_size, "block_size", minimum=1, fix="give a positive block size")
    return -(-length // block_size)


def slot_write_index(slot: int, pos: int, max_seq: int) -> int:
    """Flat index (in a layer's cache viewed as ``(-1, heads, head_dim)``) where the slot
    layout writes position ``pos`` of ``slot``: ``slot * max_seq + pos``."""
    if not 0 <= pos < max_seq:
        raise ValueError(f"position {pos} is outside the row (0..{max_seq - 1})")
    return slot * max_seq + pos


def paged_write_index(table_row: Sequence[int], pos: int, block_size: int) -> int:
    """Flat index where the paged layout writes position ``pos`` of a row whose block-table
    row is ``table_row``: ``table_row[pos // block_size] * block_size + pos % block_size``."""
    if not 0 <= pos < len(table_row) * block_size:
        raise ValueError(f"position {pos} is outside the block table row "
                         f"({len(table_row)} blocks of {block_size})")
    return int(table_row[pos // block_size]) * block_size + pos % block_size


def cache_memory(lengths: Sequence[int], *, max_seq: int, block_size: int,
                 bytes_per_pos: int) -> dict:
    """Memory of the KV cache for requests of ``lengths`` positions held at once.

    ``slot_bytes``: the slot layout reserves ``max_seq`` positions per request;
    ``paged_bytes``: the paged layout holds ``ceil(len / block_size)`` blocks per request;
    ``used_bytes``: what the tokens themselves fill; ``paged_waste_bytes``: the unused tail of
    each request's last block (internal fragmentation); ``blocks``; ``saving`` = slot / paged.
    """
    lengths = as_int_list(lengths, "lengths", minimum=0)
    max_seq = as_int(max_seq, "max_seq", minimum=1)
    too_long = [n for n in lengths if n > max_seq]
    if too_long:
        raise ValueError(f"{len(too_long)} request(s) longer than max_seq={max_seq} (e.g. "
                         f"{too_long[0]}); raise max_seq or clip the lengths")
    blocks = sum(blocks_needed(n, block_size) for n in lengths)
    used = sum(lengths) * bytes_per_pos
    paged = blocks * block_size * bytes_per_pos
    slot = len(lengths) * max_seq * bytes_per_pos
    return {"requests": len(lengths), "blocks": blocks, "slot_bytes": slot,
            "paged_bytes": paged, "used_bytes": used, "paged_waste_bytes": paged - used,
            "slot_waste_bytes": slot - used,
            "saving": slot / paged if paged else math.inf}


def block_size_tradeoff(lengths: Sequence[int], block_sizes: Sequence[int], *, max_seq: int,
                        bytes_per_pos: int) -> list[dict]:
    """Per block size: the paged bytes, the internal fragmentation (unused tail of the last
    block, bytes and share of the paged bytes) and the block-table entries per request
    (``max_seq / block_size``; the step reads them all). Small blocks waste little and need
    long tables; large blocks the opposite."""
    rows = []
    for bs in as_int_list(block_sizes, "block_sizes", minimum=1):
        m = cache_memory(lengths, max_seq=max_seq, block_size=bs, bytes_per_pos=bytes_per_pos)
        rows.append({"block_size": bs, "blocks": m["blocks"], "paged_bytes": m["paged_bytes"],
                     "waste_bytes": m["paged_waste_bytes"],
                     "waste_share": m["paged_waste_bytes"] / m["paged_bytes"]
                     if m["paged_bytes"] else 0.0,
                     "table_entries_per_request": -(-max_seq // bs)})
    return rows


def paged_rows(record: Any) -> list[dict]:
    """One row per ``max_seq`` and batch size of a ``paged_<preset>`` record: the three
    layouts' median µs and the ratios paged / in place and gather / in place."""
    rec = view(record, Paged)
    rows = []
    for run in rec.runs:
        for b in rec.batch_sizes:
            t = {m: run.at(m, b) for m in run.times}
            ip, ga, pg = t.get("slot_in_place"), t.get("slot_gather"), t.get("paged")
            rows.append({"max_seq": run.max_seq, "batch": b, "slot_in_place_us": ip,
                         "slot_gather_us": ga, "paged_us": pg,
                         "paged_over_in_place": pg / ip if pg and ip else None,
                         "gather_over_in_place": ga / ip if ga and ip else None})
    return rows


def paged_sentences(record: Any) -> list[str]:
    """What the record says, in sentences computed from it."""
    rec = view(record, Paged)
    out = []
    for r in paged_rows(rec):
        if r["paged_over_in_place"] is None:
            continue
        out.append(f"max_seq {r['max_seq']}, batch {r['batch']}: paged {r['paged_us']:,.0f} µs "
                   f"vs slot in place {r['slot_in_place_us']:,.0f} µs "
                   f"({r['paged_over_in_place']:.2f}x), slot gather "
                   f"{r['slot_gather_us']:,.0f} µs ({r['gather_over_in_place']:.2f}x)")
    ok = rec.checks.get("paged_tokens_equal_slot_gather")
    if ok is not None:
        out.append("paged tokens equal slot (gather) tokens: " + ("yes" if ok else "NO"))
    ok = rec.checks.get("graph_tokens_equal_eager")
    if ok is not None:
        out.append("graph tokens equal eager tokens in every layout: " + ("yes" if ok else "NO"))
    return out
