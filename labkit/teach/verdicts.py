"""What a claim is and what a check says about it: the verdict words (:data:`VERDICTS`), the
:class:`Assessment` a check returns, the :class:`Claim` record, and the plain text and table
rows of an evaluated claim (:func:`describe`, :func:`verdict_rows`, :func:`verdict_counts`).

The claims themselves and their checks are in :mod:`labkit.teach.claims` (which imports every
name here too), :mod:`labkit.teach.serving_claims` and :mod:`labkit.teach.seed_claims`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

#: the verdict of a claim that no record or primary source in reach can decide
CANNOT = "cannot be checked here"
VERDICTS = ("holds", "partly", "false", "depends", "untested", CANNOT)

#: where the seed claims come from (the articles' texts are not in this repository)
SEED_ORIGIN = ("one of the three seed articles on CUDA Graphs in vLLM this suite was built to "
               "test (not stored in this repository; quoted as notebook 09 quotes it)")


@dataclass
class Assessment:
    """A verdict with the numbers behind it and a sentence that uses them."""

    verdict: str
    evidence: dict
    explanation: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")


@dataclass(frozen=True)
class Claim:
    """One claim: its text, what it is checked against, and the check."""

    id: str
    claim: str
    measurement: str
    records: tuple[str, ...]
    check: Callable[[Mapping[str, dict]], Assessment]
    context: str = ""
    any_of: bool = False          # True: one of ``records`` is enough
    sources: tuple[str, ...] = field(default_factory=tuple)
    quote: str = ""               # the article's words, as this repository quotes them
    origin: str = SEED_ORIGIN     # where the claim comes from


def verdict_rows(results: Sequence[dict]) -> list[dict]:
    """Table rows: claim, verdict, the evidence in one sentence, what it was checked against."""
    return [{"claim": r["claim"], "verdict": r["verdict"], "evidence": r["explanation"],
             "checked against": ", ".join(r["records"]) or "vLLM source"} for r in results]


def describe(result: dict) -> str:
    """Plain text of one evaluated claim: the claim, its verdict, the evidence sentence and
    what real systems do."""
    lines = [f"CLAIM    : {result['claim']}"]
    if result.get("quote"):
        lines.append(f"QUOTED   : \"{result['quote']}\" ({result.get('origin') or SEED_ORIGIN})")
    lines += [f"VERDICT  : {result['verdict'].upper()}",
              f"MEASURED : {result['measurement']}"
              + (f" (records: {', '.join(result['records'])})" if result["records"] else ""),
              f"EVIDENCE : {result['explanation']}"]
    if result.get("context"):
        lines.append(f"CONTEXT  : {result['context']}")
    return "\n".join(lines)


def verdict_counts(results: Sequence[dict]) -> dict[str, int]:
    """How many claims got each verdict."""
    out = {v: 0 for v in VERDICTS}
    for r in results:
        out[r["verdict"]] += 1
    return {k: v for k, v in out.items() if v}


# ---------------------------------------------------------------------------- evidence rule

#: the fewest runs on each side for a timing verdict
MIN_RUNS = 2


@dataclass(frozen=True)
class Difference:
    """Two measured series of one quantity compared the way a verdict may use them.

    ``a`` and ``b`` are the medians; ``a_range`` / ``b_range`` the spread of each (p10–p90 of
    many samples, or min–max of repeated runs); ``runs`` the fewest runs on either side;
    ``interleaved``: whether the two series were sampled alternately in one process (only then
    does a clock or host change hit both alike). :attr:`word` is the only thing a verdict may
    conclude from it."""

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
        """True when the two spreads do not overlap: every run of one side lies beyond every
        run of the other."""
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
    """Compare two :class:`labkit.timing.Stats` (or their dicts): medians, p10–p90 spreads,
    ``n`` samples each."""
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
