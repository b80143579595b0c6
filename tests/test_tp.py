"""Tensor-parallel decode (labkit.distributed.tp) on two gloo ranks against the full model, and the rank
launcher (labkit.distributed.launch): results, errors naming the rank, time-bounded joins, no leftovers."""

from __future__ import annotations

import multiprocessing
import time

import pytest
import torch
import torch.distributed as dist

from labkit.distributed.launch import RankError, RankTimeout, check_devices, run_ranks
from labkit.model import GPTConfig, build_model
from labkit.distributed.tp import TensorParallelGPT, check_tp_split, rank_check

# 4 heads: two per rank at world size 2; small enough for milliseconds per step
CFG = dict(vocab_size=97, n_layer=2, n_head=4, d_model=32, max_seq=32)
NEW = 6


def _no_children_left() -> bool:
    return multiprocessing.active_children() == []


@pytest.fixture(scope="module", params=["slot", "paged"])
def ranks(request) -> list[dict]:
    cfg = {**CFG, "kv_layout": request.param, "block_size": 8}
    out = run_ranks(rank_check, 2, args=(cfg, 0, 4, None, NEW), backend="gloo", timeout_s=90)
    assert _no_children_left()
    return out


def test_each_rank_holds_half_the_heads(ranks):
    assert [r["rank"] for r in ranks] == [0, 1]
    assert {r["world_size"] for r in ranks} == {2}
    assert {r["tp_heads"] for r in ranks} == {2}
    assert {(r["cache_heads"], r["full_cache_heads"]) for r in ranks} == {(2, 4)}


def test_prefill_and_decode_logits_match_the_full_model(ranks):
    for r in ranks:
        ref, par = r["prefill_logits"]
        assert ref.shape == par.shape == (3, CFG["vocab_size"])
        torch.testing.assert_close(par, ref, rtol=1e-5, atol=1e-6)
        assert len(r["decode_logits"]) == 4
        for ref, par in r["decode_logits"]:
            torch.testing.assert_close(par, ref, rtol=1e-5, atol=1e-6)
        assert max(r["decode_diffs"]) < 1e-5 and r["prefill_diff"] < 1e-5


def test_greedy_tokens_match_step_by_step(ranks):
    for r in ranks:
        assert len(r["step_tokens"]) == 5
        for full, tp in r["step_tokens"]:
            assert full == tp
    assert ranks[0]["step_tokens"] == ranks[1]["step_tokens"]


def test_generate_and_the_padding_dispatcher_give_the_full_models_tokens(ranks):
    full, tp = ranks[0]["generate"]
    assert len(full) == 3 and all(len(row) == NEW for row in full)
    assert tp == full
    for r in ranks:  # in lockstep: every rank the same tokens, by generate and the dispatcher
        assert r["generate"] == (full, full)
        assert r["dispatch"] == full
        assert r["dispatch_steps"] == NEW - 1


def test_check_tp_split_names_the_heads_and_the_world_size():
    cfg = GPTConfig(**{**CFG, "n_head": 4})
    assert check_tp_split(cfg, 1) == 4 and check_tp_split(cfg, 4) == 1
    with pytest.raises(ValueError, match=r"n_head=4 is not divisible by world_size=3.*\[1, 2, 4\]"):
        check_tp_split(cfg, 3)
    with pytest.raises(ValueError, match="world_size"):
        check_tp_split(cfg, 0)


def test_tensor_parallel_gpt_needs_a_process_group():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match=r"process group.*run_ranks"):
        TensorParallelGPT(build_model(GPTConfig(**CFG)))


def _bad_inputs(rank: int, world_size: int) -> dict:
    """Errors a rank sees for a bad split or an unavailable all-reduce (caught, returned)."""
    out = {}
    for name, kwargs, cfg in (("heads", {}, {**CFG, "n_head": 2, "d_model": 30}),
                              ("three", {}, {**CFG, "n_head": 3, "d_model": 33}),
                              ("symm_mem", {"allreduce": "symm_mem"}, CFG),
                              ("kind", {"allreduce": "ring"}, CFG)):
        try:
            TensorParallelGPT(build_model(GPTConfig(**cfg)), **kwargs)
            out[name] = None
        except (ValueError, RuntimeError) as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    return out


def test_bad_world_size_and_unavailable_allreduce_give_clear_errors_on_every_rank():
    res = run_ranks(_bad_inputs, 2, backend="gloo", timeout_s=60)
    for r in res:
        assert r["heads"] is None  # 2 heads split over 2 ranks is fine
        assert "ValueError: n_head=3 is not divisible by world_size=2" in r["three"]
        assert "RuntimeError: allreduce='symm_mem' is unavailable" in r["symm_mem"]
        assert "allreduce='process_group'" in r["symm_mem"]
        assert "ValueError: allreduce must be one of" in r["kind"]
    assert _no_children_left()


def _tp_with_three_heads(rank: int, world_size: int) -> None:
    TensorParallelGPT(build_model(GPTConfig(**{**CFG, "n_head": 3, "d_model": 33})))


def test_a_rank_that_raises_is_named_and_nothing_is_left_behind():
    with pytest.raises(RankError, match=r"rank [01] of 2 failed(.|\n)*n_head=3 is not divisible"):
        run_ranks(_tp_with_three_heads, 2, backend="gloo", timeout_s=60, grace_s=2)
    assert _no_children_left()


def _rank1_sleeps(rank: int, world_size: int) -> int:
    if rank == 1:
        time.sleep(60)
    return rank


def test_a_hung_rank_is_named_with_its_phase_and_terminated():
    t0 = time.monotonic()
    with pytest.raises(RankTimeout) as info:
        run_ranks(_rank1_sleeps, 2, backend="gloo", timeout_s=3)
    msg = str(info.value)
    assert "within timeout_s=3 (after every rank joined the group)" in msg
    assert "rank 1 in running the function" in msg
    assert "rank 0 in shutdown (release graphs, synchronize, barrier, destroy_process_group)" in msg
    assert time.monotonic() - t0 < 60
    assert _no_children_left()


def test_launcher_refuses_bad_arguments_before_spawning():
    with pytest.raises(ValueError, match="world_size"):
        run_ranks(_rank1_sleeps, 0, backend="gloo")
    with pytest.raises(TypeError, match="module level"):
        run_ranks(lambda rank, world: rank, 2, backend="gloo")
    with pytest.raises(ValueError, match="backend 'mpi'"):
        run_ranks(_rank1_sleeps, 2, backend="mpi")
    with pytest.raises(ValueError, match="timeout_s"):
        run_ranks(_rank1_sleeps, 2, backend="gloo", timeout_s=0)
    with pytest.raises(ValueError, match="grace_s must be a positive"):
        run_ranks(_rank1_sleeps, 2, backend="gloo", grace_s=-1)
    assert _no_children_left()


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() >= 64,
                    reason="this machine has 64 GPUs")
def test_nccl_with_too_few_gpus_names_the_shortfall():
    with pytest.raises(RuntimeError, match=r"64 ranks with backend='nccl' need 64 CUDA devices"):
        check_devices(64, "nccl")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs 2 CUDA devices")
@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_tp2_on_two_gpus_matches_the_full_model(layout):
    cfg = {**CFG, "kv_layout": layout, "block_size": 8}
    res = run_ranks(rank_check, 2, args=(cfg, 0, 4, None, NEW), backend="nccl", timeout_s=300)
    for r in res:
        assert r["tp_heads"] == 2
        for ref, par in [r["prefill_logits"], *r["decode_logits"]]:
            torch.testing.assert_close(par, ref, rtol=1e-4, atol=1e-5)
        assert all(full == tp for full, tp in r["step_tokens"])
        full, tp = r["generate"]
        assert tp == full and r["dispatch"] == full  # the dispatcher replays captured graphs
    assert _no_children_left()


@pytest.fixture()
def one_rank():
    """A one-rank gloo group in this process (no spawn), destroyed afterwards."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def test_one_rank_is_the_full_model_in_this_process(one_rank):
    r = rank_check(0, 1, CFG, 0, 3, [[1, 2], [3]], 4, (1, 2))
    assert r["tp_heads"] == CFG["n_head"]
    for ref, par in [r["prefill_logits"], *r["decode_logits"]]:
        torch.testing.assert_close(par, ref, rtol=1e-5, atol=1e-6)
    full, tp = r["generate"]
    assert tp == full and r["dispatch"] == full and len(full[0]) == 4


def test_shard_shapes_and_collective_warmup(one_rank):
    full = build_model(GPTConfig(**CFG))
    tp = TensorParallelGPT(full)
    assert tp.world_size == 1 and tp.rank == 0
    assert tp.cache.heads == CFG["n_head"]
    assert tp.blocks[0].qkv.weight.shape == (3 * CFG["d_model"], CFG["d_model"])
    torch.testing.assert_close(tp.blocks[0].qkv.weight, full.blocks[0].qkv.weight)
    tp.warmup_collectives()  # one all-reduce of a decode-step shape; nothing to capture on CPU
    with pytest.raises(TypeError, match="full TinyGPT"):
        TensorParallelGPT(tp)
    with pytest.raises(TypeError, match=r"TinyGPT.load\(path\)"):
        TensorParallelGPT.load("model.safetensors")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs 2 CUDA devices")
def test_tp2_symmetric_memory_allreduce_matches_the_full_model():
    if not hasattr(torch.ops.symm_mem, "one_shot_all_reduce"):
        pytest.skip(f"torch {torch.__version__} has no symm_mem one_shot_all_reduce")
    res = run_ranks(rank_check, 2, args=(CFG, 0, 4, None, NEW, (1, 2, 4), "symm_mem"),
                    backend="nccl", timeout_s=300)
    for r in res:
        for ref, par in [r["prefill_logits"], *r["decode_logits"]]:
            torch.testing.assert_close(par, ref, rtol=1e-4, atol=1e-5)
        full, tp = r["generate"]
        assert tp == full and r["dispatch"] == full
    assert _no_children_left()
