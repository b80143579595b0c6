"""Numerics under graphs (labkit.measure.numerics, labkit.teach.deploying): the eager
parts on CPU, the record, the baked-decision demonstration and its fixes, the flip-rate bins."""

from __future__ import annotations

import math

import pytest

from labkit.measure import records
from labkit.measure.results import load_result, save_result
from labkit.measure.numerics import (SHORT_KEYS, attend_baked, attend_in_graph,
                                     baked_decision_demo, measure_numerics, measure_recaptures)
from labkit.teach.deploying import flip_rate_by_margin, flip_rows, flipped_steps, kernel_diff_rows, margins_and_flips, recapture_rows, size_rows
from labkit.teach.simulated import graph_api

STEPS = 12


@pytest.fixture(scope="module")
def cpu_record():
    data = measure_numerics("test", (1, 4), ("float32", "bfloat16"), steps=STEPS, prompt_len=5,
                            repeats=2, inner=1, device="cpu")
    return data, records.parse("numerics_test", data)


def test_the_cpu_measurement_runs_eagerly_and_its_record_parses(cpu_record):
    _, rec = cpu_record
    assert isinstance(rec, records.Numerics) and rec.recaptures is None
    assert rec.sizes == [1, 4] and rec.fixed_size == 4 and rec.graphs is False
    assert set(rec.dtypes) == {"float32", "bfloat16"}
    for d in rec.dtypes.values():
        assert len(d.margins) == STEPS and all(m >= 0 for m in d.margins)
        # size 1 is the reference: the same history through the same kernels, bit for bit
        assert d.max_abs_diff(1) == 0.0 and d.flips(1) == 0 and d.first_divergence[1] is None
        assert d.graph_equals_eager == {} and d.graph_eager_max_abs_diff == {}  # no graphs
        # padded to the largest size, the request's logits ignore what the other rows hold
        assert d.fixed_size_invariant is True
        assert set(d.replay) == {1, 4} and d.replay[1].n == 2
        # a flip needs some logit to move by at least half the margin
        for b in rec.sizes:
            for m, f, dx in zip(d.margins, d.flipped[b], d.step_max_abs_diff[b]):
                assert not f or m <= 2 * dx
    assert rec.dtypes["float32"].fused_flips == {1: 0, 4: 0}
    assert rec.dtypes["float32"].reduced_precision_off == {}
    off = rec.dtypes["bfloat16"].reduced_precision_off
    assert set(off) == {1, 4} and off[1] == [0.0] * STEPS


def test_the_record_is_saved_and_loaded_through_json(cpu_record, tmp_path):
    data, rec = cpu_record
    path = save_result("numerics_test", data, {"preset": "test"}, tmp_path)
    back = load_result(path).record
    assert back.dtypes["bfloat16"].flipped == rec.dtypes["bfloat16"].flipped
    assert back.dtypes["float32"].first_divergence == rec.dtypes["float32"].first_divergence


def test_a_record_whose_lists_disagree_is_refused(cpu_record):
    data, _ = cpu_record
    bad = {**data, "dtypes": {"float32": {**data["dtypes"]["float32"],
                                          "flipped": {1: [False]}}}}
    with pytest.raises(records.SchemaError, match="flipped"):
        records.parse("numerics_test", bad)


@pytest.mark.parametrize("kw, match", [({"sizes": (2, 4)}, "include 1"),
                                       ({"steps": 1}, "at least 2 steps"),
                                       ({"steps": 40}, "max_seq")])
def test_bad_arguments_say_what_to_change(kw, match):
    with pytest.raises(ValueError, match=match):
        measure_numerics("test", **{"sizes": (1, 2), **kw}, device="cpu")


def test_the_lesson_tables_read_the_record(cpu_record):
    _, rec = cpu_record
    rows = size_rows(rec, "bfloat16")
    assert [r["padded size"] for r in rows] == [1, 4]
    assert rows[0]["max |Δlogit| vs 1"] == 0.0 and rows[0]["flips"] == f"0/{STEPS}"
    assert rows[0]["graph = eager"] is None and rows[0]["reduced-precision off max |Δlogit|"] == 0
    assert size_rows(rec, "float32")[1]["reduced-precision off max |Δlogit|"] is None
    margins, flipped = margins_and_flips(rec, "float32")
    assert margins == rec.dtypes["float32"].margins  # one size above 1
    assert flipped == rec.dtypes["float32"].flipped[4]
    assert sum(r["steps"] for r in flip_rows(rec, "float32")) == STEPS
    with pytest.raises(ValueError, match="no recaptures"):
        recapture_rows(rec)


def test_the_flipped_steps_are_listed_with_their_margin(cpu_record):
    data, _ = cpu_record
    d = data["dtypes"]["bfloat16"]
    flipped = {1: [False] * STEPS, 4: [j in (2, 5) for j in range(STEPS)]}
    margins = [0.5] * STEPS
    margins[5] = 0.01
    rec = records.parse("numerics_test", {**data, "dtypes": {"bfloat16": {
        **d, "flipped": flipped, "margins": margins}}})
    rows = flipped_steps(rec)
    assert [(r["padded size"], r["step"], r["margin"]) for r in rows] == [(4, 5, 0.01),
                                                                           (4, 2, 0.5)]
    assert rows[0]["max |Δlogit|"] == d["step_max_abs_diff"][4][5]


def test_flip_rate_by_margin_counts_each_bin():
    rows = flip_rate_by_margin([0.005, 0.02, 0.025, 0.5, 2.0, 0.2],
                               [True, True, False, False, False, True], (0.0, 0.01, 0.1, 1.0))
    assert [(r["margin from"], r["to"], r["steps"], r["flips"], r["flip rate"]) for r in rows] \
        == [(0.0, 0.01, 1, 1, 1.0), (0.01, 0.1, 2, 1, 0.5), (0.1, 1.0, 2, 1, 0.5)]
    assert flip_rate_by_margin([], [], (0.0, math.inf))[0]["flip rate"] is None
    with pytest.raises(ValueError, match="one margin"):
        flip_rate_by_margin([0.1], [True, False])
    with pytest.raises(ValueError, match="increasing"):
        flip_rate_by_margin([0.1], [True], (0.1, 0.1))


def test_the_baked_decision_replays_wrongly_past_the_bound_and_both_fixes_replay_right():
    api = graph_api("cpu")
    baked = baked_decision_demo(api, "baked", capture_len=4, run_lens=(4, 8, 12, 16))
    assert [r["right"] for r in baked["rows"]] == [True, True, False, False]
    assert baked["replays_right"] is False and baked["graphs"] == 1
    assert all(r["max_abs_diff"] > 0.1 for r in baked["rows"] if r["length"] > SHORT_KEYS)
    for variant, graphs in (("in_graph", 1), ("per_decision", 2)):
        fixed = baked_decision_demo(api, variant)
        assert fixed["replays_right"] is True and fixed["graphs"] == graphs
    # a learner's function is captured as the bug is: the fix passes, the bug does not
    assert baked_decision_demo(api, attend=attend_in_graph)["replays_right"] is True
    assert baked_decision_demo(api, attend=attend_baked)["replays_right"] is False
    # captured on the long side of the bound, the bug hides: the long path masks by the
    # device length, right for every length (so a test at one length finds nothing)
    long = baked_decision_demo(api, "baked", capture_len=12, run_lens=(4, 12))
    assert long["replays_right"] is True
    with pytest.raises(ValueError, match="variant"):
        baked_decision_demo(api, "eager")


def _recaptures(us, kernels, alignment):
    stats = [{"median": u, "p10": u - 1, "p90": u + 1, "mean": u, "n": 3} for u in us]
    ops = [[{"op": "addmm", "shapes": [[1, 768]], "alignment": a, "mod_1024": [0]}]
           for a in alignment]
    return {"preset": "gpt2", "dtype": "bfloat16", "captures": len(us), "repeats": 3,
            "inner": 1, "outputs_equal": True, "replay": stats, "kernels": kernels,
            "operands": ops, "streams": [16, 32][:len(us)], "blas_handles": [1, 1][:len(us)],
            "pools": [{"reserved_bytes": 2 << 20}] * len(us), "workspace": {}}


def test_the_recapture_tables_show_what_the_captures_differ_in(cpu_record):
    data, _ = cpu_record
    kernels = [{"gemm_a": {"count": 12.0, "us": 100.0}, "ln": {"count": 25.0, "us": 30.0}},
               {"gemm_b": {"count": 12.0, "us": 120.0}, "ln": {"count": 25.0, "us": 30.2}}]
    rec = records.parse("numerics_gpt2", {**data, "recaptures": _recaptures(
        [565.0, 589.0], kernels, [[256], [128]])})
    assert rec.recaptures.same_kernels() is False and rec.recaptures.same_operands() is False
    rows = recapture_rows(rec)
    assert [(r["kernels"], r["kernel GPU µs"], r["same kernels as 0"],
             r["same operand alignment as 0"]) for r in rows] == [
        (37, 130.0, True, True), (37, 150.2, False, False)]
    assert rows[1]["replay (µs)"] == "589.0 (588.0–590.0)" and rows[1]["stream"] == "0x20"
    assert [r["gaps (µs)"] for r in rows] == [435.0, 438.8]
    assert kernel_diff_rows(rec) == [
        {"kernel": "gemm_b", "count": [0, 12.0], "µs per replay": [0.0, 120.0],
         "spread (µs)": 120.0},
        {"kernel": "gemm_a", "count": [12.0, 0], "µs per replay": [100.0, 0.0],
         "spread (µs)": 100.0}]


@pytest.mark.gpu
def test_on_a_gpu_graphs_are_compared_with_eager_and_recaptures_recorded():
    data = measure_numerics("small", (1, 8), ("float32",), steps=16, repeats=3, inner=2)
    data["recaptures"] = measure_recaptures("small", captures=2, repeats=3, inner=2,
                                            profile_replays=2)
    rec = records.parse("numerics_small", data)
    d = rec.dtypes["float32"]
    assert rec.graphs is True and set(d.graph_equals_eager) == {1, 8}
    assert d.max_abs_diff(1) == 0.0
    rc = rec.recaptures
    assert rc.outputs_equal is True and len(rc.replay) == 2 and len(rc.kernels) == 2
    assert all(rc.kernels) and all(rc.operands)
