"""The exercise registry: each exercise's checks, kept out of the cell the learner edits.

An answer module (``labkit.teach.answers.nNN``, one per notebook) registers a function per
exercise with :func:`exercise`; the notebook cell holds only the learner's answers and
``nb.check("NN.M", name=value, ...)``, which runs the registered checks. The expected answers
therefore live here and in ``notebooks/solutions/``, never in the learner's cell.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labkit.teach.exercises import Exercise

#: what an exercise makes the learner do; ``read`` is reading a field or plugging numbers into
#: a formula the hint gives, the others make the learner think
KINDS = ("predict", "write", "debug", "choose", "read")
THINKING = frozenset(KINDS) - {"read"}

CheckFn = Callable[..., None]


@dataclass(frozen=True)
class Registered:
    """One exercise: its number (``"11.3"``), title, kind and check function."""

    number: str
    title: str
    kind: str
    fn: CheckFn

    @property
    def notebook(self) -> int:
        """The notebook number (``11`` for ``"11.3"``)."""
        return int(self.number.split(".")[0])

    @property
    def answers(self) -> tuple[str, ...]:
        """The learner's answers: the check function's parameters after ``ex`` that are not
        keyword-only (keyword-only ones are context the notebook passes: a record, a cache)."""
        params = list(inspect.signature(self.fn).parameters.values())[1:]
        return tuple(p.name for p in params if p.kind is not p.KEYWORD_ONLY)

    @property
    def names(self) -> tuple[str, ...]:
        """Every name ``nb.check`` must pass: the answers, then the context."""
        return tuple(inspect.signature(self.fn).parameters)[1:]


REGISTRY: dict[str, Registered] = {}


def _valid_number(number: str) -> bool:
    head, dot, tail = number.partition(".")
    return bool(dot) and head.isdigit() and tail.isdigit()


def exercise(number: str, title: str, kind: str) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn(ex, **answers)`` as the checks of exercise ``number`` (``"11.3"``)."""
    if not _valid_number(number):
        raise ValueError(f"exercise number {number!r} is not NN.M: write it like '11.3'")
    if kind not in KINDS:
        raise ValueError(f"exercise {number}: kind {kind!r} is not one of {KINDS}")

    def register(fn: CheckFn) -> CheckFn:
        if number in REGISTRY:
            raise ValueError(f"exercise {number} is registered twice "
                             f"({REGISTRY[number].fn.__module__} and {fn.__module__})")
        REGISTRY[number] = Registered(number, title, kind, fn)
        return fn

    return register


def run(number: str, notebook: int | None = None, /, **answers: Any) -> Exercise:
    """Run exercise ``number``'s checks on the learner's ``answers``; print and return them.

    ``notebook`` (the calling notebook's number) catches a check copied from another notebook.
    """
    if number not in REGISTRY:
        raise KeyError(f"no exercise {number!r} is registered: check the number in "
                       "nb.check(...) against the exercise's heading")
    reg = REGISTRY[number]
    if notebook is not None and reg.notebook != notebook:
        raise ValueError(f"exercise {number} belongs to notebook {reg.notebook:02d}, not "
                         f"{notebook:02d}: check the number in nb.check(...)")
    expected, given = set(reg.names), set(answers)
    if expected != given:
        missing, extra = sorted(expected - given), sorted(given - expected)
        raise TypeError(
            f"exercise {number} takes {', '.join(reg.names)}"
            + (f"; missing: {', '.join(missing)}" if missing else "")
            + (f"; not a name of this exercise: {', '.join(extra)}" if extra else "")
            + f": call nb.check({number!r}, " + ", ".join(f"{a}={a}" for a in reg.names)
            + ")")
    ex = Exercise(f"{number} {reg.title}")
    reg.fn(ex, **answers)
    ex.report()
    return ex
