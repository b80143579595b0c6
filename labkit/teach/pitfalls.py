"""Notebook 07: the capture pitfalls, as rows.

One module per notebook topic: its lessons (pure: records and numbers to rows) and its
charts (plotly figures from records).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labkit.measure.records import Pitfalls, view


# ---------------------------------------------------------------------- lessons pitfalls
# The ``pitfalls`` record as lookups and table rows (notebooks 07-09), and notebook 07's quiz.

def _entries(record: Any) -> list[dict]:
    """The record's pitfall entries, checked against its kind (``SchemaError`` names a field)."""
    view(record, Pitfalls)
    return list(getattr(record, "data", record)["pitfalls"])


def by_name(record: Any) -> dict[str, dict]:
    """The ``pitfalls`` list of a record (a Result or its data), keyed by pitfall name."""
    return {p["name"]: p for p in _entries(record)}


def summary_rows(record: Any) -> list[dict]:
    """One table row per pitfall: name, rule, first line of the observed error, fixed?"""
    return [{"pitfall": p["name"], "rule broken": p.get("rule", ""),
             "what happened": ((p.get("error") or "").strip().splitlines() or [""])[0],
             "fixed": "yes" if p.get("fixed_ok") else "NO"} for p in _entries(record)]


@dataclass(frozen=True)
class QuizItem:
    """A snippet and the key (in :data:`labkit.measure.pitfalls.RULES`) of the rule it breaks."""

    code: str
    answer: str


QUIZ: dict[str, QuizItem] = {
    "a": QuizItem("def step(x):\n    n = int(x.argmax())\n    return x * n", "host_sync"),
    "b": QuizItem("out = graph.replay()\nstatic_in.copy_(next_batch)\nout2 = graph.replay()\n"
                  "loss = (out - out2).abs().sum()", "output_overwritten"),
    "c": QuizItem("def step(x):\n    return x[x != 0].mean()", "dynamic_shape"),
    "d": QuizItem("static_in = next_batch.cuda()\ngraph.replay()", "input_rebound"),
    "e": QuizItem("def step(x):\n    return x + random.gauss(0, 1)", "rng"),
    "f": QuizItem("with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n    model(x)   # warm-up\n"
                  "    with torch.cuda.graph(g):\n        y = model(x)\n"
                  "    model.load_state_dict(new_weights)\n    g.replay()", "autocast"),
}
