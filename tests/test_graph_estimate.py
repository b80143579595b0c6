"""Graph-memory estimates for one shared pool: vLLM's and labkit's on made-up samples, their
errors, the ``graph_memory_<preset>`` record assembled on CPU from a simulated allocator (the GPU
parts replaced), its argument checks; on a GPU, labkit's estimate against the measured pool and
the estimate profiled against a smaller cache."""

from __future__ import annotations

import itertools
import json
import types
from collections.abc import Sequence

import pytest
import torch

from labkit.measure import graph_memory as gm
from labkit.measure.memory_budget import SIZE_LISTS
from labkit.measure.results import to_jsonable
from labkit.model import preset
from labkit.sizes.engines import vllm_graph_estimate
from labkit.sizes.graph_estimate import (estimate_error_pct, labkit_graph_estimate,
                                         labkit_sample_sizes, vllm_estimate, vllm_sample_sizes)

MiB = 2**20


# ------------------------------------------------------------------ the pure estimators (CPU)

def test_sample_sizes_largest_then_smallest():
    assert labkit_sample_sizes([8, 1, 4, 2]) == [8, 1]
    assert labkit_sample_sizes([5]) == [5]
    assert vllm_sample_sizes([8, 1, 4, 2]) == [8, 4]
    with pytest.raises(ValueError, match="more than once"):
        labkit_sample_sizes([2, 2])
    with pytest.raises(ValueError, match="empty"):
        labkit_sample_sizes([])


def test_vllm_estimate_delegates_to_the_engine_rule():
    sizes = list(range(1, 52))  # 51 graphs
    assert vllm_estimate([100 * MiB, 0], sizes) == 100 * MiB + 50 * MiB  # the 1 MiB floor
    assert vllm_estimate([100 * MiB, 50 * MiB], [1, 2, 4, 8]) == 250 * MiB
    assert vllm_estimate([100 * MiB, 0], sizes) == vllm_graph_estimate([100 * MiB, 0], 51)
    assert vllm_estimate([7 * MiB], [4]) == 7 * MiB
    with pytest.raises(ValueError, match="samples"):
        vllm_estimate([7 * MiB], [1, 4])


def test_labkit_estimate_is_the_largest_plus_the_residue_not_a_sum():
    sizes = [1, 2, 4, 8, 16, 32, 64, 128]
    assert labkit_graph_estimate(sizes, [100 * MiB, 2 * MiB]) == 102 * MiB
    assert labkit_graph_estimate(sizes, [100 * MiB, 0], [0, 0]) == 100 * MiB
    assert labkit_graph_estimate([3], [9 * MiB]) == 9 * MiB
    # kept bytes interpolated in the size between the smallest (1 -> 8) and the largest (8 -> 1)
    # for sizes 2 and 4: 7 and 5 bytes (rounded up)
    assert labkit_graph_estimate([1, 2, 4, 8], [100, 2], [1, 8]) == 100 + 2 + 7 + 5
    assert labkit_graph_estimate([1, 2, 4, 8], [100, 2], [8, 1]) == 100 + 2 + 2 + 4
    assert labkit_graph_estimate([1, 3, 8], [0, 0], [0, 7]) == 5  # 7 - 2 = ceil(7 * 5 / 7)


def test_labkit_estimate_refuses_bad_samples():
    for grown, kept, err, match in (
            ([100], None, ValueError, "grown holds 1 values"),
            ([100, 2, 3], None, ValueError, "grown holds 3"),
            ([100, -1], None, ValueError, ">= 0"),
            ([100, 2.5], None, TypeError, "int"),
            ([100, True], None, TypeError, "int"),
            ([100, 2], [1], ValueError, "kept holds 1"),
            ("12", None, TypeError, "list of ints")):
        with pytest.raises(err, match=match):
            labkit_graph_estimate([1, 2], grown, kept)
    with pytest.raises(ValueError, match="more than once"):
        labkit_graph_estimate([1, 1], [1, 1])


def test_estimate_error_in_percent_of_the_measured_pool():
    assert estimate_error_pct(110, 100) == 10.0
    assert estimate_error_pct(75, 100) == -25.0
    assert estimate_error_pct(150 * MiB, 100 * MiB) == 50.0
    with pytest.raises(ValueError, match="measured is 0"):
        estimate_error_pct(1, 0)
    with pytest.raises(ValueError, match="estimate must be >= 0"):
        estimate_error_pct(-1, 10)


def _shared_pool(working: dict[int, int], order: Sequence[int], segment: int = 2 * MiB,
                 one_off: int = 0) -> list[int]:
    """A simulated shared pool: the reserved bytes after each capture of ``order`` when a
    graph reuses every freed block (the pool grows to the largest working set, in segments)
    and the first graph below size 4 captured after another opens one more segment
    (``one_off``)."""
    reserved, opened, out = 0, False, []
    for b in order:
        reserved = max(reserved, -(-working[b] // segment) * segment)
        if b < 4 and not opened and out:
            reserved, opened = reserved + one_off, True
        out.append(reserved)
    return out


@pytest.mark.parametrize("one_off", [0, 2 * MiB])
def test_on_a_simulated_shared_pool_labkit_is_exact_and_vllm_over(one_off):
    """vLLM's 51 sizes with a working set linear in the size: the pool is the largest graph's
    (plus the one-off segment), which labkit's two samples see and vLLM's floor overshoots by
    50 MiB."""
    sizes = SIZE_LISTS["vllm"]
    working = {b: 3 * MiB + b * 256 * 1024 for b in sizes}
    measured = _shared_pool(working, sizes[::-1], one_off=one_off)[-1]
    lk = _shared_pool(working, labkit_sample_sizes(sizes), one_off=one_off)
    vl = _shared_pool(working, vllm_sample_sizes(sizes), one_off=one_off)
    labkit = labkit_graph_estimate(sizes, [lk[0], lk[1] - lk[0]])
    vllm = vllm_estimate([vl[0], vl[1] - vl[0]], sizes)
    assert labkit == measured
    assert vllm == measured - one_off + 50 * MiB
    assert estimate_error_pct(vllm, measured) > 30 > abs(estimate_error_pct(labkit, measured))


# ------------------------------------------------------- the record on CPU (GPU parts replaced)

def _working(cfg, b: int) -> int:
    """Simulated working set of graph ``b``: paged gathers ``max_seq`` positions per row, slot
    reads in place (independent of ``max_seq``)."""
    per_row = cfg.max_seq if cfg.kv_layout == "paged" else 16
    return 1 * MiB + b * per_row * 16384


def _stand_ins(monkeypatch, calls: list) -> None:
    """graph_memory's GPU parts replaced: models are configs, captures run on a simulated
    shared pool (one-off 2 MiB segment for the first graph below size 4), pools are read from
    it."""
    pools: dict[int, dict[str, int]] = {}

    def model_of(cfg):
        blocks = (cfg.num_blocks or cfg.max_batch * (cfg.max_seq // cfg.block_size) + 1
                  if cfg.kv_layout == "paged" else None)
        cache = types.SimpleNamespace(num_blocks=blocks) if blocks else types.SimpleNamespace()
        return types.SimpleNamespace(cfg=cfg, cache=cache)

    def paged(name, max_batch, max_seq, dtype, block_size):
        calls.append(("paged", max_batch, max_seq, dtype, block_size))
        return model_of(preset(name, max_batch=max_batch, max_seq=max_seq, dtype=dtype,
                               kv_layout="paged", block_size=block_size, num_blocks=2))

    def make(name, *, max_batch, dtype, **kw):
        calls.append(("make", max_batch, dtype, tuple(sorted(kw.items()))))
        return model_of(preset(name, max_batch=max_batch, dtype=dtype, **kw))

    def pool_after(model, order):
        return _shared_pool({b: _working(model.cfg, b) for b in order}, order, one_off=2 * MiB)

    def capture_all(model, sizes, pool):
        assert pool == "shared"
        m = pool_after(model, sorted(sizes, reverse=True))[-1]
        return {"measured_bytes": m, "device_bytes": m + MiB, "startup_s": 0.5,
                "capture_s": dict.fromkeys(sizes, 0.01)}

    def capture_samples(model, sizes, pool):
        sample = vllm_sample_sizes(sizes)
        got = pool_after(model, sample)
        return {"sample_sizes": sample, "sample_bytes": [got[0], *(
            b - a for a, b in itertools.pairwise(got))], "second_device_bytes": 0}

    def capture(model, sizes, *, pool, progress, on_captured):
        order = sorted(sizes, reverse=True)
        pid = len(pools)
        for b, reserved in zip(order, pool_after(model, order)):
            pools[pid] = {"reserved": reserved, "active": 0}
            on_captured(b, types.SimpleNamespace(pool=pid))
        return types.SimpleNamespace(release=lambda: pools.pop(pid))

    monkeypatch.setattr(gm, "_need_cuda", lambda what: None)
    monkeypatch.setattr(gm, "_free", lambda: None)
    monkeypatch.setattr(gm, "_paged_model", paged)
    monkeypatch.setattr(gm, "make_model", make)
    monkeypatch.setattr(gm, "_capture_all", capture_all)
    monkeypatch.setattr(gm, "_capture_samples", capture_samples)
    monkeypatch.setattr(gm, "capture_decode_graphs", capture)
    monkeypatch.setattr(gm, "pool_reserved_bytes", lambda pid: pools[pid]["reserved"])
    monkeypatch.setattr(gm, "pool_active_bytes", lambda pid: pools[pid]["active"])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "cpu (stand-ins)")


def test_the_record_from_a_simulated_allocator(monkeypatch):
    calls: list = []
    _stand_ins(monkeypatch, calls)
    data = gm.measure_graph_memory("small", {"few": [8, 1, 4, 2], "many": [1, 2, 3, 5, 6, 8]},
                                   max_seqs=(64, 32), small_cache_sizes=[4, 1, 2],
                                   profile_max_seq=16, repeats=2)
    assert calls == [("paged", 8, 32, "bfloat16", 16), ("paged", 8, 64, "bfloat16", 16),
                     ("make", 4, "bfloat16", (("block_size", 16), ("kv_layout", "slot"),
                                              ("max_seq", 16))),
                     ("make", 4, "bfloat16", (("block_size", 16), ("kv_layout", "slot"),
                                              ("max_seq", 64))),
                     ("make", 4, "bfloat16", (("block_size", 16), ("kv_layout", "paged"),
                                              ("max_seq", 16), ("num_blocks", 2))),
                     ("make", 4, "bfloat16", (("block_size", 16), ("kv_layout", "paged"),
                                              ("max_seq", 64), ("num_blocks", None))),
                     ("make", 4, "bfloat16", (("block_size", 16), ("kv_layout", "paged"),
                                              ("max_seq", 64), ("num_blocks", 2)))]
    json.dumps(to_jsonable(data))  # a plain, JSON-able record
    assert [(p["size_list"], p["max_seq"]) for p in data["points"]] == [
        ("few", 32), ("many", 32), ("few", 64), ("many", 64)]
    few = data["points"][0]
    assert few["sizes"] == [1, 2, 4, 8] and few["n_graphs"] == 4 and len(few["runs"]) == 2
    run = few["runs"][0]
    # the largest's 5 MiB working set in 3 segments, then the one-off segment of size 2
    assert run["measured_bytes"] == 6 * MiB + 2 * MiB
    assert run["labkit_sample_sizes"] == [8, 1] and run["labkit_grown"] == [6 * MiB, 2 * MiB]
    assert run["labkit_kept"] == [0, 0]
    assert run["sample_sizes"] == [8, 4] and run["sample_bytes"] == [6 * MiB, 0]
    assert run["labkit_estimate_bytes"] == 8 * MiB and run["labkit_error_pct"] == 0.0
    assert run["vllm_estimate_bytes"] == 6 * MiB + 3 * MiB  # + the 1 MiB floor x 3
    assert run["vllm_error_pct"] == 12.5
    assert data["labkit_worst_abs_error_pct"] == 0.0
    assert data["labkit_error_pct_span"] == [0.0, 0.0]
    vllm_errors = [r["vllm_error_pct"] for p in data["points"] for r in p["runs"]]
    assert data["vllm_error_pct_span"] == [min(vllm_errors), max(vllm_errors)]
    assert min(vllm_errors) > 0

    small = data["small_cache"]
    assert (small["sizes"], small["profile_max_seq"], small["real_max_seq"]) == ([1, 2, 4], 16, 64)
    paged, slot = small["layouts"]["paged"], small["layouts"]["slot"]
    assert sorted(paged["caches"]) == ["profile", "real", "real_few_blocks"]
    assert sorted(slot["caches"]) == ["profile", "real"]
    assert paged["caches"]["real"]["num_blocks"] == 4 * 4 + 1
    assert paged["caches"]["profile"]["num_blocks"] == 2
    # paged: profiled on 16 positions per row, captured on 64: both estimates fall short
    assert paged["caches"]["real"]["runs"][0]["measured_bytes"] == 6 * MiB + 2 * MiB
    assert paged["caches"]["profile"]["runs"][0]["labkit_estimate_bytes"] == 2 * MiB + 2 * MiB
    assert paged["profiled_labkit_error_pct"] == [-50.0, -50.0]
    assert all(e < 0 for e in paged["profiled_vllm_error_pct"])
    assert paged["real_labkit_error_pct"] == [0.0, 0.0]
    assert paged["blocks_change_pct"] == [0.0, 0.0]  # the block count changes nothing
    assert paged["rows_change_pct"] == paged["profiled_labkit_error_pct"]
    # slot: rows read in place, so the short rows change nothing here
    assert slot["profiled_labkit_error_pct"] == [0.0, 0.0] and slot["rows_change_pct"] == [0.0] * 2


def test_an_out_of_memory_run_keeps_its_errors_unknown(monkeypatch):
    _stand_ins(monkeypatch, [])
    monkeypatch.setattr(gm, "_capture_all", lambda model, sizes, pool: {"oom": "no room"})
    data = gm.measure_graph_memory("small", {"few": [1, 2]}, max_seqs=(32,),
                                   small_cache_sizes=[1, 2], profile_max_seq=16, repeats=1,
                                   layouts=["slot"])
    run = data["points"][0]["runs"][0]
    assert run["oom"] == "no room" and "measured_bytes" not in run
    assert run["labkit_estimate_bytes"] == 2 * MiB + 2 * MiB  # the samples still ran
    assert run["labkit_error_pct"] is None and run["vllm_error_pct"] is None
    assert data["labkit_worst_abs_error_pct"] is None and data["vllm_error_pct_span"] is None
    assert data["small_cache"]["layouts"]["slot"]["profiled_vllm_error_pct"] == [None]


def test_bad_arguments_are_refused_before_measuring(monkeypatch):
    monkeypatch.setattr(gm, "measure_pools", lambda *a: pytest.fail("measured"))
    monkeypatch.setattr(gm, "_need_cuda", lambda what: pytest.fail("reached the GPU check"))
    for kwargs, err, match in (
            ({"profile_max_seq": 1024}, ValueError, "profile_max_seq=1024 must be below"),
            ({"profile_max_seq": 100}, ValueError, "block_size"),
            ({"max_seqs": (100,), "profile_max_seq": 16}, ValueError, "block_size"),
            ({"layouts": ["paged", "blocks"]}, ValueError, "layouts"),
            ({"layouts": "paged"}, TypeError, "layouts"),
            ({"repeats": 0}, ValueError, "repeats"),
            ({"size_lists": {"x": [2, 2]}}, ValueError, "capture sizes"),
            ({"size_lists": [1, 2]}, TypeError, "size_lists"),
            ({"small_cache_sizes": [0, 1]}, ValueError, "capture sizes"),
            ({"dtype": "float8"}, ValueError, "dtype")):
        with pytest.raises(err, match=match):
            gm.measure_graph_memory("small", **kwargs)
    with pytest.raises(ValueError, match="preset"):
        gm.measure_graph_memory("tiny")


def test_measuring_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        gm.measure_graph_memory("small", {"few": [1, 2]}, max_seqs=(64,), profile_max_seq=32)


# ------------------------------------------------------------------------------------- GPU

@pytest.fixture(scope="module")
def small_record():
    """The small preset, labkit's list, one max_seq (256) and a cache of 64 positions per row
    to profile against: about ten seconds on an H100/H200."""
    return gm.measure_graph_memory("small", {"labkit": SIZE_LISTS["labkit"]}, max_seqs=(256,),
                                   profile_max_seq=64, repeats=1)


@pytest.mark.gpu
def test_labkit_estimate_within_10_percent_on_the_gpu(small_record):
    (point,) = small_record["points"]
    (run,) = point["runs"]
    assert "oom" not in run and run["measured_bytes"] > 0
    # the whole list's first capture is the largest alone: the pool holds at least that
    assert run["labkit_grown"][0] <= run["measured_bytes"]
    assert run["sample_bytes"][0] <= run["measured_bytes"]
    assert abs(run["labkit_error_pct"]) <= 10.0, run
    assert run["vllm_estimate_bytes"] > run["labkit_estimate_bytes"], run
    assert small_record["labkit_worst_abs_error_pct"] <= 10.0


@pytest.mark.gpu
def test_profiled_against_shorter_rows_the_paged_estimate_falls_short_on_the_gpu(small_record):
    paged = small_record["small_cache"]["layouts"]["paged"]
    caches = paged["caches"]
    real = caches["real"]["runs"][0]["measured_bytes"]
    assert caches["profile"]["runs"][0]["measured_bytes"] < real  # the gather grows with rows
    assert all(e < 0 for e in paged["profiled_vllm_error_pct"]), paged
    assert all(e < 0 for e in paged["profiled_labkit_error_pct"]), paged
    # sampled against the real cache, labkit's estimate holds again
    assert all(abs(e) <= 10.0 for e in paged["real_labkit_error_pct"]), paged
    # the number of blocks does not change the graphs (within one 2 MiB segment)
    few = caches["real_few_blocks"]["runs"][0]["measured_bytes"]
    assert caches["real_few_blocks"]["num_blocks"] == 2 < caches["real"]["num_blocks"]
    assert abs(few - real) <= 2 * MiB, (few, real)


@pytest.mark.gpu
def test_the_slot_layout_reads_in_place_and_takes_less_on_the_gpu(small_record):
    layouts = small_record["small_cache"]["layouts"]
    slot = layouts["slot"]["caches"]["real"]["runs"][0]
    paged = layouts["paged"]["caches"]["real"]["runs"][0]
    assert slot["labkit_grown"][0] <= slot["measured_bytes"] < paged["measured_bytes"]
