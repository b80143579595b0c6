"""The exact search behind ``optimal_sizes`` and ``pareto_front``:
a DP over the sorted candidates, ``best[j, i]`` = the cheapest ``j + 1`` sizes whose largest is
candidate ``i`` (one per memory ceiling for a shared pool of non-monotone memory); private pools
(a knapsack: memory adds up) keep every non-dominated (memory, cost) label per state, pruned by
branch and bound with a Lagrangian incumbent and bound.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass

import numpy as np

from labkit.sizes.memory import set_memory
from labkit.sizes.problem import _Problem, _segment_costs, _tail_costs


@dataclass
class _Entry:
    sizes: list[int]
    cost: float
    memory: float | None


def _dp_matrix(C: np.ndarray, tail: np.ndarray, kmax: int) -> tuple[np.ndarray, np.ndarray]:
    """``best[j, i]`` with the tail, for segment costs ``C``, and ``back[j, i]``: the previous
    size's index. O(kmax * m^2) time, O(kmax * m) memory."""
    m = C.shape[1]
    dp = np.full((kmax, m), np.inf)
    back = np.full((kmax, m), -1, dtype=np.int64)
    dp[0] = C[0]
    for j in range(1, kmax):
        if m < 2:
            break
        A = dp[j - 1][:-1, None] + C[1:, :]      # row r: previous largest is candidate r
        back[j] = A.argmin(axis=0)
        dp[j] = A.min(axis=0)
    return dp + tail[None, :], back


def _suffix_bounds(C: np.ndarray, tail: np.ndarray, kmax: int) -> list[list[float]]:
    """``lb[r][i]``: least cost of the batches above candidate ``i`` with ``<= r`` more sizes."""
    out = [tail.copy()]
    for _ in range(kmax - 1):
        nxt = tail.copy()
        if len(tail) > 1:
            nxt[:-1] = np.minimum(tail[:-1], (C[1:, :] + out[-1][None, :]).min(axis=1))
        out.append(nxt)
    return [x.tolist() for x in out]


def _walk(back: np.ndarray, j: int, i: int) -> list[int]:
    """The candidate indices of the set ending at ``back``'s state ``(j, i)``, ascending."""
    out = [int(i)]
    for jj in range(int(j), 0, -1):
        out.append(int(back[jj, out[-1]]))
    return out[::-1]


def _entries(prob: _Problem, kmax: int, budget: float = math.inf,
             allowed: set[int] | None = None, best_only: bool = False) -> list[_Entry]:
    """The cheapest set per (size count, memory class): the optimum and Pareto front among them."""
    cands, mem, out = prob.cands, prob.mem, []
    if mem is None or prob.pool == "shared":
        if mem is None or all(x <= y for x, y in itertools.pairwise(mem)):
            classes: list[list[int]] = [list(range(len(cands)))]  # max: the largest's memory
        else:                                     # one run per memory ceiling M
            classes = [[i for i, x in enumerate(mem) if x <= ceil] for ceil in sorted(set(mem))]
        for idx in classes:
            sub = [cands[i] for i in idx]
            dp, back = _dp_matrix(_segment_costs(prob, sub), _tail_costs(prob, sub),
                                  min(kmax, len(sub)))
            for j, i in zip(*np.nonzero(np.isfinite(dp))):
                sizes = [sub[x] for x in _walk(back, j, i)]
                memory = None if mem is None else set_memory(
                    sizes, dict(zip(cands, mem)), "shared", prob.residual)
                if memory is None or memory <= budget:
                    out.append(_Entry(sizes, float(dp[j, i]), memory))
        return out
    return _private_entries(prob, kmax, budget, allowed, best_only)


def _lagrange_incumbent(C: np.ndarray, tail: np.ndarray, mem: np.ndarray, kmax: int,
                        budget: float) -> tuple[float, list[int], float, float, bool] | None:
    """Lagrangian relaxation of the private-pool budget: bisect ``lam`` in a DP of ``cost +
    lam * memory`` for the cheapest set within budget: ``(lam, indices, cost, memory,
    optimal)`` (``optimal``: the budget does not bind), or None when no set fits (the least
    memory is one size's). If no ``lam`` fits, the least-memory set is the incumbent."""
    single = np.where(np.isfinite(tail), C[0] + tail, np.inf)
    tops = [i for i in range(len(single)) if math.isfinite(single[i])]
    if not tops:
        return None
    least = min(tops, key=lambda i: (mem[i], single[i]))
    if mem[least] > budget:
        return None                       # even the least memory does not fit

    def solve(lam: float) -> tuple[list[int], float, float]:
        dp, back = _dp_matrix(C + lam * mem[None, :], tail, kmax)
        j, i = np.unravel_index(int(np.argmin(dp)), dp.shape)
        idx = _walk(back, int(j), int(i))
        memory = float(mem[idx].sum())
        return idx, float(dp[j, i]) - lam * memory, memory

    idx, cost, memory = solve(0.0)
    if memory <= budget:
        return 0.0, idx, cost, memory, True   # the budget does not bind: the optimum itself
    best = (0.0, [least], float(single[least]), float(mem[least]), False)
    finite = C[np.isfinite(C)]
    scale = (float(finite.max()) if finite.size else 1.0) + float(np.nanmax(
        np.where(np.isfinite(tail), tail, 0.0))) + 1.0
    positive = mem[mem > 0]
    hi = 2.0 * kmax * scale / (float(positive.min()) if positive.size else 1.0)
    for _ in range(200):                  # find a multiplier whose relaxed optimum fits
        idx, cost, memory = solve(hi)
        if memory <= budget:
            break
        hi *= 4.0
    else:
        return best                       # no usable multiplier: the least-memory set
    lo = 0.0
    best = min(best, (hi, idx, cost, memory, False), key=lambda t: t[2])
    for _ in range(60):
        if hi - lo <= 1e-9 * hi:
            break
        lam = 0.5 * (lo + hi)
        idx, cost, memory = solve(lam)
        if memory <= budget:
            if cost < best[2]:
                best = (lam, idx, cost, memory, False)
            hi = lam
        else:
            lo = lam
    return best


def _private_entries(prob: _Problem, kmax: int, budget: float, allowed: set[int] | None,
                     best_only: bool) -> list[_Entry]:
    """Private pools: each state (count j, largest size i) keeps its non-dominated (memory,
    cost) labels. A label is dropped when even its best completion (cost bounds from a
    memory-free suffix DP and a Lagrangian one; memory bound from the sizes it must still add)
    is dominated by a set found (``best_only``: costs more than the best set within budget,
    seeded by :func:`_lagrange_incumbent`)."""
    cands, mem = prob.cands, prob.mem
    assert mem is not None
    m = len(cands)
    C_np, tail_np, mem_np = _segment_costs(prob, cands), _tail_costs(prob, cands), np.array(mem)
    lbl = _suffix_bounds(C_np, tail_np, kmax)
    C, tail = C_np.tolist(), tail_np.tolist()
    fin = [i for i in range(m) if math.isfinite(tail[i])]
    mem_lb = [0.0 if math.isfinite(tail[i]) else
              min((mem[x] for x in fin if x > i), default=math.inf) for i in range(m)]
    allowed = set(range(1, kmax + 1)) if allowed is None else allowed
    front_mem: list[float] = []       # completed sets (allowed counts), Pareto, by memory
    front_cost: list[float] = []
    best, lam, vlam = math.inf, 0.0, lbl
    out: list[_Entry] = []
    if best_only:
        inc = _lagrange_incumbent(C_np, tail_np, mem_np, kmax, budget)
        if inc is None:
            return []
        lam, idx, best, memory, optimal = inc
        out.append(_Entry([cands[x] for x in idx], best, memory))
        if optimal:
            return out
        vlam = _suffix_bounds(C_np + lam * mem_np[None, :], tail_np, kmax)

    def hopeless(memory: float, cost: float, i: int, r: int) -> bool:
        lo_mem = memory + mem_lb[i]
        lo_cost = cost + max(lbl[r][i], vlam[r][i] - lam * (budget - memory) if lam else 0.0)
        if lo_mem > budget or not math.isfinite(lo_cost):
            return True
        tol = 1e-12 * max(1.0, abs(lo_cost))
        if best_only:
            return lo_cost > best + tol
        x = bisect.bisect_right(front_mem, lo_mem) - 1
        return x >= 0 and front_cost[x] <= lo_cost + tol

    # a state's labels: (memory, cost, parent label, candidate index), memory up, cost down
    layer: list[list[tuple]] = [[(mem[i], C[0][i], None, i)] for i in range(m)]
    for j in range(kmax):
        r = kmax - 1 - j
        if j > 0:
            keys = [([t[0] for t in labs], [-t[1] for t in labs]) for labs in layer]
            new: list[list[tuple]] = []
            for i in range(m):
                cand: list[tuple] = []
                mem_cap = budget - mem[i] - mem_lb[i]
                for l in range(1, i + 1):  # noqa: E741  (l as in C[l, i])
                    labs = layer[l - 1]
                    if not labs:
                        continue
                    mems, negc = keys[l - 1]
                    hi = bisect.bisect_right(mems, mem_cap)
                    lo = 0
                    if best_only:     # costs fall along the list: skip those that cost too much
                        thr = best - C[l][i] - lbl[r][i]
                        lo = bisect.bisect_left(negc, -thr - 1e-12 * max(1.0, abs(thr)))
                    cil = C[l][i]
                    for lab in labs[lo:hi]:
                        t = (lab[0] + mem[i], lab[1] + cil, lab, i)
                        if not hopeless(t[0], t[1], i, r):
                            cand.append(t)
                new.append(_pareto(cand))
            layer = new
        if j + 1 in allowed:              # record the sets that stop here
            done = [(lab[0], lab[1] + tail[i], lab) for i in fin for lab in layer[i]
                    if lab[0] <= budget]
            for memory, cost, lab in done:
                sizes, node = [], lab
                while node is not None:
                    sizes.append(cands[node[3]])
                    node = node[2]
                out.append(_Entry(sizes[::-1], cost, memory))
                best = min(best, cost)
            merged = _pareto(list(zip(front_mem, front_cost)) + [(d[0], d[1]) for d in done])
            front_mem, front_cost = [t[0] for t in merged], [t[1] for t in merged]
        layer = [[lab for lab in labs if not hopeless(lab[0], lab[1], i, r)]
                 for i, labs in enumerate(layer)]
    return out


def _pareto(labels: list[tuple]) -> list[tuple]:
    """Labels not dominated in (memory, cost), by increasing memory."""
    kept: list[tuple] = []
    for lab in sorted(labels, key=lambda t: (t[0], t[1])):
        if not kept or lab[1] < kept[-1][1]:
            kept.append(lab)
    return kept
