"""labkit.teach.plots.memory and labkit.teach.lessons.memory on a hand-made pool_memory record."""

from __future__ import annotations

import pytest

from labkit.teach.lessons import memory as lm
from labkit.teach.plots import memory as pm

MiB = 2**20
SIZES = [1, 2, 4, 8]


def record() -> dict:
    per = {"1": 2 * MiB, "2": 3 * MiB, "4": 5 * MiB, "8": 9 * MiB}
    cap = {str(s): 0.01 * s for s in SIZES}
    return {
        "preset": "test", "sizes": SIZES,
        "private": {"per_size_bytes": per, "total_bytes": 19 * MiB, "capture_s": cap},
        "shared_largest_first": {"total_bytes": 10 * MiB, "capture_s": cap,
                                 "growth_bytes": {"8": 9 * MiB, "4": 9 * MiB, "2": 10 * MiB,
                                                  "1": 10 * MiB}},
        "shared_smallest_first": {"total_bytes": 14 * MiB, "capture_s": cap,
                                  "growth_bytes": {"1": 2 * MiB, "2": 4 * MiB, "4": 8 * MiB,
                                                   "8": 14 * MiB}},
        "largest_private_bytes": 9 * MiB,
    }


def test_summary_ratios():
    s = lm.pool_memory_summary(record())
    assert s["private_total"] == 19 * MiB
    assert s["shared_over_largest_private"] == pytest.approx(10 / 9)
    assert s["shared_over_private_total"] == pytest.approx(10 / 19)
    assert s["smallest_first_over_largest_first"] == pytest.approx(1.4)
    assert s["best_order"] == "largest_first"
    assert s["capture_total_s"]["private"] == pytest.approx(0.15)


def test_table_rows():
    rows = lm.pool_memory_table(record())
    assert [r["batch size"] for r in rows] == SIZES
    assert rows[3]["private pool (MiB)"] == 9.0
    assert rows[0]["largest-first pool after (MiB)"] == 10.0
    assert rows[0]["smallest-first pool after (MiB)"] == 2.0
    assert rows[2]["capture private (ms)"] == 40.0
    srows = lm.summary_rows(record())
    assert [r["total (MiB)"] for r in srows] == [19.0, 10.0, 14.0]
    assert srows[0]["x largest single pool"] == round(19 / 9, 2)


def test_bad_record_names_the_problem():
    with pytest.raises(ValueError, match="pool_memory"):
        lm.pool_memory_summary({"sizes": [1]})


def test_mib():
    assert lm.mib(3 * MiB) == 3.0
    assert lm.mib(None) is None


def test_pool_totals_figure():
    fig = pm.pool_totals(record(), subtitle="prov")
    private = [t for t in fig.data if t.legendgroup == "private"]
    assert [t.y[0] for t in private] == [2.0, 3.0, 5.0, 9.0]
    shared = [t for t in fig.data if t.legendgroup != "private"]
    assert [t.y[0] for t in shared] == [10.0, 14.0]
    assert fig.layout.barmode == "stack"
    assert "prov" in fig.layout.title.text
    assert any("largest single pool" in (a.text or "") for a in fig.layout.annotations)


def test_pool_growth_figure():
    fig = pm.pool_growth(record())
    lf, sf, run = fig.data
    assert list(lf.text) == ["8", "4", "2", "1"] and list(lf.y) == [9, 9, 10, 10]
    assert list(sf.text) == ["1", "2", "4", "8"] and list(sf.y) == [2, 4, 8, 14]
    assert list(run.y) == [9, 14, 17, 19]


def test_pool_growth_without_growth_data():
    rec = record()
    for mode in ("shared_largest_first", "shared_smallest_first"):
        del rec[mode]["growth_bytes"]
    fig = pm.pool_growth(rec)
    assert len(fig.data) == 1  # only the private running sum


def test_capture_times_and_private_bars():
    fig = pm.capture_times(record())
    assert len(fig.data) == 3
    assert list(fig.data[0].y) == pytest.approx([10, 20, 40, 80])
    bars = pm.private_per_size(record())
    assert list(bars.data[0].y) == [2.0, 3.0, 5.0, 9.0]
