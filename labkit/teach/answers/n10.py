"""Exercise checks of notebook 10 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from labkit.measure import lesson_runs
from labkit.measure.records import Modes, view
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach import modes as lm

#: 10.4: every ``cudagraph_mode`` that does what each situation needs, so each is right.
#: a (attention never capturable): PIECEWISE, or the default FULL_AND_PIECEWISE, which vLLM
#:   lowers to PIECEWISE for such a backend (``resolve_cudagraph_mode_and_sizes``); FULL is
#:   refused there with an error, FULL_DECODE_ONLY leaves mixed batches eager.
#: b (decode only, attention capturable for any batch): every mode that replays a FULL graph
#:   for uniform decode batches; the pieces FULL_AND_PIECEWISE also captures go unused.
#: c (full graphs only for uniform batches, mixed batches too): FULL_AND_PIECEWISE, or FULL,
#:   which vLLM lowers to FULL_AND_PIECEWISE on a UNIFORM_BATCH backend (section 3).
#: d (every kernel launched on its own): NONE.
MODE_CHOICES: dict[str, tuple[str, ...]] = {
    "a": ("PIECEWISE", "FULL_AND_PIECEWISE"),
    "b": ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"),
    "c": ("FULL_AND_PIECEWISE", "FULL"),
    "d": ("NONE",),
}


def _answer(answers: Any, key: str) -> Any:
    return answers.get(key, ...) if isinstance(answers, Mapping) else ...


@exercise("10.1", "vLLM's runtime mode", "predict")
def _runtime_mode(ex: Exercise, predicted: Any, *, runners: Mapping[int, Any],
                  steps: Mapping[str, tuple[list[int], int]]) -> None:
    for key, (lens, q) in steps.items():
        mode, descriptor = runners[q].decide(lesson_runs.mixed_requests(runners[q], lens)[1])
        guess = _answer(predicted, key)
        got, n = guess if isinstance(guess, tuple) and len(guess) == 2 else (guess, guess)
        ex.check(f"{key}: runtime mode", got, mode,
                 hint="uniform decode -> FULL; mixed -> PIECEWISE; no capture size large "
                      "enough -> NONE")
        ex.check(f"{key}: tokens run", n, descriptor.num_tokens,
                 hint="pad up to the next capture size; NONE runs the tokens as they are")


@exercise("10.2", "launches per step", "read")
def _launches(ex: Exercise, full_launches: Any, piecewise_launches: Any,
              attention_only_launches: Any, eager_attentions: Any, *, rec: Any) -> None:
    n_layer = 12
    counted = view(rec, Modes).graph_launches_counted if rec is not None else {}
    for mode, got in (("full", full_launches), ("piecewise", piecewise_launches),
                      ("attention_only", attention_only_launches)):
        ex.check(mode, got, counted.get(mode, lm.graph_launches(mode, n_layer)),
                 hint="where is the step cut, and what lies before the first cut?")
    ex.check("eager attentions in PIECEWISE", eager_attentions, n_layer,
             hint="what does each layer run between two pieces?")


@exercise("10.3", "where PIECEWISE comes closest", "predict")
def _closest(ex: Exercise, closest_batch: Any, piecewise_flat: Any, *, rec: Any) -> None:
    if rec is None:
        ex.check_true("a recorded modes_gpt2 to compare with", False,
                      hint="this exercise needs the modes record (data/reference/h200/)")
        return
    d = view(rec, Modes)
    pw = cast(list[float], d.median_us("piecewise"))  # a modes record times every point
    fu = cast(list[float], d.median_us("full"))
    ratios = [p / f for p, f in zip(pw, fu)]
    ex.check("batch where PIECEWISE / FULL is smallest", closest_batch,
             d.batch_sizes[ratios.index(min(ratios))], hint="which side grows with the batch?")
    ex.check("PIECEWISE grows by a smaller share than FULL", piecewise_flat,
             pw[-1] / pw[0] < fu[-1] / fu[0],
             hint="what does the host launch at every batch size?")


@exercise("10.4", "choose the mode", "choose")
def _choose_mode(ex: Exercise, choice: Any, why_c: Any) -> None:
    for key, accepted in MODE_CHOICES.items():
        ex.check_one_of(f"situation {key}", _answer(choice, key), accepted,
                        hint="what can be captured, for which batches?")
    ex.check_true("a reason for situation c",
                  ... if why_c is ... else isinstance(why_c, str) and bool(why_c.strip()),
                  hint="one sentence: which batches get which graphs?")
