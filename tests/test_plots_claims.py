"""labkit.teach.claims on hand-made records."""

from __future__ import annotations

import pytest

from labkit.teach import claims as pcl


def _stats(us: float) -> dict:
    return {"median": us, "p10": 0.9 * us, "p90": 1.1 * us, "mean": us, "n": 30, "unit": "us"}


def decode(sp):
    """A decode record whose graph replay is ``sp`` times faster than eager."""
    return {"preset": "x", "batch_sizes": [1, 8, 64], "kernels_per_step": 50,
            "times": {"eager": [_stats(100 * s) for s in sp], "graph": [_stats(100.0)] * 3},
            "speedup_vs_eager": {"graph": sp}}


def test_speedup_vs_claim():
    fig = pcl.speedup_vs_claim({"decode_small": decode([7, 5, 2]),
                                "decode_gpt2": decode([8, 4, 1.5])}, (5, 8))
    assert [t.name for t in fig.data] == ["eager", "graph", "eager", "graph"]
    assert list(fig.data[1].text) == ["8.0×", "4.0×", "1.5×"]
    assert list(fig.data[0].y) == pytest.approx([800, 400, 150])
    assert "5–8×" in fig.layout.title.text
    with pytest.raises(ValueError, match="no decode record"):
        pcl.speedup_vs_claim({}, (5, 8))
