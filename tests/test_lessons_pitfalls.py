"""labkit.teach.pitfalls: reading a ``pitfalls`` record, and the quiz (CPU)."""

from __future__ import annotations

import pytest

from labkit.measure.records import SchemaError

from labkit.measure.pitfalls import RULES
from labkit.teach import pitfalls


def test_quiz_answers_are_rule_keys():
    assert {item.answer for item in pitfalls.QUIZ.values()} == set(RULES)


def _fake_record() -> dict:
    return {"pitfalls": [
        {"name": "host_sync", "rule": RULES["host_sync"], "what": "w",
         "error": "CUDA graph capture failed: host synchronisation\n  fix: ...", "fix": "f",
         "fixed_ok": True, "details": {}},
        {"name": "rng", "rule": RULES["rng"], "what": "w", "error": "", "fix": "f",
         "fixed_ok": False, "details": {}},
    ]}


def test_summary_rows_and_by_name():
    rec = _fake_record()
    rows = pitfalls.summary_rows(rec)
    assert [r["pitfall"] for r in rows] == ["host_sync", "rng"]
    assert rows[0]["what happened"] == "CUDA graph capture failed: host synchronisation"
    assert rows[0]["fixed"] == "yes" and rows[1]["fixed"] == "NO"
    assert rows[1]["what happened"] == ""
    assert set(pitfalls.by_name(rec)) == {"host_sync", "rng"}
    with pytest.raises(SchemaError, match=r"'data.pitfalls' is missing"):
        pitfalls.by_name({"x": 1})
    with pytest.raises(SchemaError, match="fixed_ok"):
        pitfalls.summary_rows({"pitfalls": [{"name": "rng", "fixed_ok": "yes"}]})
