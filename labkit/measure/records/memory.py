"""Record kinds of graph-pool memory: ``pool_memory_<preset>`` and ``pool_overwrite``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from labkit.measure.records.fields import (
    _bool, _dict, _int, _int_keyed, _ints, _num, _nums, _opt, _req, _str,
)


# ----------------------------------------------------------------------------- pool memory


@dataclass(frozen=True)
class PoolLayout:
    """One way of holding the graphs: ``total_bytes`` reserved; for private pools the bytes
    of each size's pool, for a shared pool its size after each capture (``growth_bytes``);
    capture seconds per size. Keys are batch sizes."""

    total_bytes: int
    per_size_bytes: dict[int, int] = field(default_factory=dict)
    growth_bytes: dict[int, int] = field(default_factory=dict)
    capture_s: dict[int, float] = field(default_factory=dict)

    @classmethod
    def from_data(cls, v: Any, where: str) -> "PoolLayout":
        d = _dict(v, where)
        return cls(total_bytes=_req(d, "total_bytes", where, _int),
                   per_size_bytes=_opt(d, "per_size_bytes", where, _int_keyed(_int), {}),
                   growth_bytes=_opt(d, "growth_bytes", where, _int_keyed(_int), {}),
                   capture_s=_opt(d, "capture_s", where, _int_keyed(_num), {}))


@dataclass(frozen=True)
class PoolAtMaxSeq:
    """One shared pool captured largest-first at one ``max_seq``: its bytes and the KV
    cache's (``in_place``: the cache read in place, else the old whole-row gather)."""

    max_seq: int
    shared_largest_first_bytes: int
    kv_cache_bytes: int | None = None
    in_place: bool = True

    @classmethod
    def from_data(cls, v: Any, where: str, max_seq: int | None = None,
                  in_place: bool = True) -> "PoolAtMaxSeq":
        d = _dict(v, where)
        if max_seq is None:
            max_seq = _req(d, "max_seq", where, _int)
        return cls(max_seq=max_seq,
                   shared_largest_first_bytes=_req(d, "shared_largest_first_bytes", where, _int),
                   kv_cache_bytes=_opt(d, "kv_cache_bytes", where, _int), in_place=in_place)


def _pools_by_max_seq(v: Any, where: str) -> dict[int, PoolAtMaxSeq]:
    raw = _int_keyed(_dict)(v, where)
    return {m: PoolAtMaxSeq.from_data(x, f"{where}.{m}", max_seq=m) for m, x in raw.items()}


@dataclass(frozen=True)
class PoolMemory:
    """``pool_memory_<preset>``: graph-pool bytes for ``sizes``, private pools vs one shared
    pool captured largest-first and smallest-first. Optional (newer records): ``max_seq`` of
    the three layouts, ``logits_bytes`` (the static logits buffer outside the pool),
    ``by_max_seq`` (max_seq -> :class:`PoolAtMaxSeq`, cache read in place) and ``gather``
    (one :class:`PoolAtMaxSeq` of the old whole-row gather path)."""

    RECORD = "pool_memory_<preset>"  # the record name(s) of this kind

    preset: str
    sizes: list[int]
    private: PoolLayout
    shared_largest_first: PoolLayout
    shared_smallest_first: PoolLayout
    largest_private_bytes: int
    dtype: str = ""
    max_seq: int | None = None
    logits_bytes: int | None = None
    by_max_seq: dict[int, PoolAtMaxSeq] = field(default_factory=dict)
    gather: PoolAtMaxSeq | None = None

    LAYOUTS = ("private", "shared_largest_first", "shared_smallest_first")

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "PoolMemory":
        private = _req(d, "private", where, PoolLayout.from_data)
        largest = _opt(d, "largest_private_bytes", where, _int)
        if largest is None:
            largest = max(private.per_size_bytes.values(), default=0)
        return cls(preset=_opt(d, "preset", where, _str, ""), sizes=_req(d, "sizes", where, _ints),
                   private=private,
                   shared_largest_first=_req(d, "shared_largest_first", where,
                                             PoolLayout.from_data),
                   shared_smallest_first=_req(d, "shared_smallest_first", where,
                                              PoolLayout.from_data),
                   largest_private_bytes=largest, dtype=_opt(d, "dtype", where, _str, ""),
                   max_seq=_opt(d, "max_seq", where, _int),
                   logits_bytes=_opt(d, "logits_bytes", where, _int),
                   by_max_seq=_opt(d, "by_max_seq", where, _pools_by_max_seq, {}),
                   gather=_opt(d, "gather", where,
                               lambda v, w: PoolAtMaxSeq.from_data(v, w, in_place=False)))

    def layout(self, name: str) -> PoolLayout:
        """``private``, ``shared_largest_first`` or ``shared_smallest_first``."""
        if name not in self.LAYOUTS:
            raise KeyError(f"no pool layout {name!r}; layouts: {self.LAYOUTS}")
        return getattr(self, name)

    def total_bytes(self) -> dict[str, int]:
        """Total bytes of each layout, in :data:`LAYOUTS` order."""
        return {n: self.layout(n).total_bytes for n in self.LAYOUTS}


# ----------------------------------------------------------------------------- pool overwrite


@dataclass(frozen=True)
class OverwriteFix:
    """One fix of a ``pool_overwrite`` record: B's output (its distinct values) after A's
    replay, ``ok`` when it kept B's value; and, for the keep-alive fix, the two pointers."""

    values_after_replay_a: list[float]
    ok: bool
    a_temporary_ptr: int | None = None
    b_output_ptr: int | None = None
    same_block: bool | None = None

    @classmethod
    def from_data(cls, v: Any, where: str, key: str) -> "OverwriteFix":
        d = _dict(v, where)
        return cls(values_after_replay_a=_req(d, key, where, _nums),
                   ok=_req(d, "ok", where, _bool),
                   a_temporary_ptr=_opt(d, "a_temporary_ptr", where, _int),
                   b_output_ptr=_opt(d, "b_output_ptr", where, _int),
                   same_block=_opt(d, "same_block", where, _bool))


@dataclass(frozen=True)
class PoolOverwrite:
    """``pool_overwrite``: graph A then graph B captured into one shared pool, A's temporary
    freed during its capture and B's output given that block (``same_block``: the pointers
    are equal). B's output (its distinct float32 values) read right after A, B (capture
    order), after B's replay and after A's replay (``overwritten``), and the two fixes:
    ``fix_clone`` (B's output copied before A replays) and ``fix_keep_a_temporary``."""

    RECORD = "pool_overwrite"  # the record name(s) of this kind

    device: str
    torch: str
    numel: int
    a_temporary_value: float
    b_expected_value: float
    a_temporary_ptr: int
    b_output_ptr: int
    same_block: bool
    b_in_capture_order: list[float]
    b_after_replay_b: list[float]
    b_after_replay_a: list[float]
    overwritten: bool
    fix_clone: OverwriteFix
    fix_keep_a_temporary: OverwriteFix
    fixed: bool

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "PoolOverwrite":
        return cls(device=_opt(d, "device", where, _str, ""),
                   torch=_opt(d, "torch", where, _str, ""),
                   numel=_req(d, "numel", where, _int),
                   a_temporary_value=_req(d, "a_temporary_value", where, _num),
                   b_expected_value=_req(d, "b_expected_value", where, _num),
                   a_temporary_ptr=_req(d, "a_temporary_ptr", where, _int),
                   b_output_ptr=_req(d, "b_output_ptr", where, _int),
                   same_block=_req(d, "same_block", where, _bool),
                   b_in_capture_order=_req(d, "b_in_capture_order", where, _nums),
                   b_after_replay_b=_req(d, "b_after_replay_b", where, _nums),
                   b_after_replay_a=_req(d, "b_after_replay_a", where, _nums),
                   overwritten=_req(d, "overwritten", where, _bool),
                   fix_clone=_req(d, "fix_clone", where, lambda v, w: OverwriteFix.from_data(
                       v, w, "copy_after_replay_a")),
                   fix_keep_a_temporary=_req(
                       d, "fix_keep_a_temporary", where,
                       lambda v, w: OverwriteFix.from_data(v, w, "b_after_replay_a")),
                   fixed=_req(d, "fixed", where, _bool))
