"""Graph memory models: bytes per captured size and the memory of a set of sizes in pools."""

from __future__ import annotations

import math
from typing import Literal
from collections.abc import Callable, Mapping, Sequence

from labkit.checks import as_number
from labkit.sizes.padding import _check_sizes

MemoryModel = Callable[[int], float] | Mapping[int, float]
"""Graph memory in bytes per captured size: a function (e.g. ``a + b * size``) or measurements."""
Pool = Literal["shared", "private"]


def _mem_of(memory_per_size: MemoryModel, size: int) -> float:
    if isinstance(memory_per_size, Mapping):
        if size not in memory_per_size:
            raise ValueError(f"no memory figure for capture size {size}; measured sizes are "
                             f"{sorted(memory_per_size)}: restrict the sizes to those")
        m = float(memory_per_size[size])
    else:
        m = float(memory_per_size(size))
    if not math.isfinite(m) or m < 0:
        raise ValueError(f"memory for capture size {size} must be finite and >= 0, got {m}")
    return m


def set_memory(sizes: Sequence[int], memory_per_size: MemoryModel, pool: Pool = "shared",
               residual_per_graph: float = 0.0) -> float:
    """Graph memory of a set of sizes, in bytes: the sum of ``memory_per_size`` in private
    pools; in one shared pool captured largest first, the largest graph's plus
    ``residual_per_graph`` per further graph (as vLLM estimates it: first + per-graph x (n-1))."""
    ordered = _check_sizes(sizes)
    _check_pool(pool)
    _check_memory_model(memory_per_size)
    residual = as_number(residual_per_graph, "residual_per_graph", minimum=0.0,
                         fix="bytes each further graph adds to a shared pool, >= 0")
    mems = [_mem_of(memory_per_size, s) for s in ordered]
    if pool == "private":
        return float(sum(mems))
    return max(mems) + residual * (len(ordered) - 1)


def _check_pool(pool: object) -> None:
    if not isinstance(pool, str) or pool not in ("shared", "private"):
        raise ValueError(f"pool must be 'shared' or 'private', got {pool!r}")


def _check_memory_model(memory_per_size: object) -> None:
    if not isinstance(memory_per_size, Mapping) and not callable(memory_per_size):
        raise TypeError("memory_per_size must be a function size -> bytes or a mapping "
                        f"{{size: bytes}}, got {type(memory_per_size).__name__}")
