"""The size-choice problem as the optimiser sees it (:class:`_Problem`) and its cost arrays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from labkit.checks import as_number
from labkit.sizes.distribution import DistLike, _as_batch_size, to_distribution
from labkit.sizes.memory import MemoryModel, Pool, _check_memory_model, _check_pool, _mem_of
from labkit.sizes.padding import _check_sizes

CostModel = Literal["padded_rows"] | Callable[[int], float]
"""``"padded_rows"`` (wasted rows per step) or ``step_time(padded_size)`` of one graph replay."""


@dataclass
class _Problem:
    """A validated size-choice problem (see :func:`optimal_sizes`)."""

    b: np.ndarray                 # support (observed sizes), ascending
    p: np.ndarray                 # probabilities
    cands: list[int]              # candidate capture sizes, ascending
    step: Callable[[int], float] | None           # padded size -> step cost; None: padded rows
    eager: Callable[[int], float] | None          # batch -> cost of one eager step
    mem: list[float] | None       # memory per candidate
    pool: Pool
    residual: float


def _problem(dist: DistLike, *, max_size: int | None, cost: CostModel,
             eager_cost: Callable[[int], float] | None, memory_per_size: MemoryModel | None,
             pool: Pool, residual_per_graph: float, candidates: Iterable[int] | None) -> _Problem:
    p = to_distribution(dist)
    _check_pool(pool)
    residual_per_graph = as_number(residual_per_graph, "residual_per_graph", minimum=0.0,
                                   fix="bytes each further graph adds to a shared pool, >= 0")
    if memory_per_size is not None:
        _check_memory_model(memory_per_size)
    if eager_cost is not None and not callable(eager_cost):
        raise TypeError(f"eager_cost must be a function batch size -> cost, got "
                        f"{type(eager_cost).__name__}")
    if candidates is not None:
        cands = _check_sizes(candidates, "candidates")
    elif isinstance(memory_per_size, Mapping):
        cands = _check_sizes(list(memory_per_size), "memory_per_size sizes")  # measured
    else:
        cands = sorted(p)                        # observed sizes contain an optimum (see docs)
    if max_size is not None:
        max_size = _as_batch_size(max_size, "max_size")
        cands = [c for c in cands if c <= max_size]
    if not cands:
        raise ValueError(f"no candidate capture size is <= max_size={max_size}: raise "
                         "max_size or pass candidates=... that include smaller sizes")
    if isinstance(cost, str) and cost == "padded_rows":
        step = None
    elif callable(cost):
        step = cost
        above = [b for b in p if b > cands[-1]]
        if above and eager_cost is None:
            raise ValueError(f"batch sizes {above[:5]}{'...' if len(above) > 5 else ''} exceed "
                             f"the largest candidate size {cands[-1]} and always run eager: "
                             "pass eager_cost=... (time of an eager step) or raise max_size")
    else:
        raise ValueError(f"cost must be 'padded_rows' or a function padded_size -> step cost, "
                         f"got {cost!r}")
    mem = None if memory_per_size is None else [_mem_of(memory_per_size, c) for c in cands]
    return _Problem(b=np.array(list(p), dtype=np.int64), p=np.array(list(p.values())),
                    cands=cands, step=step, eager=eager_cost, mem=mem, pool=pool,
                    residual=float(residual_per_graph))


def _tail_costs(prob: _Problem, tops: Sequence[int]) -> np.ndarray:
    """Cost of the batches above each possible largest size (they run eager)."""
    b, p, cmax = prob.b, prob.p, prob.cands[-1]
    cut = np.searchsorted(b, np.asarray(tops), side="right")
    if prob.eager is not None:
        e = np.array([float(prob.eager(int(x))) for x in b.tolist()])
        suffix = np.concatenate([np.cumsum((p * e)[::-1])[::-1], [0.0]])
        return suffix[cut]
    forced = np.searchsorted(b, cmax, side="right")   # batches <= cmax must hit a graph
    return np.where(cut >= forced, 0.0, np.inf)


def _segment_costs(prob: _Problem, cands: Sequence[int]) -> np.ndarray:
    """``C[l, i]``: cost of the batches in ``(cands[l-1], cands[i]]`` padded to ``cands[i]``
    (``l = 0``: everything up to ``cands[i]``); ``inf`` where ``l > i``."""
    b, p = prob.b, prob.p
    c = np.asarray(cands, dtype=np.int64)
    pre_p = np.concatenate([[0.0], np.cumsum(p)])
    cut = np.asarray(np.searchsorted(b, c, side="right"))
    prev = np.concatenate([[0], cut[:-1]])
    dp_ = pre_p[cut][None, :] - pre_p[prev][:, None]
    if prob.step is None:                 # padded rows: sum p (c - b) = c * dP - dQ
        pre_q = np.concatenate([[0.0], np.cumsum(p * b)])
        dq = pre_q[cut][None, :] - pre_q[prev][:, None]
        C = np.maximum(c[None, :] * dp_ - dq, 0.0)   # clip float round-off below 0
    else:
        g = np.array([float(prob.step(int(x))) for x in c])
        C = g[None, :] * dp_
    m = len(c)
    return np.where(np.arange(m)[:, None] <= np.arange(m)[None, :], C, np.inf)
