"""Self-checking exercises: a check prints what passed and what did not, with a hint, and never
raises (open TODOs keep a notebook running), except in strict mode (``LABKIT_STRICT_EXERCISES=1``,
how the solutions run), where a failing or unanswered check, or no check, raises."""

from __future__ import annotations

import dis
import math
import os
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

import torch

#: the environment variable that turns strict mode on (``1``) or off (``0`` or unset)
STRICT_ENV = "LABKIT_STRICT_EXERCISES"


class StrictExerciseError(AssertionError):
    """A check failed (or was left unanswered) while strict mode was on."""


def strict_mode() -> bool:
    """True when ``LABKIT_STRICT_EXERCISES=1``; False when ``0``, empty or unset."""
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
    if isinstance(got, torch.Tensor) or isinstance(expected, torch.Tensor):
        return bool(torch.equal(torch.as_tensor(got), torch.as_tensor(expected)))
    return got == expected


_UNANSWERED = "not answered yet (replace the ... / None)"


def _unanswered(got: Any, expected: Any) -> bool:
    """``...`` is the TODO placeholder; ``None`` counts as unanswered unless it is expected."""
    return got is ... or (got is None and expected is not None)


#: what a "write" exercise's skeleton function (its body ``...``) compiles to, per Python
#: version: nothing but ``return None``
_RETURN_NONE = ([("RETURN_CONST", None)], [("LOAD_CONST", None), ("RETURN_VALUE", None)])


def skeleton(fn: Any) -> bool:
    """Whether ``fn``'s body does nothing but return ``None`` (a docstring, ``...`` or
    ``pass``): the skeleton a "write" exercise hands out, not yet written."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    ops = [(i.opname, i.argval) for i in dis.get_instructions(code)
           if i.opname not in ("RESUME", "NOP", "CACHE")]
    return ops in _RETURN_NONE


@dataclass
class Exercise:
    """A named exercise collecting checks (``strict`` overrides ``LABKIT_STRICT_EXERCISES``)."""

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
              rel: float = 1e-6, reveal: bool = False) -> bool:
        """Compare ``got`` with ``expected`` and print the outcome; a wrong answer is shown
        without the expected one unless ``reveal=True``."""
        if _unanswered(got, expected):
            return self._record(what, False, _UNANSWERED, hint, got, expected)
        ok = _equal(got, expected, rel)
        msg = ("" if ok else f"got {got!r}, expected {expected!r}" if reveal
               else f"{got!r} is not right yet")
        return self._record(what, ok, msg, hint, got, expected)

    def check_one_of(self, what: str, got: Any, accepted: Any, *, hint: str = "") -> bool:
        """Accept any of several defensible answers (``accepted``: a collection); strings are
        compared without case or surrounding spaces. The accepted answers are never printed."""
        options = list(accepted)
        if not options:
            raise ValueError(f"{self.title}: {what}: no accepted answer given")
        if _unanswered(got, options[0]):
            return self._record(what, False, _UNANSWERED, hint, got, options)

        def norm(v: Any) -> Any:
            return v.strip().lower() if isinstance(v, str) else v

        ok = any(_equal(norm(got), norm(a), 1e-6) for a in options)
        return self._record(what, ok, "" if ok else f"{got!r} is not right yet", hint, got,
                            options)

    def check_function(self, what: str, fn: Any, *, hint: str = "") -> bool:
        """Whether ``fn`` is a written function. If it is not a function, or its body is still
        the skeleton's ``...`` (:func:`skeleton`), one TODO line says so and the caller checks
        nothing more: a body not written yet is not run against every case."""
        if not callable(fn):
            return self.check(what, fn, "a function", hint=hint)
        if skeleton(fn):
            return self._record(what, False, "not answered yet (write the function's body)",
                                hint, ..., "a function")
        return True

    def check_true(self, what: str, condition: Any, *, hint: str = "") -> bool:
        """Record a condition that should hold (``...`` or ``None``: not answered yet)."""
        if _unanswered(condition, True):
            return self._record(what, False, _UNANSWERED, hint, condition, True)
        ok = bool(condition)
        return self._record(what, ok, "" if ok else "does not hold yet", hint, ok, True)

    @property
    def passed(self) -> bool:
        """True when at least one check ran and every check passed."""
        return bool(self.results) and all(ok for _, ok, _ in self.results)

    def report(self) -> None:
        """Print how many checks passed; in strict mode an exercise with no check raises."""
        n_ok = sum(ok for _, ok, _ in self.results)
        print(f"{self.title}: {n_ok}/{len(self.results)} checks passed"
              + ("" if self.passed else " -- keep going, the hints above say what to look at"))
        if not self.results and self._strict():
            raise StrictExerciseError(
                f"exercise {self.title!r}: expected at least one check, got none "
                f"({STRICT_ENV}=1: every exercise must check its answer)")


# ------------------------------------------- multiple choice against a measured ratio

def closest_choice(value: float, options: Mapping[str, float]) -> str:
    """The key of ``options`` whose value lies closest to ``value`` on a log scale."""
    if not options:
        raise ValueError("options must name at least one choice, got none")
    for key, v in [("value", value), *options.items()]:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{key} must be a ratio > 0, got {v!r}")
    return min(options, key=lambda k: abs(math.log(value / options[k])))


def defensible_choices(value: float, options: Mapping[str, float],
                       slack: float = 1.25) -> list[str]:
    """The keys of ``options`` a careful estimate could defend: the closest one on a log scale
    and any other whose distance is within a factor ``slack`` of the closest one's (a measured
    ratio near the middle of two options accepts both)."""
    best = closest_choice(value, options)
    if isinstance(slack, bool) or not isinstance(slack, (int, float)) or not slack >= 1:
        raise ValueError(f"slack must be a factor >= 1, got {slack!r}")
    d0 = abs(math.log(value / options[best]))
    return [k for k, v in options.items() if abs(math.log(value / v)) <= d0 + math.log(slack)]
