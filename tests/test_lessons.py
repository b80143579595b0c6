"""labkit.teach.lessons: launch arithmetic, timeline statistics, decode helpers (CPU)."""

from __future__ import annotations

import math

import pytest

from labkit.teach.lessons import record_data, record_provenance, stat
from labkit.teach import launch
from labkit.teach import decode as ld
from labkit.model import build_model, preset
from labkit.measure.results import Result
from labkit.timing import Stats, WorkPoint


def S(m: float) -> dict:
    return {"median": m, "p10": m, "p90": m, "mean": m, "n": 1, "unit": "us"}


SWEEP = [{"numel": 2**20, "eager": S(8.0), "graph": S(7.5)},
         {"numel": 1, "eager": S(7.0), "graph": S(0.8)},
         {"numel": 2**24, "eager": S(40.0), "graph": S(40.0)}]


def test_record_helpers():
    r = Result("x", {"a": 1}, {}, {"tier": "gpu", "gpu_name": "NVIDIA H200"}, 1, "2026-01-02")
    assert record_data(r) == {"a": 1} and record_data({"a": 2}) == {"a": 2}
    assert "NVIDIA H200" in record_provenance(r) and record_provenance({"a": 1}) == ""
    with pytest.raises(TypeError, match="Result or a dict"):
        record_data([1, 2])
    assert stat(S(3.0)) == 3.0 and stat(None) is None
    assert stat(Stats(2.0, 1.0, 3.0, 2.0, 3)) == 2.0


def test_expected_replay():
    assert launch.expected_replay_us(200, 0.84) == pytest.approx(168.0)
    with pytest.raises(ValueError, match="n_kernels"):
        launch.expected_replay_us(-1, 0.84)
    with pytest.raises(ValueError, match="gpu_per_node_us"):
        launch.expected_replay_us(10, float("nan"))


def test_crossover_and_sweep_rows():
    assert launch.crossover_numel(SWEEP) == 2**20
    assert launch.crossover_numel(SWEEP, meet_ratio=1.01) == 2**24
    assert launch.crossover_numel({"device": "cuda", "n_kernels": 200, "sweep": SWEEP}) == 2**20
    assert launch.crossover_numel([{"numel": 1, "eager": S(5), "graph": None}]) is None
    with pytest.raises(ValueError, match="meet_ratio"):
        launch.crossover_numel(SWEEP, meet_ratio=0.5)
    rows = launch.sweep_rows(SWEEP)
    assert [r["numel"] for r in rows] == [1, 2**20, 2**24]
    assert [r["verdict"] for r in rows] == ["launch-bound", "bandwidth-bound", "bandwidth-bound"]
    assert rows[0]["ratio"] == pytest.approx(7.0 / 0.8)
    assert rows[2]["gbs"] == pytest.approx(2**24 * 8 / 40e-6 / 1e9)
    assert rows[2]["mb"] == pytest.approx(2**24 * 8 / 1e6)
    none = launch.sweep_rows([{"numel": 1, "eager": S(5), "graph": None}])[0]
    assert none["verdict"] == "unknown" and none["gbs"] is None and none["ratio"] is None
    assert launch.point_at(SWEEP, 3)["numel"] == 1
    assert launch.point_at(SWEEP, 2**23)["numel"] == 2**24
    with pytest.raises(ValueError, match="numel >= 1"):
        launch.point_at(SWEEP, 0)


def test_sweep_accepts_timing_workpoints():
    pts = [WorkPoint(1, Stats(7, 7, 7, 7, 1), Stats(1, 1, 1, 1, 1)),
           WorkPoint(8, Stats(2, 2, 2, 2, 1), Stats(2, 2, 2, 2, 1))]
    assert launch.crossover_numel(pts) == 8


def test_timeline_stats_union_of_gpu_intervals():
    method = {"events": [{"lane": "CPU", "name": "l", "start_us": 0, "dur_us": 5},
                         {"lane": "GPU", "name": "a", "start_us": 5, "dur_us": 4},
                         {"lane": "GPU", "name": "b", "start_us": 7, "dur_us": 4},  # overlaps
                         {"lane": "GPU", "name": "c", "start_us": 15, "dur_us": 5}],
              "step_us": 20.0}
    st = launch.timeline_stats(method)
    assert st["n_cpu"] == 1 and st["n_gpu"] == 3
    assert st["span_us"] == 20 and st["gpu_busy_us"] == 11
    assert st["gpu_idle_fraction"] == pytest.approx(9 / 20)
    assert math.isnan(launch.timeline_stats({"events": []})["gpu_idle_fraction"])
    with pytest.raises(ValueError, match="lane"):
        launch.timeline_stats({"events": [{"lane": "TPU", "start_us": 0, "dur_us": 1}]})


@pytest.mark.parametrize("name,over", [("test", {}), ("test", {"max_batch": 3}),
                                       ("char", {"dtype": "bfloat16", "max_seq": 16})])
def test_kv_cache_bytes_matches_the_model(name, over):
    cfg = preset(name, **over)
    assert ld.kv_cache_bytes(cfg) == build_model(cfg).cache_bytes()


def test_decode_rows():
    bss = [1, 8]
    rec = {"preset": "small", "batch_sizes": bss, "kernels_per_step": 50,
           "times": {"eager": [S(1000.0), S(1100.0)], "graph": [S(100.0), S(200.0)]},
           "speedup_vs_eager": {"eager": [1.0, 1.0], "graph": [10.0, 5.5]}}
    rows = ld.decode_rows(rec)
    assert rows[1] == {"batch": 8, "eager µs": 1100.0, "eager tok/s": 7273, "graph µs": 200.0,
                       "graph tok/s": 40000, "graph speed-up": 5.5, "eager µs per GPU op": 22.0}
    assert list(ld.decode_rows(rec, ["graph"])[0]) == ["batch", "graph µs", "graph tok/s",
                                                       "graph speed-up", "eager µs per GPU op"]



def test_the_overlap_model_of_notebook_03():
    m = launch.step_model_us(100, 10.0, 300.0)
    assert m == {"host_issue_us": 1000.0, "eager_us": 1000.0, "graph_us": 300.0,
                 "speedup": pytest.approx(1000 / 300)}
    assert launch.step_model_us(10, 10.0, 300.0)["eager_us"] == 300.0
    with pytest.raises(ValueError, match="kernels"):
        launch.step_model_us(-1, 1.0, 1.0)
    from labkit.measure.results import load_reference

    rows = launch.model_vs_measured(load_reference("decode_small"),
                                    load_reference("launch_overhead"))
    assert [r["batch"] for r in rows] == [1, 8, 64]
    assert all(r["eager_measured_us"] >= r["eager_model_us"] for r in rows)


def test_the_host_cost_shown_beside_a_speed_up_says_where_it_comes_from():
    import dataclasses

    from labkit.measure.results import load_reference

    disp, lo = load_reference("dispatcher_small"), load_reference("launch_overhead")
    h = launch.host_cost_beside(disp, lo)
    assert h["host_us"] == lo.data["host_per_launch"]["median"]
    assert h["same_commit"] and h["same_host"] and abs(h["minutes_apart"]) < 60
    other = dataclasses.replace(lo, env={**lo.env, "git_commit": "0" * 40, "cpu": "another"})
    h = launch.host_cost_beside(disp, other)
    assert not h["same_commit"] and not h["same_host"]
    no_cuda = dataclasses.replace(lo, data={**lo.data, "host_per_launch": None})
    with pytest.raises(ValueError, match="host_per_launch"):
        launch.host_cost_beside(disp, no_cuda)
