"""Notebook 12 on CPU: the floor arithmetic on known byte counts, multi-step decoding equal to
single steps, the ``roofline_*`` / ``multistep_*`` record kinds, the lesson helpers, the
charts, the conditional-node probe, and the entry point's refusals (no GPU needed)."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

from labkit.roofline import stepcost
from labkit.roofline.conditional import conditional_support, if_node_demo
from labkit.measure import records as R
from labkit.measure import roofline as mr
from labkit.teach import compile as fairness
from labkit.measure.results import SchemaError, load_reference, load_result, save_result
from labkit.model import build_model, generate, preset
from labkit.roofline.multistep import capture_multistep, multistep_decode, single_steps
from labkit.teach import roofline as lr
from labkit.teach import roofline as pr

# ------------------------------------------------------------------------------ arithmetic

TEST_BLOCK = 4 * 32 + (3 * 32 * 32 + 3 * 32) + (32 * 32 + 32) + (4 * 32 * 32 + 4 * 32) \
    + (4 * 32 * 32 + 32)


def test_step_bytes_of_the_test_preset_by_hand():
    cfg = preset("test")  # vocab 97, 2 layers, d 32, float32
    sb = stepcost.step_bytes(cfg, 2, 10)
    assert sb.weights == (2 * TEST_BLOCK + 2 * 32 + 97 * 32) * 4 == 114304
    assert sb.embedding_rows == 2 * 2 * 32 * 4
    assert sb.kv_read == 2 * 2 * 10 * 2 * 32 * 4
    assert sb.kv_write == 2 * 2 * 2 * 32 * 4
    assert sb.logits_write == 2 * 97 * 4
    assert sb.total == 126856
    assert sb.to_dict()["total"] == 126856


def test_floor_is_bytes_over_bandwidth():
    assert stepcost.floor_us(126856, 1000.0) == pytest.approx(0.126856)
    # the issue's figure: 325 MB at 4.8 TB/s is about 68 µs
    assert stepcost.floor_us(325e6, 4800.0) == pytest.approx(67.708, rel=1e-4)
    assert stepcost.compute_floor_us(2e12, 1000.0) == pytest.approx(2000.0)


def test_all_weight_bytes_equal_the_model_parameters():
    for name in ("test", "small"):
        cfg = preset(name)
        model = build_model(cfg, "cpu")
        assert stepcost.all_weight_bytes(cfg) == model.num_parameters() * 4
        # a step reads every weight but the two embedding tables (only their rows)
        emb = (cfg.vocab_size + cfg.max_seq) * cfg.d_model * 4
        assert stepcost.step_bytes(cfg, 1, 1).weights == stepcost.all_weight_bytes(cfg) - emb


def test_gpt2_bf16_weights_match_the_issue_figure():
    cfg = preset("gpt2", dtype="bfloat16")
    assert stepcost.all_weight_bytes(cfg) == pytest.approx(325e6, rel=0.01)
    assert stepcost.step_bytes(cfg, 1, 128).weights == pytest.approx(247.3e6, rel=0.01)


def test_flops_and_ridge():
    cfg = preset("test")
    assert stepcost.step_flops(cfg, 1, 1) == 2 * (2 * 12 * 32 * 32 + 97 * 32) + 2 * 4 * 32
    # gpt2, one position per row: the KV read is tiny, enough rows make it compute-bound
    big = preset("gpt2", dtype="bfloat16")
    ridge = stepcost.ridge_batch(big, 1, bandwidth_gbps=4000.0, tflops=700.0)
    assert ridge is not None and 100 < ridge < 400
    at = stepcost.roofline_floor_us(big, ridge, 1, 4000.0, 700.0)
    assert at == pytest.approx(stepcost.compute_floor_us(stepcost.step_flops(big, ridge, 1),
                                                         700.0))
    below = stepcost.roofline_floor_us(big, ridge - 1, 1, 4000.0, 700.0)
    assert below == pytest.approx(stepcost.floor_us(
        stepcost.step_bytes(big, ridge - 1, 1).total, 4000.0))
    # the tiny test model never is: a row's logits and KV bytes outweigh its flops
    assert stepcost.ridge_batch(cfg, 1, 4000.0, 700.0) is None
    # gpt2 at 128 positions: each row's KV bytes outweigh its flops, never compute-bound
    assert stepcost.ridge_batch(preset("gpt2", dtype="bfloat16"), 128, 4000.0, 700.0) is None


@pytest.mark.parametrize("call, match", [
    (lambda: stepcost.step_bytes(preset("test"), 0, 4), "batch"),
    (lambda: stepcost.step_bytes(preset("test"), 1, 33), "context"),
    (lambda: stepcost.step_bytes({"d_model": 3}, 1, 1), "lacks"),
    (lambda: stepcost.step_bytes("gpt2", 1, 1), "GPTConfig"),
    (lambda: stepcost.floor_us(10, 0), "bandwidth_gbps"),
])
def test_arithmetic_refuses_bad_input(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()


def test_weights_equal_batch():
    cfg = preset("gpt2", dtype="bfloat16")
    b = lr.weights_equal_batch(cfg, 128)
    one = stepcost.step_bytes(cfg, b, 128)
    before = stepcost.step_bytes(cfg, b - 1, 128)
    assert one.total - one.weights >= one.weights > before.total - before.weights
    rows = lr.bytes_rows(cfg, [1, b], 128)
    assert rows[0]["weights share"] > 0.9 and rows[1]["weights share"] <= 0.5


# ------------------------------------------------------------------------------ multi-step


def _prefilled(model, prompts):
    first = [model.prefill(torch.tensor([p]), torch.tensor([i])).argmax(-1)
             for i, p in enumerate(prompts)]
    return (torch.cat(first), torch.tensor([len(p) for p in prompts]),
            torch.arange(len(prompts)))


def test_multistep_tokens_equal_single_steps_and_generate():
    model = build_model(preset("test", max_batch=3), "cpu")
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    t, p, s = _prefilled(model, prompts)
    many = multistep_decode(model, t, p, s, 6)
    assert many.shape == (3, 6)
    assert torch.equal(many, single_steps(model, t, p, s, 6))
    assert many.tolist() == [row[1:] for row in generate(model, prompts, 7)]


def test_multistep_writes_into_out():
    model = build_model(preset("test", max_batch=2), "cpu")
    t, p, s = _prefilled(model, [[1, 2], [3]])
    out = torch.full((2, 4), -1, dtype=torch.long)
    got = multistep_decode(model, t, p, s, 4, out=out)
    assert got is out and (out >= 0).all()


def test_multistep_held_still_runs_every_step_at_the_given_positions():
    model = build_model(preset("test", max_batch=2), "cpu")
    t, p, s = _prefilled(model, [[1, 2], [3]])
    still = multistep_decode(model, t, p, s, 3, advance=False)
    expected, tok = [], t
    for _ in range(3):  # the one-step graph replayed three times, tokens fed back, p unchanged
        tok = model.decode_step(tok, p, s).argmax(-1)
        expected.append(tok)
    assert torch.equal(still, torch.stack(expected, dim=1))
    assert not torch.equal(still, multistep_decode(model, t, p, s, 3))


@pytest.mark.parametrize("kwargs, match", [
    ({"n_steps": 0}, "n_steps"),
    ({"n_steps": 31}, "past the KV cache"),
    ({"n_steps": 2, "out": torch.zeros(2, 3, dtype=torch.long)}, "out must be"),
])
def test_multistep_refuses_before_writing(kwargs, match):
    model = build_model(preset("test", max_batch=2), "cpu")
    t, p, s = _prefilled(model, [[1, 2], [3]])
    before = model.k_cache.clone()
    with pytest.raises((TypeError, ValueError), match=match):
        multistep_decode(model, t, p, s, **kwargs)
    assert torch.equal(model.k_cache, before)


def test_capture_multistep_needs_a_gpu():
    model = build_model(preset("test"), "cpu")
    with pytest.raises(RuntimeError, match="CUDA"):
        capture_multistep(model, 1, 2)


# ------------------------------------------------------------------------------ records


def st(m: float) -> dict:
    return {"median": m, "p10": m * 0.9, "p90": m * 1.1, "mean": m, "n": 5, "unit": "us"}


def roofline_record() -> dict:
    """A well-formed roofline record (numbers made up for the test, never shown as results)."""
    cfg = preset("gpt2", dtype="bfloat16", max_batch=64).to_dict()
    var = {"setup_s": 0.3, "pool_bytes": 2 * 2**20, "gpu_ops": 170, "graph_launches": 1,
           "profiled_batch": 1, "sizes": [1, 8, 64], "error": None}
    return {"preset": "gpt2", "dtype": "bfloat16", "config": cfg, "context": 128,
            "batch_sizes": [1, 8, 64], "compile_sizes": [1],
            "bandwidth": {"bytes": 2**30, "counted": "read + write", "copy": st(500.0),
                          "gbps": 4000.0},
            "matmul": {"n": 8192, "dtype": "bfloat16", "time": st(1500.0), "tflops": 700.0},
            "times": {"eager": [st(4400.0), st(4450.0), st(4500.0)],
                      "graph": [st(630.0), st(700.0), st(950.0)],
                      "compile_reduce_overhead": [st(700.0), None, None],
                      "compile_manual_graph": [None, None, None]},
            "variants": {"eager": {**var, "graph_launches": 0, "pool_bytes": None},
                         "graph": var,
                         "compile_reduce_overhead": {**var, "sizes": [1], "setup_s": 60.0,
                                                     "cudagraph_skips": 0, "gpu_ops": 120},
                         "compile_manual_graph": {"sizes": [1],
                                                  "error": "Unsupported: a graph break"}},
            "checks": {"graph_tokens_equal_eager": True, "graph_token_agreement": 1.0,
                       "compile_reduce_overhead_token_agreement": 0.98}}


def multistep_record() -> dict:
    times = {"host_sync": [st(700.0), st(800.0)], "one_step_graphs": [st(640.0), st(720.0)],
             "multistep": [st(620.0), st(700.0)]}
    return {"preset": "gpt2", "dtype": "bfloat16", "batch_sizes": [1, 8], "n_steps": 8,
            "times": times, "checks": {"multistep_tokens_equal_single_steps": True},
            "tokens_per_s": {m: [R.tokens_per_s(b, s["median"]) for b, s in zip([1, 8], ts)]
                             for m, ts in times.items()},
            "conditional": {"torch": "2.11.0", "cuda_built": True, "if_node": False,
                            "while_node": False, "cuda_python": None,
                            "if_node_demo": {"ok": False, "values": [], "error": "no binding"}}}


def test_roofline_record_kind_and_derived_floor(tmp_path):
    res = load_result(save_result("roofline_gpt2", roofline_record(), {}, tmp_path))
    r = res.record
    assert isinstance(r, R.Roofline) and R.kind_of("roofline_small") is R.Roofline
    want = stepcost.step_bytes(preset("gpt2", dtype="bfloat16"), 1, 128).total
    assert r.step_bytes()[0] == want
    assert r.over_floor("graph")[0] == pytest.approx(630.0 / r.roofline_us()[0])
    assert r.over_floor("compile_manual_graph") == [None, None, None]
    assert r.variants["graph"].graphs_used is True
    assert r.variants["eager"].graphs_used is False
    assert r.variants["compile_manual_graph"].graphs_used is None


def test_multistep_record_kind(tmp_path):
    m = load_result(save_result("multistep_gpt2", multistep_record(), {}, tmp_path)).record
    assert isinstance(m, R.Multistep)
    assert m.gain()[0] == pytest.approx(640.0 / 620.0)
    assert m.conditional["if_node"] is False


@pytest.mark.parametrize("name, edit, field", [
    ("roofline_gpt2", lambda d: d.pop("bandwidth"), "data.bandwidth"),
    ("roofline_gpt2", lambda d: d["config"].pop("d_model"), "data.config"),
    ("roofline_gpt2", lambda d: d["times"]["graph"].pop(), "data.times.graph"),
    ("roofline_gpt2", lambda d: d.__setitem__("context", 999), "data.context"),
    ("roofline_gpt2", lambda d: d["variants"].__setitem__("fused", {}), "data.variants"),
    ("multistep_gpt2", lambda d: d["times"].pop("multistep"), "data.times.multistep"),
    ("multistep_gpt2", lambda d: d["tokens_per_s"]["multistep"].__setitem__(0, 1.0),
     "data.tokens_per_s.multistep[0]"),
])
def test_malformed_records_are_refused_naming_the_field(tmp_path, name, edit, field):
    data = copy.deepcopy(roofline_record() if name.startswith("roofline") else
                         multistep_record())
    edit(data)
    with pytest.raises(SchemaError, match=field.replace("[", r"\[").replace("]", r"\]")):
        save_result(name, data, {}, tmp_path)
    assert not (tmp_path / "results" / f"{name}.json").exists()


def test_defaults_fit_the_measurement_functions():
    import inspect

    from labkit.suite.bench_cli import ROOFLINE_RECORDS

    for name in ROOFLINE_RECORDS:
        fn = getattr(mr, R.recipe(name).function.split(":")[1])
        inspect.signature(fn).bind(**R.measure_kwargs(R.default_params(name)))
        assert R.kind_of(name) in (R.Roofline, R.Multistep)


# ------------------------------------------------------------------------------ lessons, plots


def test_floor_rows_and_node_model():
    rec = roofline_record()
    rows = lr.floor_rows(rec, ["graph", "eager"])
    assert [r["batch"] for r in rows] == [1, 8, 64]
    floor1 = R.parse("roofline_gpt2", rec).roofline_us()[0]
    assert rows[0]["floor (µs)"] == round(floor1, 1)
    assert rows[0]["graph × floor"] == round(630.0 / floor1, 1)
    nm = lr.node_model(rec, 1, empty_node_us=1.0)
    assert nm["nodes"] == 170 and nm["us_per_node"] == pytest.approx(630.0 / 170)
    assert nm["predicted_us"] == pytest.approx(floor1 + 170)
    at8 = lr.node_model(rec, 8)                    # no empty-node cost given: the floor alone
    assert at8["predicted_us"] == pytest.approx(at8["floor_us"]) and at8["step_us"] == 700.0
    with pytest.raises(KeyError, match="batch 2"):
        lr.node_model(rec, 2)


def test_compile_rows_carry_the_verdict_of_the_record():
    rows = {r["variant"]: r for r in lr.compile_rows(roofline_record())}
    ro = rows[lr.variant_label("compile_reduce_overhead")]
    assert ro["batch 1 (µs)"] == 700.0 and ro["CUDA graphs used"] is True
    assert ro["tokens = eager"] == 0.98
    # the variants of a roofline record are timed one after another: no verdict
    assert ro["batch 1 vs FULL graph"] == "untested (not interleaved)"
    assert rows[lr.variant_label("graph")]["batch 1 vs FULL graph"] == ""
    assert rows[lr.variant_label("compile_manual_graph")]["error"].startswith("Unsupported")
    assert rows[lr.variant_label("compile_manual_graph")]["batch 1 vs FULL graph"] == ""


def test_multistep_rows_give_gains_and_interleaved_verdicts():
    rows = lr.multistep_rows(multistep_record())
    assert rows[0]["N-step gain (%)"] == round(100 * (640 / 620 - 1), 2)
    assert rows[0]["multistep (µs/step)"] == 620.0
    # spreads of ±10% overlap: no difference measured; a record timed interleaved is judged
    assert rows[0]["multistep vs one_step_graphs"] == "no difference measured"
    rec = multistep_record()
    rec["times"]["host_sync"] = [st(900.0), st(1000.0)]
    rec["tokens_per_s"]["host_sync"] = [R.tokens_per_s(b, t["median"])
                                        for b, t in zip([1, 8], rec["times"]["host_sync"])]
    assert lr.multistep_rows(rec)[1]["host_sync vs one_step_graphs"] == "a higher"


def test_multistep_controls_and_split_rows():
    assert lr.multistep_control_rows(multistep_record()) == []   # an older record: no controls
    assert lr.multistep_split_rows(multistep_record()) == []
    rec = multistep_record()
    rec["times"].update({"one_step_recaptured": [st(641.0), st(721.0)],
                         "multistep_fixed_positions": [st(400.0), st(701.0)],
                         "multistep_own_pool": [st(619.0), st(699.0)]})
    rec["tokens_per_s"] = {m: [R.tokens_per_s(b, s["median"]) for b, s in zip([1, 8], ts)]
                           for m, ts in rec["times"].items()}
    split = {"span_us": 80.0, "kernel_us": 70.0, "kernels": 20.0, "by_kernel": {"gemv": 50.0}}
    rec["gpu_split"] = {"multistep": [split, split]}
    rows = lr.multistep_control_rows(rec)
    assert [(r["control"], r["batch"]) for r in rows] == [
        (c, b) for c in R.MULTISTEP_CONTROLS for b in (1, 8)]
    held = rows[2]
    assert held["differs from"] == "multistep" and held["ratio"] == round(400 / 620, 3)
    assert held["verdict"] == "a lower"                  # ±10% spreads, 400 vs 620: apart
    assert rows[0]["verdict"] == "no difference measured"
    split_rows = lr.multistep_split_rows(rec)
    assert split_rows[0] == {"model": "gpt2", "batch": 1, "way": "multistep", "in kernels (µs/step)": 70.0,
                             "between kernels (µs/step)": 10.0, "kernels per step": 20.0}


def test_conditional_probe():
    sup = conditional_support()
    assert set(sup) >= {"torch", "cuda_built", "if_node", "while_node", "cuda_python"}
    assert sup["torch"] == torch.__version__
    if not torch.cuda.is_available():
        assert if_node_demo()["ok"] is False
    probe = multistep_record()["conditional"]
    assert probe["if_node"] is False and probe["while_node"] is False


def test_cache_copy_numbers():
    rec = roofline_record()
    assert lr.cache_copy(rec) is None          # no compile_full_cache column
    cache = 2 * 12 * 65 * 256 * 768 * 2         # k + v, 64 slots + scratch, bf16
    rec["times"]["compile_full_cache"] = [st(3000.0), None, None]
    rec["variants"]["compile_full_cache"] = {"sizes": [1], "max_batch": 64,
                                             "cache_bytes": cache, "error": None}
    rec["variants"]["compile_reduce_overhead"]["max_batch"] = 1
    cc = lr.cache_copy(rec)
    assert cc["extra_us"] == pytest.approx(2300.0) and cc["writes"] == 24
    assert cc["copy_us"] == pytest.approx(stepcost.floor_us(24 * cache, 4000.0))
    assert cc["full_slots"] == 64 and cc["small_slots"] == 1
    rows = {r["variant"]: r for r in lr.compile_rows(rec)}
    assert rows[lr.variant_label("compile_full_cache")]["cache slots"] == 64


def test_bytes_rows():
    cfg = preset("gpt2", dtype="bfloat16")
    rows = lr.bytes_rows(cfg, [1, 64], 128)
    sb = stepcost.step_bytes(cfg, 64, 128)
    assert rows[1]["total (MB)"] == round(sb.total / 1e6, 2)
    assert rows[0]["weights share"] > rows[1]["weights share"]


def test_charts_build():
    fig = pr.floor_chart(roofline_record(), subtitle="test")
    names = [t.name for t in fig.data]
    assert lr.variant_label("graph") in names and any("floor" in n for n in names)
    assert len(pr.multistep_chart(multistep_record(), subtitle="").data) == 3
    assert pr.multistep_chart(multistep_record(), subtitle="").data[2].name == "8 steps in one graph"
    with pytest.raises(KeyError, match="fused"):
        pr.floor_chart(roofline_record(), variants=["fused"])


# ------------------------------------------------------------------------------ entry point


def test_a_new_step_variant_is_one_entry(monkeypatch):
    monkeypatch.setitem(mr.STEP_VARIANTS, "fused", mr.eager_variant)
    assert "fused" in mr.STEP_VARIANTS
    mr._check_args([1, 8], ["eager", "fused"], [1], 16, 32)  # accepted


@pytest.mark.parametrize("kwargs, match", [
    ({"variants": ["nope"]}, "unknown step variant"),
    ({"compile_sizes": [3]}, "not in batch_sizes"),
    ({"batch_sizes": []}, "empty"),
    ({"context": 0}, "context"),
])
def test_measure_roofline_refuses_bad_input_before_anything(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        mr.measure_roofline("test", **{"batch_sizes": [1, 8], "max_seq": 32, "context": 8,
                                       **kwargs})


def test_record_each_refuses_unknown_names_and_overrides_before_starting(tmp_path):
    from labkit.measure.recorder import Job, record_each

    lines: list[str] = []
    with pytest.raises(KeyError, match="roofline_huge"):
        record_each(["roofline_small", "roofline_huge"], tmp_path, echo=lines.append)
    with pytest.raises(TypeError, match="takes no parameter repeat"):
        record_each([Job("multistep_small", {"repeat": 2})], tmp_path, echo=lines.append)
    assert lines == [] and not (tmp_path / "results").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU answer")
def test_bench_roofline_without_a_gpu_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "labkit", "bench", "--roofline", "--out",
                           str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "no CUDA GPU" in proc.stderr


# ------------------------------------------------------------------------------ assembly on CPU
# The measurement functions need CUDA; with the CUDA-only pieces stubbed (timers, profiler,
# capture) their control flow and the records they assemble are checked here, so that a
# schema mismatch fails on CPU and not on the GPU machine. Nothing here is a result.


@pytest.fixture
def cpu_measure(monkeypatch):
    from labkit.timing import Stats

    fake_stats = Stats.from_samples([1.0, 2.0, 3.0])
    monkeypatch.setattr(mr, "_need_cuda", lambda what: None)
    monkeypatch.setattr(mr, "_free", lambda: None)
    monkeypatch.setattr(mr, "copy_bandwidth", lambda: {"bytes": 1, "gbps": 1.0,
                                                        "copy": fake_stats.to_dict()})
    monkeypatch.setattr(mr, "matmul_rate", lambda: {"n": 1, "tflops": 1.0,
                                                     "time": fake_stats.to_dict()})
    monkeypatch.setattr(mr, "time_cuda", lambda fn, **kw: (fn(), fake_stats)[1])
    monkeypatch.setattr(mr, "time_cuda_interleaved",
                        lambda fns, **kw: {k: (f(), fake_stats)[1] for k, f in fns.items()})
    monkeypatch.setattr(mr, "profile_call", lambda fn: (fn(), {"gpu_ops": 7,
                                                              "graph_launches": 0})[1])
    monkeypatch.setattr(mr, "make_model", lambda name, **kw: build_model(
        preset(name, max_batch=kw["max_batch"], max_seq=kw["max_seq"]), "cpu"))

    def eager_as_graph(model, sizes):
        return mr.Runner(prepare=lambda b, t, p, s: (lambda: model.decode_step(t, p, s)),
                         step_fn=model.decode_step, info={"setup_s": 0.0, "pool_bytes": 1})

    def failing(model, sizes):
        raise RuntimeError("compile failed")

    monkeypatch.setitem(mr.STEP_VARIANTS, "graph", eager_as_graph)
    monkeypatch.setitem(mr.STEP_VARIANTS, "compile_reduce_overhead", failing)


def test_measure_roofline_assembles_a_valid_record_on_cpu(cpu_measure, tmp_path):
    data = mr.measure_roofline("test", batch_sizes=[1, 2], compile_sizes=[1], context=8,
                               max_seq=32, variants=["eager", "graph", "compile_reduce_overhead"],
                               repeats=2, inner=1)
    rec = load_result(save_result("roofline_test", data, {}, tmp_path)).record
    assert rec.checks["graph_tokens_equal_eager"] is True
    assert rec.variants["graph"].gpu_ops == 7 and rec.variants["graph"].profiled_batch == 1
    assert rec.variants["compile_reduce_overhead"].error == "RuntimeError: compile failed"
    assert rec.median_us("compile_reduce_overhead") == [None, None]
    assert rec.median_us("graph") == [2.0, 2.0]


def test_measure_multistep_assembles_a_valid_record_on_cpu(cpu_measure, monkeypatch, tmp_path):
    from labkit.roofline.multistep import MultiStepGraph

    captured = []

    class Eager(MultiStepGraph):
        advance = True

        def replay(self):
            return multistep_decode(self.captured, self.tokens, self.positions, self.slots,
                                    self.n_steps, out=self.out, advance=self.advance)

    def fake_capture(model, b, n, pool=None, advance=True):
        captured.append((b, n, advance))
        z = torch.zeros(b, dtype=torch.long)
        g = Eager(model, n, z.clone(), z.clone(), z.clone(), torch.zeros((b, n), dtype=torch.long))
        g.advance = advance
        return g

    def split(fn):
        fn()
        return {"span_us": 30.0, "kernel_us": 24.0, "kernels": 6, "by_kernel": {"gemv": 18.0}}

    monkeypatch.setattr(mr, "capture_multistep", fake_capture)
    monkeypatch.setattr(mr, "gpu_busy_split", split)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    data = mr.measure_multistep("test", batch_sizes=[1, 2], n_steps=3, max_seq=32, repeats=2)
    rec = load_result(save_result("multistep_test", data, {}, tmp_path)).record
    assert rec.checks["multistep_tokens_equal_single_steps"] is True
    assert rec.median_us("multistep") == [pytest.approx(2.0 / 3)] * 2
    assert rec.methods == [*R.MULTISTEP_METHODS, *R.MULTISTEP_CONTROLS]
    # per size: one step, N steps, one step again, N steps held still, N steps in its own pool
    assert captured == [(b, n, adv) for b in (1, 2)
                        for n, adv in ((1, True), (3, True), (1, True), (3, False), (3, True))]
    assert set(rec.gpu_split) == set(rec.methods) - {"host_sync"}
    assert rec.gpu_split["multistep"][0] == {"span_us": 10.0, "kernel_us": 8.0, "kernels": 2.0,
                                             "by_kernel": {"gemv": 6.0}}
    assert set(rec.conditional["if_node_demo"]) == {"ok", "values", "error"}


def test_measure_roofline_samples_the_static_graph_columns_in_turn(cpu_measure, monkeypatch,
                                                                     tmp_path):
    from labkit.timing import Stats

    calls = []

    def interleaved(fns, **kw):
        calls.append(tuple(fns))
        return {k: (f(), Stats.from_samples([i + 1.0, i + 1.1, i + 1.2]))[1]
                for i, (k, f) in enumerate(fns.items())}

    monkeypatch.setattr(mr, "time_cuda_interleaved", interleaved)
    data = mr.measure_roofline("test", batch_sizes=[1, 2], compile_sizes=[1], context=8,
                               max_seq=32, variants=["eager", "graph", "compile_reduce_overhead"],
                               repeats=2, inner=1)
    assert calls == [("eager", "graph")] * 2
    assert data["interleaved"] == ["eager", "graph"]
    rec = load_result(save_result("roofline_test", data, {}, tmp_path))
    assert fairness.compare(rec, "graph", "eager", 1).word == "a higher"
    assert not fairness.interleaved(rec, columns=("graph", "compile_reduce_overhead"))


def test_triton_kernel_rows_add_up_to_the_step_and_its_plan():
    """The table of notebook 12 from the recorded 12-layer Triton step: one row per kernel
    kind, the launches summing to 5L + 1, the bytes to the plan's compulsory total."""
    rec = load_reference("triton_gpt2", gpu="h200")
    rows = lr.triton_kernel_rows(rec)
    *kinds, total = rows
    assert {r["kernel"] for r in kinds} == set(rec.data["ops"]["triton"])
    assert total["launches"] == sum(r["launches"] for r in kinds) == 61
    plan_mb = sum(r["compulsory"] for r in rec.data["plan"]) / 1e6
    assert abs(total["MB moved"] - plan_mb) < 0.5
    assert total["µs"] == pytest.approx(sum(rec.data["op_us"]["triton"].values()), abs=0.5)
    assert all(r["GB/s"] > 0 for r in rows)
    assert [r["µs"] for r in kinds] == sorted((r["µs"] for r in kinds), reverse=True)


def test_multistep_cause_reads_the_controls_and_the_split():
    from labkit.measure.results import load_reference

    cause = lr.multistep_cause(load_reference("multistep_gpt2"))
    assert cause is not None and cause["fewer_gaps"] is True
    assert 0.10 < cause["gap"] < 0.20 and cause["control"] < 0.02 and cause["kernels"] < 0.01
    assert lr.multistep_cause(multistep_record()) is None  # a record without controls
