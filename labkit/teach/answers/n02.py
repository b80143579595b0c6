"""Exercise checks of notebook 02 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from typing import Any

from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach import exercises as choices
from labkit.teach import launch

#: exercise 2.3's bins of the idle share, and the margin a share near a bin's edge gets
IDLE_BINS = {"a": (0.0, 0.35), "b": (0.35, 0.65), "c": (0.65, 1.0)}
IDLE_MARGIN = 0.05


@exercise("2.1", "predict the batch's effect", "predict")
def _batch_effect(ex: Exercise, answer: Any, pays_for: Any, *, rec: Any) -> None:
    t = [s["median"] for s in rec.data["times"]["eager"]]
    b_lo, b_hi = rec.data["batch_sizes"][0], rec.data["batch_sizes"][-1]
    ok = choices.defensible_choices(t[-1] / t[0], {"a": 1, "b": 8, "c": 64})
    ex.check_one_of(f"batch {b_hi} vs batch {b_lo}", answer, ok,
                    hint="does a larger batch launch more kernels?")
    ex.check_one_of("what the eager step pays for", pays_for,
                    ["launches"] if ok == ["a"] else ["arithmetic"] if "a" not in ok
                    else ["launches", "arithmetic"],
                    hint="the number of kernels per step does not depend on the batch")


@exercise("2.2", "find the bug: tokens per second", "debug")
def _tokens_per_s(ex: Exercise, tokens_per_s: Any, bug: Any, *, rec: Any) -> None:
    if not ex.check_function("tokens_per_s is a function (batch_size, step_us) -> float",
                             tokens_per_s):
        return
    d = rec.data
    for b, s, recorded in zip(d["batch_sizes"], d["times"]["eager"], d["tokens_per_s"]["eager"]):
        ex.check(f"eager tokens/s at batch {b}", tokens_per_s(b, s["median"]), recorded,
                 rel=0.001, hint="steps per second × rows per step")
    ex.check_true("the bug is explained", isinstance(bug, str) and len(bug.strip()) > 0,
                  hint="a sentence: what did the function return, and what should it?")


@exercise("2.3", "predict the idle GPU", "predict")
def _idle_gpu(ex: Exercise, idle_share: Any, *, tl: Any) -> None:
    idle = launch.timeline_stats(tl.data["eager"])["gpu_idle_fraction"]
    ok = [k for k, (low, high) in IDLE_BINS.items()
          if low - IDLE_MARGIN <= idle <= high + IDLE_MARGIN]
    ex.check_one_of("share of the traced span the GPU is idle", idle_share, ok,
                    hint="notebook 01: a small kernel runs for about a microsecond, a launch "
                         "takes several")
