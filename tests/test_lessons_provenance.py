"""Where and when records were made (labkit.teach.decode), and the choices a
measured ratio defends (labkit.teach.exercises.defensible_choices)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from labkit.measure.results import load_reference
from labkit.teach import exercises as choices
from labkit.teach import decode as provenance


def rec(**env):
    base = dict(gpu_name="NVIDIA H200", cpu="Xeon", cpu_count=16, platform="Linux-a",
                git_commit="0e885744ef69", date="2026-12-01T20:09:44+00:00")
    return SimpleNamespace(env={**base, **env}, data={})


def test_one_machine_one_commit_minutes_apart():
    a, b = rec(), rec(git_commit="0e88574", date="2026-12-01T20:13:22+00:00")
    assert provenance.same_machine(a, b) and provenance.same_commit(a, b)
    assert provenance.minutes_apart(a, b) == pytest.approx(3 + 38 / 60)
    assert provenance.hours_between(b, a) < 0


def test_another_kernel_build_commit_or_a_missing_field_is_not_the_same():
    a = rec()
    assert not provenance.same_machine(a, rec(platform="Linux-b"))
    assert not provenance.same_machine(a, rec(cpu=None))
    assert not provenance.same_commit(a, rec(git_commit="50758a3"))
    assert not provenance.same_commit(a, rec(git_commit=None))
    with pytest.raises(ValueError, match="at least two"):
        provenance.same_machine(a)
    with pytest.raises(TypeError, match="environment record"):
        provenance.recorded_at(SimpleNamespace(data={}))


def test_the_recorded_references_say_what_notebooks_02_and_03_tell():
    small, roof, bench = (load_reference(n) for n in ("decode_small", "roofline_small", "bench"))
    assert provenance.same_machine(small, roof) and provenance.same_commit(small, roof)
    assert provenance.minutes_apart(small, roof) < 30
    assert provenance.hours_between(bench, small) > 12
    assert not provenance.same_commit(bench, small)


def test_defensible_choices_accept_the_neighbour_near_the_middle():
    opts = {"a": 1, "b": 10, "c": 100}
    assert choices.defensible_choices(9.9, opts) == ["b"]
    assert choices.defensible_choices(3.2, opts) == ["a", "b"]  # near the log middle
    assert choices.defensible_choices(1.0, opts, slack=1.0) == ["a"]
    with pytest.raises(ValueError, match="slack"):
        choices.defensible_choices(2.0, opts, slack=0.5)
