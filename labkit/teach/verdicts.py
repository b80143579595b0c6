"""What a claim is and what a check says about it: the verdict words (:data:`VERDICTS`), the
:class:`Assessment` a check returns, the :class:`Claim` record, and the plain text and table
rows of an evaluated claim (:func:`describe`, :func:`verdict_rows`, :func:`verdict_counts`).

The claims themselves and their checks are in :mod:`labkit.teach.claims` (which imports every
name here too), :mod:`labkit.teach.serving_claims` and :mod:`labkit.teach.seed_claims`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

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
