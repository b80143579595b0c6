"""Token-flattened steps (labkit.mixed): decode rows, prefill chunks and verify rows in one
batch give the logits of the full forward pass; the dispatcher decides as vLLM's does."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from labkit.mixed import (
    BatchDescriptor, FlatBatch, TokenDispatcher, resolve_mode, spec_capture_sizes,
)
from labkit.runner import MixedRunner
from labkit.model import build_model, preset
from labkit.teach.modes import vllm_runtime_mode


def _model(**kw):
    return build_model(preset("test", max_batch=4, **kw), seed=0)


def _prefilled(m, prompts):
    for i, p in enumerate(prompts):
        m.cache.reserve(i, m.cfg.max_seq)
        m.prefill(torch.tensor([p]), torch.tensor([i]))


PROMPTS = [[5, 6, 7], [], [9, 8, 7, 6, 5]]


def _mixed_batch():
    """Slot 0 decodes one token, slot 1 prefills a first chunk of 6, slot 2 verifies 1 + 2."""
    return FlatBatch.of([(0, 3, [11]), (1, 0, [1, 2, 3, 4, 5, 6]), (2, 5, [12, 13, 14])])


def _reference(m, batch):
    """Each token's logits from the full forward pass over its request's context."""
    ctx = {0: PROMPTS[0] + [11], 1: [1, 2, 3, 4, 5, 6], 2: PROMPTS[2] + [12, 13, 14]}
    rows = []
    for pos, slot in zip(batch.positions, batch.slots):
        rows.append(m(torch.tensor([ctx[slot]]))[0, pos])
    return torch.stack(rows)


@pytest.mark.parametrize("layout", ["slot", "paged"])
@pytest.mark.parametrize("mode", ["NONE", "PIECEWISE", "FULL_AND_PIECEWISE",
                                  "FULL_DECODE_ONLY"])
def test_mixed_step_equals_the_full_forward_pass(layout, mode):
    m = _model(kv_layout=layout, block_size=8)
    _prefilled(m, [PROMPTS[0], [0], PROMPTS[2]])
    batch = _mixed_batch()
    runner = MixedRunner(m, [1, 2, 4, 8, 16], cudagraph_mode=mode, capture=False)
    got = runner.step(batch)
    want = _reference(m, batch)
    assert got.shape == (10, m.cfg.vocab_size)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    assert got.argmax(-1).tolist() == want.argmax(-1).tolist()
    expected = {"NONE": "NONE", "PIECEWISE": "PIECEWISE", "FULL_AND_PIECEWISE": "PIECEWISE",
                "FULL_DECODE_ONLY": "NONE"}[mode]
    assert runner.counters.mode_steps == {expected: 1}
    assert runner.counters.padded_rows == (0 if expected == "NONE" else 6)


@pytest.mark.parametrize("mode", ["PIECEWISE", "FULL_AND_PIECEWISE", "NONE"])
def test_uniform_verify_batch_equals_the_full_forward_pass(mode):
    m = _model()
    prompts = [[3, 4], [7, 7, 7, 7], [1]]
    _prefilled(m, prompts)
    drafts = [[10, 11, 12], [13, 14, 15], [16, 17, 18]]
    batch = FlatBatch.of([(i, len(p), d) for i, (p, d) in enumerate(zip(prompts, drafts))])
    runner = MixedRunner(m, [3, 6, 12], cudagraph_mode=mode, uniform_query_len=3,
                         capture=False)
    assert runner.decide(batch) == {  # 9 tokens padded to 12: 4 requests of 3
        "PIECEWISE": ("PIECEWISE", BatchDescriptor(12)), "NONE": ("NONE", BatchDescriptor(9)),
        "FULL_AND_PIECEWISE": ("FULL", BatchDescriptor(12, 4, True))}[mode]
    got = runner.step(batch)
    want = torch.cat([m(torch.tensor([p + d]))[0, len(p):] for p, d in zip(prompts, drafts)])
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_a_padded_step_writes_only_its_own_slots_and_the_scratch_slot():
    m = _model()
    _prefilled(m, [[1, 2], [3, 4], [5, 6], [7, 8]])
    before = m.cache.kv.clone()
    runner = MixedRunner(m, [8], cudagraph_mode="PIECEWISE", capture=False)
    runner.step(FlatBatch.of([(1, 2, [9]), (3, 2, [10, 11])]))  # 3 tokens padded to 8
    per_slot = (m.cache.kv != before).any(dim=(0, 1, 4, 5))  # (slots, max_seq)
    written = {(s, p) for s, p in per_slot.nonzero().tolist()}
    assert written == {(1, 2), (3, 2), (3, 3), (m.cfg.scratch_slot, 0)}


def test_bad_batches_are_refused_before_anything_is_written():
    m = _model(kv_layout="paged", block_size=8)
    m.cache.reserve(0, 8)
    runner = MixedRunner(m, [4, 8], capture=False)
    before = m.cache.kv.clone()
    with pytest.raises(ValueError, match="slot 1 owns room for 0 positions"):
        runner.step(FlatBatch.of([(0, 0, [1, 2]), (1, 0, [3])]))
    with pytest.raises(ValueError, match="room for 8 positions but the step writes"):
        runner.step(FlatBatch.of([(0, 7, [1, 2])]))  # past the reserved room
    with pytest.raises(ValueError, match="appear more than once"):
        runner.step(FlatBatch.of([(0, 0, [1]), (0, 1, [2])]))
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 97\)"):
        runner.step(FlatBatch.of([(0, 0, [m.cfg.vocab_size])]))
    with pytest.raises(ValueError, match="no tokens"):
        FlatBatch.of([(0, 0, [])])
    with pytest.raises(TypeError, match="slot, first_position, tokens"):
        FlatBatch.of([(0, [1])])
    assert torch.equal(m.cache.kv, before) and runner.counters.mode_steps == {}


def test_resolve_mode_follows_vllm_fallbacks():
    assert resolve_mode("FULL") == "FULL_AND_PIECEWISE"          # mixed FULL needs ALWAYS
    assert resolve_mode("FULL", "ALWAYS") == "FULL"
    assert resolve_mode("FULL_DECODE_ONLY") == "FULL_DECODE_ONLY"
    assert resolve_mode("FULL_AND_PIECEWISE", "NEVER") == "PIECEWISE"
    assert resolve_mode("FULL_AND_PIECEWISE", "UNIFORM_SINGLE_TOKEN_DECODE", 3) == "PIECEWISE"
    assert resolve_mode("FULL_AND_PIECEWISE", "UNIFORM_SINGLE_TOKEN_DECODE", 1) == \
        "FULL_AND_PIECEWISE"
    with pytest.raises(ValueError, match="use cudagraph_mode='PIECEWISE'"):
        resolve_mode("FULL", "NEVER")
    with pytest.raises(ValueError, match="cudagraph_mode must be one of"):
        resolve_mode("HALF")  # type: ignore[arg-type]


def test_spec_capture_sizes_are_multiples_of_the_verify_length():
    assert spec_capture_sizes([1, 2, 4, 8, 16], 1) == [1, 2, 4, 8, 16]
    assert spec_capture_sizes([1, 2, 4, 8, 16], 3) == [3, 6, 9]  # 18 > 16 is dropped
    with pytest.raises(ValueError, match="no capture size is left"):
        spec_capture_sizes([1, 2], 4)  # vLLM raises: nothing holds 1 + k
    assert spec_capture_sizes([1, 4], 4) == [4]


MODES = ["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(lens=st.lists(st.sampled_from([1, 1, 1, 2, 3, 4, 17, 90]), min_size=1, max_size=40),
       q=st.sampled_from([1, 2, 4]), mode=st.sampled_from(MODES),
       seqs=st.sampled_from([8, 16, 64]))
def test_dispatch_matches_the_transcription_of_vllms_rule(lens, q, mode, seqs):
    lens = lens[:seqs]
    sizes = spec_capture_sizes([1, 2, 4, 8, 16, 32, 64, 128], q)
    d = TokenDispatcher(sizes, seqs, mode, q, support="ALWAYS")
    uniform = all(n == q for n in lens)
    got_mode, key = d.dispatch(sum(lens), uniform)
    want = vllm_runtime_mode(lens, sizes, max_num_seqs=seqs, decode_query_len=q,
                             cudagraph_mode=mode)
    assert (got_mode, key.num_tokens) == want
    if got_mode == "FULL" and key.uniform:
        assert key.num_reqs * q == key.num_tokens


def _gpu_model(layout):
    m = build_model(preset("small", max_batch=8, max_seq=64, vocab_size=4096,
                           kv_layout=layout), "cuda")
    g = torch.Generator().manual_seed(0)
    for i, n in enumerate([5, 9, 30, 2]):
        m.cache.reserve(i, 64)
        m.prefill(torch.randint(0, 4096, (1, n), generator=g).cuda(), torch.tensor([i]).cuda())
    return m


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_graph_steps_equal_eager_and_the_forward_pass_on_gpu(layout):
    m = _gpu_model(layout)
    graphs = MixedRunner(m, [1, 2, 4, 8, 16, 32], uniform_query_len=3, progress=False)
    eager = MixedRunner(m, [1, 2, 4, 8, 16, 32], uniform_query_len=3, capture=False)
    g = torch.Generator().manual_seed(1)

    def toks(n):
        return torch.randint(0, 4096, (n,), generator=g).tolist()

    steps = [FlatBatch.of([(0, 5, toks(3)), (1, 9, toks(3)), (2, 30, toks(3))]),   # uniform
             FlatBatch.of([(0, 5, toks(1)), (3, 2, toks(12)), (2, 30, toks(3))]),  # mixed
             FlatBatch.of([(1, 9, toks(40))])]                                     # above
    want_modes = ["FULL", "PIECEWISE", "NONE"]
    for batch, mode in zip(steps, want_modes):
        assert graphs.decide(batch)[0] == mode
        kv = m.cache.kv.clone()
        a = graphs.step(batch)
        m.cache.kv.copy_(kv)
        b = eager.step(batch)
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
        assert torch.equal(a.argmax(-1), b.argmax(-1)), (layout, mode)
    assert graphs.counters.mode_steps == {"FULL": 1, "PIECEWISE": 1, "NONE": 1}
    graphs.release()


@pytest.mark.gpu
def test_in_place_varlen_attention_equals_the_gathered_reference_on_gpu():
    m = _gpu_model("slot")
    batch = FlatBatch.of([(0, 5, [1]), (3, 2, list(range(20, 40))), (2, 30, [7, 8, 9])])
    dev = [torch.tensor(x, device="cuda") for x in (batch.tokens, batch.positions,
                                                    batch.slots)]
    meta = m.cache.mixed_meta(dev[1], dev[2], batch.query_lens)
    kv = m.cache.kv.clone()
    in_place = m.forward_tokens(dev[0], meta, max(batch.query_lens))
    m.cache.kv.copy_(kv)
    m.cache.in_place = False
    reference = m.forward_tokens(dev[0], meta, max(batch.query_lens))
    torch.testing.assert_close(in_place, reference, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("layout", ["slot", "paged"])
@pytest.mark.parametrize("k", [1, 3])
def test_speculative_decoding_on_the_runner_equals_plain_greedy(k, layout):
    from labkit.model import generate
    from labkit.serving.spec import generate_speculative

    m = build_model(preset("test", kv_layout=layout, block_size=8), seed=0)
    prompts = [[1, 2, 3], [90] * 12, [7, 8, 9, 10, 11]]
    runner = MixedRunner(m, [4, 8, 16], uniform_query_len=k + 1, capture=False)
    spec, stats = generate_speculative(m, prompts, 12, k, runner.verify)
    assert spec == generate(m, prompts, 12)
    assert stats.accepted > 0 and set(runner.counters.mode_steps) == {"FULL"}


@pytest.mark.gpu
@pytest.mark.parametrize("k", [1, 3])
def test_speculative_decoding_under_full_graphs_equals_plain_greedy_on_gpu(k):
    from labkit.model import generate
    from labkit.serving.spec import generate_speculative

    m = build_model(preset("small", max_batch=8, max_seq=128, vocab_size=4096), "cuda")
    prompts = [[1, 2, 3] * 4, [90] * 12, list(range(30, 50))]
    graphs = MixedRunner(m, [4, 8, 16, 32], uniform_query_len=k + 1, progress=False)
    spec, stats = generate_speculative(m, prompts, 24, k, graphs.verify)
    eager = MixedRunner(m, [4, 8, 16, 32], uniform_query_len=k + 1, capture=False)
    assert spec == generate_speculative(m, prompts, 24, k, eager.verify)[0]
    assert spec == generate(m, prompts, 24)
    assert graphs.counters.mode_steps.get("FULL", 0) == stats.steps
    graphs.release()


def _host_timer(fns, **kw):
    from labkit.timing import time_host
    return {name: time_host(fn, warmup=1, repeats=kw["repeats"]) for name, fn in fns.items()}


def test_the_measurements_run_on_cpu_and_their_records_parse():
    from labkit.measure import records
    from labkit.measure.mixed_bench import measure_mixed, measure_spec, measure_verify

    data = measure_mixed("test", (1, 4), ((1, 5), (3, 9)), "float32", repeats=2, inner=1,
                         device="cpu", timer=_host_timer)
    rec = records.parse("mixed_test", data)
    assert rec.mixed_tokens == [6, 12] and rec.mixed_modes == ["PIECEWISE", "PIECEWISE"]
    assert all(rec.checks.values()) and len(rec.checks) == 4
    assert all(x is not None for x in rec.ratio("uniform", "new_step", "today_step"))
    data = measure_verify("test", (1, 2), (1, 2), "float32", repeats=2, inner=1, device="cpu",
                          timer=_host_timer)
    rec = records.parse("spec_verify_test", data)
    assert rec.ks == [0, 1, 2] and set(rec.times) == {"k0", "k1", "k2"}
    data = measure_spec((1, 3), n_prompts=2, prompt_len=24, new_tokens=10, repeats=1,
                        device="cpu")
    rec = records.parse("spec_char", data)
    assert rec.checks == {"token_agreement.plain": 1.0, "token_agreement.plain_synced": 1.0,
                          "token_agreement.k1": 1.0,
                          "token_agreement.k3": 1.0}
    assert set(rec.seconds) == {"plain", "plain_synced", "k1", "k3"}
    assert len(rec.seconds["k1"]) == 1
    assert 0 < rec.stats["k1"]["acceptance_rate"] <= 1


def test_the_chunked_prefill_record_parses():
    from labkit.measure import records
    from labkit.measure.serve import measure_chunked
    from labkit.serving.traces import TraceRequest

    m = build_model(preset("test", max_batch=4, max_seq=32), seed=0)
    trace = [TraceRequest(0.01 * i, n, 4) for i, n in enumerate([20, 3, 5, 18, 2])]
    data = measure_chunked(m, trace, ("eager",), (8,), 1, clock="sim")
    rec = records.parse("chunked_test", data)
    assert set(rec.arms) == {"eager", "eager_chunked8"} and rec.budgets == [8]
    assert len(rec.percentile("eager_chunked8", "itl")) == 1
    assert rec.arms["eager_chunked8"]["latency"][0]["max_step_tokens"] <= 8


_FUZZ_MODEL = None


def _fuzz_model():
    global _FUZZ_MODEL
    if _FUZZ_MODEL is None:
        _FUZZ_MODEL = build_model(preset("test", max_batch=6, max_seq=32), seed=0)
    return _FUZZ_MODEL


@settings(max_examples=60, deadline=None, derandomize=True)
@given(data=st.data(), mode=st.sampled_from(["PIECEWISE", "FULL_AND_PIECEWISE",
                                             "FULL_DECODE_ONLY"]),
       q=st.sampled_from([1, 2, 3]))
def test_fuzz_every_mode_gives_the_unpadded_eager_step(data, mode, q):
    """Random steps of decode rows, prefill chunks and verify rows: each mode's padded (CPU
    stand-in) run gives the logits and the cache of the unpadded eager run."""
    m = _fuzz_model()
    n = data.draw(st.integers(1, 5))
    slots = data.draw(st.permutations(range(6)))[:n]
    kinds = data.draw(st.lists(st.sampled_from(["decode", "chunk", "verify"]), min_size=n,
                               max_size=n))
    reqs = []
    for slot, kind in zip(slots, kinds):
        length = {"decode": 1, "verify": q, "chunk": data.draw(st.integers(2, 9))}[kind]
        start = data.draw(st.integers(0, 32 - length))
        toks = data.draw(st.lists(st.integers(0, 96), min_size=length, max_size=length))
        reqs.append((slot, start, toks))
    batch = FlatBatch.of(reqs)
    kv = m.cache.kv.clone()
    want = MixedRunner(m, [1, 2, 4, 8, 16, 32], cudagraph_mode="NONE", capture=False).step(batch)
    live = m.cache.kv[:, :, :m.cfg.max_batch].clone()
    m.cache.kv.copy_(kv)
    runner = MixedRunner(m, [1, 2, 4, 8, 16, 32], cudagraph_mode=mode, uniform_query_len=q,
                         capture=False)
    got = runner.step(batch)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    torch.testing.assert_close(m.cache.kv[:, :, :m.cfg.max_batch], live)


def test_the_recorder_refuses_a_cpu_and_shows_its_usage(tmp_path, capsys):
    from labkit.measure import recorder

    if torch.cuda.is_available():
        pytest.skip("checks the CPU refusal")
    with pytest.raises(RuntimeError, match="measures on a CUDA GPU"):
        recorder.record("mixed_small", tmp_path)
    assert not (tmp_path / "results").exists()
    assert recorder.main([]) == 2
    assert "usage: python -m labkit.measure.recorder RUN_DIR NAME" in capsys.readouterr().err


# ---------------------------------------------------------------- the edge: bad input refused


def _verify_setup(layout="slot"):
    m = _model(kv_layout=layout, block_size=8)
    _prefilled(m, [[3, 4], [7, 7, 7, 7], [1]])
    return m, MixedRunner(m, [3, 6, 12], uniform_query_len=3, capture=False)


def test_verify_runs_every_rows_slots_and_positions_as_given():
    m, runner = _verify_setup()
    t = torch.tensor([10, 11, 12, 13, 14, 15])
    p = torch.tensor([2, 3, 4, 4, 5, 6])
    s = torch.tensor([0, 0, 0, 1, 1, 1])
    got = runner.verify(t, p, s, 3)
    want = torch.cat([m(torch.tensor([[3, 4, 10, 11, 12]]))[0, 2:],
                      m(torch.tensor([[7, 7, 7, 7, 13, 14, 15]]))[0, 4:]])
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("tokens, positions, slots, q, error, words", [
    # a row mixing two slots, or positions that are not consecutive: not one request's row
    ([10, 11, 12], [2, 3, 4], [0, 1, 0], 3, ValueError, "row 0 holds slots"),
    ([10, 11, 12], [2, 5, 6], [0, 0, 0], 3, ValueError, "row 0 has positions"),
    # a partial last row
    ([10, 11, 12, 13], [2, 3, 4, 4], [0, 0, 0, 1], 3, ValueError, "not a multiple of query_len"),
    ([10, 11, 12], [2, 3, 4], [0, 0, 0], 0, ValueError, "query_len must be >= 1"),
    ([10, 11, 12], [2, 3, 4], [0, 0, 0], 2.0, TypeError, "query_len must be an int"),
    # the runner's graphs are keyed by 1 + k = 3: a query_len of 1 never reaches FULL
    ([10, 11, 12], [2, 3, 4], [0, 0, 0], 1, ValueError, "uniform_query_len=3"),
    ([10, 11, 12], [2, 3], [0, 0, 0], 3, ValueError, "one entry per token"),
    ([], [], [], 3, ValueError, "at least one row"),
])
def test_verify_refuses_a_batch_it_would_not_run_as_given(tokens, positions, slots, q, error,
                                                          words):
    m, runner = _verify_setup()
    before = m.cache.kv.clone()
    args = [torch.tensor(x, dtype=torch.int64) for x in (tokens, positions, slots)]
    with pytest.raises(error, match=words):
        runner.verify(*args, q)
    assert torch.equal(m.cache.kv, before) and runner.counters.mode_steps == {}


@pytest.mark.parametrize("bad, error, words", [
    ("list", TypeError, "tokens must be a torch.Tensor"),
    ("int16", TypeError, "dtype torch.int16"),
    ("meta", ValueError, "is on meta"),
    ("2d", ValueError, "1 dimension"),
])
def test_verify_refuses_the_tensors_decode_step_refuses(bad, error, words):
    _, runner = _verify_setup()
    t = torch.tensor([10, 11, 12])
    t = {"list": [10, 11, 12], "int16": t.to(torch.int16), "meta": t.to("meta"),
         "2d": t.view(1, 3)}[bad]
    with pytest.raises(error, match=words):
        runner.verify(t, torch.tensor([2, 3, 4]), torch.tensor([0, 0, 0]), 3)


def test_flat_batch_names_the_request_whose_tokens_are_missing():
    with pytest.raises(TypeError, match="request 1 tokens must be a list of token ids, got None"):
        FlatBatch.of([(0, 0, [1]), (1, 0, None)])
    with pytest.raises(TypeError, match="request 0 tokens must be a list of token ids"):
        FlatBatch.of([(0, 0, "abc")])


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(sizes=[]), ValueError, "must not be empty"),
    (dict(sizes=[0, 4]), ValueError, r"capture sizes\[0\] must be >= 1"),
    (dict(sizes=[-2]), ValueError, "must be >= 1"),
    (dict(sizes=[2.5]), TypeError, "must be an int"),
    (dict(sizes=["4"]), TypeError, "must be an int"),
    (dict(sizes=[True, 4]), TypeError, "must be an int"),
    (dict(max_num_seqs=0), ValueError, "max_num_seqs must be >= 1"),
    (dict(max_num_seqs=2.0), TypeError, "max_num_seqs must be an int"),
])
def test_token_dispatcher_checks_its_arguments(kwargs, error, words):
    args = {"sizes": [1, 2, 4], "max_num_seqs": 4, "cudagraph_mode": "FULL_AND_PIECEWISE",
            **kwargs}
    with pytest.raises(error, match=words):
        TokenDispatcher(**args)


@pytest.mark.parametrize("n, error", [(0, ValueError), (-3, ValueError), (2.0, TypeError),
                                      (True, TypeError)])
def test_token_dispatcher_refuses_an_empty_or_negative_step(n, error):
    d = TokenDispatcher([1, 2, 4], 4, "FULL_AND_PIECEWISE")
    with pytest.raises(error, match="num_tokens"):
        d.dispatch(n, False)


def test_spec_rounding_is_applied_only_with_separate_full_decode_graphs():
    """vLLM rounds the sizes to multiples of 1 + k only when uniform decode batches get FULL
    graphs of their own (FULL_AND_PIECEWISE, FULL_DECODE_ONLY); under PIECEWISE the sizes stay,
    so a 12-token verify step runs PIECEWISE at 16."""
    d = TokenDispatcher([1, 2, 4, 8, 16], 8, "PIECEWISE", 3)
    assert d.sizes == [1, 2, 4, 8, 16]
    assert d.dispatch(12, True) == ("PIECEWISE", BatchDescriptor(16))
    assert TokenDispatcher([1, 2, 4, 8, 16], 8, "FULL_AND_PIECEWISE", 3).sizes == [3, 6, 9]
    assert TokenDispatcher([1, 2, 4, 8, 16], 8, "FULL_DECODE_ONLY", 3).sizes == [3, 6, 9]
    # FULL with an attention that captures every batch: one routine, no rounding (vLLM)
    assert TokenDispatcher([1, 2, 4, 8, 16], 8, "FULL", 3, support="ALWAYS").sizes == \
        [1, 2, 4, 8, 16]


def test_spec_rounding_with_no_size_left_raises_as_vllm_does():
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        TokenDispatcher([1, 2], 4, "FULL_AND_PIECEWISE", 4)
    with pytest.raises(ValueError, match="uniform_query_len"):
        MixedRunner(_model(), [1, 2], uniform_query_len=4, capture=False)
    # one size holds 1 + k exactly: [1 + k], as vLLM keeps it
    assert TokenDispatcher([1, 4], 4, "FULL_AND_PIECEWISE", 4).sizes == [4]
    # PIECEWISE does not round: nothing to raise, the verify steps run eager above 2
    assert TokenDispatcher([1, 2], 4, "PIECEWISE", 4).sizes == [1, 2]


def test_an_eager_runner_allocates_no_budget_sized_buffer(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("an eager runner allocated the graphs' static batch")

    monkeypatch.setattr("labkit.runner.new_batch", refuse)
    m = _model()
    _prefilled(m, [[5, 6, 7]])
    runner = MixedRunner(m, [1, 2, 4, 8, 16, 32, 64, 128], cudagraph_mode="PIECEWISE",
                         capture=False)
    out = runner.step(FlatBatch.of([(0, 3, [11, 12, 13])]))
    assert out.shape == (3, m.cfg.vocab_size)
    assert runner.counters.mode_steps == {"PIECEWISE": 1} and runner.counters.padded_rows == 1



@pytest.mark.parametrize("layout", ["slot", "paged"])
@pytest.mark.parametrize("mode", ["PIECEWISE", "FULL_AND_PIECEWISE"])
def test_the_one_runner_graph_paths_give_the_eager_tokens(monkeypatch, layout, mode):
    """capture=True on the CPU with capture replaced by a recorder (tests/test_dispatch.py):
    one runner serves a mixed step, decode steps (uniform, query length 1) and a verify step
    from its graphs, each equal to the same runner without graphs."""
    import contextlib

    import labkit.graphs as G
    import labkit.piecewise as P
    import labkit.runner as R
    from labkit.model import generate
    from tests.test_dispatch import _fake_capture

    for mod in (G, P, R):
        monkeypatch.setattr(mod, "capture_unchecked", _fake_capture, raising=False)
    monkeypatch.setattr(G, "gc_frozen", contextlib.nullcontext)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: None)
    monkeypatch.setattr(R, "check_capture_flag", lambda model, capture: bool(capture))
    got = {}
    for capture in (True, False):
        m = _model(kv_layout=layout, block_size=8)
        _prefilled(m, [PROMPTS[0], [0], PROMPTS[2]])
        runner = MixedRunner(m, [1, 2, 4, 8, 16], cudagraph_mode=mode, capture=capture)
        assert (runner.pieces is not None) is capture
        assert (runner.graphs is not None) is (capture and mode == "FULL_AND_PIECEWISE")
        mixed = runner.step(_mixed_batch())
        m2 = _model(kv_layout=layout, block_size=8)
        for i in range(3):
            m2.cache.reserve(i, m2.cfg.max_seq)
        r2 = MixedRunner(m2, [1, 2, 4, 8], cudagraph_mode=mode, capture=capture)
        tokens = generate(m2, [[1, 2, 3], [4, 5], [6]], 5, step_fn=r2.decode)
        m3 = _model(kv_layout=layout, block_size=8)
        _prefilled(m3, [PROMPTS[0], [0], PROMPTS[2]])
        r3 = MixedRunner(m3, [1, 2, 4, 8, 16], cudagraph_mode=mode, uniform_query_len=3,
                         capture=capture)  # two rows of 1 + 2 verify tokens: a uniform key
        verified = r3.verify(torch.tensor([11, 12, 13, 14, 15, 16]),
                             torch.tensor([3, 4, 5, 5, 6, 7]), torch.tensor([0, 0, 0, 2, 2, 2]), 3)
        got[capture] = (mixed, tokens, dict(runner.counters.mode_steps),
                        dict(r2.counters.mode_steps), verified, dict(r3.counters.mode_steps))
    assert torch.equal(got[True][4], got[False][4])
    assert got[True][5] == {"FULL" if mode == "FULL_AND_PIECEWISE" else "PIECEWISE": 1}
    assert torch.equal(got[True][0], got[False][0])
    assert got[True][1] == got[False][1] == generate(
        _model(kv_layout=layout, block_size=8), [[1, 2, 3], [4, 5], [6]], 5)
    assert got[True][2:4] == got[False][2:4]
    decode_mode = "FULL" if mode == "FULL_AND_PIECEWISE" else "PIECEWISE"
    assert got[True][3] == {decode_mode: 4}  # 3 rows padded to 4, four decode steps
