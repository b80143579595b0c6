"""Exercise checks of notebook 16 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from typing import Any

from labkit.measure import numerics as mn
from labkit.measure.records import MemoryBudget, Numerics, view
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach import deploying as lb
from labkit.teach.simulated import graph_api

#: the bands exercise 16.1 predicts vLLM's estimate over the measured graph memory in
BANDS = ((1.0, "below 1"), (1.5, "1 to 1.5"), (3.0, "1.5 to 3"), (float("inf"), "above 3"))
#: exercise 16.3's made-up top-2 margins
MARGINS = [0.001, 0.012, 0.02, 0.5]


def band(ratio: float) -> str:
    """The band of exercise 16.1 a ratio falls in."""
    return next(word for top, word in BANDS if ratio < top)


@exercise("16.1", "predict vLLM's estimate of graph memory", "predict")
def _predict_estimate(ex: Exercise, shared_pool: Any, private_pools: Any, *, rec: Any) -> None:
    if rec is None:
        ex.check_true("a recorded memory budget", rec is not None,
                      hint="this exercise needs memory_budget_gpt2 (data/reference/h200/)")
        return
    err = lb.estimate_errors(rec)
    for what, got, pool, hint in (
            ("estimate / measured, one shared pool", shared_pool, "shared",
             "a smaller graph captured after a larger one reuses the blocks it left: how much "
             "does the second sample add?"),
            ("estimate / measured, private pools", private_pools, "private",
             "each graph keeps its own memory: is the second-largest graph typical of the "
             "others?")):
        r = err[("vllm", 256, pool)]
        if r is None:
            ex.check_true(f"the record holds vLLM's estimate over {pool} pools", False,
                          hint="this record lacks the point (vllm, 256)")
            continue
        # a ratio within 5% of a band's edge: either side is defensible
        ex.check_one_of(what, got, sorted({band(r * f) for f in (0.95, 1.0, 1.05)}), hint=hint)


@exercise("16.2", "a size list under a start-up limit", "choose")
def _size_list(ex: Exercise, chosen: Any, reason: Any, *, rec: Any,
               startup_limit_s: float) -> None:
    if rec is None:
        ex.check_true("a recorded memory budget", rec is not None,
                      hint="this exercise needs memory_budget_gpt2 (data/reference/h200/)")
        return
    d = view(rec, MemoryBudget)
    fits = [r["list"] for r in lb.startup_rows(rec) if r["max_seq"] == 256
            and r["eager start-up (s)"] <= startup_limit_s and max(d.size_lists[r["list"]]) >= 256]
    ex.check_one_of("a list that fits both conditions", chosen, fits or ["none"],
                    hint="the start-up column at max_seq 256, and the largest size of the list "
                         "(d.size_lists)")
    ex.check_true("a reason in a few words", isinstance(reason, str) and bool(reason.strip()),
                  hint="which two numbers decided it?")


@exercise("16.3", "a flip from the margin", "read")
def _flip_from_margin(ex: Exercise, can_flip: Any, *, num: Any) -> None:
    if num is None:
        ex.check_true("a recorded numerics run", num is not None,
                      hint="this exercise needs numerics_gpt2 (data/reference/h200/)")
        return
    d = view(num, Numerics)
    delta = max(d.dtypes["bfloat16"].max_abs_diff(b) for b in d.sizes)
    got = sorted(can_flip) if isinstance(can_flip, (list, tuple, set)) else can_flip
    ex.check("steps that can flip", got, [i for i, m in enumerate(MARGINS) if m < 2 * delta],
             hint="the gap closes by up to 2 * delta")


@exercise("16.4", "a decision baked into a graph", "debug")
def _baked_decision(ex: Exercise, attend_fixed: Any) -> None:
    if not ex.check_function("attend_fixed is a function", attend_fixed):
        return
    try:
        mine = mn.baked_decision_demo(graph_api("cpu"), attend=attend_fixed)
    except TypeError:  # a body that returns None (no return yet)
        mine = {"replays_right": None}
    ex.check_true("your attention replays right at every length", mine["replays_right"],
                  hint="no host decision: mask by lens")
