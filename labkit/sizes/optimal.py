"""The exact optimum under a size count and a memory budget, and the memory/cost Pareto front."""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable, Iterable

from labkit.checks import as_int, as_number
from labkit.sizes.distribution import DistLike
from labkit.sizes.memory import MemoryModel, Pool
from labkit.sizes.padding import _check_sizes
from labkit.sizes.problem import CostModel, _Problem, _problem, _tail_costs
from labkit.sizes.search import _entries


def optimal_sizes(dist: DistLike, k: int, *, max_size: int | None = None,
                  cost: CostModel = "padded_rows",
                  eager_cost: Callable[[int], float] | None = None,
                  memory_per_size: MemoryModel | None = None,
                  memory_budget: float | None = None, pool: Pool = "shared",
                  residual_per_graph: float = 0.0,
                  candidates: Iterable[int] | None = None) -> list[int]:
    """At most ``k`` capture sizes minimising the expected cost per decode step, exactly: a
    step of ``b`` rows on graph ``s`` costs ``s - b`` padded rows or ``cost(s)``; batches above
    the largest candidate (observed sizes ``<= max_size``, or given) run eager at
    ``eager_cost(b)``, and below it only when ``eager_cost`` is given. The set's memory
    (:func:`set_memory`) stays ``<= memory_budget``. Ties go to fewer sizes."""
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
    """Memory of the smallest allowed set: one size that may be the largest."""
    assert prob.mem is not None
    tail = _tail_costs(prob, prob.cands)
    return min(m for m, t in zip(prob.mem, tail.tolist()) if math.isfinite(t))


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
    """The exact memory/cost Pareto front of sets of ``candidates_k`` sizes (as
    :func:`optimal_sizes` costs them), by memory; private pools: pass coarser ``candidates``."""
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
