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


def record_with_max_seq() -> dict:
    rec = record()
    rec.update(max_seq=256, logits_bytes=8 * 97 * 2,
               by_max_seq={"256": {"shared_largest_first_bytes": 10 * MiB,
                                   "kv_cache_bytes": 4 * MiB},
                           "1024": {"shared_largest_first_bytes": 11 * MiB,
                                    "kv_cache_bytes": 16 * MiB}},
               gather={"max_seq": 256, "shared_largest_first_bytes": 30 * MiB,
                       "kv_cache_bytes": 4 * MiB})
    return rec


def test_logits_buffer_bytes_from_record_or_config():
    assert lm.logits_buffer_bytes(record_with_max_seq()) == 8 * 97 * 2
    assert lm.logits_buffer_bytes(record()) is None  # older record, no vocabulary given
    assert lm.logits_buffer_bytes(record(), vocab_size=97) == 8 * 97 * 2
    assert lm.logits_buffer_bytes(record(), vocab_size=97, bytes_per_element=4) == 8 * 97 * 4


def test_max_seq_rows_and_summary():
    assert not lm.has_max_seq_data(record())
    assert lm.max_seq_summary(record()) is None
    rec = record_with_max_seq()
    assert lm.has_max_seq_data(rec)
    rows = lm.max_seq_rows(rec)
    assert [(r["max_seq"], r["cache read"]) for r in rows] == [
        (256, "in place"), (1024, "in place"), (256, "gather whole row per layer")]
    assert [r["shared pool (MiB)"] for r in rows] == [10.0, 11.0, 30.0]
    assert [r["KV cache (MiB)"] for r in rows] == [4.0, 16.0, 4.0]
    s = lm.max_seq_summary(rec)
    assert (s["lo"], s["hi"]) == (256, 1024)
    assert s["pool_ratio"] == pytest.approx(1.1)
    assert s["cache_ratio"] == pytest.approx(4.0)
    assert s["gather_over_in_place"] == pytest.approx(3.0)


def test_max_seq_summary_without_cache_or_gather():
    rec = record_with_max_seq()
    del rec["gather"]
    del rec["by_max_seq"]["1024"]["kv_cache_bytes"]
    s = lm.max_seq_summary(rec)
    assert s["cache_ratio"] is None and s["gather_over_in_place"] is None
    assert [r["KV cache (MiB)"] for r in lm.max_seq_rows(rec)] == [4.0, None]


def test_max_seq_summary_refuses_a_zero_pool():
    rec = record_with_max_seq()
    rec["by_max_seq"]["256"]["shared_largest_first_bytes"] = 0
    with pytest.raises(ValueError, match="zero-byte pool at max_seq=256"):
        lm.max_seq_summary(rec)


def test_pool_vs_max_seq_figure():
    fig = pm.pool_vs_max_seq(record_with_max_seq(), subtitle="prov")
    pool, cache, gather = fig.data
    assert list(pool.x) == ["max_seq 256", "max_seq 1024"] and list(pool.y) == [10.0, 11.0]
    assert list(cache.y) == [4.0, 16.0]
    assert list(gather.x) == ["max_seq 256"] and list(gather.y) == [30.0]
    assert "prov" in fig.layout.title.text
    assert fig.layout.yaxis.type == "log"


def test_pool_vs_max_seq_needs_the_newer_record():
    with pytest.raises(ValueError, match="by_max_seq"):
        pm.pool_vs_max_seq(record())
