"""Serving metrics on a hand-made timeline, the serve_<name> record kind, request traces (the
seeded generator, the shipped files, the CSV loader's errors) and `labkit serve`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.measure import records
from labkit.measure.results import SchemaError, load_result, save_result
from labkit.measure.serving_metrics import gpu_busy, run_metrics, step_windows, summarize
from labkit.suite.cli import main
from labkit.serving.runs import RequestResult, StepRecord
from labkit.serving.traces import (
    TraceFormatError, TraceRequest, arrival_times, load_request_trace, request_trace, trace_csv,
)

ROOT = Path(__file__).resolve().parents[1]

REQUESTS = [  # arrival and token times in seconds
    {"arrival_s": 0.0, "prompt_len": 4, "output_len": 3, "token_times_s": [0.1, 0.2, 0.4]},
    {"arrival_s": 0.5, "prompt_len": 2, "output_len": 1, "token_times_s": [0.6]},
    {"arrival_s": 1.0, "prompt_len": 3, "output_len": 2, "token_times_s": [1.5, 2.0]},
]
STEPS = [
    {"start_s": 0.0, "end_s": 0.1, "batch": 3, "padded": 4, "runtime": "FULL", "graph": True},
    {"start_s": 0.5, "end_s": 0.6, "batch": 1, "padded": 1, "runtime": "FULL", "graph": True},
    {"start_s": 1.2, "end_s": 1.3, "batch": 5, "padded": 5, "runtime": "NONE", "graph": False},
]


def test_metrics_on_a_hand_made_timeline():
    m = run_metrics(REQUESTS, STEPS)
    assert (m["completed"], m["total_output"], m["duration_s"]) == (3, 6, 2.0)
    assert m["request_throughput"] == pytest.approx(1.5)
    assert m["output_throughput"] == pytest.approx(3.0)
    # TTFT 100, 100, 500 ms: NumPy's linear percentiles, as vLLM reports them
    assert m["ttft_ms"] == pytest.approx({"mean": 700 / 3, "median": 100, "p90": 420,
                                          "p99": 492})
    assert m["tpot_ms"] == pytest.approx({"mean": 325, "median": 325, "p90": 465, "p99": 496.5})
    assert m["itl_ms"]["median"] == pytest.approx(200)  # gaps 100, 200, 500
    assert m["itl_ms"]["mean"] == pytest.approx(800 / 3)
    assert m["e2el_ms"]["median"] == pytest.approx(400)  # 400, 100, 1000
    assert (m["steps"], m["eager_fallbacks"]) == (3, 1)
    assert m["graph_hit_rate"] == pytest.approx(2 / 3)
    assert m["padded_waste"] == pytest.approx(1 / 10)


def test_step_windows():
    w = step_windows(STEPS, 1.0)
    assert w == [
        {"start_s": 0.0, "steps": 2, "graph_hit_rate": 1.0, "padded_waste": pytest.approx(0.2),
         "eager_fallbacks": 0, "mean_batch": 2.0},
        {"start_s": 1.0, "steps": 1, "graph_hit_rate": 0.0, "padded_waste": 0.0,
         "eager_fallbacks": 1, "mean_batch": 5.0}]
    with pytest.raises(ValueError, match="window_s"):
        step_windows(STEPS, 0)


def test_empty_and_bad_timelines():
    assert summarize([]) == {"mean": None, "median": None, "p90": None, "p99": None}
    m = run_metrics([], [])
    assert m["completed"] == 0 and m["output_throughput"] is None
    bad = [{"arrival_s": 1.0, "token_times_s": [0.5]}]
    with pytest.raises(ValueError, match=r"request 0.*before its arrival"):
        run_metrics(bad, [])


def test_serve_record_kind_validates():
    data = {"mode": "full", "requests": REQUESTS, "steps": STEPS,
            "metrics": run_metrics(REQUESTS, STEPS)}
    rec = records.parse("serve_full", data)
    assert isinstance(rec, records.Serve) and rec.steps[0].padded == 4
    assert rec.requests[2].token_times_s == [1.5, 2.0]
    bad = json.loads(json.dumps(data))
    bad["steps"][1]["padded"] = 0
    assert isinstance(rec.requests[2], RequestResult) and rec.requests[2].index == 2
    assert isinstance(rec.steps[0], StepRecord) and rec.steps[0].tokens == 3  # an older step
    with pytest.raises(SchemaError, match=r"data.steps\[1\].padded.*below the 1 tokens"):
        records.parse("serve_full", bad)
    del bad["requests"]
    with pytest.raises(SchemaError, match=r"data.requests"):
        records.parse("serve_x", bad)


def test_gpu_busy_share_from_the_steps_gpu_times():
    got = gpu_busy([2.0, 3.0, 5.0], duration_s=0.05)    # ms per step, a 50 ms run
    assert got["gpu_busy_s"] == pytest.approx(0.010)
    assert got["gpu_busy_share"] == pytest.approx(0.2)
    assert got["gpu_step_ms"]["median"] == pytest.approx(3.0)
    assert gpu_busy(None, 1.0) == {}                     # not timed (a CPU model)
    assert gpu_busy([1.0], 0.0)["gpu_busy_share"] is None


def test_serve_record_optional_fields_of_an_interleaved_record():
    m = run_metrics(REQUESTS, STEPS)
    arm = {"mode": "full", "breaker": None, "metrics": m, "repeats": [m, m], "windows": []}
    data = {"mode": "full", "requests": [], "steps": [], "metrics": m, "repeats": [m, m],
            "interleaved": True, "warmup_runs": 1,
            "arms": {"off": arm, "on": {**arm, "breaker": {"window": 4}}}}
    rec = records.parse("serve_breaker_ab", data)
    assert rec.interleaved and rec.warmup_runs == 1 and list(rec.arms) == ["off", "on"]
    assert rec.arms["on"].breaker == {"window": 4} and len(rec.arms["off"].repeats) == 2
    old = records.parse("serve_full", {k: data[k] for k in ("mode", "requests", "steps",
                                                            "metrics")})
    assert not old.interleaved and old.arms == {} and old.warmup_runs == 0
    with pytest.raises(SchemaError, match="two arms"):
        records.parse("serve_x", {**data, "arms": {"off": arm}})
    with pytest.raises(SchemaError, match=r"arms\.on\.repeats"):
        records.parse("serve_x", {**data, "arms": {"off": arm, "on": {**arm, "repeats": 3}}})


def test_serve_record_saves_and_loads(tmp_path):
    data = {"mode": "eager", "requests": REQUESTS, "steps": STEPS,
            "metrics": run_metrics(REQUESTS, STEPS)}
    path = save_result("serve_eager", data, {"mode": "eager"}, tmp_path, env={})
    back = records.view(load_result(path), records.Serve)
    assert back.metrics["total_output"] == 6 and back.mode == "eager"


# ----------------------------------------------------------------------------- traces


def test_request_trace_is_seeded_and_fits():
    a = request_trace(50, rate=10.0, seed=3, max_seq=64)
    assert a == request_trace(50, rate=10.0, seed=3, max_seq=64)
    assert a != request_trace(50, rate=10.0, seed=4, max_seq=64)
    times = [r.arrival_s for r in a]
    assert times == sorted(times) and times[0] > 0
    assert all(r.prompt_len + r.output_len <= 64 and r.output_len >= 1 for r in a)
    b = arrival_times(50, rate=1.0, arrivals="bursty", seed=3, busy_rate=50.0)
    assert b == sorted(b) and len(b) == 50
    with pytest.raises(ValueError, match="arrivals 'steady'"):
        arrival_times(5, rate=1.0, arrivals="steady")
    with pytest.raises(ValueError, match="rate"):
        arrival_times(5, rate=0)


def test_trace_csv_round_trip(tmp_path):
    trace = request_trace(20, rate=5.0, seed=1, max_seq=128)
    p = tmp_path / "t.csv"
    p.write_text(trace_csv(trace, "SYNTHETIC\nsecond line"))
    assert p.read_text().startswith("# SYNTHETIC\n# second line\narrival_s,")
    assert load_request_trace(p) == trace


@pytest.mark.parametrize("name", ["synthetic_requests_poisson", "synthetic_requests_bursty"])
def test_shipped_request_traces(name):
    path = ROOT / "data" / "traces" / f"{name}.csv"
    assert path.read_text().startswith("# SYNTHETIC")
    trace = load_request_trace(name)
    assert len(trace) == 400
    assert all(r.prompt_len + r.output_len - 1 <= 256 for r in trace)


def test_make_request_traces_reproduces_shipped_files():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_request_traces.py"),
                          "--check"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("ok") == 4 and "DIFF" not in out.stdout


def test_loader_accepts_extra_columns_comments_and_any_order(tmp_path):
    p = tmp_path / "mine.csv"
    p.write_text("# my service, day 1\nid,output_len,arrival_s,prompt_len\n"
                 "a,5,0.25,7\n\nb,1,0,3\n")
    assert load_request_trace(p) == [TraceRequest(0.25, 7, 5), TraceRequest(0.0, 3, 1)]


@pytest.mark.parametrize("text, match", [
    ("arrival_s,prompt_len\n0,3\n", r"line 1: missing column\(s\) \['output_len'\]"),
    ("arrival_s,prompt_len,output_len\n0,3,4\n0.5,x,4\n", r"line 3, column 'prompt_len'.*'x'"),
    ("# c\narrival_s,prompt_len,output_len\n-1,3,4\n", r"line 3, column 'arrival_s'.*>= 0"),
    ("arrival_s,prompt_len,output_len\nnan,3,4\n", r"line 2, column 'arrival_s'"),
    ("arrival_s,prompt_len,output_len\n0,3,0\n", r"line 2, column 'output_len'.*at least 1"),
    ("arrival_s,prompt_len,output_len\n0,2.5,3\n", r"line 2, column 'prompt_len'.*whole"),
    ("arrival_s,prompt_len,output_len\n0,3\n", r"line 2: 2 value\(s\) for 3 columns"),
    ("arrival_s,prompt_len,output_len\n", "no requests"),
    ("# only a comment\n", "no header"),
])
def test_loader_errors_name_file_line_and_column(tmp_path, text, match):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(TraceFormatError, match=match) as info:
        load_request_trace(p)
    assert "bad.csv" in str(info.value)


def test_loader_unknown_name_lists_shipped():
    with pytest.raises(FileNotFoundError, match="synthetic_requests_poisson"):
        load_request_trace("no_such_trace")


# ----------------------------------------------------------------------------- labkit serve


def _tiny_trace(tmp_path) -> Path:
    p = tmp_path / "tiny.csv"
    p.write_text("arrival_s,prompt_len,output_len\n0,3,4\n0,5,2\n0.02,2,3\n")
    return p


def test_labkit_serve_with_breaker_records_its_trips(tmp_path, capsys):
    rc = main(["serve", "--trace", str(_tiny_trace(tmp_path)), "--preset", "test",
               "--max-batch", "2", "--mode", "full", "--sizes", "1", "--clock", "sim",
               "--breaker", "--breaker-window", "1", "--breaker-threshold", "1",
               "--breaker-cooldown", "5", "--name", "brk", "--out", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert rc == 0, out
    data = load_result(Path(out.strip().splitlines()[-1])).data
    # the first step (batch 2, above the one captured size) trips it; eager from then on
    assert data["breaker_trips_s"] == [0.0]
    assert [s["runtime"] for s in data["steps"]][:2] == ["NONE", "NONE"]
    assert data["windows"][0]["eager_fallbacks"] == len(data["steps"])


def test_labkit_serve_writes_a_record(tmp_path, capsys):
    rc = main(["serve", "--trace", str(_tiny_trace(tmp_path)), "--preset", "test",
               "--max-batch", "2", "--mode", "full", "--sizes", "1,2", "--clock", "sim",
               "--device", "cpu", "--out", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert rc == 0, out
    path = Path(out.strip().splitlines()[-1])
    assert path.name == "serve_full.json" and path.is_file()
    rec = records.view(load_result(path), records.Serve)
    assert rec.mode == "full" and rec.metrics["completed"] == 3
    assert rec.metrics["total_output"] == 9 and rec.clock == "sim"
    assert all(s.runtime == "FULL" for s in rec.steps)


def test_labkit_serve_no_timeline_keeps_metrics_and_drops_the_lists(tmp_path, capsys):
    from labkit.measure.serve import drop_timeline

    base = ["serve", "--trace", str(_tiny_trace(tmp_path)), "--preset", "test", "--max-batch",
            "2", "--clock", "sim", "--device", "cpu"]
    paths = []
    for extra, out in (([], "full"), (["--no-timeline"], "small")):
        assert main(base + extra + ["--out", str(tmp_path / out)]) == 0
        paths.append(Path(capsys.readouterr().out.strip().splitlines()[-1]))
    full, small = (load_result(p) for p in paths)
    assert small.data["requests"] == [] and small.data["steps"] == []
    assert small.params["keep_timeline"] is False and "keep_timeline" not in full.params
    assert small.data["metrics"] == full.data["metrics"]
    assert small.data["windows"] == full.data["windows"]
    assert len(small.data["per_request"]["ttft"]) == 3
    # the same transformation on the full record's data gives the small record's data
    assert drop_timeline(full.data) == small.data and full.data["requests"]
    assert drop_timeline(small.data) == small.data
    with pytest.raises(ValueError, match="needs the data of a serve record"):
        drop_timeline({"metrics": {}})


@pytest.mark.parametrize("args, match", [
    (["--mode", "fast"], "--mode"),
    (["--sizes", "1,x"], "--sizes"),
    (["--max-batch", "0"], "--max-batch"),
    (["--decode-ms", "-3"], "--decode-ms"),
    (["--mode", "full", "--breaker", "--breaker-threshold", "1.5"], "threshold"),
    (["--preset", "huge"], "preset"),
    (["--breaker"], "breaker"),
])
def test_labkit_serve_bad_arguments_are_one_line(tmp_path, capsys, args, match):
    rc = main(["serve", "--trace", str(_tiny_trace(tmp_path)), "--preset", "test",
               "--clock", "sim", "--device", "cpu", "--out", str(tmp_path / "runs"), *args])
    err = capsys.readouterr().err
    assert rc == 2 and match in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()


def test_labkit_serve_bad_trace_names_the_line(tmp_path, capsys):
    p = tmp_path / "bad.csv"
    p.write_text("arrival_s,prompt_len,output_len\n0,3,oops\n")
    rc = main(["serve", "--trace", str(p), "--preset", "test", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and "line 2, column 'output_len'" in err


def test_a_serve_record_reads_back_as_the_loops_own_classes():
    from labkit.serving.runs import ServeRun

    run = ServeRun([RequestResult(0, 0.0, 4, 2, 0.01, [0.1, 0.2], [5, 6]),
                    RequestResult(1, 0.5, 3, 1, 0.55, [0.6], [7])],
                   [StepRecord(0.0, 0.1, 1, 4, "NONE", False, 1, 4, 4),
                    StepRecord(0.5, 0.6, 2, 4, "FULL", True, 0, 2, 0)])
    data = {"mode": "full", **run.to_data(), "metrics": run_metrics(**run.to_data())}
    rec = records.parse("serve_full", json.loads(json.dumps(data)))
    assert rec.requests == run.requests and rec.steps == run.steps
    data["requests"][0]["token_times_s"] = [0.1, 0.2, 0.3]
    with pytest.raises(SchemaError, match=r"requests\[0\]\.token_times_s.*3 times"):
        records.parse("serve_full", data)
