"""Exercise checks of notebook 04 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from typing import Any

import torch

from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach import exercises as choices
from labkit.teach import memory as lm


def _letters(answer: Any) -> Any:
    """A set of letters from a set, list or string of letters (``...`` stays unanswered)."""
    if answer is ... or answer is None:
        return answer
    items = list(answer) if not isinstance(answer, str) else list(answer.replace(",", " "))
    return {str(x).strip().upper() for x in items if str(x).strip()}


@exercise("4.1", "shared vs largest private", "predict")
def _shared_size(ex: Exercise, shared_size: Any, *, rec: Any) -> None:
    s = lm.pool_memory_summary(rec)
    options = {"a": 1.0, "b": s["private_total"] / s["largest_private"],
               "c": s["private_total"] / (2 * s["largest_private"])}
    ex.check_one_of("shared pool size", shared_size,
                    choices.defensible_choices(s["shared_largest_first"] / s["largest_private"],
                                               options),
                    hint="what is the pool's peak, when every smaller graph fits in freed blocks?")


@exercise("4.2", "which order ends smaller", "choose")
def _which_order(ex: Exercise, order: Any, why: Any, *, rec: Any) -> None:
    s = lm.pool_memory_summary(rec)
    ex.check_one_of("which order ends smaller", order, [s["smaller_order"]],
                    hint="which sizes need a 20 MiB segment at all?")
    ex.check_one_of("why", why, [{"tie": "a", "largest_first": "b", "smallest_first": "c"}[
        s["smaller_order"]]], hint="which segments does the largest graph need?")


@exercise("4.3", "does B's output survive", "predict")
def _does_b_survive(ex: Exercise, survives: Any, keeps: Any, unsafe: Any) -> None:
    ex.check("B's output survives A's replay", survives, False,
             hint="what do A's kernels write on every replay, and where?")
    ex.check("what keeps B's value", _letters(keeps), {"B", "C"},
             hint="a reference does not stop a kernel from writing; a copy or a block of its own"
                  " does")
    ex.check("what breaks a shared pool", _letters(unsafe), {"B", "C"},
             hint="concurrent replays, and outputs read after another replay may overwrite them")


@exercise("4.4", "overwrite a kept output yourself", "write")
def _overwrite_by_hand(ex: Exercise, overwrite_by_hand: Any, *, cuda: Any, x_a: torch.Tensor,
                       x_b: torch.Tensor, stream: Any) -> None:
    if not ex.check_function("overwrite_by_hand is a function (cuda, x_a, x_b, stream) -> dict",
                             overwrite_by_hand):
        return
    got = overwrite_by_hand(cuda, x_a, x_b, stream)
    if not isinstance(got, dict) or not {"a_tmp_ptr", "out_b", "copy"} <= set(got):
        ex.check("overwrite_by_hand returns its dict", got, "a dict",
                 hint="return a dict with the keys a_tmp_ptr, out_b, copy and graphs")
        return
    ex.check_true("B's output lies in A's freed temporary (same data_ptr())",
                  got["out_b"].data_ptr() == got["a_tmp_ptr"],
                  hint="one pool for both captures, A's temporary dropped inside its capture")
    ex.check("the copy keeps B's value", got["copy"].unique().tolist(),
             (x_b + 100.0).unique().tolist(), hint="copy out_b right after B's replay")
    ex.check_true("replaying A changed the kept out_b",
                  not torch.equal(got["out_b"], got["copy"]),
                  hint="replay A after the copy, then read out_b")
