"""Notebook 12 on a GPU (marker ``gpu``): the roofline and multi-step measurements save
records of their kinds, graph and multi-step tokens equal the eager ones, CUDA graphs are
really launched, and the conditional-node probe reports instead of raising."""

from __future__ import annotations

import pytest
import torch

from labkit.roofline.conditional import conditional_support, if_node_demo
from labkit.measure import records as R
from labkit.measure.results import load_result, save_result
from labkit.measure.roofline import copy_bandwidth, matmul_rate, measure_multistep, \
    measure_roofline
from labkit.model import build_model, preset
from labkit.roofline.multistep import capture_multistep, single_steps

pytestmark = pytest.mark.gpu


# kept short (the GPU suite runs every file once, each well under 30 s): the tiny ``test``
# preset, two or three batch sizes, a few repeats


def test_copy_bandwidth_and_matmul_rate_are_positive():
    bw = copy_bandwidth(nbytes=2**26, repeats=3)
    mm = matmul_rate(n=1024, repeats=3)
    assert bw["gbps"] > 0 and bw["bytes"] == 2**26
    assert mm["tflops"] > 0 and mm["n"] == 1024


def test_measure_roofline_eager_and_graph_saves_a_roofline_record(tmp_path):
    data = measure_roofline("test", batch_sizes=(1, 2, 4), variants=("eager", "graph"),
                            compile_sizes=(1,), context=8, max_seq=32, dtype="float32",
                            repeats=3, inner=1)
    rec = load_result(save_result("roofline_test", data, {}, tmp_path)).record
    assert isinstance(rec, R.Roofline)
    assert rec.checks["graph_tokens_equal_eager"] is True
    assert all(t is not None for t in rec.median_us("graph"))
    assert rec.variants["graph"].graph_launches == 1
    assert rec.variants["eager"].graph_launches == 0
    assert rec.variants["graph"].gpu_ops >= 2 * preset("test").n_layer
    assert all(r > 0 for r in rec.over_floor("graph"))


def test_measure_roofline_compiled_columns_use_cuda_graphs(tmp_path):
    names = ("compile_reduce_overhead",)  # one compile keeps the file short
    data = measure_roofline("test", batch_sizes=(1, 2), variants=names, compile_sizes=(1,),
                            context=8, max_seq=32, dtype="float32", repeats=3, inner=1)
    rec = load_result(save_result("roofline_test", data, {}, tmp_path)).record
    for name in names:
        v = rec.variants[name]
        assert v.error is None, v.error
        assert v.sizes == [1]
        assert rec.median_us(name)[1] is None          # batch 2 was not compiled
        assert v.graphs_used is True
        assert rec.checks[f"{name}_token_agreement"] >= 0.9


def test_multistep_graph_tokens_equal_single_steps():
    model = build_model(preset("test", max_batch=4), "cuda")
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    first = [model.prefill(torch.tensor([p], device="cuda"), torch.tensor([i], device="cuda"))
             .argmax(-1) for i, p in enumerate(prompts)]
    t = torch.cat(first)
    p = torch.tensor([len(x) for x in prompts], device="cuda")
    s = torch.arange(3, device="cuda")
    ref = single_steps(model, t, p, s, 5)
    g = capture_multistep(model, 3, 5)
    g.load(t, p, s)
    assert torch.equal(g.replay(), ref)


def test_measure_multistep_saves_a_multistep_record(tmp_path):
    data = measure_multistep("test", batch_sizes=(1, 2), n_steps=4, max_seq=32,
                             dtype="float32", repeats=3)
    rec = load_result(save_result("multistep_test", data, {}, tmp_path)).record
    assert isinstance(rec, R.Multistep)
    assert rec.checks["multistep_tokens_equal_single_steps"] is True
    assert set(R.MULTISTEP_METHODS) <= set(rec.methods)
    assert "if_node" in rec.conditional and "if_node_demo" in rec.conditional


def test_if_node_demo_reports_on_a_gpu():
    out = if_node_demo()
    assert set(out) == {"ok", "values", "error"}
    if conditional_support()["if_node"]:
        assert out["ok"], out
