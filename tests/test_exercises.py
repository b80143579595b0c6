"""labkit.teach.exercises: checks print PASS/TODO; strict mode (LABKIT_STRICT_EXERCISES=1) raises."""

from __future__ import annotations

import pytest
import torch

from labkit.teach.exercises import (STRICT_ENV, Exercise, StrictExerciseError, skeleton,
                                    strict_mode)


@pytest.fixture
def lenient(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STRICT_ENV, raising=False)


@pytest.fixture
def strict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STRICT_ENV, "1")


def test_checks_print_and_never_raise_by_default(lenient, capsys):
    ex = Exercise("1.1 demo")
    assert ex.check("right", 4, 4) is True
    assert ex.check("wrong", 5, 4, hint="add one") is False
    assert ex.check("todo", ..., 4) is False
    assert ex.check("close enough", 1.0 + 1e-9, 1.0) is True
    assert ex.check("tensors", torch.tensor([1, 2]), torch.tensor([1, 2])) is True
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[PASS] 1.1 demo: right"
    assert out[1] == "[TODO] 1.1 demo: wrong -- 5 is not right yet | hint: add one"
    assert out[2] == "[TODO] 1.1 demo: todo -- not answered yet (replace the ... / None)"
    assert not ex.passed


def test_report_prints_a_count_and_returns_nothing(lenient, capsys):
    ex = Exercise("1.2 demo")
    ex.check("a", 1, 1)
    ex.check("b", ..., 2)
    assert ex.report() is None      # a cell ending in ex.report() shows no stray True/False
    assert capsys.readouterr().out.splitlines()[-1].startswith("1.2 demo: 1/2 checks passed --")
    ok = Exercise("1.3 demo")
    ok.check("a", 1, 1)
    ok.report()
    assert ok.passed and capsys.readouterr().out.splitlines()[-1] == "1.3 demo: 1/1 checks passed"
    assert not Exercise("empty").passed


def test_reveal_false_keeps_the_expected_value_out_of_the_printed_line(lenient, capsys):
    ex = Exercise("7.1 quiz")
    ex.check("snippet a", "rng", "host_sync", reveal=False)
    line = capsys.readouterr().out
    assert "'rng' is not right yet" in line and "host_sync" not in line


def test_check_true_unanswered_is_not_reported_as_false(lenient, capsys):
    ex = Exercise("6.1 demo")
    assert ex.check_true("holds", ...) is False
    assert ex.check_true("holds", None) is False
    assert ex.check_true("holds", 0 < 1) is True
    assert ex.check_true("holds", 1 < 0) is False
    out = capsys.readouterr().out.splitlines()
    assert all("not answered yet" in line for line in out[:2])
    assert out[3] == "[TODO] 6.1 demo: holds -- does not hold yet"
    assert not any("got False" in line for line in out)


def test_strict_mode_raises_on_a_wrong_answer_naming_exercise_expected_and_got(strict):
    ex = Exercise("0.2 KV cache bytes")
    assert ex.check("right", 8, 8)
    with pytest.raises(AssertionError) as info:
        ex.check("test model (float32)", 12, 8)
    assert isinstance(info.value, StrictExerciseError)
    msg = str(info.value)
    assert "'0.2 KV cache bytes'" in msg and "'test model (float32)'" in msg
    assert "expected 8, got 12" in msg and STRICT_ENV in msg


def test_strict_mode_raises_on_an_unanswered_check(strict):
    with pytest.raises(StrictExerciseError, match=r"expected 4, got \.\.\. \(not answered\)"):
        Exercise("1.1 demo").check("todo", ..., 4)
    with pytest.raises(StrictExerciseError, match="expected True, got None"):
        Exercise("6.1 demo").check_true("holds", None)


def test_strict_mode_names_the_hidden_answer(strict):
    with pytest.raises(StrictExerciseError, match="expected 'host_sync', got 'rng'"):
        Exercise("7.1 quiz").check("snippet a", "rng", "host_sync", reveal=False)


def test_strict_mode_passes_right_answers_and_rejects_an_exercise_without_checks(strict):
    ex = Exercise("1.1 demo")
    assert ex.check("a", 2.0, 2.0) and ex.check_true("b", True)
    ex.report()
    with pytest.raises(StrictExerciseError, match="at least one check"):
        Exercise("empty").report()


def test_the_strict_argument_overrides_the_environment(monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "1")
    assert Exercise("x", strict=False).check("wrong", 1, 2) is False
    monkeypatch.delenv(STRICT_ENV)
    with pytest.raises(StrictExerciseError, match="expected 2, got 1"):
        Exercise("x", strict=True).check("wrong", 1, 2)


@pytest.mark.parametrize("value, expected", [("1", True), ("0", False), ("", False),
                                             (" 1 ", True)])
def test_strict_mode_values(monkeypatch, value, expected):
    monkeypatch.setenv(STRICT_ENV, value)
    assert strict_mode() is expected


def test_strict_mode_rejects_an_unknown_value(monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "yes")
    with pytest.raises(ValueError, match=r"LABKIT_STRICT_EXERCISES='yes'.*set it to 1"):
        strict_mode()
    monkeypatch.delenv(STRICT_ENV)
    assert strict_mode() is False


def _handed_out(x: int) -> int:
    """A "write" exercise's skeleton: a docstring and ``...``."""
    ...  # TODO


def _passed(x: int) -> None:
    pass


def _written(x: int) -> int:
    return x + 1


def test_skeleton_is_a_body_that_only_returns_none():
    assert skeleton(_handed_out) and skeleton(_passed) and skeleton(lambda: None)
    assert not skeleton(_written) and not skeleton(lambda x: x)
    assert not skeleton(len) and not skeleton(print) and not skeleton(3)


def test_check_function_says_once_that_a_body_is_not_written(lenient, capsys):
    ex = Exercise("17.2 demo")
    assert ex.check_function("targets", _handed_out, hint="h") is False
    assert ex.check_function("targets", ...) is False
    assert ex.check_function("targets", 3) is False
    assert ex.check_function("targets", _written) is True
    out = capsys.readouterr().out.splitlines()
    assert out == ["[TODO] 17.2 demo: targets -- not answered yet (write the function's body) "
                   "| hint: h",
                   "[TODO] 17.2 demo: targets -- not answered yet (replace the ... / None)",
                   "[TODO] 17.2 demo: targets -- 3 is not right yet"]
    assert [ok for _, ok, _ in ex.results] == [False, False, False]   # a written one adds none


def test_check_function_raises_on_a_skeleton_in_strict_mode(strict):
    with pytest.raises(StrictExerciseError, match=r"got \.\.\. \(not answered\)"):
        Exercise("17.2 demo").check_function("targets", _handed_out)
