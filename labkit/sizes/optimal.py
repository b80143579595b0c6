"""The public size choices: the exact optimum under a size count and a memory budget
(:func:`optimal_sizes`), its brute-force reference (:func:`brute_force_optimal`) and the
memory/cost Pareto front (:func:`pareto_front`). Part of :mod:`labkit.sizes`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from collections.abc import Callable, Iterable

from labkit.checks import as_int, as_number
from labkit.sizes.distribution import DistLike
from labkit.sizes.memory import MemoryModel, Pool, set_memory
from labkit.sizes.padding import _check_sizes
from labkit.sizes.problem import CostModel, _Problem, _objective, _problem, _tail_costs
from labkit.sizes.search import _entries


def optimal_sizes(dist: DistLike, k: int, *, max_size: int | None = None,
                  cost: CostModel = "padded_rows",
                  eager_cost: Callable[[int], float] | None = None,
                  memory_per_size: MemoryModel | None = None,
                  memory_budget: float | None = None, pool: Pool = "shared",
                  residual_per_graph: float = 0.0,
                  candidates: Iterable[int] | None = None) -> list[int]:
    """At most ``k`` capture sizes minimising the expected cost per decode step, exactly.

    Cost of a step of ``b`` rows served by graph ``s >= b``: ``s - b`` padded rows
    (``cost="padded_rows"``) or ``cost(s)``, e.g. the measured replay time at size ``s``.
    Eager fallback: batches above the largest *candidate* run eager in every set and cost
    ``eager_cost(b)`` (0 padded rows when not given; a callable ``cost`` then needs
    ``eager_cost``). Below the largest candidate a batch may fall back to eager only when
    ``eager_cost`` is given; by default the largest candidate (the largest observed size
    ``<= max_size``) is therefore always chosen and nothing falls back.

    Candidates are the observed sizes ``<= max_size`` (or the keys of a measured
    ``memory_per_size`` dict, or ``candidates``). They contain an optimum whenever cost and
    memory do not decrease with size: moving a size down to the largest observed size it
    serves changes no assignment and raises neither cost nor memory.

    Memory (``memory_per_size`` and ``memory_budget`` in bytes): see :func:`set_memory` for
    ``pool`` and ``residual_per_graph``; the chosen set's memory is ``<= memory_budget``.

    Algorithm: dynamic programming over the sorted candidates, ``best[j][i]`` = the cheapest
    set of ``j`` sizes whose largest is candidate ``i``, using prefix sums for the cost of the
    batches between two consecutive sizes. With no budget or a shared pool whose memory grows
    with size, one DP of O(k * m^2) time (numpy) and O(k * m) memory for m candidates; with a
    shared pool of non-monotone memory, one DP per distinct memory ceiling (O(m * k * m^2)).
    Private pools make it a knapsack (memory adds up): the DP then keeps every non-dominated
    (memory, cost) label per state, exact but pseudo-polynomial (O(k * m^2 * L) for L labels
    per state), pruned by branch and bound with a Lagrangian incumbent and bound (milliseconds
    on the shipped traces). Ties go to fewer sizes.
    """
    k = as_int(k, "k (the most sizes to capture)", minimum=1, fix="capture at least one size")
    prob = _problem(dist, max_size=max_size, cost=cost, eager_cost=eager_cost,
                    memory_per_size=memory_per_size, pool=pool,
                    residual_per_graph=residual_per_graph, candidates=candidates)
    budget = _check_budget(memory_budget, memory_per_size)
    entries = [e for e in _entries(prob, int(k), budget, best_only=True)
               if e.memory is None or e.memory <= budget]
    if not entries:
        need = _min_memory(prob)
        raise ValueError(f"memory budget {budget:.6g} bytes is too small for any set of capture "
                         f"sizes: the cheapest allowed set needs {need:.6g} bytes; raise "
                         "memory_budget, lower max_size, or allow eager fallback with "
                         "eager_cost=...")
    best = min(entries, key=lambda e: (e.cost, len(e.sizes), e.memory or 0.0))
    return best.sizes


def _check_budget(memory_budget: float | None, memory_per_size: MemoryModel | None) -> float:
    if memory_budget is None:
        return math.inf
    if memory_per_size is None:
        raise ValueError("memory_budget needs memory_per_size (bytes per captured size)")
    return as_number(memory_budget, "memory_budget", minimum=0.0, allow_inf=True,
                     fix="give the bytes the graphs may use, >= 0")


def _min_memory(prob: _Problem) -> float:
    """Memory of the smallest allowed set: one size that may be the largest (any size with
    eager fallback; otherwise one that serves every batch up to the largest candidate)."""
    assert prob.mem is not None
    tail = _tail_costs(prob, prob.cands)
    return min(m for m, t in zip(prob.mem, tail.tolist()) if math.isfinite(t))


def brute_force_optimal(dist: DistLike, k: int, *, max_size: int | None = None,
                        cost: CostModel = "padded_rows",
                        eager_cost: Callable[[int], float] | None = None,
                        memory_per_size: MemoryModel | None = None,
                        memory_budget: float | None = None, pool: Pool = "shared",
                        residual_per_graph: float = 0.0,
                        candidates: Iterable[int] | None = None) -> tuple[list[int], float]:
    """Reference for tests: enumerate every set of at most ``k`` candidates (same arguments and
    rules as :func:`optimal_sizes`) and cost it batch by batch, without the DP.

    Returns ``(sizes, expected cost)``. Exponential in the number of candidates: small cases only.
    """
    k = as_int(k, "k (the most sizes to capture)", minimum=1, fix="capture at least one size")
    budget = _check_budget(memory_budget, memory_per_size)
    prob = _problem(dist, max_size=max_size, cost=cost, eager_cost=eager_cost,
                    memory_per_size=memory_per_size, pool=pool,
                    residual_per_graph=residual_per_graph, candidates=candidates)
    mem = None if prob.mem is None else dict(zip(prob.cands, prob.mem))
    best: tuple[list[int], float] | None = None
    for j in range(1, min(int(k), len(prob.cands)) + 1):
        for combo in itertools.combinations(prob.cands, j):
            if mem is not None and set_memory(combo, mem, prob.pool, prob.residual) > budget:
                continue
            c = _objective(prob, combo)
            if math.isfinite(c) and (best is None or c < best[1] - 1e-12):
                best = (list(combo), c)
    if best is None:
        raise ValueError("no set of capture sizes fits the memory budget")
    return best


# --------------------------------------------------------------------------------------------
# memory / cost Pareto front
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParetoPoint:
    """One non-dominated choice: ``k`` sizes, their memory (bytes), expected cost per step."""

    k: int
    sizes: tuple[int, ...]
    memory: float
    expected_cost: float


def pareto_front(dist: DistLike, candidates_k: Iterable[int] = range(1, 9), *,
                 memory_per_size: MemoryModel,
                 step_time: CostModel = "padded_rows",
                 eager_time: Callable[[int], float] | None = None, pool: Pool = "shared",
                 residual_per_graph: float = 0.0, max_size: int | None = None,
                 candidates: Iterable[int] | None = None) -> list[ParetoPoint]:
    """The memory/cost Pareto front over sets whose size count is in ``candidates_k``.

    Every returned point is the cheapest set for its memory, and no set with a count in
    ``candidates_k`` has both less memory and lower expected cost (``step_time`` as ``cost`` in
    :func:`optimal_sizes`, ``eager_time`` as its ``eager_cost``). Sorted by memory; the cost
    falls along the list. Exact, by the same dynamic programme as :func:`optimal_sizes`.
    A shared pool takes milliseconds. Private pools can have a front of hundreds of points
    (memory adds up) and take seconds for large ``candidates_k`` over hundreds of observed
    sizes: pass ``candidates=`` a coarser grid (e.g. multiples of 8) to explore them.
    """
    ks = _check_sizes(candidates_k, "candidates_k")
    prob = _problem(dist, max_size=max_size, cost=step_time, eager_cost=eager_time,
                    memory_per_size=memory_per_size, pool=pool,
                    residual_per_graph=residual_per_graph, candidates=candidates)
    allowed = set(ks)
    labels = [(float(e.memory or 0.0), e.cost, e.sizes)
              for e in _entries(prob, ks[-1], allowed=allowed) if len(e.sizes) in allowed]
    front: list[ParetoPoint] = []
    for memory, c, sizes in sorted(labels, key=lambda t: (t[0], t[1], len(t[2]))):
        if not front or c < front[-1].expected_cost - 1e-12 * max(1.0, abs(c)):
            front.append(ParetoPoint(len(sizes), tuple(sizes), float(memory), float(c)))
    return front
