"""labkit.teach.sizing on a hand-made dispatcher record and padding tables."""

from __future__ import annotations

import pytest

from labkit.runner import build_padding_table
from labkit.teach import sizing as pd


def stats(m: float) -> dict:
    return {"median": m, "p10": m - 1, "p90": m + 2, "mean": m, "n": 5, "unit": "us"}


DISP_US = [16, 17, 18, 19, 106]   # dispatcher µs per batch size 1..5


def record() -> dict:
    bss = [1, 2, 3, 4, 5]
    caps = [1, 2, 4]
    padded = [1, 2, 4, 4, None]
    return {
        "preset": "small", "capture_sizes": caps, "batch_sizes": bss, "padded_to": padded,
        "times": {"eager": [stats(100 + b) for b in bss],
                  "graph_exact": [stats(10 + b) for b in bss[:4]] + [None],
                  "dispatcher": [stats(t) for t in DISP_US]},
        "tokens_per_s": {"eager": [b / (100 + b) * 1e6 for b in bss],
                         "graph_exact": [b / (10 + b) * 1e6 for b in bss[:4]] + [None],
                         "dispatcher": [b / (t * 1e-6) for b, t in zip(bss, DISP_US)]},
    }


def test_step_times_traces_and_marks():
    fig = pd.step_times(record(), subtitle="prov")
    names = [t.name for t in fig.data]
    assert len(names) == 3 and "a capture of its own" in names[1]
    graph = fig.data[1]
    assert list(graph.x) == [1, 2, 3, 4]          # None entries dropped
    assert list(graph.y) == [11, 12, 13, 14]
    assert list(graph.error_y.array) == [2, 2, 2, 2]
    assert list(graph.error_y.arrayminus) == [1, 1, 1, 1]
    vlines = [s for s in fig.layout.shapes if s.type == "line"]
    assert sorted(s.x0 for s in vlines) == [1, 2, 4]
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(rects) == 1 and rects[0].x0 == 4      # eager-fallback region


def test_padding_table_chart():
    table = build_padding_table([2, 4], 6)
    fig = pd.padding_table_chart(table)
    real, padded, eager = fig.data
    assert list(real.x) == [1, 2, 3, 4]
    assert list(padded.y) == [1, 0, 1, 0]
    assert list(eager.x) == [5, 6]
    with pytest.raises(ValueError):
        pd.padding_table_chart([0])


def test_hit_waste():
    fig = pd.hit_waste({"a": {"hit_rate": 0.5, "waste": 0.25}, "b": {"hit_rate": 1.0,
                                                                     "waste": 0.0}})
    assert list(fig.data[0].y) == [50.0, 100.0]
    assert list(fig.data[1].y) == [25.0, 0.0]


def test_hit_waste_accepts_padding_reports():
    from labkit.sizes import expected_padding

    rep = expected_padding([2, 4], {1: 0.5, 3: 0.5})
    fig = pd.hit_waste({"r": rep})
    assert list(fig.data[0].y) == [100.0]
    assert fig.data[1].y[0] == pytest.approx(100 / 3)   # 1 padded row per 3 computed
