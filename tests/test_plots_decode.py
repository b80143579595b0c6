"""labkit.teach.decode: step time charts of decode records."""

from __future__ import annotations

import pytest

from labkit.teach import decode as dp
from labkit.measure.results import Result
from labkit.timing import Stats


def S(m: float) -> dict:
    return {"median": m, "p10": 0.9 * m, "p90": 1.1 * m, "mean": m, "n": 30, "unit": "us"}


def decode(preset: str = "small", eager=(1200.0, 1250.0, 1400.0), graph=(170.0, 190.0, 350.0)):
    bss = [1, 8, 64]
    return {"preset": preset, "config": {"n_layer": 4, "d_model": 256}, "dtype": "bfloat16",
            "batch_sizes": bss, "kernels_per_step": 68,
            "times": {"eager": [S(x) for x in eager], "graph": [S(x) for x in graph]},
            "tokens_per_s": {"eager": [b * 1e6 / x for b, x in zip(bss, eager)],
                             "graph": [b * 1e6 / x for b, x in zip(bss, graph)]},
            "speedup_vs_eager": {"eager": [1.0] * 3,
                                 "graph": [e / g for e, g in zip(eager, graph)]},
            "checks": {"graph_tokens_equal_eager": True}}


def test_step_time_chart_bars_per_method():
    fig = dp.step_time_chart(decode())
    assert [t.name for t in fig.data] == ["eager", "graph replay"]
    assert list(fig.data[0].x) == ["1", "8", "64"]
    assert list(fig.data[1].y) == [170.0, 190.0, 350.0]
    assert "4 layers, d=256" in fig.layout.title.text
    with pytest.raises(KeyError, match="compile"):
        dp.step_time_chart(decode(), methods=["compile"])


def test_eager_step_chart_with_live_cpu_times():
    env = {"tier": "gpu", "gpu_name": "NVIDIA H200"}
    rec = Result("decode_small", decode(), {}, env, 1, "2026-01-02")
    cpu = {1: Stats(9000.0, 8000.0, 10000.0, 9000.0, 5), 2: Stats(9500.0, 9000, 9900, 9500, 5)}
    fig = dp.eager_step_chart({"small": rec}, cpu_times=cpu)
    assert fig.data[0].name == "NVIDIA H200 eager, small"
    assert "CPU" in fig.data[1].name and list(fig.data[1].y) == [9000.0, 9500.0]
    assert list(fig.layout.xaxis.categoryarray) == ["1", "2", "8", "64"]


def test_eager_step_chart_subtitle_joins_provenance_once():
    env = {"tier": "gpu", "gpu_name": "NVIDIA H200", "torch": "2.11.0"}
    a = Result("decode_small", decode(), {}, env, 1, "2026-01-02T00:00:00")
    b = Result("decode_gpt2", decode("gpt2"), {}, env, 1, "2026-01-02T00:00:00")
    fig = dp.eager_step_chart({"small": a, "gpt2": b})
    assert fig.layout.title.text.count("NVIDIA H200") == 1
    assert [t.name for t in fig.data] == ["NVIDIA H200 eager, small", "NVIDIA H200 eager, gpt2"]
