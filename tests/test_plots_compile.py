"""labkit.teach.compile and labkit.teach.compile on hand-made compile_<preset>
records, and measure_compile's interleaved timing on the CPU (the GPU parts stood in for)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from labkit.measure import records as R
from labkit.teach import compile as fairness
from labkit.teach import compile as pc

MiB = 2 ** 20


def st(m: float, spread: float = 0.1) -> dict:
    return {"median": m, "p10": m * (1 - spread), "p90": m * (1 + spread), "mean": m, "n": 5,
            "unit": "us"}


def record(compile_us=(100.0, 150.0), compile_s=10.0, capture_s=0.5, **extra) -> dict:
    return {"preset": "small", "dtype": "bfloat16", "batch_sizes": [1, 8],
            "times": {"eager": [st(1000.0), st(1100.0)], "graph": [st(200.0), st(250.0)],
                      "dispatcher": [st(210.0), st(260.0)],
                      "compile": [st(c, 0.01) for c in compile_us]},
            "compile_s": compile_s, "capture_s": capture_s,
            "memory": {"graph_pool_bytes": 10 * MiB, "compile_pool_bytes": 20 * MiB},
            "kernels_per_step": {"eager": 68, "compile": 30}, "cudagraph_skips": [],
            "checks": {"compile_tokens_equal_eager": True}, **extra}


def test_fair_size_needs_an_empty_skips_field():
    assert fairness.fair_compile_size(record()) == 1
    assert fairness.fair_compile_size(record(cudagraph_skips=["cpu tensor"])) is None
    rec = record()
    del rec["cudagraph_skips"]
    assert fairness.fair_compile_size(rec) is None and fairness.fair_compile_size(None) is None


def test_a_verdict_needs_an_interleaved_record():
    old = record()  # no interleaved field: timed one method after another
    assert fairness.interleaved(old) is False and fairness.interleaved(old, default=True)
    assert fairness.compare(old, "compile", "graph", 1).word == "untested (not interleaved)"
    new = record(interleaved=True)
    assert fairness.compare(new, "compile", "graph", 1).word == "a lower"      # 100 vs 200
    assert fairness.compare(new, "dispatcher", "graph", 1).word == "no difference measured"
    with pytest.raises(ValueError):
        fairness.compare(new, "compile", "graph", 64)


def test_step_rows_say_shapes_spreads_and_verdicts():
    rows = pc.compile_rows(record(interleaved=True))
    assert [r["compile shapes"] for r in rows] == ["static", "dynamic recompile (or graphs skipped)"]
    assert rows[0]["compile µs (p10–p90)"] == "100.0 (99.0–101.0)"
    assert rows[0]["compile vs graph"] == "a lower" and rows[1]["compile vs dispatcher"] == "a lower"
    assert pc.compile_rows(record())[0]["compile vs dispatcher"] == "untested (not interleaved)"


def test_break_even_steps():
    # extra set-up 9.5 s, saving 100 µs per step at batch 1
    assert pc.break_even_steps(record(), 1) == pytest.approx(95_000)
    assert math.isinf(pc.break_even_steps(record(compile_us=(300.0, 300.0)), 1))
    assert pc.break_even_steps(record(compile_s=0.1), 1) == 0.0
    with pytest.raises(ValueError, match="was not measured"):
        pc.break_even_steps(record(), 64)


def test_figures_build():
    rec = record()
    fig = pc.step_time_bars(rec, subtitle="test")
    assert [t.name for t in fig.data][-1] == "torch.compile (reduce-overhead)"
    assert list(fig.data[-1].y) == [100.0, 150.0] and "µs" in fig.data[-1].texttemplate
    tot = pc.total_time_chart(rec, 1, 10 ** 6, subtitle="")
    assert [t.name for t in tot.data] == ["eager", "graph replay",
                                          "torch.compile (reduce-overhead)"]
    assert tot.data[1].y[0] == pytest.approx(0.5 + 200e-6)
    assert max(tot.data[0].x) == 10 ** 6
    with pytest.raises(KeyError, match="no method"):
        pc.step_time_bars(rec, methods=["nope"])
    with pytest.raises(ValueError, match="max_steps"):
        pc.total_time_chart(rec, 1, 5)


def test_measure_compile_samples_the_methods_in_turn_on_cpu(monkeypatch, tmp_path):
    from labkit.measure import bench
    from labkit.measure.results import load_result, save_result
    from labkit.model import build_model, preset
    from labkit.timing import Stats

    calls: list[tuple[str, ...]] = []

    class Dispatcher:  # what measure_compile uses of a PaddingDispatcher, eager on the CPU
        def __init__(self, model, sizes, **kw):
            self.model = model
            self.graphs = SimpleNamespace(graphs={b: SimpleNamespace(pool=0) for b in sizes},
                                          replay=lambda b: None)

        def load_inputs(self, *args):
            pass

        def step(self, t, p, s, check=True):
            return self.model.decode_step(t, p, s)

        def release(self):
            pass

    def interleaved(fns, **kw):
        order = []
        for _ in range(kw["repeats"]):
            for name, fn in fns.items():
                fn()
                order.append(name)
        calls.append(tuple(order))
        return {name: Stats.from_samples([float(i + 1)]) for i, name in enumerate(fns)}

    monkeypatch.setattr(bench, "_need_cuda", lambda what: None)
    monkeypatch.setattr(bench, "_free", lambda: None)
    monkeypatch.setattr(bench, "make_model", lambda name, max_batch, dtype: build_model(
        preset(name, max_batch=max_batch), "cpu", seed=0))
    monkeypatch.setattr(bench, "PaddingDispatcher", Dispatcher)
    monkeypatch.setattr(bench, "pool_reserved_bytes", lambda pool: 2 * MiB)
    monkeypatch.setattr(bench, "_pool_segments", lambda: {})
    monkeypatch.setattr(bench, "_compiled_step", lambda model, sizes: (model.decode_step, 3.0, 1.0))
    monkeypatch.setattr(bench, "count_step_ops", lambda model, *a, **k: 62)
    monkeypatch.setattr(bench, "_count_compiled_kernels", lambda *a: 57)
    monkeypatch.setattr(bench, "time_cuda_interleaved", interleaved)
    data = bench.measure_compile("test", batch_sizes=(1, 2), repeats=2, inner=1)
    # one interleaved call per batch size: the four methods alternate, sample after sample
    assert calls == [("eager", "graph", "dispatcher", "compile") * 2] * 2
    rec = load_result(save_result("compile_test", data, {}, tmp_path))
    assert isinstance(rec.record, R.Compile) and fairness.interleaved(rec) is True
    assert rec.record.median_us("compile") == [4.0, 4.0]
    assert fairness.compare(rec, "compile", "eager", 1).word == "untested (1 run)"
