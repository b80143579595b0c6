"""The fused decode step (labkit.fused): same tokens as the readable step, same cache, same
interface, fewer operations; the op counter; the ``fused_<preset>`` record; GPU checks."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch

from labkit.runner import PaddingDispatcher
from labkit.fused import ATTENTION, FLASH_MAX_ROW_HEADS, agreement, make_fused_step
from labkit.kvcache import SlotKVCache
from labkit.measure import records as R
from labkit.measure.fused_bench import measure_fused
from labkit.measure.opcount import compare_counts, op_counts
from labkit.model import build_model, generate, preset

PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10], [11, 12, 13, 14, 15]]


def _model(layout: str = "slot", dtype: str = "float32", **kw):
    m = build_model(preset("test", max_batch=8, kv_layout=layout, dtype=dtype, **kw), seed=1)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # GPT-2's biases are not zero: make every one count
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return m


def _step_inputs(b: int):
    return (torch.arange(b) * 7 % 97, torch.arange(b) * 3 + 2, torch.arange(b))


@pytest.mark.parametrize("layout", ["slot", "paged"])
@pytest.mark.parametrize("bs", [1, 2, 3, 5])
def test_fused_tokens_equal_readable_in_float32(layout, bs):
    m = _model(layout)
    ref = generate(m, PROMPTS[:bs], 12)
    assert generate(m, PROMPTS[:bs], 12, step_fn=make_fused_step(m)) == ref


@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_fused_logits_and_cache_match_readable(layout):
    m = _model(layout)
    t, p, s = _step_inputs(3)
    for slot, pos in zip(s.tolist(), p.tolist()):
        m.cache.reserve(slot, pos + 1)
    want = m.decode_step(t, p, s)
    kv_readable = m.cache.kv.clone()
    m.reset_cache()
    out = torch.full_like(want, float("nan"))
    got = make_fused_step(m)(t, p, s, out=out)
    assert got is out
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m.cache.kv, kv_readable, rtol=1e-6, atol=1e-6)


def test_fused_reads_the_live_weights_every_call():
    m = _model()
    step = make_fused_step(m)
    t, p, s = _step_inputs(2)
    before = step(t, p, s)
    with torch.no_grad():
        m.blocks[-1].fc_out.bias.add_(1.0)
        m.blocks[0].proj.bias.add_(0.5)
        m.blocks[1].fc.weight.mul_(1.5)
    after = step(t, p, s)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, m.decode_step(t, p, s), rtol=1e-5, atol=1e-5)


def test_write_kv_writes_what_write_writes():
    for layout in ("slot", "paged"):
        m = _model(layout)
        _, p, s = _step_inputs(3)
        for slot, pos in zip(s.tolist(), p.tolist()):
            m.cache.reserve(slot, pos + 1)
        meta = m.cache.step_meta(p, s)
        k, v = torch.randn(2, 3, m.cfg.n_head, m.cfg.head_dim).unbind(0)
        m.cache.write(1, k, v, meta)
        ref = m.cache.kv.clone()
        m.reset_cache()
        m.cache.write_kv(1, torch.stack([k, v]), meta)
        assert torch.equal(m.cache.kv, ref)
        assert m.k_cache.data_ptr() == m.cache.kv.data_ptr()  # k, v are views of kv


def test_fused_refuses_what_the_readable_step_refuses_and_changes_nothing():
    m = _model()
    step = make_fused_step(m)
    t, p, s = _step_inputs(2)
    before = m.cache.kv.clone()
    with pytest.raises(ValueError, match="token ids must lie in"):
        step(torch.tensor([0, 97]), p, s)
    with pytest.raises(ValueError, match="past the KV cache"):
        step(t, torch.tensor([0, 32]), s)
    with pytest.raises(ValueError, match="appear more than once"):
        step(t, p, torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="one entry per row"):
        step(t, p[:1], s)
    with pytest.raises(ValueError, match="out must be a"):
        step(t, p, s, out=torch.empty(3, 97))
    with pytest.raises(TypeError, match="check must be"):
        step(t, p, s, check="yes")
    assert torch.equal(m.cache.kv, before)


def test_fused_step_notices_a_model_cast_after_it_was_built():
    m = _model()
    step = make_fused_step(m)
    m.to(torch.float64)
    with pytest.raises(RuntimeError, match="build it again"):
        step(*_step_inputs(1))


def test_fused_step_refuses_a_non_model():
    with pytest.raises(TypeError, match="must be a TinyGPT"):
        make_fused_step("model")


def test_branches_option_is_checked_and_changes_nothing_on_cpu():
    with pytest.raises(TypeError, match="branches must be True, False or None"):
        make_fused_step(_model(), branches="yes")
    m = _model()
    t, p, s = _step_inputs(3)
    want = make_fused_step(m, branches=False)(t, p, s)
    m.reset_cache()
    assert torch.equal(make_fused_step(m, branches=True)(t, p, s), want)  # no stream on CPU


def test_attention_option_is_checked_and_auto_picks_by_dtype_and_size():
    with pytest.raises(ValueError, match="attention must be one of"):
        make_fused_step(_model(), attention="fast")
    with pytest.raises(ValueError, match="needs a bf16 or fp16 model"):
        make_fused_step(_model(), attention="flash")  # float32: flash does not take it
    assert make_fused_step(_model()).attention_kernel(1) == "efficient"  # float32
    half = make_fused_step(_model(dtype="bfloat16"))  # test preset: 2 heads of 16
    assert ATTENTION == ("auto", "flash", "efficient")
    assert half.attention_kernel(FLASH_MAX_ROW_HEADS // 2) == "flash"
    assert half.attention_kernel(FLASH_MAX_ROW_HEADS // 2 + 1) == "efficient"
    assert make_fused_step(_model(dtype="bfloat16"), attention="efficient"
                           ).attention_kernel(1) == "efficient"
    assert make_fused_step(_model(dtype="bfloat16"), attention="flash"
                           ).attention_kernel(10**6) == "flash"


@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_flash_choice_on_cpu_falls_back_to_the_reference(layout):
    m = _model(layout, dtype="bfloat16")
    prompts = PROMPTS[:3]
    ref = generate(m, prompts, 6, step_fn=make_fused_step(m, attention="efficient"))
    assert generate(m, prompts, 6, step_fn=make_fused_step(m, attention="flash")) == ref


@pytest.mark.parametrize("mode", ["FULL", "NONE"])
def test_dispatcher_runs_the_fused_step(mode):
    m = _model()
    ref = generate(m, PROMPTS[:3], 8)
    d = PaddingDispatcher(m, [1, 2, 4], cudagraph_mode=mode, step="fused")
    assert d.step_name == "fused"
    assert generate(m, PROMPTS[:3], 8, step_fn=d) == ref


def test_dispatcher_refuses_fused_piecewise_and_unknown_steps():
    m = _model()
    with pytest.raises(ValueError, match="piecewise capture cuts the readable step"):
        PaddingDispatcher(m, [1, 2], cudagraph_mode="PIECEWISE", step="fused")
    with pytest.raises(ValueError, match="step must be one of"):
        PaddingDispatcher(m, [1, 2], step="quick")


def test_agreement_in_float32_and_bf16():
    a = agreement(_model(), PROMPTS, new_tokens=6)
    assert a.tokens == 30 and a.fraction == 1.0 and a.max_logit_diff < 1e-4
    b = agreement(_model(dtype="bfloat16"), PROMPTS, new_tokens=6)
    assert b.tokens == 30 and 0.0 <= b.fraction <= 1.0 and b.max_logit_diff >= 0.0
    assert set(b.to_dict()) == {"tokens", "equal", "fraction", "max_logit_diff"}
    with pytest.raises(ValueError, match="new_tokens"):
        agreement(_model(), PROMPTS, new_tokens=1)


# ----------------------------------------------------------------------------- op counter


def test_cpu_op_count_fused_issues_fewer_operations():
    m = _model()
    t, p, s = _step_inputs(2)
    fused = make_fused_step(m)
    readable = op_counts(lambda: m.decode_step(t, p, s, check=False), device="cpu")
    fewer = op_counts(lambda: fused(t, p, s, check=False), device="cpu")
    layers = m.cfg.n_layer
    # the readable step: 4 linears (addmm) per layer, 2 cache writes per layer
    assert readable["addmm"] == 4 * layers and readable["index_copy_"] == 2 * layers
    # the fused step: QKV and MLP-up addmm, two GEMMs onto the residual, one cache write
    assert fewer["addmm"] == 2 * layers and fewer["addmm_"] == 2 * layers
    assert fewer["index_copy_"] == layers and "index_put_" not in fewer
    assert fewer["native_layer_norm"] == readable["native_layer_norm"] == 2 * layers + 1
    assert sum(fewer.values()) < sum(readable.values())
    assert not any(n in fewer for n in ("view", "empty", "transpose"))  # no kernel of their own


def test_compare_counts_table():
    rows = compare_counts({"a": 2, "b": 1}, {"a": 1, "c": 3})
    assert rows[-1] == {"name": "total", "readable": 3, "fused": 4, "change": 1}
    assert rows[0]["name"] == "c" and {r["name"] for r in rows} == {"a", "b", "c", "total"}
    assert next(r for r in rows if r["name"] == "b")["fused"] == 0
    with pytest.raises(ValueError, match="readable count"):
        compare_counts({"a": -1}, {})


def test_op_counts_refuses_bad_arguments():
    with pytest.raises(ValueError, match="device must be"):
        op_counts(lambda: None, device="tpu")
    with pytest.raises(TypeError, match="callable"):
        op_counts(3, device="cpu")
    with pytest.raises(ValueError, match="warmup"):
        op_counts(lambda: None, device="cpu", warmup=-1)


# ----------------------------------------------------------------------------- record


def _stats(us: float) -> dict:
    return {"median": us, "p10": us, "p90": us, "mean": us, "n": 3, "unit": "us"}


FUSED_DATA = {
    "preset": "gpt2", "dtype": "bfloat16", "n_layer": 12, "batch_sizes": [1, 8],
    "times": {"readable": [_stats(560.0), _stats(600.0)], "fused": [_stats(420.0), _stats(470.0)]},
    "count_batch": 1,
    "ops": {"readable": {"gemv": 100, "ln": 125}, "fused": {"gemm": 70, "ln": 48}},
    "ops_total": {"readable": [225, 225], "fused": [118, 118]},
    "agreement": {"tokens": 64, "equal": 63, "fraction": 63 / 64, "max_logit_diff": 0.06},
    "checks": {"fused_tokens_equal_readable_float32": True, "graph_tokens_equal_eager": True},
}


def test_fused_record_parses_and_derives():
    rec = R.parse("fused_gpt2", FUSED_DATA)
    assert R.kind_of("fused_small") is R.Fused
    assert rec.at("fused", 1) == 420.0 and rec.ops_at("readable", 8) == 225
    assert rec.ops_per_layer("fused") == pytest.approx(118 / 12)
    assert rec.ops_at("fused", 64) is None


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["ops_total"].update(fused=[117, 118]), "ops_total.fused[0]"),
    (lambda d: d["times"].pop("fused"), "times.fused"),
    (lambda d: d["ops"]["fused"].update(gemm=-1), "ops.fused.gemm"),
    (lambda d: d["ops_total"].update(readable=[225]), "ops_total.readable"),
    (lambda d: d.pop("agreement"), "agreement"),
    (lambda d: d.update(kernel_us={"fused": [1.0]}), "kernel_us.fused"),
    (lambda d: d.update(op_us={"fused": {"k": "x"}}), "op_us.fused.k"),
])
def test_fused_record_refuses_inconsistent_data(edit, field):
    d = copy.deepcopy(FUSED_DATA)
    edit(d)
    with pytest.raises(R.SchemaError, match=field.replace("[", r"\[").replace("]", r"\]")):
        R.parse("fused_gpt2", d)


def test_fused_defaults_fit_measure_fused():
    inspect.signature(measure_fused).bind(**R.measure_kwargs(R.default_params("fused_gpt2")))


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_sizes=[]), "batch_sizes must not be empty"),
    (dict(batch_sizes=[0]), "batch_sizes"),
    (dict(repeats=0), "repeats"),
    (dict(new_tokens=1), "new_tokens"),
])
def test_measure_fused_refuses_bad_input_before_anything(kwargs, match):
    with pytest.raises(ValueError, match=match):
        measure_fused("test", **kwargs)


# ----------------------------------------------------------------------------- GPU


def _cuda_model(name: str = "small", dtype: str = "float32", max_batch: int = 8):
    m = build_model(preset(name, max_batch=max_batch, dtype=dtype), "cuda", seed=0)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("bias"):
                p.copy_((torch.randn(p.shape, generator=g) * 0.02).to(p))
    return m


@pytest.mark.gpu
@pytest.mark.parametrize("bs", [1, 2, 5, 8])
def test_fused_tokens_equal_readable_on_the_gpu_float32(bs):
    m = _cuda_model()
    assert isinstance(m.cache, SlotKVCache) and m.cache.in_place  # the in-place kernel path
    prompts = [[(7 * i + j) % 1000 for j in range(3 + i)] for i in range(bs)]
    assert generate(m, prompts, 10, step_fn=make_fused_step(m)) == generate(m, prompts, 10)


@pytest.mark.gpu
def test_fused_graphs_replay_equal_eager_and_see_weight_updates():
    from labkit.graphs import capture_decode_graphs

    m = _cuda_model()
    step = make_fused_step(m)
    gs = capture_decode_graphs(m, [1, 4], step=step, progress=False)
    try:
        t = torch.tensor([5, 6, 7, 8], device="cuda")
        p = torch.tensor([3, 9, 1, 20], device="cuda")
        s = torch.arange(4, device="cuda")
        gs.copy_inputs(t, p, s)
        torch.testing.assert_close(gs.replay(4)[:4].clone(), step(t, p, s, check=False),
                                   rtol=1e-5, atol=1e-5)
        with torch.no_grad():  # a weight update after capture is read by the replay
            m.blocks[0].proj.bias.add_(0.25)
            m.blocks[-1].fc_out.bias.add_(0.25)
        gs.copy_inputs(t, p, s)
        torch.testing.assert_close(gs.replay(4)[:4].clone(), m.decode_step(t, p, s),
                                   rtol=1e-4, atol=1e-4)
    finally:
        gs.release()


@pytest.mark.gpu
@pytest.mark.parametrize("bs", [1, 4])
def test_graphs_of_a_step_nobody_else_holds_survive_allocator_churn(bs):
    """Regression: the graph set must keep the fused step (and the buffers it caches) alive.
    Captured from a fused step nobody else holds (``step=make_fused_step(m)`` inline); once
    it was freed its key-offset buffers went back to the allocator, eager allocations reused
    them and the replay read garbage (NaN logits; an illegal memory access at batch 256)."""
    from labkit.graphs import capture_decode_graphs

    m = _cuda_model()
    gs = capture_decode_graphs(m, [1, 4], step=make_fused_step(m), progress=False)
    try:
        assert all(g.fn is not None for g in gs.graphs.values())
        # churn: take whatever blocks are free and fill them with garbage offsets
        junk = [torch.full((n,), -(2**30), dtype=torch.int32, device="cuda")
                for n in (2, 5, 8, 64, 512, 4096) for _ in range(16)]
        t = torch.tensor([5, 6, 7, 8][:bs], device="cuda")
        p = torch.tensor([3, 9, 1, 20][:bs], device="cuda")
        s = torch.arange(bs, device="cuda")
        gs.copy_inputs(t, p, s)
        got = gs.replay(bs)[:bs].clone()
        torch.cuda.synchronize()
        del junk
        torch.testing.assert_close(got, make_fused_step(m)(t, p, s), rtol=1e-5, atol=1e-5)
    finally:
        gs.release()


@pytest.mark.gpu
def test_fused_step_launches_fewer_gpu_kernels():
    m = _cuda_model("small", dtype="bfloat16")
    fused = make_fused_step(m)
    t, p, s = (x.cuda() for x in (torch.tensor([3]), torch.tensor([10]), torch.tensor([0])))
    readable = op_counts(lambda: m.decode_step(t, p, s, check=False), device="cuda")
    fewer = op_counts(lambda: fused(t, p, s, check=False), device="cuda")
    assert sum(fewer.values()) < sum(readable.values())
    # 9 per layer + 11 per step by design; cuBLAS may add a split-K reduction per GEMM
    assert sum(fewer.values()) <= 9 * m.cfg.n_layer + 11 + 4 * m.cfg.n_layer + 1
    assert any("flash" in name for name in fewer)  # batch 1, bf16: auto picks flash


@pytest.mark.gpu
@pytest.mark.parametrize("bs", [1, 8])
def test_branched_step_equals_the_one_stream_step_eager_and_in_a_graph(bs):
    """The side stream (bias pairs, metadata) changes no value: eager with branches=True,
    and a graph captured with the default (branched while capturing), both bit-equal to the
    one-stream eager step; repeated eager branched calls keep their tensors valid."""
    from labkit.graphs import capture_decode_graphs

    m = _cuda_model("small", dtype="bfloat16", max_batch=8)
    t = torch.arange(bs, device="cuda") * 13 % m.cfg.vocab_size
    p = torch.arange(bs, device="cuda") * 7 + 5
    s = torch.arange(bs, device="cuda")
    want = make_fused_step(m, branches=False)(t, p, s, check=False).clone()
    kv = m.cache.kv.clone()
    branched = make_fused_step(m, branches=True)
    for _ in range(3):
        m.reset_cache()
        junk = torch.randn(4096, device="cuda")  # allocator traffic between calls
        assert torch.equal(branched(t, p, s, check=False), want)
        del junk
    assert torch.equal(m.cache.kv, kv)
    gs = capture_decode_graphs(m, [bs], step=make_fused_step(m), progress=False)
    try:
        m.reset_cache()
        gs.copy_inputs(t, p, s)
        assert torch.equal(gs.replay(bs)[:bs], want)
        assert torch.equal(m.cache.kv, kv)
    finally:
        gs.release()


@pytest.mark.gpu
@pytest.mark.parametrize("bs", [1, 8, 64])
def test_flash_and_efficient_attention_agree_on_the_gpu(bs):
    """Both in-place kernels over the same cache offsets: bf16 logits close, the cache the
    same, and graphs of either replay equal to their eager step."""
    from labkit.graphs import capture_decode_graphs

    m = _cuda_model("small", dtype="bfloat16", max_batch=64)
    t = torch.arange(bs, device="cuda") * 11 % m.cfg.vocab_size
    p = (torch.arange(bs, device="cuda") * 5) % 100 + 3
    s = torch.randperm(m.cfg.max_batch, device="cuda")[:bs]
    out = {}
    for kernel in ("flash", "efficient"):
        m.reset_cache()
        step = make_fused_step(m, attention=kernel)
        out[kernel] = step(t, p, s, check=False).float()
        kv = m.cache.kv.clone()
        gs = capture_decode_graphs(m, [bs], step=step, progress=False)
        try:
            m.reset_cache()
            gs.copy_inputs(t, p, s)
            assert torch.equal(gs.replay(bs)[:bs].float(), out[kernel])
            assert torch.equal(m.cache.kv, kv)
        finally:
            gs.release()
    torch.testing.assert_close(out["flash"], out["efficient"], rtol=0.05, atol=0.05)


@pytest.mark.gpu
def test_measure_fused_on_the_gpu():
    data = measure_fused("test", batch_sizes=(1, 4), dtype="bfloat16", repeats=3, inner=2,
                         new_tokens=4)
    rec = R.parse("fused_test", data)
    assert rec.batch_sizes == [1, 4] and set(rec.times) == set(R.FUSED_STEPS)
    assert rec.checks["fused_tokens_equal_readable_float32"] is True
    assert rec.checks["graph_tokens_equal_eager"] is True
    assert rec.ops_at("fused", 1) < rec.ops_at("readable", 1)
    assert 0.0 <= rec.agreement["fraction"] <= 1.0


# ----------------------------------------------------------------------------- lessons


def test_measure_fused_samples_both_steps_in_turn_on_cpu(monkeypatch):
    """The timing logic of measure_fused on the CPU: a stand-in for the GPU parts; both steps'
    replays go to one interleaved timing call per batch size and the record says so."""
    from types import SimpleNamespace

    from labkit.measure import fused_bench as fb
    from labkit.timing import Stats

    calls: list[tuple[int, tuple[str, ...]]] = []

    class Dispatcher(PaddingDispatcher):  # eager on the CPU, with a replay of its own
        def __init__(self, model, sizes, **kw):
            super().__init__(model, sizes, **kw)
            self.graphs = SimpleNamespace(release=lambda: None,
                                          replay=lambda b: self._decode(*self.batch.view(b)))

    def interleaved(fns, **kw):
        calls.append((kw["repeats"], tuple(fns)))
        for _ in range(kw["repeats"]):
            for fn in fns.values():
                fn()
        return {name: Stats.from_samples([10.0 * (i + 1)]) for i, name in enumerate(fns)}

    monkeypatch.setattr(fb, "_need_cuda", lambda what: None)
    monkeypatch.setattr(fb, "_free", lambda: None)
    monkeypatch.setattr(fb, "make_model", lambda name, max_batch, dtype: build_model(
        preset(name, max_batch=max_batch, dtype="float32"), "cpu", seed=0))
    monkeypatch.setattr(fb, "PaddingDispatcher", Dispatcher)
    monkeypatch.setattr(fb, "gpu_op_profile", lambda fn: (fn(), {"k": {"count": 3, "us": 1.5}})[1])
    monkeypatch.setattr(fb, "time_cuda_interleaved", interleaved)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "stand-in")
    data = measure_fused("test", batch_sizes=(1, 2), repeats=2, inner=1, new_tokens=2)
    assert calls == [(2, R.FUSED_STEPS)] * 2          # one call per batch size, both steps
    rec = R.parse("fused_test", data)
    assert data["interleaved"] is True and rec.median_us("fused") == [20.0, 20.0]
    assert rec.checks["graph_tokens_equal_eager"] is True


def test_lessons_read_the_fused_record():
    from labkit.teach import compile as fairness
    from labkit.teach import compile as lf

    d = copy.deepcopy(FUSED_DATA)
    rows = lf.step_rows(d)
    assert [(r["batch"], r["step"]) for r in rows] == [(1, "readable"), (1, "fused"),
                                                      (8, "readable"), (8, "fused")]
    assert rows[1] == {"batch": 1, "step": "fused", "replay (µs)": 420.0, "GPU ops": 118,
                       "kernel time (µs)": None, "gaps (µs)": None}
    d["kernel_us"] = {"readable": [400.0, 450.0], "fused": [236.0, 300.0]}
    rows = lf.step_rows(d)
    assert rows[1]["kernel time (µs)"] == 236.0 and rows[1]["gaps (µs)"] == 184.0
    # a record without the interleaved field was timed one step after the other
    assert fairness.compare(d, "fused", "readable", 1).word == "untested (not interleaved)"
    d["interleaved"] = True
    assert fairness.compare(d, "fused", "readable", 1).word == "a lower"


def test_time_groups_sort_a_steps_kernels_by_kind():
    from labkit.teach import compile as lf

    d = copy.deepcopy(FUSED_DATA)
    assert lf.time_groups(d) == []  # no per-kernel times recorded
    d["ops"]["fused"] = {"void pytorch_flash::flash_fwd_kernel<64>(p)": 12,
                         "nvjet_sm90_tst_64x8_bias_TNT": 24,
                         "void cublasLt::splitKreduce_kernel<32>(p)": 12,
                         "void at::native::vectorized_layer_norm_kernel<bf16>(p)": 25,
                         "void at::native::index_elementwise_kernel<index_copy_kernel_impl>": 12,
                         "void at::native::vectorized_elementwise_kernel<add>(p)": 14}
    d["op_us"] = {"fused": {"void pytorch_flash::flash_fwd_kernel<64>(p)": 80.0,
                            "nvjet_sm90_tst_64x8_bias_TNT": 100.0,
                            "void cublasLt::splitKreduce_kernel<32>(p)": 20.0,
                            "void at::native::vectorized_layer_norm_kernel<bf16>(p)": 75.0,
                            "void at::native::index_elementwise_kernel<index_copy_kernel_impl>":
                                25.0,
                            "void at::native::vectorized_elementwise_kernel<add>(p)": 20.0}}
    d["ops_total"]["fused"] = [99, 99]
    rows = lf.time_groups(d)
    kinds = [r["kind"] for r in rows]
    assert kinds == ["GEMM (cuBLAS) and split-K reduction", "attention", "LayerNorm",
                     "cache write", lf.OTHER_GROUP, "total"]
    assert rows[0] == {"kind": kinds[0], "kernels": 36, "us": 120.0, "share": 0.375}
    assert rows[-1] == {"kind": "total", "kernels": 99, "us": 320.0, "share": 1.0}
    d["op_us"]["fused"]["void pytorch_flash::flash_fwd_kernel<64>(p)"] = 500.0
    assert lf.time_groups(d)[0]["kind"] == "attention"
    assert lf.kernel_group("fmha_cutlassF_bf16_aligned") == "attention"
    assert lf.kernel_group("indexSelectSmallIndex") == "embedding gathers"
