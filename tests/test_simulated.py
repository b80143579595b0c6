"""labkit.teach.simulated: the CPU stand-ins keep a graph's input/output semantics, and the
stand-in pool keeps the caching allocator's addresses rule (a block freed during one capture is
the block a later capture into the same pool gets)."""

from __future__ import annotations

import pytest
import torch

from labkit.teach.simulated import SimulatedGraph, graph_api, standin_cuda

cuda = standin_cuda


def test_simulated_graph_rebinding_is_stale_and_copy_fixes_it():
    static_x = torch.zeros(3)
    g = SimulatedGraph(lambda t: t * 2, static_x)
    static_x.copy_(torch.tensor([1.0, 2.0, 3.0]))
    assert g.replay().tolist() == [2.0, 4.0, 6.0]
    static_x = torch.tensor([5.0, 5.0, 5.0])       # rebinding: the graph never sees it
    assert g.replay().tolist() == [2.0, 4.0, 6.0]
    g.inputs[0].copy_(static_x)                     # the fix
    assert g.replay().tolist() == [10.0, 10.0, 10.0]


def test_simulated_graph_output_is_static_and_overwritten():
    x = torch.ones(2)
    g = SimulatedGraph(lambda t: t + 1, x)
    held = g.replay()
    kept = held.clone()
    x.fill_(10.0)
    again = g.replay()
    assert again is held and held.tolist() == [11.0, 11.0]
    assert kept.tolist() == [2.0, 2.0]
    assert SimulatedGraph(lambda t: t, x).output is not x   # its own output, even for identity


def test_simulated_graph_rejects_non_tensor_inputs():
    with pytest.raises(TypeError, match="input 0"):
        SimulatedGraph(lambda t: t, [1.0, 2.0])


def capture_pair(pool_b=None, keep_temporary=False, n=64):
    """Graph A: a temporary freed during its capture (unless kept), its output; graph B: an
    output of the same size, into ``pool_b`` (default: A's pool)."""
    x_a, x_b = torch.full((n,), 1.0), torch.full((n,), 5.0)
    g_a, g_b = cuda.CUDAGraph(), cuda.CUDAGraph()
    with cuda.graph(g_a, pool=cuda.graph_pool_handle()):
        tmp = x_a * 2.0
        ptr = tmp.data_ptr()
        out_a = tmp + 1.0
        kept = tmp if keep_temporary else None
        del tmp
    with cuda.graph(g_b, pool=g_a.pool() if pool_b is None else pool_b):
        out_b = x_b + 100.0
    return dict(g_a=g_a, g_b=g_b, out_a=out_a, out_b=out_b, ptr=ptr, kept=kept, x_a=x_a)


def test_a_block_freed_during_capture_is_the_next_captures_output_and_gets_overwritten():
    p = capture_pair()
    assert p["out_b"].data_ptr() == p["ptr"] != p["out_a"].data_ptr()
    p["g_b"].replay()
    copy = p["out_b"].clone()
    assert p["out_b"].unique().tolist() == [105.0]
    p["g_a"].replay()                              # A writes its temporary where out_b lies
    assert p["out_b"].unique().tolist() == [2.0] and copy.unique().tolist() == [105.0]
    assert p["out_a"].unique().tolist() == [3.0]
    p["x_a"].fill_(4.0)                            # replay reads the static input's new value
    p["g_a"].replay()
    assert p["out_a"].unique().tolist() == [9.0] and p["out_b"].unique().tolist() == [8.0]


def test_a_kept_temporary_or_a_pool_of_its_own_keeps_b_apart():
    kept = capture_pair(keep_temporary=True)
    assert kept["out_b"].data_ptr() != kept["ptr"]
    kept["g_b"].replay()
    kept["g_a"].replay()
    assert kept["out_b"].unique().tolist() == [105.0]
    private = capture_pair(pool_b=cuda.graph_pool_handle())
    assert private["out_b"].data_ptr() != private["ptr"]


def test_best_fit_and_allocations_outside_capture():
    pool = cuda.graph_pool_handle()
    g1, g2 = cuda.CUDAGraph(), cuda.CUDAGraph()
    with cuda.graph(g1, pool=pool):
        big, small = torch.ones(100), torch.ones(25)    # blocks of 400 and 100 bytes
    at_big, at_small = big.data_ptr(), small.data_ptr()
    del big, small                                      # both blocks free now
    with cuda.graph(g2, pool=pool):
        a = torch.ones(20)      # 80 bytes: the best fit is the 100-byte block
        b = torch.ones(50)      # 200 bytes: only the 400-byte block holds it
        c = torch.ones(30)      # 120 bytes: no free block fits, a new one
    assert (a.data_ptr(), b.data_ptr()) == (at_small, at_big)
    assert c.data_ptr() not in (at_small, at_big) and len(pool.blocks) == 3
    g2.replay()
    assert a.tolist() == [1.0] * 20 and c.tolist() == [1.0] * 30
    outside = torch.ones(25)                            # not captured: never from the pool
    assert outside.data_ptr() not in {blk.data_ptr() for blk in pool.blocks}


def test_a_graph_holds_addresses_not_tensors():
    x = torch.ones(8)
    g1, g2 = cuda.CUDAGraph(), cuda.CUDAGraph()
    with cuda.graph(g1):
        out1 = x * 3.0
    with cuda.graph(g2, pool=g1.pool()):
        out2 = out1 + 1.0                           # g2 reads g1's output by its address
    ptr = out1.data_ptr()
    del out1                                        # its block is free now, though g2 reads it
    g3 = cuda.CUDAGraph()
    with cuda.graph(g3, pool=g1.pool()):
        out3 = x * 0.0
    assert out3.data_ptr() == ptr
    g1.replay(); g3.replay(); g2.replay()           # noqa: E702
    assert out2.unique().tolist() == [1.0]          # g3 overwrote what g2 reads


def test_graph_api_and_misuse():
    assert graph_api("cpu") is standin_cuda and graph_api("cuda") is torch.cuda
    g = cuda.CUDAGraph()
    assert g.pool() is None
    with pytest.raises(TypeError, match="graph_pool_handle"), cuda.graph(g, pool="mine"):
        pass
    with cuda.graph(g):
        pass
    with pytest.raises(RuntimeError, match="already captured"), cuda.graph(g):
        pass
    s = cuda.Stream()
    s.wait_stream(cuda.current_stream())
    with cuda.stream(s):
        pass
