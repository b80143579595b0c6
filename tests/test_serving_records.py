"""Serving reference records on CPU: repeats and their spread, the latency–load curve and its
record kind, the defaults of every serving record, and `labkit serve --record` (with small
stand-in defaults: the real ones need a GPU)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from labkit.measure import records
from labkit.measure.results import SchemaError, load_reference, load_result
from labkit.measure.serve import check_serving, measure_interleaved, measure_serving, spread
from labkit.measure.serve_load import check_rates, load_trace, measure_load_curve
from labkit.measure.records import Recipe as R
from labkit.suite import cli, serve_cli
from labkit.suite.cli import main
from labkit.serving.traces import TraceRequest

TRACE = [TraceRequest(0.0, 3, 4), TraceRequest(0.0, 5, 2), TraceRequest(0.02, 2, 3)]


def test_repeats_keep_every_runs_metrics_and_their_spread():
    data = measure_serving("test", TRACE, "full", device="cpu", max_batch=2,
                           capture_sizes=[1, 2], clock="sim", repeats=3, warmup_requests=2)
    assert len(data["repeats"]) == 3
    # the simulated clock: every run is the same schedule
    assert all(m == data["repeats"][0] for m in data["repeats"])
    assert data["metrics"]["tpot_ms"] == data["repeats"][0]["tpot_ms"]
    s = data["spread"]["tpot_ms.median"]
    assert s["min"] == s["median"] == s["max"] == data["metrics"]["tpot_ms"]["median"]
    assert s["n"] == 3
    assert records.view(data, records.Serve).repeats == data["repeats"]


def test_repeats_come_after_a_discarded_warm_up_run():
    one = measure_serving("test", TRACE, "eager", device="cpu", max_batch=2, clock="sim")
    three = measure_serving("test", TRACE, "eager", device="cpu", max_batch=2, clock="sim",
                            repeats=3)
    none = measure_serving("test", TRACE, "eager", device="cpu", max_batch=2, clock="sim",
                           repeats=3, warmup_runs=0)
    assert (one["warmup_runs"], three["warmup_runs"], none["warmup_runs"]) == (0, 1, 0)
    assert len(three["repeats"]) == len(none["repeats"]) == 3
    assert "gpu_busy_share" not in three["metrics"]    # CPU: the GPU was not timed
    with pytest.raises(ValueError, match="warmup_runs"):
        measure_serving("test", TRACE, "eager", device="cpu", clock="sim", warmup_runs=-1)


BREAKER_ARMS = {"breaker off": {"mode": "full", "capture_sizes": [1]},
                "breaker on": {"mode": "full", "capture_sizes": [1],
                               "breaker": {"window": 1, "threshold": 1.0, "cooldown_s": 5.0}}}


def test_interleaved_arms_alternate_after_a_warm_up_and_share_their_graphs(monkeypatch):
    from labkit.measure import serve

    built = []
    real = serve.make_step_fn
    monkeypatch.setattr(serve, "make_step_fn",
                        lambda model, mode, sizes=None: built.append((mode, sizes)) or
                        real(model, mode, sizes))
    served = []
    real_serve = serve._serve
    monkeypatch.setattr(serve, "_serve", lambda *a, **k: served.append(k["breaker"]) or
                        real_serve(*a, **k))
    data = measure_interleaved("test", TRACE, BREAKER_ARMS, device="cpu", max_batch=2,
                               clock="sim", repeats=3)
    assert built == [("full", [1])]          # breaker off and on replay the same graphs
    # the warm-up round (B A), then A B, B A, A B: every round reverses the one before
    assert [b is not None for b in served] == [True, False, False, True, True, False,
                                               False, True]
    assert data["interleaved"] and data["warmup_runs"] == 1
    assert data["order"] == [["breaker off", "breaker on"], ["breaker on", "breaker off"],
                             ["breaker off", "breaker on"]]
    rec = records.view(data, records.Serve)
    assert rec.interleaved and list(rec.arms) == list(BREAKER_ARMS)
    on, off = data["arms"]["breaker on"], data["arms"]["breaker off"]
    assert len(on["repeats"]) == len(off["repeats"]) == 3
    assert on["breaker_trips_s"] == [0.0] and off["breaker_trips_s"] == []
    assert on["metrics"]["graph_hit_rate"] < off["metrics"]["graph_hit_rate"]
    assert data["mode"] == "full" and data["metrics"] == off["metrics"]  # the first arm's


@pytest.mark.parametrize("arms, match", [
    ({"eager": {"mode": "eager"}}, "at least two arms"),
    ({"a": {"mode": "eager"}, "b": {"sizes": [1]}}, "arm 'b'"),
    ({"a": {"mode": "eager"}, "b": {"mode": "eager", "breaker": {"window": 2}}}, "breaker"),
])
def test_bad_arms_are_named(arms, match):
    with pytest.raises(ValueError, match=match):
        measure_interleaved("test", TRACE, arms, device="cpu", clock="sim")


def test_the_interleaved_records_bind_to_their_measure_function():
    for name in ("serve_graphs_ab", "serve_breaker_ab"):
        assert records.recipe(name).function == "serve:measure_interleaved"
        kw = records.measure_kwargs(records.default_params(name))
        inspect.signature(measure_interleaved).bind(**kw)
        assert kw["repeats"] >= 3 and kw["warmup_runs"] >= 1 and kw["clock"] == "real"
        for arm in kw["arms"].values():
            check_serving(kw["preset_name"], arm["mode"], clock="real", dtype=kw["dtype"],
                          max_batch=kw["max_batch"], breaker=arm.get("breaker"))


def test_spread_of_hand_made_runs():
    runs = [{"tpot_ms": {"median": v, "p99": 2 * v}, "output_throughput": 10 * v}
            for v in (3.0, 1.0, 2.0)]
    s = spread(runs)
    assert s["tpot_ms.median"] == {"min": 1.0, "median": 2.0, "max": 3.0, "n": 3}
    assert s["output_throughput"] == {"min": 10.0, "median": 20.0, "max": 30.0, "n": 3}
    assert s["ttft_ms.p99"] is None


@pytest.mark.parametrize("bad, match", [({"repeats": 0}, "repeats"),
                                        ({"warmup_requests": -1}, "warmup_requests")])
def test_bad_repeats_and_warmup_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        measure_serving("test", TRACE, "eager", device="cpu", clock="sim", **bad)


def test_load_curve_on_the_simulated_clock():
    data = measure_load_curve("test", ["eager", "full"], [5.0, 500.0], n_requests=12,
                              device="cpu", dtype="float32", max_batch=4,
                              capture_sizes=[1, 2, 4], clock="sim", decode_ms=10.0,
                              warmup_requests=2)
    rec = records.view(data, records.ServeLoad)
    assert [(p.mode, p.rate) for p in rec.points] == [("eager", 5.0), ("eager", 500.0),
                                                      ("full", 5.0), ("full", 500.0)]
    assert rec.warmup_runs == 1    # a discarded run of the lowest rate's trace per mode
    # the H200 reference was recorded with the warm-up run too
    assert records.view(load_reference("serving_load_gpt2"), records.ServeLoad).warmup_runs == 1
    assert all(p.metrics["completed"] == 12 for p in rec.points)
    # on the simulated clock a step costs the same in every mode: the same schedule
    assert rec.series("eager", "ttft_ms.p99") == rec.series("full", "ttft_ms.p99")
    # a higher rate queues requests: waiting for a slot makes TTFT grow
    lo, hi = rec.series("eager", "ttft_ms.p99")
    assert hi > lo
    assert rec.series("eager", "nope.p99") == [None, None]


def test_load_trace_is_seeded_and_fits():
    a, b = load_trace(20.0, 30, seed=7, max_seq=64), load_trace(20.0, 30, seed=7, max_seq=64)
    assert a == b and len(a) == 30
    assert all(r.prompt_len + r.output_len <= 64 for r in a)
    assert load_trace(20.0, 30, seed=8, max_seq=64) != a


@pytest.mark.parametrize("rates", [[], [0.0], [2.0, 1.0], [1.0, 1.0], "fast", [True]])
def test_bad_rates_are_named(rates):
    with pytest.raises(ValueError, match="rates"):
        check_rates(rates)


def test_bad_modes_are_named():
    with pytest.raises(ValueError, match="modes"):
        measure_load_curve("test", [], [1.0], device="cpu", clock="sim")
    with pytest.raises(ValueError, match="mode 'fast'"):
        measure_load_curve("test", ["fast"], [1.0], device="cpu", clock="sim")


def test_serve_load_kind_refuses_a_point_outside_its_rates():
    data = {"modes": ["eager"], "rates": [1.0],
            "points": [{"mode": "eager", "rate": 2.0, "metrics": {}}]}
    with pytest.raises(SchemaError, match="points\\[0\\]"):
        records.parse("serving_load_gpt2", data)
    assert records.kind_of("serving_load_gpt2") is records.ServeLoad
    assert records.kind_of("serve_full") is records.Serve


@pytest.mark.parametrize("name", records.SERVE_RECORDS)
def test_serving_defaults_bind_to_their_measure_function(name):
    from labkit.measure.records.recipes import measure_function

    params = records.default_params(name)
    inspect.signature(measure_function(name)).bind(**records.measure_kwargs(params))
    # the settings are checked the same way a run checks them (no model is built here)
    kw = records.measure_kwargs(params)
    if records.recipe(name).function == "serve:measure_serving":
        check_serving(kw["preset_name"], kw["mode"], clock=kw["clock"], dtype=kw["dtype"],
                      max_batch=kw["max_batch"], breaker=kw.get("breaker"))
        assert kw["max_requests"] <= 100 and kw["clock"] == "real"


def test_record_serving_writes_every_record_and_reports_failures(tmp_path, monkeypatch):
    trace = tmp_path / "tiny.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,3,4\n0,5,2\n0.02,2,3\n")
    small = {"preset": "test", "trace": str(trace), "max_batch": 2, "clock": "sim"}
    fake = {"serve_eager": R("serve:measure_serving", {**small, "repeats": 2}),
            "serve_full": R("serve:measure_serving", {**small, "mode": "full",
                                                      "capture_sizes": [1, 2]}),
            "serve_exact": R("serve:measure_serving", {**small, "mode": "warp"}),
            "serving_load_gpt2": R("serve_load:measure_load_curve",
                                   {"preset": "test", "modes": ["eager"], "rates": [50.0],
                                    "n_requests": 4, "dtype": "float32", "clock": "sim",
                                    "max_batch": 2})}
    for name, entry in fake.items():  # in place: the registry the recorder reads
        monkeypatch.setitem(records.RECIPES, name, entry)
    lines: list[str] = []
    run, failed = serve_cli.record_serving(tmp_path / "runs", list(fake), echo=lines.append)
    assert failed == ["serve_exact"]
    assert any("serve_exact: FAILED" in ln and "warp" in ln for ln in lines)
    got = sorted(p.stem for p in (run / "results").glob("*.json"))
    assert got == ["serve_eager", "serve_full", "serving_load_gpt2"]
    rec = load_result(run / "results" / "serve_eager.json")
    assert len(rec.data["repeats"]) == 2 and rec.env  # provenance is written
    assert isinstance(load_result(run / "results" / "serving_load_gpt2.json").record,
                      records.ServeLoad)


def test_labkit_serve_record_refuses_unknown_names_and_stray_only(tmp_path, capsys):
    assert main(["serve", "--record", "--only", "serve_nope", "--out", str(tmp_path)]) == 2
    assert "serve_nope" in capsys.readouterr().err
    assert main(["serve", "--only", "serve_full", "--out", str(tmp_path)]) == 2
    assert "--record" in capsys.readouterr().err
    assert not any(Path(tmp_path).iterdir())


def test_without_the_timeline_a_record_keeps_per_request_latencies():
    full = measure_serving("test", TRACE, "eager", device="cpu", max_batch=2, clock="sim")
    small = measure_serving("test", TRACE, "eager", device="cpu", max_batch=2, clock="sim",
                            keep_timeline=False)
    assert small["requests"] == [] and small["steps"] == []
    assert small["metrics"] == full["metrics"] and small["windows"] == full["windows"]
    per = small["per_request"]
    assert len(per["ttft"]) == 3 and per["tpot"][1] is not None
    assert per["e2el"] == [pytest.approx(1e3 * (r["token_times_s"][-1] - r["arrival_s"]))
                           for r in full["requests"]]
    assert records.view(small, records.Serve).requests == []


def test_labkit_serve_record_runs_the_chosen_records(tmp_path, monkeypatch, capsys):
    trace = tmp_path / "tiny.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,3,4\n0.01,2,3\n")
    fake = {"serve_eager": R("serve:measure_serving", {"preset": "test", "trace": str(trace),
                                                       "max_batch": 2, "clock": "sim"})}
    for name, entry in fake.items():  # in place: the registry the recorder reads
        monkeypatch.setitem(records.RECIPES, name, entry)
    monkeypatch.setattr(cli, "_cuda_available", lambda: True)  # it refuses on a CPU otherwise
    rc = main(["serve", "--record", "--only", "serve_eager", "--out", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert rc == 0, out
    run = Path(out.strip().splitlines()[-1])
    assert run.name.endswith("serve-record")
    assert [p.name for p in (run / "results").iterdir()] == ["serve_eager.json"]
    assert "serve_eager:" in out and "2 requests" in out


def test_the_recorder_refuses_unknown_names_before_measuring():
    from labkit.measure import recorder

    with pytest.raises(KeyError, match=r"serve_nope.*serve_eager"):
        recorder.measure("serve_nope")
    with pytest.raises(TypeError, match="takes no parameter trce"):
        recorder.measure("serve_full", trce="x")
