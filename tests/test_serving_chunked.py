"""Chunked prefill in the serving engine (ServingEngine(max_num_batched_tokens=...)) on CPU:
the same tokens as serving without it and as generating each request alone, the token budget
of every step, vLLM V1's schedule (running requests first, then new ones), the graph modes of
make_mixed_runner, bad budgets refused."""

from __future__ import annotations

import json

import pytest

from labkit.measure.serve import measure_chunked
from labkit.measure.serving_metrics import latencies, run_metrics
from labkit.model import build_model, generate, preset
from labkit.serving.loop import (
    STEP_MODES, ServingEngine, SimClock, make_mixed_runner, make_step_fn, prompt_tokens,
)
from labkit.serving.traces import TraceRequest, request_lengths

# prompts of 5-30 tokens (the test preset holds max_seq=32 positions), some arriving together
TRACE = [TraceRequest(0.0, 9, 3), TraceRequest(0.0, 30, 2), TraceRequest(0.004, 13, 1),
         TraceRequest(0.008, 20, 8), TraceRequest(0.012, 5, 12), TraceRequest(0.016, 27, 4),
         TraceRequest(0.02, 8, 6), TraceRequest(0.024, 18, 1), TraceRequest(0.5, 25, 5)]


def _model(layout: str = "slot", **kw):
    return build_model(preset("test", max_batch=4, kv_layout=layout, block_size=8, **kw))


def _tokens(run):
    return [r.tokens for r in run.requests]


@pytest.mark.parametrize("layout", ["slot", "paged"])
@pytest.mark.parametrize("budget", [4, 8, 16])
def test_chunked_tokens_equal_unchunked_and_generate_alone(layout, budget):
    model = _model(layout)
    free0 = model.cache.allocator.free if layout == "paged" else None
    plain = ServingEngine(model, clock=SimClock(0.01), seed=3).run(TRACE)
    run = ServingEngine(model, clock=SimClock(0.01), seed=3,
                        max_num_batched_tokens=budget).run(TRACE)
    assert _tokens(run) == _tokens(plain)
    for r in run.requests:
        ids = prompt_tokens(r.index, r.prompt_len, model.cfg.vocab_size, 3)
        assert r.tokens == generate(model, [ids], r.output_len)[0]
        assert len(r.token_times_s) == r.output_len == len(r.tokens)
    assert max(s.tokens for s in run.steps) <= budget
    # every prompt token ran once, in chunks: some steps ran a whole budget of prompt tokens
    assert sum(s.prefill_tokens for s in run.steps) == sum(r.prompt_len for r in TRACE)
    assert any(s.prefill_tokens == budget for s in run.steps)
    if layout == "paged":
        assert model.cache.allocator.free == free0
        assert all(model.cache.capacity(s) == 0 for s in range(model.cfg.max_batch))


def test_a_prompt_in_chunks_gives_its_first_token_with_its_last_chunk():
    clock = SimClock(0.01, prefill_per_token_s=0.001)
    run = ServingEngine(_model(), clock=clock, max_num_batched_tokens=4).run(
        [TraceRequest(0.0, 18, 3)])
    steps = run.steps
    assert [(s.batch, s.tokens, s.prefill_tokens, s.padded) for s in steps] == \
        [(1, 4, 4, 4)] * 4 + [(1, 2, 2, 2), (1, 1, 0, 1), (1, 1, 0, 1)]
    assert [s.admitted for s in steps] == [1, 0, 0, 0, 0, 0, 0]
    # four chunks emit nothing; the fifth ends the prompt at 18 ms: the first token
    r = run.requests[0]
    assert r.token_times_s == pytest.approx([0.018, 0.028, 0.038])
    assert r.token_times_s[0] == pytest.approx(steps[4].end_s)
    unchunked = ServingEngine(_model(), clock=SimClock(0.01, prefill_per_token_s=0.001)).run(
        [TraceRequest(0.0, 18, 3)])
    assert unchunked.requests[0].tokens == r.tokens


def test_running_requests_go_first_then_new_ones_with_the_budget_left():
    clock = SimClock(0.01, prefill_per_token_s=0.001)
    trace = [TraceRequest(0.0, 5, 6), TraceRequest(0.012, 20, 3), TraceRequest(0.012, 6, 2)]
    run = ServingEngine(_model(), clock=clock, max_num_batched_tokens=8).run(trace)
    assert [(s.batch, s.tokens, s.prefill_tokens, s.admitted) for s in run.steps] == [
        (1, 5, 5, 1),  # request 0's whole prompt: its first token
        (1, 1, 0, 0),  # its decode row; requests 1 and 2 arrive during it
        (2, 8, 7, 1),  # the decode row first, then 7 of request 1's 20 prompt tokens
        (2, 8, 7, 0),  # request 2 waits: no budget left after request 1's chunk
        (3, 8, 7, 1),  # request 1's last 6 (its first token), 1 token of request 2's 6
        (3, 7, 5, 0),  # request 1 decodes, request 2's last 5 (its first token)
        (2, 2, 0, 0)]  # request 0 has left with its 6 tokens
    r0, r1, r2 = run.requests
    assert r1.token_times_s[0] == pytest.approx(run.steps[4].end_s)
    assert r2.admitted_s == pytest.approx(run.steps[4].start_s)
    assert r2.token_times_s[0] == pytest.approx(run.steps[5].end_s)
    assert len(r0.tokens) == 6 and r0.token_times_s[-1] == pytest.approx(run.steps[5].end_s)


def test_budget_bounds_every_step_and_so_the_inter_token_latency():
    # a 30-token prompt arrives while a short request decodes: served alone, its prefill
    # stalls the running request for the whole prompt; in chunks of the budget, every step,
    # and so every gap between two tokens of a running request, stays short
    trace = [TraceRequest(0.0, 5, 12), TraceRequest(0.03, 30, 2), TraceRequest(0.031, 28, 2)]
    cost = dict(decode_per_row_s=0.001, prefill_s=0.002, prefill_per_token_s=0.001)
    budget = 4
    worst = 0.01 + 0.002 + 0.001 * budget  # both fixed costs and every token at full price
    chunked = ServingEngine(_model(), clock=SimClock(0.01, **cost),
                            max_num_batched_tokens=budget).run(trace)
    plain = ServingEngine(_model(), clock=SimClock(0.01, **cost)).run(trace)
    assert _tokens(chunked) == _tokens(plain)
    assert max(s.tokens for s in chunked.steps) <= budget
    assert max(s.end_s - s.start_s for s in chunked.steps) <= worst + 1e-12
    itl_chunked = latencies(chunked.requests)["itl"]
    itl_plain = latencies(plain.requests)["itl"]
    assert max(itl_chunked) <= worst + 1e-12 < max(itl_plain)


@pytest.mark.parametrize("mode", STEP_MODES)
def test_mixed_runner_modes_give_eager_tokens_and_record_the_dispatch(mode):
    model = _model()
    eager = ServingEngine(model, clock=SimClock(0.01), max_num_batched_tokens=8).run(TRACE)
    runner = make_mixed_runner(model, mode, 8, capture=False)
    run = ServingEngine(model, clock=SimClock(0.01), max_num_batched_tokens=8,
                        runner=runner).run(TRACE)
    assert _tokens(run) == _tokens(eager)
    sizes = {"exact": list(range(1, 9))}.get(mode, [1, 2, 4, 8])
    assert runner.dispatcher.sizes == sizes
    for s in run.steps:
        padded = min(n for n in sizes if n >= s.tokens)
        # FULL for uniform batches (one token a request: decode rows or a prompt's last
        # token), of at most max_batch=4 requests; PIECEWISE for the rest
        full = "FULL" if s.tokens == s.batch else "PIECEWISE"
        want = {"eager": ("NONE", s.tokens), "none": ("NONE", s.tokens),
                "piecewise": ("PIECEWISE", padded), "full": (full, padded),
                "exact": (full, s.tokens)}[mode]
        assert (s.runtime, s.padded) == want and s.graph == (want[0] != "NONE")
    both = {"FULL", "PIECEWISE"}
    assert {s.runtime for s in run.steps} == {"eager": {"NONE"}, "none": {"NONE"},
                                              "piecewise": {"PIECEWISE"}, "full": both,
                                              "exact": both}[mode]
    m = run_metrics(run.to_data()["requests"], run.to_data()["steps"])
    real, computed = sum(s.tokens for s in run.steps), sum(s.padded for s in run.steps)
    assert m["padded_waste"] == pytest.approx((computed - real) / computed)


def test_paged_chunked_admission_waits_for_blocks():
    # 3 usable blocks of 8: requests 0 and 1 need 2 blocks each, request 2 one
    model = _model("paged", num_blocks=4)
    trace = [TraceRequest(0.0, 8, 5), TraceRequest(0.0, 8, 5), TraceRequest(0.0, 2, 3)]
    run = ServingEngine(model, clock=SimClock(0.01), max_num_batched_tokens=4).run(trace)
    assert run.requests[1].admitted_s == run.requests[2].admitted_s \
        == pytest.approx(run.requests[0].token_times_s[-1])
    assert model.cache.allocator.free == 3
    for r in run.requests:
        ids = prompt_tokens(r.index, r.prompt_len, model.cfg.vocab_size, 0)
        assert r.tokens == generate(model, [ids], r.output_len)[0]


@pytest.mark.parametrize("bad, err", [(0, ValueError), (-3, ValueError), (2.5, TypeError),
                                      (True, TypeError), ("8", TypeError)])
def test_bad_budgets_are_refused(bad, err):
    with pytest.raises(err, match="max_num_batched_tokens"):
        ServingEngine(_model(), max_num_batched_tokens=bad)
    with pytest.raises(err, match="max_num_batched_tokens"):
        make_mixed_runner(_model(), "eager", bad)


def test_runner_and_step_fn_belong_to_their_own_path():
    model = _model()
    with pytest.raises(ValueError, match="give max_num_batched_tokens"):
        ServingEngine(model, runner=make_mixed_runner(model, "eager", 8))
    with pytest.raises(ValueError, match="runner=make_mixed_runner"):
        ServingEngine(model, make_step_fn(model, "eager"), max_num_batched_tokens=8)
    with pytest.raises(TypeError, match="MixedRunner of this model"):
        ServingEngine(model, max_num_batched_tokens=8,
                      runner=make_mixed_runner(_model(), "eager", 8))
    with pytest.raises(ValueError, match=r"'fast'.*eager"):
        make_mixed_runner(model, "fast", 8)


def test_long_prompt_share_replaces_some_prompts_and_leaves_the_rest():
    base = request_lengths(200, seed=5, max_seq=256, prompt_median=16, output_median=48)
    mixed = request_lengths(200, seed=5, max_seq=256, prompt_median=16, output_median=48,
                            long_share=0.25, long_prompt=(100, 200))
    assert request_lengths(200, seed=5, max_seq=256, prompt_median=16, output_median=48,
                           long_share=0.0) == base
    long = [m for b, m in zip(base, mixed) if m.prompt != b.prompt]
    assert 30 <= len(long) <= 70 and all(100 <= m.prompt <= 200 for m in long)
    assert all(m.length <= 256 for m in mixed)


@pytest.mark.parametrize("bad, match", [(dict(long_share=1.5), "long_share"),
                                        (dict(long_share=-0.1), "long_share"),
                                        (dict(long_share=0.1, long_prompt=(200, 100)), "shortest"),
                                        (dict(long_share=0.1, long_prompt=(100, 300)), "long_prompt")])
def test_long_prompt_settings_are_checked(bad, match):
    with pytest.raises(ValueError, match=match):
        request_lengths(10, max_seq=256, **bad)


def test_measure_chunked_interleaves_arms_and_reports_latency_percentiles():
    model = _model()
    out = measure_chunked(model, TRACE, ("eager", "full"), (8,), repeats=2, clock="sim",
                          seed=3)
    labels = ["eager", "eager_chunked8", "full", "full_chunked8"]
    assert list(out["arms"]) == labels
    assert out["order"] == [labels, labels[::-1]] and out["warmup_runs"] == 1
    assert json.loads(json.dumps(out)) == out  # plain data
    direct = ServingEngine(model, clock=SimClock(0.01), seed=3,
                           max_num_batched_tokens=8).run(TRACE).to_data()
    want = run_metrics(direct["requests"], direct["steps"])
    arm = out["arms"]["eager_chunked8"]
    assert arm["max_num_batched_tokens"] == 8 and arm["mode"] == "eager"
    for got in arm["latency"]:  # a simulated clock: every repeat the same
        for k in ("ttft", "tpot", "itl"):
            assert got[f"{k}_ms"] == {"p50": want[f"{k}_ms"]["median"],
                                      "p90": want[f"{k}_ms"]["p90"],
                                      "p99": want[f"{k}_ms"]["p99"]}
        assert got["max_step_tokens"] == 8
    for label in labels:
        assert len(out["arms"][label]["latency"]) == len(out["arms"][label]["repeats"]) == 2
    assert out["arms"]["full"]["latency"][0]["max_step_tokens"] <= model.cfg.max_batch
    assert [r["steps"] for r in out["arms"]["full_chunked8"]["repeats"]] == \
        [len(direct["steps"])] * 2


@pytest.mark.parametrize("kw, err", [(dict(modes="eager"), ValueError),
                                     (dict(modes=["fast"]), ValueError),
                                     (dict(budgets=8), ValueError),
                                     (dict(budgets=[0]), ValueError),
                                     (dict(budgets=[2.5]), TypeError),
                                     (dict(repeats=0), ValueError)])
def test_measure_chunked_refuses_bad_settings(kw, err):
    with pytest.raises(err):
        measure_chunked(_model(), TRACE, **{"clock": "sim", **kw})


def test_an_absurd_budget_is_refused_at_once_naming_the_option_and_its_bound(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a buffer was allocated before the budget was checked")

    monkeypatch.setattr("labkit.runner.new_batch", refuse)
    monkeypatch.setattr("labkit.runner.MixedRunner.__init__", refuse)
    model = _model()
    bound = model.cfg.max_batch * model.cfg.max_seq
    for call in (lambda: ServingEngine(model, max_num_batched_tokens=10**8),
                 lambda: make_mixed_runner(model, "eager", 10**8),
                 lambda: make_mixed_runner(model, "full", bound + 1)):
        with pytest.raises(ValueError, match=rf"max_num_batched_tokens.*<= {bound}.*max_seq"):
            call()
