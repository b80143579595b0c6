"""labkit.measure.lesson_runs: the small live runs the notebooks make (CPU; replay on a GPU)."""

from __future__ import annotations

import pytest
import torch

from labkit.runner import PaddingDispatcher
from labkit.measure import lesson_runs as runs
from labkit.graphs import capture_decode_graphs
from labkit.measure.bench import step_inputs
from labkit.mixed import BatchDescriptor
from labkit.runner import MixedRunner
from labkit.model import build_model, generate, preset


def test_time_eager_steps_and_inputs():
    m = build_model(preset("test"))
    times = runs.time_eager_steps(m, [1, 2], repeats=2, warmup=0)
    assert sorted(times) == [1, 2] and all(t.n == 2 and t.median > 0 for t in times.values())
    with pytest.raises(ValueError, match="max_batch"):
        runs.time_eager_steps(m, [m.cfg.max_batch + 1])


def test_count_dispatched_ops_sees_the_step():
    m = build_model(preset("test"))
    tokens, positions, slots = step_inputs(m, 2)
    ops = runs.count_dispatched_ops(lambda: m.decode_step(tokens, positions, slots))
    # one LayerNorm per sub-block plus the final one; 4 linear layers per block + head
    assert ops["native_layer_norm"] == 2 * m.cfg.n_layer + 1
    assert ops["addmm"] + ops["mm"] == 4 * m.cfg.n_layer + 1
    assert sum(runs.count_dispatched_ops(lambda: m.decode_step(tokens, positions, slots),
                                         include_views=True).values()) > sum(ops.values())


def test_cached_decode_equals_full_forward():
    m = build_model(preset("test"))
    check = runs.check_cached_equals_full(m, [1, 2, 3], 6)
    assert check.tokens_equal and bool(check) and len(check.generated) == 6
    assert check.max_abs_logit_diff < 1e-4


@pytest.mark.gpu
def test_replay_step_matches_eager_on_gpu():
    m = build_model(preset("test", max_batch=2), "cuda")
    graphs = capture_decode_graphs(m, [1])
    eager = generate(m, [[1, 2, 3]], 8)
    replay = generate(m, [[1, 2, 3]], 8, step_fn=runs.replay_step(graphs, 1))
    assert replay == eager
    with pytest.raises(KeyError):
        runs.replay_step(graphs, 2)
    graphs.release()


@pytest.fixture(scope="module")
def dispatcher():
    model = build_model(preset("test", max_batch=8))
    return PaddingDispatcher(model, [1, 2, 4], capture=False)


def test_run_batch_stream_counts(dispatcher):
    threads = torch.get_num_threads()
    c = runs.run_batch_stream(dispatcher, [1, 3, 3, 6, 4])
    assert torch.get_num_threads() == threads          # restored
    assert c["steps"] == 5 and c["eager_fallbacks"] == 1
    assert c["padded_rows"] == 2 and c["real_rows"] == 17
    assert c["graph_hits"] == {"1": 1, "4": 3}


def test_padding_isolation(dispatcher):
    r = runs.padding_isolation(dispatcher, live=3)
    assert r["padded_to"] == 4 and r["padded_rows"] == 1
    assert r["stepped_slots_changed"] and r["other_request_unchanged"]
    assert r["untouched_slots_unchanged"] and r["scratch_slot_changed"]
    with pytest.raises(ValueError, match="padded"):
        runs.padding_isolation(dispatcher, live=4)


@pytest.mark.gpu
def test_live_pool_comparison_is_shaped_like_a_pool_memory_record_on_gpu():
    from labkit.teach import memory as lm

    m = build_model(preset("test", max_batch=8, dtype="bfloat16"), "cuda")
    live = runs.live_pool_comparison(m, [4, 1, 2, 2])
    assert live["sizes"] == [1, 2, 4]
    assert set(live["private"]["per_size_bytes"]) == {"1", "2", "4"}
    assert live["largest_private_bytes"] == max(live["private"]["per_size_bytes"].values()) > 0
    for mode in runs.MODES:
        assert live[mode]["total_bytes"] > 0 and set(live[mode]["capture_s"]) == {"1", "2", "4"}
    rows = lm.summary_rows(live)                 # what notebook 04 shows
    assert next(r["strategy"] for r in rows) == "private pool per size"


@pytest.mark.gpu
def test_naive_reserved_delta_splits_pool_and_outside_on_gpu():
    m = build_model(preset("test", max_batch=4, dtype="bfloat16"), "cuda")
    d = runs.naive_reserved_delta(m, [1, 2])
    assert d["pool_bytes"] > 0
    assert d["outside_pool_bytes"] == d["naive_delta_bytes"] - d["pool_bytes"]


def test_mixed_requests_continue_prompts_for_uniform_rows_only():
    runner = MixedRunner(build_model(preset("test"), seed=0), [8], capture=False)
    prompts, batch = runs.mixed_requests(runner, [1, 5, 1], seed=0)
    assert [len(p) for p in prompts] == [2, 0, 4]
    assert batch.query_lens == [1, 5, 1] and batch.req_slots == [0, 1, 2]
    assert batch.positions == [2, 0, 1, 2, 3, 4, 4]
    again = runs.mixed_requests(runner, [1, 5, 1], seed=0)
    assert again[0] == prompts and again[1].tokens == batch.tokens  # seeded
    assert all(0 <= t < 97 for p in prompts for t in p + batch.tokens)


@pytest.mark.parametrize("layout", ["slot", "paged"])
@pytest.mark.parametrize("lens, q, mode, key", [
    ([1] * 5, 1, "FULL", (8, 8, True)), ([1, 1, 1, 10], 1, "PIECEWISE", (16, None, False)),
    ([4] * 3, 4, "FULL", (16, 4, True)), ([30], 1, "NONE", (30, None, False))])
def test_check_mixed_step_equals_the_full_forward_pass(layout, lens, q, mode, key):
    m = build_model(preset("test", max_batch=8, max_seq=64, kv_layout=layout, block_size=8),
                    seed=0)
    runner = MixedRunner(m, [1, 2, 4, 8, 16], uniform_query_len=q, capture=False)
    got = runs.check_mixed_step(runner, lens)
    assert got["runtime mode"] == mode and got["descriptor"] == BatchDescriptor(*key)
    assert got["logits close"] and got["greedy tokens equal"]
    assert got["max |logit diff|"] < 1e-5
