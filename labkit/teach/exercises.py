"""Self-checking exercises: each check prints what passed and what did not, with a hint.

    from labkit.teach.exercises import Exercise
    ex = Exercise("2.1 pad a batch of 5")
    ex.check("padded size", answer, expected)
    ex.report()

A check never raises on a wrong answer (the notebook keeps running under papermill and
nbval); ``report()`` returns True only when every check passed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


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


@dataclass
class Exercise:
    """A named exercise collecting checks."""

    title: str
    results: list[tuple[str, bool, str]] = field(default_factory=list)

    def check(self, what: str, got: Any, expected: Any = True, *, hint: str = "",
              rel: float = 1e-6) -> bool:
        """Compare ``got`` with ``expected``; record and print the outcome."""
        if got is ... or got is None and expected is not None:
            ok, msg = False, "not answered yet (replace the ... / None)"
        else:
            ok = _equal(got, expected, rel)
            msg = "" if ok else f"got {got!r}, expected {expected!r}"
        self.results.append((what, ok, msg))
        mark = "PASS" if ok else "TODO"
        line = f"[{mark}] {self.title}: {what}"
        if not ok:
            line += f" -- {msg}" + (f" | hint: {hint}" if hint else "")
        print(line)
        return ok

    def check_true(self, what: str, condition: bool, *, hint: str = "") -> bool:
        """Record a condition that should hold."""
        return self.check(what, bool(condition), True, hint=hint)

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(ok for _, ok, _ in self.results)

    def report(self) -> bool:
        n_ok = sum(ok for _, ok, _ in self.results)
        print(f"{self.title}: {n_ok}/{len(self.results)} checks passed"
              + ("" if self.passed else " -- keep going, the hints above say what to look at"))
        return self.passed
