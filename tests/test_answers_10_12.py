"""The checks of notebooks 10 and 12 that carry reasoning of their own: the modes 10.4 accepts
run what each situation needs under labkit's transcription of vLLM's lowering, 12.1's expected
batch is the definition searched, 12.2's bands; and the host-per-launch helper that tells a
speed-up over eager with the host of its own run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from labkit.measure.results import load_reference
from labkit.mixed import GRAPH_MODES, ROUTINES, resolve_mode
from labkit.model import preset
from labkit.teach.answers import n10, n12
from labkit.teach import launch as ll
from labkit.teach import roofline as lr


def runs(mode: str, support: str) -> str | None:
    try:
        return resolve_mode(mode, support)
    except ValueError:
        return None


def test_10_4_accepts_exactly_the_modes_that_run_what_each_situation_needs():
    # a: the attention can never be captured; graphs for the rest of every batch
    assert {m for m in GRAPH_MODES if runs(m, "NEVER") == "PIECEWISE"
            and ROUTINES[m][1] == "PIECEWISE"} == set(n10.MODE_CHOICES["a"])
    # b: decode only, any batch capturable: a FULL graph for every uniform decode step
    assert {m for m in GRAPH_MODES if ROUTINES[runs(m, "ALWAYS")][0] == "FULL"} == \
        set(n10.MODE_CHOICES["b"])
    # c: full graphs for uniform batches only, mixed batches too: what vLLM runs there
    assert {m for m in GRAPH_MODES if runs(m, "UNIFORM_BATCH") == "FULL_AND_PIECEWISE"} == \
        set(n10.MODE_CHOICES["c"])
    assert n10.MODE_CHOICES["d"] == ("NONE",)


@pytest.mark.parametrize("name, ctx", [("gpt2", 128), ("small", 64), ("gpt2", 256)])
def test_12_1_expected_batch_is_the_definition_and_the_lesson_formula(name, ctx):
    cfg = preset(name, dtype="bfloat16")
    assert n12.rows_reach_weights(cfg, ctx) == lr.weights_equal_batch(cfg, ctx)


def test_12_2_bands_and_the_recorded_growth():
    assert [n12.growth_band(g) for g in (1.0, 1.24, 1.25, 3.9, 4.0, 8.0)] == \
        ["a", "a", "b", "b", "c", "c"]
    for p in ("small", "gpt2"):
        assert n12.growth_band(n12.growth_to(load_reference(f"roofline_{p}"))) == "a"


def test_host_launch_beside_needs_one_host_and_one_commit():
    launch = load_reference("launch_overhead")
    same = load_reference("modes_gpt2")      # same machine and commit, minutes later
    other = load_reference("mixed_gpt2")     # another commit
    got = ll.host_launch_beside(same, launch)
    assert got is not None and got["host_us"] == launch.record.host_per_launch.median
    assert 0 < got["minutes_before"] < 60
    assert ll.host_launch_beside(other, launch) is None
    assert ll.host_launch_beside(same, None) is None
    moved = SimpleNamespace(env={**same.env, "cpu": "another CPU"}, created=same.created)
    assert ll.host_launch_beside(moved, launch) is None
