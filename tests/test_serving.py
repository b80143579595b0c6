"""The continuous-batching engine (labkit.serving.loop) on CPU: scheduling, no cache leak, tokens
equal to generating each request alone, reproducibility, the circuit breaker."""

from __future__ import annotations

import pytest
import torch

from labkit.kvcache import CacheFullError
from labkit.model import build_model, generate, preset
from labkit.serving.loop import (
    STEP_MODES, CircuitBreaker, ServingEngine, SimClock, eager_step, make_mixed_runner,
    make_step_fn, prompt_tokens,
)
from labkit.serving.traces import TraceRequest

TRACE = [TraceRequest(0.0, 5, 6), TraceRequest(0.0, 3, 1), TraceRequest(0.015, 7, 10),
         TraceRequest(0.02, 4, 3), TraceRequest(0.02, 9, 12), TraceRequest(0.021, 2, 2),
         TraceRequest(1.0, 2, 4)]


def _model(layout: str = "slot", **kw):
    return build_model(preset("test", max_batch=4, kv_layout=layout, block_size=8, **kw))


def _free(model) -> int | None:
    alloc = getattr(model.cache, "allocator", None)
    return alloc.free if alloc is not None else None


@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_eager_run_matches_generate_alone_and_frees_everything(layout):
    model = _model(layout)
    free0 = _free(model)
    run = ServingEngine(model, clock=SimClock(0.01), seed=3).run(TRACE)
    assert [len(r.tokens) for r in run.requests] == [r.output_len for r in TRACE]
    for r in run.requests:
        ids = prompt_tokens(r.index, r.prompt_len, model.cfg.vocab_size, 3)
        assert r.tokens == generate(model, [ids], r.output_len)[0]
        assert len(r.token_times_s) == r.output_len
        assert r.token_times_s == sorted(r.token_times_s) and r.token_times_s[0] >= r.arrival_s
    assert _free(model) == free0  # every block back on the free list
    if layout == "paged":
        assert all(model.cache.capacity(s) == 0 for s in range(model.cfg.max_batch))
        assert (model.cache.host_table == 0).all()


def test_admission_and_retirement_follow_the_slots():
    run = ServingEngine(_model(), clock=SimClock(0.01)).run(TRACE)
    steps = run.steps
    # t=0: requests 0 and 1 arrive; 1 wants one token (from its prefill) and leaves at once
    assert (steps[0].batch, steps[0].admitted, steps[0].start_s) == (1, 2, 0.0)
    assert run.requests[1].token_times_s == [0.0]
    # request 2 arrives at 15 ms and joins at the step starting at 20 ms, with 3 and 4
    assert steps[2].admitted == 3 and steps[2].batch == 4
    assert run.requests[2].admitted_s == pytest.approx(0.02)
    # request 5 (21 ms) waits for a slot: 4 slots are busy until request 3 leaves
    r5 = run.requests[5]
    assert r5.admitted_s == pytest.approx(run.requests[3].token_times_s[-1])
    assert max(s.batch for s in steps) == 4
    # request 6 arrives after an idle gap: the clock jumps to its arrival
    assert run.requests[6].admitted_s == pytest.approx(1.0)
    assert run.requests[6].token_times_s == pytest.approx([1.0, 1.01, 1.02, 1.03])


def test_paged_admission_waits_for_blocks():
    # 4 slots but 3 usable blocks of 8: requests 0 and 1 need 2 blocks each, request 2 one
    model = _model("paged", num_blocks=4)
    trace = [TraceRequest(0.0, 8, 5), TraceRequest(0.0, 8, 5), TraceRequest(0.0, 2, 3)]
    run = ServingEngine(model, clock=SimClock(0.01)).run(trace)
    # first come, first served: request 1 waits for blocks and request 2 waits behind it
    assert [s.batch for s in run.steps] == [1, 1, 1, 1, 2, 2, 1, 1]
    assert run.requests[1].admitted_s == run.requests[2].admitted_s \
        == pytest.approx(run.requests[0].token_times_s[-1])
    assert model.cache.allocator.free == 3
    for r in run.requests:
        ids = prompt_tokens(r.index, r.prompt_len, model.cfg.vocab_size, 0)
        assert r.tokens == generate(model, [ids], r.output_len)[0]


def test_request_larger_than_the_pool_is_an_error_and_frees_everything():
    model = _model("paged", num_blocks=2)
    with pytest.raises(CacheFullError, match="request 0"):
        ServingEngine(model, clock=SimClock(0.01)).run([TraceRequest(0.0, 9, 3)])
    assert model.cache.allocator.free == 1


def test_request_longer_than_max_seq_is_refused():
    with pytest.raises(ValueError, match=r"request 1.*max_seq=32"):
        ServingEngine(_model(), clock=SimClock()).run([TraceRequest(0, 2, 2),
                                                        TraceRequest(0, 30, 4)])


def test_same_seed_same_tokens_and_schedule_other_seed_other_prompts():
    def go(seed):
        run = ServingEngine(_model(), clock=SimClock(0.01, decode_per_row_s=0.001),
                            seed=seed).run(TRACE)
        return [r.tokens for r in run.requests], run.steps, run.to_data()

    a, b, c = go(7), go(7), go(8)
    assert a[0] == b[0] and a[1] == b[1] and a[2] == b[2]
    assert a[0] != c[0]


@pytest.mark.parametrize("mode", [m for m in STEP_MODES if m != "eager"])
def test_dispatcher_modes_give_eager_tokens_and_record_padding(mode):
    model = _model()
    eager = ServingEngine(model, clock=SimClock(0.01)).run(TRACE)
    run = ServingEngine(model, make_step_fn(model, mode, [1, 2, 4]),
                        clock=SimClock(0.01)).run(TRACE)
    assert [r.tokens for r in run.requests] == [r.tokens for r in eager.requests]
    want = {"full": "FULL", "exact": "FULL", "piecewise": "PIECEWISE", "none": "NONE"}[mode]
    assert {s.runtime for s in run.steps} == {want}
    for s in run.steps:
        padded = {1: 1, 2: 2, 3: 4, 4: 4}[s.batch] if mode in ("full", "piecewise") else s.batch
        assert s.padded == padded and s.graph == (want != "NONE")


def test_make_step_fn_rejects_unknown_mode():
    with pytest.raises(ValueError, match=r"'fast'.*eager"):
        make_step_fn(_model(), "fast")


class _FakeDispatcher:
    """decide(bs): a graph for bs <= 2, eager above; counts calls."""

    def __init__(self, model):
        self.model, self.calls = model, 0

    def decide(self, bs):
        return ("FULL", 2 if bs == 2 else 1) if bs <= 2 else ("NONE", bs)

    def __call__(self, t, p, s):
        self.calls += 1
        return self.model.decode_step(t, p, s)


def test_circuit_breaker_opens_on_low_hit_rate_and_closes_after_cooldown():
    model = _model()
    clock = SimClock()
    graph = _FakeDispatcher(model)
    eager_calls = []

    def eager(t, p, s):
        eager_calls.append(t.shape[0])
        return model.decode_step(t, p, s)

    br = CircuitBreaker(graph, eager, clock, window=4, threshold=0.5, cooldown_s=1.0)
    one = (torch.tensor([1]), torch.tensor([0]), torch.tensor([0]))
    three = (torch.tensor([1, 2, 3]), torch.tensor([0, 0, 0]), torch.tensor([0, 1, 2]))
    for args in (one, three, three):  # window not full yet: stays closed
        br(*args)
        clock.sleep_until(clock.now() + 0.1)
    assert not br.is_open and br.hit_rate == pytest.approx(1 / 3)
    br(*three)  # 1 hit in 4 < 0.5: trips
    assert br.is_open and br.trips == [pytest.approx(0.3)]
    assert br.decide(1) == ("NONE", 1)
    clock.sleep_until(clock.now() + 0.5)
    br(*one)  # open: eager, even for a size the graphs hold
    assert eager_calls == [1] and graph.calls == 4
    clock.sleep_until(clock.now() + 0.5)  # 1.0 s after the trip: closed again, with an empty window
    assert not br.is_open and br.hit_rate is None
    assert br.decide(1) == ("FULL", 1)
    br(*one)
    assert graph.calls == 5 and br.hit_rate == 1.0


def test_circuit_breaker_in_the_engine_falls_back_and_records_it():
    model = _model()
    clock = SimClock(0.01)
    br = CircuitBreaker(_FakeDispatcher(model), eager_step(model), clock, window=2,
                        threshold=0.75, cooldown_s=0.05)
    run = ServingEngine(model, br, clock=clock).run(TRACE)
    assert br.trips
    modes = [s.runtime for s in run.steps]
    assert "NONE" in modes and "FULL" in modes
    # right after a trip, steps within the cool-down run eager even at batch <= 2
    t = br.trips[0]
    inside = [s for s in run.steps if t <= s.start_s < t + 0.05 - 1e-9]
    assert inside and all(s.runtime == "NONE" for s in inside)


@pytest.mark.parametrize("bad, match", [(dict(window=0), "window"),
                                        (dict(threshold=1.5), "threshold"),
                                        (dict(cooldown_s=-1), "cooldown_s")])
def test_circuit_breaker_bad_arguments(bad, match):
    model = _model()
    with pytest.raises(ValueError, match=match):
        CircuitBreaker(_FakeDispatcher(model), eager_step(model), SimClock(), **bad)
    with pytest.raises(TypeError, match="decide"):
        CircuitBreaker(eager_step(model), eager_step(model), SimClock())


def test_sim_clock_refuses_negative_cost():
    with pytest.raises(ValueError, match="decode_s"):
        SimClock(-1.0)


def test_prefill_cost_delays_the_first_token_and_the_step():
    clock = SimClock(0.01, prefill_per_token_s=0.001)
    run = ServingEngine(_model(), clock=clock).run([TraceRequest(0.0, 5, 3)])
    r = run.requests[0]
    assert r.admitted_s == 0.0
    assert r.token_times_s == pytest.approx([0.005, 0.015, 0.025])
    assert [s.start_s for s in run.steps] == pytest.approx([0.005, 0.015])


def test_max_running_caps_the_batch():
    run = ServingEngine(_model(), clock=SimClock(0.01), max_running=2).run(TRACE)
    assert max(s.batch for s in run.steps) == 2
    with pytest.raises(ValueError, match="max_running"):
        ServingEngine(_model(), max_running=5)


@pytest.mark.parametrize("budget", [None, 6])
def test_each_serving_step_is_decided_once_by_the_runner(monkeypatch, budget):
    """The loop records the mode and rows the runner itself decided (``last_step``), so no
    one decides a step a second time: asking ``decide`` would fail here."""
    from labkit.runner import PaddingDispatcher
    from labkit.mixed import TokenDispatcher
    from labkit.runner import MixedRunner

    model = _model()
    step_fn = make_step_fn(model, "full", [1, 2])  # a batch of 3 or 4 runs eager
    decided: list[int] = []
    real = TokenDispatcher.dispatch
    monkeypatch.setattr(TokenDispatcher, "dispatch",
                        lambda self, n, u: decided.append(n) or real(self, n, u))

    def refuse(self, *args):
        raise AssertionError("the loop asked for a second decision")

    monkeypatch.setattr(PaddingDispatcher, "decide", refuse)
    monkeypatch.setattr(MixedRunner, "decide", refuse)
    engine = (ServingEngine(model, step_fn, clock=SimClock(0.01), seed=3) if budget is None else
              ServingEngine(model, clock=SimClock(0.01), seed=3, max_num_batched_tokens=budget,
                            runner=make_mixed_runner(model, "full", budget)))
    decided.clear()  # what building the runners decided (a decode step's table)
    run = engine.run(TRACE)
    modes = {s.runtime for s in run.steps}
    assert modes <= {"FULL", "PIECEWISE", "NONE"} and len(modes) >= 2
    if budget is None:  # decode steps: a table made once, no decision per step
        assert decided == []
        assert all((s.padded, s.runtime) == ((s.batch, "NONE") if s.batch > 2 else
                                             (s.batch, "FULL")) for s in run.steps)
    else:  # one decision per mixed step
        assert len(decided) == len(run.steps)
