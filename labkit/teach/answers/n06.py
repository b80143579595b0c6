"""Exercise checks of notebook 06 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from labkit.sizes import SGLANG_VERSION, VLLM_VERSION, expected_padding, expected_step_cost
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise

#: how close (in fraction points) to a band's edge an answer of the neighbouring band is right
EDGE = 0.02


def _engines(values: Mapping[str, float]) -> float:
    return min(values[f"{VLLM_VERSION} default"], values[f"{SGLANG_VERSION} default"])


@exercise("6.1", "predict which lists pad least", "predict")
def _pad_least(ex: Exercise, optimum_fewer: Any, fewest: Any, *, dist: Any,
               sets: Mapping[str, Sequence[int]], k: int) -> None:
    padrows = {n: expected_padding(s, dist).expected_padded_rows for n, s in sets.items()}
    opt, cov = padrows[f"optimal ({k}, padded rows)"], padrows[f"coverage ({k})"]
    ex.check("(a) the optimum pads fewer rows than coverage", optimum_fewer, opt < cov,
             hint="what does optimal promise, for k sizes?")
    ex.check_one_of("(b) optimal k sizes or the engines' lists", fewest,
                    ["engines" if _engines(padrows) < opt else "optimal"],
                    hint="count the sizes in each list")


def _bands(more: float) -> list[str]:
    """The bands of exercise 6.2(b) that hold ``more``, with a neighbour near an edge."""
    m = abs(more)
    band = "under 10%" if m < 0.1 else "10-50%" if m <= 0.5 else "over 50%"
    near = ["under 10%", "10-50%"] if abs(m - 0.1) <= EDGE else \
        ["10-50%", "over 50%"] if abs(m - 0.5) <= EDGE else []
    return [band, *near]


@exercise("6.2", "predict what eager steps cost", "predict")
def _eager_cost(ex: Exercise, coverage_is: Any, by_how_much: Any, engines_5pc: Any, *,
                dist: Any, sets: Mapping[str, Sequence[int]], k: int,
                step: Callable[[int], float], eager: Callable[[int], float]) -> None:
    cost = {n: expected_step_cost(s, dist, step, eager) for n, s in sets.items()}
    c_opt, c_cov = cost[f"optimal ({k}, step time)"], cost[f"coverage ({k})"]
    more = c_cov / c_opt - 1
    ex.check_one_of("(a) coverage vs the step-time optimum", coverage_is,
                    ["dearer" if more > 0 else "cheaper"],
                    hint="compare eager and graph in the step-time chart")
    ex.check_one_of("(b) by how much", by_how_much, _bands(more),
                    hint="share of eager steps x (eager - graph) / graph step")
    saving = 1 - _engines(cost) / c_opt
    ex.check_one_of("(c) the engines' lists more than 5% cheaper", engines_5pc,
                    [True, False] if abs(saving - 0.05) <= EDGE / 2 else [saving > 0.05],
                    hint="what does a padded row cost in the step-time chart?")


@exercise("6.3", "beat the coverage heuristic", "write")
def _beat_coverage(ex: Exercise, my_sizes: Any, *, dist: Any,
                   sets: Mapping[str, Sequence[int]], k: int) -> None:
    cov = sets[f"coverage ({k})"]
    if my_sizes is ... or not isinstance(my_sizes, (list, tuple, set)) or not my_sizes:
        ex.check("your sizes (a list of positive whole numbers)", my_sizes, "a list")
        return
    mine, base = expected_padding(sorted(my_sizes), dist), expected_padding(cov, dist)
    ex.check_true(f"at most {k} sizes", len(set(my_sizes)) <= k)
    ex.check_true("same largest size as the coverage list", max(my_sizes) == max(cov),
                  hint=f"the coverage list ends at {max(cov)}")
    ex.check_true(f"fewer padded rows than coverage ({base.expected_padded_rows:.2f} per step)",
                  mine.expected_padded_rows < base.expected_padded_rows,
                  hint=f"yours pad {mine.expected_padded_rows:.2f} rows per step")


@exercise("6.4", "expected waste", "read")
def _expected_waste(ex: Exercise, padded_per_step: Any, waste_share: Any) -> None:
    rep = expected_padding([1, 2, 4, 8, 16, 32, 64], {3: 0.5, 10: 0.3, 40: 0.2})
    ex.check("padded rows per step", padded_per_step, rep.expected_padded_rows, rel=1e-6,
             hint="3 -> 4, 10 -> 16, 40 -> 64")
    ex.check("waste share", waste_share, rep.waste_fraction, rel=1e-6,
             hint="mean real rows = 0.5*3 + 0.3*10 + 0.2*40")
