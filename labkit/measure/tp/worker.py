"""The function every spawned rank runs (:func:`rank_main`) and the table of its parts."""

from __future__ import annotations

import time
from collections.abc import Callable

from labkit.measure.tp.allreduce import _allreduce_part
from labkit.measure.tp.decode import _check_part, _decode_part
from labkit.measure.tp.rank import _Rank, _say


_PARTS: dict[str, Callable[[_Rank], None]] = {
    "allreduce_pg": lambda r: _allreduce_part(r, ["pg"]),
    "allreduce_symm": lambda r: _allreduce_part(r, ["one_shot", "two_shot"]),
    "check_pg": lambda r: _check_part(r, False),
    "check_symm": lambda r: _check_part(r, True),
    "decode_pg": lambda r: _decode_part(r, False),
    "decode_symm": lambda r: _decode_part(r, True),
}


def rank_main(rank: int, world_size: int, spec: dict) -> dict:
    """Run the parts named in ``spec['parts']`` in order; this rank's times, checks, errors and
    part seconds."""
    r = _Rank(rank, world_size, spec)
    for part in spec["parts"]:
        t0 = time.perf_counter()
        _say(rank, f"part {part} ...")
        r.attempt(f"part.{part}", lambda: _PARTS[part](r))
        r.out["parts_s"][part] = time.perf_counter() - t0
        r.save_partial()
    return r.out
