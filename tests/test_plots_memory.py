"""labkit.teach.memory and labkit.teach.memory on a hand-made pool_memory record."""

from __future__ import annotations

import pytest

from labkit.model import preset
from labkit.teach import memory as lm
from labkit.teach import memory as pm

MiB = 2**20
SIZES = [1, 2, 4, 8]


def record(smallest_first_total: int = 14 * MiB) -> dict:
    per = {"1": 2 * MiB, "2": 3 * MiB, "4": 5 * MiB, "8": 9 * MiB}
    cap = {str(s): 0.01 * s for s in SIZES}
    return {
        "preset": "test", "sizes": SIZES, "dtype": "bfloat16",
        "private": {"per_size_bytes": per, "total_bytes": 19 * MiB, "capture_s": cap},
        "shared_largest_first": {"total_bytes": 10 * MiB, "capture_s": cap,
                                 "growth_bytes": {"8": 9 * MiB, "4": 9 * MiB, "2": 10 * MiB,
                                                  "1": 10 * MiB}},
        "shared_smallest_first": {"total_bytes": smallest_first_total, "capture_s": cap,
                                  "growth_bytes": {"1": 2 * MiB, "2": 4 * MiB, "4": 8 * MiB,
                                                   "8": smallest_first_total}},
        "largest_private_bytes": 9 * MiB,
    }


def test_summary_totals_and_the_smaller_order_within_one_segment():
    s = lm.pool_memory_summary(record())
    assert (s["private_total"], s["shared_largest_first"], s["largest_private"]) == (
        19 * MiB, 10 * MiB, 9 * MiB)
    assert s["smaller_order"] == "largest_first"
    assert s["capture_total_s"]["private"] == pytest.approx(0.15)
    # less than one 2 MiB segment apart is a tie, in either direction; a segment or more is not
    assert lm.pool_memory_summary(record(11 * MiB))["smaller_order"] == "tie"
    assert lm.pool_memory_summary(record(9 * MiB))["smaller_order"] == "tie"
    assert lm.pool_memory_summary(record(12 * MiB))["smaller_order"] == "largest_first"
    assert lm.pool_memory_summary(record(8 * MiB))["smaller_order"] == "smallest_first"


def test_allocator_constants_and_the_hidden_layer():
    got = (lm.SMALL_SIZE, lm.SMALL_BUFFER, lm.MIN_LARGE_ALLOC, lm.LARGE_BUFFER, lm.ROUND_LARGE)
    assert got == (MiB, 2 * MiB, 10 * MiB, 20 * MiB, 2 * MiB)
    d = preset("test").d_model
    assert lm.hidden_bytes(record(), 8) == 8 * 4 * d * 2        # bf16
    assert lm.hidden_bytes({**record(), "dtype": "float32"}, 8) == 8 * 4 * d * 4
    gpt2 = {**record(), "preset": "gpt2"}
    assert lm.hidden_bytes(gpt2, 512) == 3 * MiB                # 512 x 3072 x 2 bytes


def test_table_rows():
    rows = lm.pool_memory_table(record())
    assert [r["batch size"] for r in rows] == SIZES
    assert rows[3]["private pool (MiB)"] == 9.0
    assert rows[0]["largest-first pool after (MiB)"] == 10.0
    assert rows[0]["smallest-first pool after (MiB)"] == 2.0
    assert rows[2]["capture private (ms)"] == 40.0
    assert rows[3]["MLP hidden (MiB)"] == round(lm.hidden_bytes(record(), 8) / MiB, 2)
    srows = lm.summary_rows(record())
    assert [r["total (MiB)"] for r in srows] == [19.0, 10.0, 14.0]
    assert srows[0]["x largest single pool"] == round(19 / 9, 2)


def test_bad_record_names_the_problem():
    with pytest.raises(ValueError, match="pool_memory"):
        lm.pool_memory_summary({"sizes": [1]})


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


def test_max_seq_rows():
    assert lm.max_seq_rows(record()) == []
    rows = lm.max_seq_rows(record_with_max_seq())
    assert [(r["max_seq"], r["cache read"]) for r in rows] == [
        (256, "in place"), (1024, "in place"), (256, "gathered")]
    assert [r["shared pool (MiB)"] for r in rows] == [10.0, 11.0, 30.0]
    assert [r["KV cache (MiB)"] for r in rows] == [4.0, 16.0, 4.0]
    rec = record_with_max_seq()
    del rec["gather"], rec["by_max_seq"]["1024"]["kv_cache_bytes"]
    assert [r["KV cache (MiB)"] for r in lm.max_seq_rows(rec)] == [4.0, None]


def test_the_h200_records_tie_and_their_pools_follow_the_segments():
    from labkit.measure.results import load_reference

    for name in ("small", "gpt2"):
        rec = load_reference(f"pool_memory_{name}")
        s = lm.pool_memory_summary(rec)
        assert s["smaller_order"] == "tie"
        per = rec.record.private.per_size_bytes
        big = [b for b in rec.record.sizes if lm.hidden_bytes(rec, b) > lm.SMALL_SIZE]
        assert big == [b for b in rec.record.sizes if per[b] >= lm.LARGE_BUFFER]
