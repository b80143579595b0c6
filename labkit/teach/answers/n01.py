"""Exercise checks of notebook 01 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach import exercises as choices
from labkit.teach import launch
from labkit.teach import launch as regime


@exercise("1.1", "predict the two clocks", "predict")
def _two_clocks(ex: Exercise, eager_kernel_like: Any, ratio_choice: Any, *, lo: Any) -> None:
    host_us, node_us = lo.data["host_per_launch"]["median"], lo.data["gpu_per_graph_node"]["median"]
    eager_k = lo.data["gpu_per_eager_kernel"]["median"]
    ex.check_one_of("GPU time per eager kernel is close to", eager_kernel_like,
                    choices.defensible_choices(eager_k, {"host": host_us, "node": node_us}),
                    hint="can the GPU run kernels faster than the CPU hands them over?")
    ex.check_one_of("launching vs replaying a step", ratio_choice,
                    choices.defensible_choices(host_us / node_us, {"a": 1, "b": 10, "c": 100}),
                    hint="several microseconds per launch, about one per graph node")


@exercise("1.2", "write the crossover search", "write")
def _crossover(ex: Exercise, crossover: Any, *, lo: Any) -> None:
    if not ex.check_function("crossover is a function (sweep, meet_ratio) -> numel or None",
                             crossover):
        return
    sweep = lo.data["sweep"]
    ex.check("crossover (elements per kernel)", crossover(sweep),
             launch.crossover_numel(lo, meet_ratio=1.1),
             hint="the first point, smallest numel first, with eager median <= 1.1 × graph median")
    ex.check("a looser meeting (2.5×)", crossover(sweep, 2.5),
             launch.crossover_numel(lo, meet_ratio=2.5), hint="use meet_ratio, not a fixed 1.1")
    ex.check("points in any order", crossover(list(reversed(sweep))),
             launch.crossover_numel(lo, meet_ratio=1.1), hint="sort by numel first")


@exercise("1.3", "predict launching vs reading", "predict")
def _launching_or_reading(ex: Exercise, eager_7b: Any, replayed_7b: Any, *, lo: Any,
                          decs: Mapping[str, Any], big: Mapping[str, Any]) -> None:
    est = regime.regime_rows(lo, decs, big)[-1]
    r = est["launch_us"] / est["read_us"]
    ok = ["launching"] if r > 1.25 else ["reading"] if r < 0.8 else \
        ["about the same", "launching" if r >= 1 else "reading"]
    ex.check_one_of("eager, batch 1", eager_7b, ok,
                    hint="kernels × host µs per launch vs weight bytes / bandwidth")
    share = est["read_share"]
    ex.check_one_of("replayed from a graph", replayed_7b,
                    ["reading"] if share > 0.55 else ["nodes"] if share < 0.45
                    else ["reading", "nodes"],
                    hint="kernels × GPU µs per graph node vs the weights' read time")
