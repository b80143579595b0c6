"""labkit.teach.plots.claims on hand-made records and claim results."""

from __future__ import annotations

import pytest

from labkit.teach import claims
from labkit.teach.plots import claims as pcl

MiB = 2 ** 20


def _stats(us: float) -> dict:
    return {"median": us, "p10": us, "p90": us, "mean": us, "n": 1, "unit": "us"}


def decode(sp):
    """A decode record whose graph replay is ``sp`` times faster than eager."""
    return {"preset": "x", "batch_sizes": [1, 8, 64],
            "times": {"eager": [_stats(s) for s in sp], "graph": [_stats(1.0)] * 3},
            "speedup_vs_eager": {"graph": sp}}


def test_verdict_table_colours_each_verdict():
    res = [{"claim": "c1", "verdict": "holds", "explanation": "e", "records": ["r"]},
           {"claim": "c2", "verdict": "false", "explanation": "e", "records": []}]
    fig = pcl.verdict_table(res)
    cells = fig.data[0].cells
    assert list(cells.values[1]) == ["HOLDS", "FALSE"]
    assert list(cells.fill.color[1]) == [pcl.VERDICT_COLORS["holds"], pcl.VERDICT_COLORS["false"]]
    assert list(cells.values[3]) == ["r", "vLLM source"]
    with pytest.raises(ValueError, match="no claim results"):
        pcl.verdict_table([])


def test_speedup_vs_claim():
    fig = pcl.speedup_vs_claim({"decode_small": decode([7, 5, 2]),
                                "decode_gpt2": decode([8, 4, 1.5])}, (5, 8), subtitle="")
    assert [t.name for t in fig.data] == ["gpt2", "small"]
    assert fig.layout.shapes[0].y0 == 5 and fig.layout.shapes[0].y1 == 8
    with pytest.raises(ValueError, match="no decode record"):
        pcl.speedup_vs_claim({"decode_small": {"preset": "x", "batch_sizes": [1],
                                               "times": {"eager": [_stats(5.0)]}}}, (5, 8))


def test_pool_vs_claim():
    rec = claims.pool_record_from_mib({1: 10, 2: 12, 4: 14, 8: 20}, [20, 20, 20, 20.5],
                                      [10, 14, 22, 30])
    fig = pcl.pool_vs_claim(rec, subtitle="")
    assert list(fig.data[0].y) == pytest.approx([56, 20, 20.5, 30])
