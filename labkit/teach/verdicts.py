"""Verdicts, the :class:`Assessment` a check returns, and the timing evidence rule."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Mapping, Sequence

#: no record or primary source in reach can decide the claim
CANNOT = "cannot be checked here"
#: the verdicts; ``untested`` may carry its reason: ``"untested (1 run)"``, ``"(not recorded)"``
VERDICTS = ("holds", "partly", "false", "depends", "untested", CANNOT)


@dataclass
class Assessment:
    """A verdict (:data:`VERDICTS`) with the numbers behind it."""

    verdict: str
    evidence: dict

    def __post_init__(self) -> None:
        if self.verdict.split(" (")[0] not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")


@dataclass(frozen=True)
class Claim:
    """One claim: a paraphrase, the records that answer it, the check, the article's words."""

    id: str
    claim: str
    measurement: str
    records: tuple[str, ...]
    check: Callable[[Mapping[str, Any]], Assessment]
    any_of: bool = False
    quote: str = ""


def timing_verdict(d: Difference, lower: str, higher: str, same: str = "false") -> str:
    """The verdict a :class:`Difference` allows: untested, ``lower``, ``higher`` or ``same``."""
    if not d.tested:
        return d.word
    return {"a lower": lower, "a higher": higher}.get(d.word, same)


# ---------------------------------------------------------------------------- evidence rule

#: the fewest runs on each side for a timing verdict
MIN_RUNS = 2


@dataclass(frozen=True)
class Difference:
    """Two measured series of one quantity: medians, spreads (p10–p90 of samples or min–max of
    runs), the fewest runs on a side, and whether they were sampled alternately (only then does a
    clock or host change hit both alike). A verdict may conclude only :attr:`word` from it."""

    a: float
    b: float
    a_range: tuple[float, float]
    b_range: tuple[float, float]
    runs: int
    interleaved: bool

    @property
    def ratio(self) -> float:
        """``a / b`` of the medians."""
        return self.a / self.b if self.b else float("inf")

    @property
    def separated(self) -> bool:
        """True when the two spreads do not overlap."""
        return self.a_range[1] < self.b_range[0] or self.b_range[1] < self.a_range[0]

    @property
    def word(self) -> str:
        """``"untested (1 run)"``, ``"untested (not interleaved)"``, ``"no difference
        measured"`` (the spreads overlap), ``"a lower"`` or ``"a higher"``."""
        if self.runs < MIN_RUNS:
            return f"untested ({self.runs} run{'s' if self.runs != 1 else ''})"
        if not self.interleaved:
            return "untested (not interleaved)"
        if not self.separated:
            return "no difference measured"
        return "a lower" if self.a < self.b else "a higher"

    @property
    def tested(self) -> bool:
        """True when :attr:`word` is a measured outcome (a difference, or none)."""
        return not self.word.startswith("untested")


def _stat(s: Any, key: str) -> float:
    return float(s[key] if isinstance(s, Mapping) else getattr(s, key))


def compare_stats(a: Any, b: Any, *, interleaved: bool) -> Difference:
    """Compare two :class:`labkit.timing.Stats` (or dicts): medians, p10–p90, ``n`` samples."""
    n = min(int(_stat(a, "n")), int(_stat(b, "n")))
    return Difference(_stat(a, "median"), _stat(b, "median"),
                      (_stat(a, "p10"), _stat(a, "p90")), (_stat(b, "p10"), _stat(b, "p90")),
                      n, interleaved)


def compare_runs(a: Sequence[float], b: Sequence[float], *, interleaved: bool) -> Difference:
    """Compare the values of repeated runs (one value per run): medians, min–max spreads."""
    if not a or not b:
        raise ValueError("compare_runs needs at least one run on each side")
    return Difference(statistics.median(a), statistics.median(b), (min(a), max(a)),
                      (min(b), max(b)), min(len(a), len(b)), interleaved)
