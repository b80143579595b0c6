"""Self-checking exercises: each check prints what passed and what did not, with a hint.

    from labkit.teach.exercises import Exercise
    ex = Exercise("2.1 pad a batch of 5")
    ex.check("padded size", answer, expected)
    ex.report()

By default a check never raises on a wrong answer (a student notebook with open TODOs keeps
running under papermill and nbval); :attr:`Exercise.passed` says whether every check passed.

**Strict mode** (``LABKIT_STRICT_EXERCISES=1``, how ``make test`` runs the solutions): a
failing or unanswered check raises :class:`StrictExerciseError` naming the exercise, the check,
the expected and the given answer, and so does an exercise that made no check at all.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

#: the environment variable that turns strict mode on (``1``) or off (``0`` or unset)
STRICT_ENV = "LABKIT_STRICT_EXERCISES"


class StrictExerciseError(AssertionError):
    """A check failed (or was left unanswered) while strict mode was on."""


def strict_mode() -> bool:
    """True when ``LABKIT_STRICT_EXERCISES=1``; False when it is ``0``, empty or unset.

    Read at every check, so a test or a kernel can switch it without re-importing."""
    value = os.environ.get(STRICT_ENV, "").strip()
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise ValueError(f"{STRICT_ENV}={value!r} is not understood: set it to 1 (every exercise "
                     "check must pass, for solution notebooks) or 0 / unset it (checks only "
                     "print)")


def _equal(got: Any, expected: Any, rel: float) -> bool:
    if isinstance(expected, float) or isinstance(got, float):
        try:
            return math.isclose(float(got), float(expected), rel_tol=rel, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    try:
        import torch

        if isinstance(got, torch.Tensor) or isinstance(expected, torch.Tensor):
            return bool(torch.equal(torch.as_tensor(got), torch.as_tensor(expected)))
    except ImportError:  # pragma: no cover
        pass
    return got == expected


def _unanswered(got: Any, expected: Any) -> bool:
    """``...`` is the TODO placeholder; ``None`` counts as unanswered unless it is expected."""
    return got is ... or (got is None and expected is not None)


@dataclass
class Exercise:
    """A named exercise collecting checks.

    ``strict``: ``None`` (default) follows ``LABKIT_STRICT_EXERCISES``; True or False
    overrides it for this exercise.
    """

    title: str
    results: list[tuple[str, bool, str]] = field(default_factory=list)
    strict: bool | None = field(default=None, kw_only=True)

    def _strict(self) -> bool:
        return strict_mode() if self.strict is None else bool(self.strict)

    def _record(self, what: str, ok: bool, msg: str, hint: str, got: Any,
                expected: Any) -> bool:
        self.results.append((what, ok, msg))
        line = f"[{'PASS' if ok else 'TODO'}] {self.title}: {what}"
        if not ok:
            line += f" -- {msg}" + (f" | hint: {hint}" if hint else "")
        print(line)
        if not ok and self._strict():
            shown = "... (not answered)" if got is ... else repr(got)
            raise StrictExerciseError(
                f"exercise {self.title!r}, check {what!r}: expected {expected!r}, got {shown} "
                f"({STRICT_ENV}=1: every check must pass; fix the answer in the solution "
                "notebook)")
        return ok

    def check(self, what: str, got: Any, expected: Any = True, *, hint: str = "",
              rel: float = 1e-6, reveal: bool = True) -> bool:
        """Compare ``got`` with ``expected``; record and print the outcome.

        ``reveal=False`` keeps the expected value out of the printed line (for multiple-choice
        answers, where it would give the answer away); strict mode's error always names it.
        """
        if _unanswered(got, expected):
            ok, msg = False, "not answered yet (replace the ... / None)"
        else:
            ok = _equal(got, expected, rel)
            if ok:
                msg = ""
            elif reveal:
                msg = f"got {got!r}, expected {expected!r}"
            else:
                msg = f"{got!r} is not right yet"
        return self._record(what, ok, msg, hint, got, expected)

    def check_true(self, what: str, condition: Any, *, hint: str = "") -> bool:
        """Record a condition that should hold (``...`` or ``None``: not answered yet)."""
        if _unanswered(condition, True):
            return self._record(what, False, "not answered yet (replace the ... / None)", hint,
                                condition, True)
        ok = bool(condition)
        return self._record(what, ok, "" if ok else "does not hold yet", hint, ok, True)

    @property
    def passed(self) -> bool:
        """True when at least one check ran and every check passed."""
        return bool(self.results) and all(ok for _, ok, _ in self.results)

    def report(self) -> None:
        """Print how many checks passed. Returns nothing (so a notebook cell ending in
        ``ex.report()`` shows no stray ``True``/``False``); read :attr:`passed` for the verdict.
        In strict mode an exercise that made no check raises :class:`StrictExerciseError`."""
        n_ok = sum(ok for _, ok, _ in self.results)
        print(f"{self.title}: {n_ok}/{len(self.results)} checks passed"
              + ("" if self.passed else " -- keep going, the hints above say what to look at"))
        if not self.results and self._strict():
            raise StrictExerciseError(
                f"exercise {self.title!r}: expected at least one check, got none "
                f"({STRICT_ENV}=1: every exercise must check its answer)")
