"""Exercise checks of notebook 11 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from typing import Any

import torch

from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach import paged as lp
from labkit.kvcache import PagedKVCache


@exercise("11.1", "slot mapping", "write")
def _slot_mapping(ex: Exercise, write_index_formula: Any, *, cache: PagedKVCache,
                  block_size: int) -> None:
    if not ex.check_function("a function of (table_row, pos, block_size)", write_index_formula):
        return
    for slot, p in ((0, 0), (0, 7), (0, 8), (0, 19), (2, 3), (2, 8)):
        row = cache.host_table[slot].tolist()
        ex.check(f"slot {slot}, position {p}", write_index_formula(row, p, block_size),
                 int(cache.write_index(torch.tensor([p]), torch.tensor([slot]))),
                 hint="the block holding pos, times block_size, plus the offset inside it")


@exercise("11.2", "the cost of paging", "predict")
def _cost_of_paging(ex: Exercise, paged_vs_in_place: Any, paged_vs_gather: Any, *,
                    rec: Any) -> None:
    if rec is None:
        ex.check_true("a recorded paged step to compare with", rec is not None,
                      hint="this exercise needs the paged record (data/reference/h200/)")
        return
    pr = lp.paged_rows(rec)
    above = [r["paged_over_in_place"] > 1 for r in pr]
    g = [r["paged_over_gather"] for r in pr]
    ex.check("paged vs slot in place", paged_vs_in_place,
             "higher" if all(above) else "lower" if not any(above) else "mixed",
             hint="which layout reads the cache where it is?")
    ex.check("paged vs slot gather", paged_vs_gather,
             "within 15%" if all(abs(x - 1) <= 0.15 for x in g) else "higher" if min(g) > 1.15
             else "lower" if max(g) < 0.85 else "mixed",
             hint="both copy before they attend")


@exercise("11.3", "allocator bug", "debug")
def _allocator_bug(ex: Exercise, buggy_line: Any, blocks_with_bug: Any) -> None:
    ex.check_one_of("the buggy line", buggy_line, ["A"],
                    hint="positions past the last full block land in the pad block")
    ex.check("blocks for 20 positions with the bug", blocks_with_bug, 1,
             hint="integer division rounds down")
