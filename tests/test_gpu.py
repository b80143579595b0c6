"""CUDA tests (marker ``gpu``): graphs equal eager token for token, pools, capture errors.

Skipped with a reason on machines without CUDA; run them on a GPU with ``pytest -m gpu``.
"""

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from labkit.measure import records
from labkit.measure.bench import measure_pool_memory, tokens_match
from labkit.runner import PaddingDispatcher
from labkit.graphs import (CaptureAllocationError, CaptureError, CaptureSyncError,
                           capture_callable, capture_decode_graphs, pool_reserved_bytes)
from labkit.model import build_model, generate, preset

pytestmark = pytest.mark.gpu
SIZES = [1, 2, 4, 8, 16]


@pytest.fixture(scope="module")
def fp32_model():
    return build_model(preset("small", max_batch=24, max_seq=64, vocab_size=4096), "cuda")


@pytest.fixture(scope="module")
def bf16_model():
    return build_model(preset("small", max_batch=24, max_seq=64, dtype="bfloat16"), "cuda")


def test_graph_equals_eager_at_every_captured_and_padded_size(fp32_model):
    d = PaddingDispatcher(fp32_model, SIZES, progress=False)
    assert d.capture is True
    for bs in range(1, max(SIZES) + 6):
        assert tokens_match(fp32_model, d.step, bs, new_tokens=10, seed=bs), bs
    assert d.counters.eager_fallbacks > 0  # 17..21 ran eager
    d.release()


def test_bf16_graph_logits_bitwise_equal_eager_at_captured_sizes(bf16_model):
    gs = capture_decode_graphs(bf16_model, SIZES, progress=False)
    for bs in SIZES:
        g = torch.Generator().manual_seed(bs)
        t = torch.randint(0, 50257, (bs,), generator=g).cuda()
        p = torch.randint(0, 60, (bs,), generator=g).cuda()
        s = torch.randperm(bs, generator=g).cuda()
        eager = bf16_model.decode_step(t, p, s).clone()
        gs.batch.tokens[:bs].copy_(t)
        gs.batch.positions[:bs].copy_(p)
        gs.batch.slots[:bs].copy_(s)
        assert torch.equal(gs.replay(bs), eager), bs
    for bs in SIZES:
        d = PaddingDispatcher(bf16_model, [bs], graphs=None, progress=False)
        assert tokens_match(bf16_model, d.step, bs, new_tokens=8), bs
        d.release()
    gs.release()


def test_a_graph_set_passed_in_is_used_and_not_rewritten(fp32_model):
    gs = capture_decode_graphs(fp32_model, SIZES, progress=False)
    before = (gs.batch, dict(gs.graphs), gs.batch.tokens.data_ptr(), gs.logits.data_ptr())
    d = PaddingDispatcher(fp32_model, SIZES, graphs=gs, progress=False)
    assert d.graphs is gs and d.batch is gs.batch
    for bs in (1, 3, 16, 20):
        assert tokens_match(fp32_model, d.step, bs, new_tokens=6, seed=bs), bs
    assert (gs.batch, dict(gs.graphs), gs.batch.tokens.data_ptr(), gs.logits.data_ptr()) == before
    gs.release()


def test_padding_never_touches_live_cache_on_gpu(fp32_model):
    m = fp32_model
    d = PaddingDispatcher(m, SIZES, progress=False)
    m.prefill(torch.tensor([[1, 2, 3]], device="cuda"), torch.tensor([20], device="cuda"))
    live = m.k_cache[:, 20].clone()
    for bs in (7, 3, 5, 1):
        d.step(torch.ones(bs, dtype=torch.long, device="cuda"),
               torch.full((bs,), 4, device="cuda"), torch.arange(bs, device="cuda"))
    torch.cuda.synchronize()
    assert torch.equal(m.k_cache[:, 20], live)
    d.release()


def test_shared_pool_smaller_than_sum_of_private(bf16_model):
    sizes = [1, 2, 4, 8, 16]
    priv = capture_decode_graphs(bf16_model, sizes, pool="private", progress=False)
    per = [pool_reserved_bytes(g.pool) for g in priv.graphs.values()]
    assert len(priv.pools()) == len(sizes) and all(b > 0 for b in per)
    priv.release()
    shared = capture_decode_graphs(bf16_model, sizes, pool="shared", progress=False)
    assert len(shared.pools()) == 1
    total = shared.memory_report()["total_reserved_bytes"]
    assert 0 < total < sum(per)
    shared.release()


def test_pool_memory_record_holds_two_max_seqs_logits_and_the_gather_path():
    data = measure_pool_memory("small", sizes=(1, 8, 64), max_seqs=(256, 1024),
                               gather_max_seq=256)
    rec = records.parse("pool_memory_small", data)
    assert rec.max_seq == 256
    assert rec.logits_bytes == 64 * preset("small").vocab_size * 2  # bf16, outside the pool
    lo, hi = rec.by_max_seq[256], rec.by_max_seq[1024]
    assert hi.kv_cache_bytes == 4 * lo.kv_cache_bytes
    # the cache is read in place: nothing in the pool has a max_seq dimension
    assert hi.shared_largest_first_bytes <= 1.25 * lo.shared_largest_first_bytes
    assert rec.gather.max_seq == 256 and not rec.gather.in_place
    assert rec.gather.shared_largest_first_bytes > lo.shared_largest_first_bytes


def test_host_sync_in_capture_is_named_and_loses_nothing(fp32_model):
    x = torch.ones(4, device="cuda")

    def bad(t):
        return t * t.sum().item()

    with pytest.raises(CaptureSyncError, match="host synchronisation") as info:
        capture_callable(bad, x)
    assert "fix:" in str(info.value) and ".item()" in str(info.value)
    # the model still decodes after the failed capture
    assert len(generate(fp32_model, [[1, 2, 3]], 4)[0]) == 4


def test_dynamic_shape_in_capture_is_named():
    x = torch.randn(64, device="cuda")
    with pytest.raises(CaptureSyncError, match="depends on the data"):
        capture_callable(lambda t: t[t > 0].sum(), x)


def test_sync_error_inside_capture_itself_is_translated():
    x = torch.ones(4, device="cuda")
    with pytest.raises(CaptureError):
        capture_callable(lambda t: t * t.sum().item(), x, check_sync=False)
    y = torch.ones(2, device="cuda") * 3  # CUDA still works
    assert y.sum().item() == 6


def test_host_copy_inside_capture_is_named():
    x = torch.ones(4, device="cuda")
    with pytest.raises((CaptureAllocationError, CaptureSyncError)):
        capture_callable(lambda t: t + torch.tensor([1.0, 2.0, 3.0, 4.0]).cuda(), x)


def test_oom_during_capture_releases_and_says_what_to_lower():
    code = textwrap.dedent("""
        import json, torch
        from labkit.model import build_model, generate, preset
        from labkit.graphs import capture_decode_graphs, CaptureOOMError
        m = build_model(preset("small", max_batch=512, max_seq=128, dtype="bfloat16"), "cuda")
        generate(m, [[1, 2, 3]], 2)
        torch.cuda.synchronize()
        base = torch.cuda.memory_reserved()
        total = torch.cuda.get_device_properties(0).total_memory
        logits = 512 * m.cfg.vocab_size * 2  # the static logits buffer, outside the pools
        torch.cuda.set_per_process_memory_fraction((base + logits + 48 * 2**20) / total)
        out = {}
        try:
            capture_decode_graphs(m, [1, 2, 4, 64, 128, 256, 512], order="smallest_first",
                                  pool="private", progress=False)
            out["raised"] = None
        except CaptureOOMError as e:
            out["raised"] = str(e)
        torch.cuda.synchronize()
        out["reserved_after_mib"] = (torch.cuda.memory_reserved() - base) / 2**20
        out["tokens_after"] = generate(m, [[1, 2, 3]], 4)[0]
        print(json.dumps(out))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["raised"] and "ran out of memory during capture" in out["raised"]
    assert "lower max_batch" in out["raised"] and "released" in out["raised"]
    assert out["reserved_after_mib"] < 48 + 512 * 50257 * 2 / 2**20
    assert len(out["tokens_after"]) == 4


def test_launch_overhead_reports_gpu_figures():
    from labkit.timing import launch_overhead

    lo = launch_overhead("cuda", n_kernels=50, repeats=5)
    assert lo.launch_sync is not None and lo.gpu_per_graph_node is not None
    assert lo.host_per_launch.median > 0 and lo.gpu_per_graph_node.median > 0
