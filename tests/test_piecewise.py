"""Piecewise decode (the step cut at attention) and the dispatcher's capture modes."""

import pytest
import torch

from labkit.runner import PaddingDispatcher
from labkit.model import build_model, generate, preset
from labkit.piecewise import piecewise_step

PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9], [4], [10, 11], [3, 3], [9]]


@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_piecewise_step_equals_decode_step(layout):
    m = build_model(preset("test", max_batch=8, kv_layout=layout), seed=0)
    for i in range(3):
        m.cache.reserve(i, 12)
        m.prefill(torch.tensor([[1 + i, 2, 3]]), torch.tensor([i]))
    t, p, s = torch.tensor([4, 5, 6]), torch.tensor([3, 3, 3]), torch.tensor([2, 0, 1])
    k0 = m.k_cache.clone()
    a = m.decode_step(t, p, s)
    m.k_cache.copy_(k0)
    b = piecewise_step(m, t, p, s)
    assert torch.equal(a, b)


@pytest.mark.parametrize("mode,full_max", [("FULL", None), ("PIECEWISE", None), ("NONE", None),
                                           ("FULL_AND_PIECEWISE", 2)])
@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_every_mode_gives_eager_tokens_on_cpu(mode, full_max, layout):
    m = build_model(preset("test", max_batch=8, kv_layout=layout), seed=0)
    want = generate(m, PROMPTS, 10)
    d = PaddingDispatcher(m, [1, 2, 4, 8], cudagraph_mode=mode, max_num_seqs=full_max)
    assert generate(m, PROMPTS, 10, step_fn=d.step) == want
    assert generate(m, PROMPTS[:2], 10, step_fn=d.step) == generate(m, PROMPTS[:2], 10)
    # six rows pad to 8, two rows run at 2: 9 steps each
    expected = {"NONE": {"NONE": 18}, "FULL": {"FULL": 18}, "PIECEWISE": {"PIECEWISE": 18},
                "FULL_AND_PIECEWISE": {"PIECEWISE": 9, "FULL": 9}}[mode]
    assert d.counters.mode_steps == expected


def test_decide_picks_mode_and_padded_size_from_the_row_count():
    m = build_model(preset("test", max_batch=16), seed=0)
    d = PaddingDispatcher(m, [1, 2, 4, 8], cudagraph_mode="FULL_AND_PIECEWISE",
                          max_num_seqs=2)
    assert [d.decide(b) for b in (1, 2, 3, 5, 8, 9)] == [
        ("FULL", 1), ("FULL", 2), ("PIECEWISE", 4), ("PIECEWISE", 8), ("PIECEWISE", 8),
        ("NONE", 9)]
    assert d.full_sizes == [1, 2] and d.piecewise_sizes == [4, 8]
    none = PaddingDispatcher(m, [1, 2], cudagraph_mode="NONE")
    assert none.decide(1) == ("NONE", 1)


def test_piecewise_counters_and_padding_on_cpu():
    m = build_model(preset("test", max_batch=16), seed=0)
    d = PaddingDispatcher(m, [1, 4, 8], cudagraph_mode="PIECEWISE")
    generate(m, [[1, 2]] * 3, 5, step_fn=d.step)
    assert d.counters.mode_steps == {"PIECEWISE": 4}
    assert d.counters.padded_rows == 4  # 3 rows padded to 4, four steps


def test_bad_mode_arguments_are_refused():
    m = build_model(preset("test", max_batch=8), seed=0)
    with pytest.raises(ValueError, match="cudagraph_mode must be one of"):
        PaddingDispatcher(m, [1, 2], cudagraph_mode="FAST")
    # vLLM's max_num_seqs bounds the FULL decode graphs; none given: every size FULL
    assert PaddingDispatcher(m, [1, 2], cudagraph_mode="FULL_AND_PIECEWISE").full_sizes == [1, 2]
    with pytest.raises(ValueError, match="max_num_seqs"):
        PaddingDispatcher(m, [1, 2], cudagraph_mode="FULL", max_num_seqs=0)


@pytest.mark.gpu
@pytest.mark.parametrize("mode,full_max", [("FULL", None), ("PIECEWISE", None),
                                           ("FULL_AND_PIECEWISE", 4), ("NONE", None)])
@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_graph_modes_equal_eager_token_for_token_on_gpu(mode, full_max, layout):
    from labkit.measure.bench import tokens_match

    m = build_model(preset("small", max_batch=24, max_seq=64, vocab_size=4096,
                           kv_layout=layout), "cuda")
    d = PaddingDispatcher(m, [1, 2, 4, 8, 16], cudagraph_mode=mode, max_num_seqs=full_max,
                          progress=False)
    for bs in (1, 3, 8, 13, 20):
        assert tokens_match(m, d.step, bs, new_tokens=8, seed=bs), (mode, layout, bs)
    if mode == "PIECEWISE":
        assert d.pieces.graphs_per_step() == m.cfg.n_layer + 1
        assert d.counters.mode_steps.get("PIECEWISE", 0) > 0
    d.release()


@pytest.mark.gpu
def test_piecewise_logits_bitwise_equal_eager_on_gpu():
    from labkit.measure.bench import step_inputs

    m = build_model(preset("small", max_batch=16, max_seq=64, dtype="bfloat16"), "cuda")
    d = PaddingDispatcher(m, [1, 4, 16], cudagraph_mode="PIECEWISE", progress=False)
    for bs in (1, 4, 16):
        t, p, s = step_inputs(m, bs, seed=bs)
        k0 = m.k_cache.clone()
        eager = m.decode_step(t, p, s).clone()
        m.k_cache.copy_(k0)
        assert torch.equal(d.step(t, p, s), eager), bs
    d.release()
