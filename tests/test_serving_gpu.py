"""The serving engine on CUDA (marker ``gpu``): graphs serve a trace token for token like eager,
with and without chunked prefill, the real clock's token times are ordered, and every slot and
block is free afterwards."""

import pytest

from labkit.measure.records import Serve, ServeLoad, view
from labkit.measure.serve import measure_chunked, measure_interleaved, measure_serving
from labkit.measure.serve_load import measure_load_curve
from labkit.model import build_model, preset
from labkit.serving.loop import RealClock, ServingEngine, make_mixed_runner, make_step_fn
from labkit.serving.traces import request_trace

pytestmark = pytest.mark.gpu

TRACE = request_trace(24, rate=200.0, seed=5, max_seq=64, prompt_median=12.0,
                      output_median=16.0)


@pytest.fixture(scope="module")
def model():
    return build_model(preset("small", max_batch=8, max_seq=64, vocab_size=4096,
                              kv_layout="paged", block_size=16), "cuda")


def test_graph_modes_serve_the_trace_like_eager(model):
    free0 = model.cache.allocator.free
    eager = ServingEngine(model, make_step_fn(model, "eager"), clock=RealClock("cuda")).run(TRACE)
    want = [r.tokens for r in eager.requests]
    for mode in ("full", "piecewise", "exact", "none"):
        step = make_step_fn(model, mode, [1, 2, 4, 8], progress=False)
        try:
            run = ServingEngine(model, step, clock=RealClock("cuda")).run(TRACE)
        finally:
            step.release()
        assert [r.tokens for r in run.requests] == want, mode
        assert all(r.token_times_s == sorted(r.token_times_s) for r in run.requests)
        assert model.cache.allocator.free == free0
        assert {s.runtime for s in run.steps} == {"full": {"FULL"}, "piecewise": {"PIECEWISE"},
                                                 "exact": {"FULL"}, "none": {"NONE"}}[mode]


def test_measure_serving_on_gpu_makes_a_valid_record():
    data = measure_serving("small", TRACE, "full", device="cuda", max_batch=8,
                           capture_sizes=[1, 2, 4, 8], dtype="bfloat16")
    assert data["metrics"]["completed"] == len(TRACE)
    assert data["metrics"]["ttft_ms"]["median"] > 0


def test_repeats_after_a_warmup_on_gpu_keep_the_tokens_and_free_the_cache():
    data = measure_serving("small", TRACE, "exact", device="cuda", max_batch=8,
                           dtype="bfloat16", repeats=2, warmup_requests=4)
    assert len(data["repeats"]) == 2
    assert all(m["completed"] == len(TRACE) for m in data["repeats"])
    s = data["spread"]["tpot_ms.median"]
    assert 0 < s["min"] <= s["median"] <= s["max"]
    assert {st["runtime"] for st in data["steps"]} == {"FULL"}


def test_load_curve_on_gpu_and_breaker_record():
    data = measure_load_curve("small", ["eager", "full"], [50.0, 400.0], n_requests=16,
                              device="cuda", max_batch=8, capture_sizes=[1, 2, 4, 8],
                              warmup_requests=2)
    rec = view(data, ServeLoad)
    assert len(rec.points) == 4
    assert all(p.metrics["completed"] == 16 for p in rec.points)
    brk = measure_serving("small", TRACE, "full", device="cuda", max_batch=8,
                          capture_sizes=[1, 2], dtype="bfloat16",
                          breaker={"window": 4, "threshold": 0.9, "cooldown_s": 0.05})
    assert brk["metrics"]["completed"] == len(TRACE)
    assert brk["breaker_trips_s"] == sorted(brk["breaker_trips_s"])


def test_every_decode_step_is_timed_on_the_gpu():
    data = measure_serving("small", TRACE, "full", device="cuda", max_batch=8,
                           capture_sizes=[1, 2, 4, 8], dtype="bfloat16", repeats=2)
    assert data["warmup_runs"] == 1
    for m in data["repeats"]:
        assert 0 < m["gpu_busy_s"] <= m["duration_s"]
        assert 0 < m["gpu_busy_share"] <= 1
        assert m["gpu_step_ms"]["median"] > 0
    assert data["spread"]["gpu_busy_share"]["n"] == 2


def test_interleaved_record_on_gpu():
    data = measure_interleaved("small", TRACE, {"eager": {"mode": "eager"},
                                                "full": {"mode": "full",
                                                         "capture_sizes": [1, 2, 4, 8]}},
                               device="cuda", max_batch=8, dtype="bfloat16", repeats=3)
    rec = view(data, Serve)
    assert rec.interleaved and len(rec.arms["full"].repeats) == 3
    assert all("gpu_busy_share" in m for a in rec.arms.values() for m in a.repeats)


def test_chunked_prefill_graphs_serve_the_trace_like_unchunked_eager(model):
    free0 = model.cache.allocator.free
    eager = ServingEngine(model, make_step_fn(model, "eager"), clock=RealClock("cuda")).run(TRACE)
    want = [r.tokens for r in eager.requests]
    for mode in ("eager", "piecewise", "full"):
        runner = make_mixed_runner(model, mode, 16, progress=False)
        try:
            run = ServingEngine(model, clock=RealClock("cuda"), max_num_batched_tokens=16,
                                runner=runner).run(TRACE)
        finally:
            runner.release()
        assert [r.tokens for r in run.requests] == want, mode
        assert all(r.token_times_s == sorted(r.token_times_s) for r in run.requests)
        assert max(s.tokens for s in run.steps) <= 16
        assert model.cache.allocator.free == free0
        modes = {s.runtime for s in run.steps}
        assert modes <= {"eager": {"NONE"}, "piecewise": {"PIECEWISE"},
                         "full": {"FULL", "PIECEWISE"}}[mode], mode
        if mode == "full":
            assert "PIECEWISE" in modes  # steps with prompt chunks


def test_measure_chunked_on_gpu(model):
    data = measure_chunked(model, TRACE, ("eager", "full"), (16,), repeats=2)
    assert list(data["arms"]) == ["eager", "eager_chunked16", "full", "full_chunked16"]
    for label, arm in data["arms"].items():
        assert [m["completed"] for m in arm["repeats"]] == [len(TRACE)] * 2, label
        assert all(r["ttft_ms"]["p50"] > 0 for r in arm["latency"])
    assert all(r["max_step_tokens"] <= 16 for r in data["arms"]["full_chunked16"]["latency"])
