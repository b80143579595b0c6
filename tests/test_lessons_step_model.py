"""The overlap model of notebook 03: step ≈ max(host issue, GPU time), against the records."""

from __future__ import annotations

import pytest

from labkit.measure.results import load_reference
from labkit.teach.lessons import launch


def load(name: str):
    return load_reference(name)


def test_step_model_is_the_max_of_host_issue_and_gpu_time():
    m = launch.step_model_us(100, 5.0, 200.0)
    assert m == {"host_issue_us": 500.0, "eager_us": 500.0, "graph_us": 200.0, "speedup": 2.5}
    m = launch.step_model_us(10, 5.0, 200.0)
    assert m["eager_us"] == 200.0 and m["speedup"] == 1.0
    with pytest.raises(ValueError, match="gpu_us"):
        launch.step_model_us(10, 5.0, -1.0)


def test_model_vs_decode_records_uses_their_values():
    lo, dec = load("launch_overhead"), load("decode_small")
    rows = launch.model_vs_measured(dec, lo)
    d, host = dec.data, lo.data["host_per_launch"]["median"]
    assert [r["batch"] for r in rows] == d["batch_sizes"]
    for i, r in enumerate(rows):
        gpu = d["times"]["graph"][i]["median"]
        eager = d["times"]["eager"][i]["median"]
        assert r["eager_model_us"] == pytest.approx(max(d["kernels_per_step"] * host, gpu))
        assert r["eager_measured_us"] == eager
        assert r["measured_over_model"] == pytest.approx(eager / r["eager_model_us"])


def test_model_vs_bench_record():
    lo, bench = load("launch_overhead"), load("bench")
    rows = launch.bench_vs_model(bench, lo, {"small": 65})
    assert rows and all(r["model"] == "small" for r in rows)
    first = next(r for r in bench.data["rows"] if r["model"] == "small")
    assert rows[0]["eager_measured_us"] == first["eager_us"]
    assert rows[0]["gpu_us"] == first["graph_us"]


def test_model_vs_measured_refuses_a_record_without_graph_times():
    lo = load("launch_overhead")
    dec = {"batch_sizes": [1], "kernels_per_step": 10, "times": {"eager": [{"median": 1.0}]}}
    with pytest.raises(ValueError, match="eager and graph"):
        launch.model_vs_measured(dec, lo)
