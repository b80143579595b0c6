"""Notebook 15's lessons: which launch record belongs to a run."""

from __future__ import annotations

import dataclasses

import pytest

from labkit.measure.results import load_reference
from labkit.teach import mixed as lx


def test_host_us_per_launch_only_from_a_launch_record_of_the_same_commit_and_gpu():
    mixed, launch = load_reference("mixed_small"), load_reference("launch_overhead")
    assert lx.host_us_per_launch(mixed, launch) is None          # another commit: not this run's
    same = dataclasses.replace(launch, env={**launch.env, "git_commit": mixed.env["git_commit"]})
    assert lx.host_us_per_launch(mixed, same) == pytest.approx(
        launch.data["host_per_launch"]["median"])
    other_gpu = dataclasses.replace(same, env={**same.env, "gpu_name": "another GPU"})
    assert lx.host_us_per_launch(mixed, other_gpu) is None
    assert lx.host_us_per_launch(mixed, None) is None


def test_same_commit_matches_a_short_hash_to_its_full_one():
    a = dataclasses.replace(load_reference("launch_overhead"))
    short = dataclasses.replace(a, env={**a.env, "git_commit": a.env["git_commit"][:7]})
    assert lx.same_commit(a, short) and lx.same_commit(short, a)
    none = dataclasses.replace(a, env={**a.env, "git_commit": None})
    assert not lx.same_commit(a, none)
