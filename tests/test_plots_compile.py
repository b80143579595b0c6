"""labkit.teach.plots.compile on a hand-made compile_<preset> record."""

from __future__ import annotations

import math

import pytest

from labkit.teach.plots import compile as pc

MiB = 2 ** 20


def st(m: float) -> dict:
    return {"median": m, "p10": m * 0.9, "p90": m * 1.1, "mean": m, "n": 5, "unit": "us"}


def record(compile_us=(100.0, 150.0), compile_s=10.0, capture_s=0.5, kernels=None,
           compile_pool=20 * MiB) -> dict:
    return {"preset": "small", "dtype": "bfloat16", "batch_sizes": [1, 8],
            "times": {"eager": [st(1000.0), st(1100.0)], "graph": [st(200.0), st(250.0)],
                      "dispatcher": [st(210.0), st(260.0)],
                      "compile": [st(c) for c in compile_us]},
            "compile_s": compile_s, "capture_s": capture_s,
            "memory": {"graph_pool_bytes": 10 * MiB, "compile_pool_bytes": compile_pool},
            "kernels_per_step": kernels or {"eager": 68, "compile": 30},
            "checks": {"compile_tokens_equal_eager": True}}


def test_summary_numbers():
    s = pc.summary(record())
    assert s["batch_sizes"] == [1, 8]
    assert list(s["step_us"]) == ["eager", "graph", "dispatcher", "compile"]
    assert s["speedup_vs_eager"]["compile"] == pytest.approx([10.0, 1100 / 150])
    assert s["speedup_vs_eager"]["graph"][0] == pytest.approx(5.0)
    assert s["graph_pool_mib"] == pytest.approx(10.0) and s["compile_pool_mib"] == 20.0
    assert s["kernels_per_step"] == {"eager": 68, "compile": 30}


def test_summary_marks_missing_figures():
    s = pc.summary(record(kernels={"eager": 68, "compile": -1}, compile_pool=None))
    assert s["kernels_per_step"]["compile"] is None and s["compile_pool_mib"] is None


def test_summary_rows():
    rows = pc.summary_rows(record())
    assert len(rows) == 8
    first_compile = next(r for r in rows if r["method"].startswith("torch.compile"))
    assert first_compile == {"method": "torch.compile (reduce-overhead)", "batch": 1,
                             "step time (µs, median)": 100.0, "× vs eager": 10.0}


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
    assert "10.0×" in fig.data[-1].text[0]
    assert list(pc.setup_cost_bars(rec, subtitle="").data[0].y) == [0.5, 10.0]
    mem = pc.memory_bars(record(compile_pool=None), subtitle="")
    assert mem.data[0].text[1] == "not measured"
    assert list(pc.kernels_bars(rec, subtitle="").data[0].y) == [68, 30]
    tot = pc.total_time_chart(rec, 1, 10 ** 6, subtitle="")
    assert [t.name for t in tot.data] == ["eager", "graph replay",
                                          "torch.compile (reduce-overhead)"]
    assert tot.data[1].y[0] == pytest.approx(0.5 + 200e-6)
    with pytest.raises(KeyError, match="no method"):
        pc.step_time_bars(rec, methods=["nope"])
    with pytest.raises(ValueError, match="max_steps"):
        pc.total_time_chart(rec, 1, 5)
