"""The memory budget (notebook 16): the arithmetic bytes -> blocks -> requests, vLLM's linear
estimate on made-up pools, the record built from a fake measurement (the GPU part replaced),
its parse and lesson rows, and the graph-update facts; one GPU test runs the measurement."""

from __future__ import annotations

import json

import pytest

from labkit.measure import memory_budget as mb
from labkit.measure import records
from labkit.measure.results import to_jsonable
from labkit.sizes.engines import (
    from_sglang, from_vllm, kv_plan, max_concurrent_requests, vllm_graph_estimate,
    vllm_sample_sizes,
)
from labkit.teach.deploying import budget_rows, estimate_errors, startup_inversions, startup_rows

MiB = 2**20
#: gpt2 in bf16: K and V x 12 layers x 16 positions x 12 heads x 64 dims x 2 bytes
GPT2_BLOCK = 2 * 12 * 16 * 12 * 64 * 2
GPT2 = {"n_layer": 12, "n_head": 12, "head_dim": 64, "block_size": 16, "dtype_bytes": 2}


def test_kv_plan_exact_numbers():
    assert GPT2_BLOCK == 589_824
    plan = kv_plan(10_000_000_000, 0.9, 1_000_000_000, 1000 * GPT2_BLOCK, 1000 * GPT2_BLOCK,
                   **GPT2, context=1024)
    # 9e9 - 1e9 - 1000 blocks = 7_410_176_000 bytes = 12563 blocks (+ the pad block)
    assert plan == {"reserved_bytes": 589_824_000, "kv_bytes": 7_410_176_000,
                    "kv_blocks": 12564, "requests": 196,  # 12563 // 64 blocks per request
                    "headroom_left_bytes": 1_000_000_000}  # total * (1 - utilization)
    ignored = kv_plan(10_000_000_000, 0.9, 1_000_000_000, 0, 1_500_000_000, **GPT2,
                      context=1024)
    assert ignored["kv_bytes"] == 8_000_000_000 and ignored["kv_blocks"] == 13564
    assert ignored["headroom_left_bytes"] == -500_000_000  # the capture runs out of memory
    assert kv_plan(100, 1.0, 90, 0, None, **GPT2, context=16)["kv_blocks"] == 0
    with pytest.raises(ValueError, match="utilization"):
        kv_plan(100, 1.5, 0, 0, 0, **GPT2, context=16)


def test_max_concurrent_requests_counts_whole_requests_and_skips_the_pad_block():
    assert max_concurrent_requests(65, 1024) == 1
    assert max_concurrent_requests(64, 1024) == 0
    assert max_concurrent_requests(129, 1000) == 2  # 63 blocks per request of 1000 tokens
    assert max_concurrent_requests(0, 16) == 0
    with pytest.raises(ValueError, match="context"):
        max_concurrent_requests(10, 0)


def test_vllm_samples_the_two_largest_sizes_and_extrapolates_per_graph():
    assert vllm_sample_sizes([1, 2, 4, 8]) == [8, 4]
    assert vllm_sample_sizes([5]) == [5]
    # made-up pools for sizes 1, 2, 4, 8: a private pool each of 1, 2, 4, 8 MiB (15 in all),
    # one shared pool that holds about the largest (8 MiB; the second capture adds nothing)
    private = vllm_graph_estimate([8 * MiB, 4 * MiB], 4)
    shared = vllm_graph_estimate([8 * MiB, 0], 4)
    assert private == 20 * MiB  # 8 + 3 x 4: above the sum, 15
    assert shared == 11 * MiB  # 8 + 3 x 1 MiB (vLLM's least per graph): close to the largest
    assert vllm_graph_estimate([7], 1) == 7
    with pytest.raises(ValueError, match="samples"):
        vllm_graph_estimate([7], 3)


def test_default_size_lists_are_the_engines():
    assert mb.SIZE_LISTS["labkit"] == [1, 2, 4, 8, 16, 32, 64, 128]
    assert len(mb.SIZE_LISTS["vllm"]) == 51 and mb.SIZE_LISTS["vllm"][-1] == 512
    assert mb.SIZE_LISTS["vllm"] == list(from_vllm(max_num_seqs=256).capture_sizes)
    assert len(mb.SIZE_LISTS["sglang"]) == 36 and mb.SIZE_LISTS["sglang"][-1] == 256
    assert mb.SIZE_LISTS["sglang"] == list(from_sglang().capture_sizes)


def _fake_captures(calls):
    """A stand-in for the GPU part: made-up bytes, seconds; one private capture out of memory."""
    def fake(preset_name, size_lists, max_seqs, pools, dtype, block_size):
        calls.append((preset_name, dict(size_lists), list(max_seqs), list(pools), dtype,
                      block_size))
        caps = []
        for m in max_seqs:
            for name, sizes in size_lists.items():
                for pool in pools:
                    c = {"size_list": name, "max_seq": m, "pool": pool,
                         "sample_sizes": vllm_sample_sizes(sizes)}
                    if pool == "private" and m == 64:
                        c["oom"] = "CUDA graph capture failed: the GPU ran out of memory"
                    else:
                        per = {b: b * MiB for b in sizes}
                        c.update(measured_bytes=max(per.values()) if pool == "shared"
                                 else sum(per.values()), device_bytes=sum(per.values()) + MiB,
                                 startup_s=0.5, capture_s=dict.fromkeys(sizes, 0.004),
                                 warmup_s={b: 0.001 * b for b in sizes})
                    c["sample_bytes"] = ([sizes[-1] * MiB, 0] if pool == "shared"
                                         else [sizes[-1] * MiB, sizes[-2] * MiB])
                    c["second_device_bytes"] = c["sample_bytes"][1] + 2 * MiB
                    caps.append(c)
        return {"device": "fake", "total_bytes": 10_000_000_000, "activation_batch": 8,
                "weights_bytes": dict.fromkeys(max_seqs, 500_000_000),
                "activation_bytes": {m: 500_000_000 + m for m in max_seqs}, "captures": caps}
    return fake


def test_the_record_from_a_fake_measurement(monkeypatch):
    calls: list = []
    monkeypatch.setattr(mb, "_need_cuda", lambda what: None)
    monkeypatch.setattr(mb, "measure_captures", _fake_captures(calls))
    data = mb.measure_memory_budget("gpt2", {"mine": [8, 1, 4, 2]}, max_seqs=(64, 32),
                                    context=32)
    assert calls == [("gpt2", {"mine": [1, 2, 4, 8]}, [32, 64], ["shared", "private"],
                      "bfloat16", 16)]
    stored = json.loads(json.dumps(to_jsonable(data)))  # as a saved file holds it
    rec = records.parse("memory_budget_gpt2", stored)
    assert isinstance(rec, records.MemoryBudget) and rec.kv_block_bytes == GPT2_BLOCK
    assert rec.weights_bytes == {32: 500_000_000, 64: 500_000_000}
    assert rec.graph_update == mb.graph_update_verdict()
    shared, private = rec.point("mine", 32, "shared"), rec.point("mine", 32, "private")
    assert shared.estimate_bytes == 11 * MiB and private.estimate_bytes == 20 * MiB
    assert shared.estimate_error() == 11 / 8 and private.estimate_error() == 20 / 15
    other = 1_000_000_032  # weights + the activation peak at max_seq 32
    for p in (shared, private):
        for way, reserved in (("measured", p.measured_bytes), ("estimate", p.estimate_bytes),
                              ("ignored", 0)):
            want = kv_plan(10_000_000_000, 0.9, other, reserved, p.measured_bytes, **GPT2,
                           context=32)
            assert p.ways[way] == records.kinds.BudgetWay(**want), (p.pool, way)
    est, meas = private.ways["estimate"], private.ways["measured"]
    # 9e9 - other - 15 MiB = 7_984_271_328 bytes: 13536 blocks + pad; 5 MiB less: 13527 + pad
    assert (meas.kv_bytes, meas.kv_blocks, est.kv_blocks) == (7_984_271_328, 13537, 13528)
    assert private.lost("estimate") == 9
    assert private.lost("ignored") < 0  # ignoring the graphs promises blocks that do not fit
    assert private.lost("estimate", "requests") == 6768 - 6763  # 2 blocks per request of 32
    assert private.lazy_first_request_s()[8] == pytest.approx(0.012)
    oom = rec.point("mine", 64, "private")
    assert oom.oom and oom.measured_bytes is None and sorted(oom.ways) == ["estimate", "ignored"]
    assert oom.lost("estimate") is None and oom.estimate_error() is None
    assert oom.ways["ignored"].headroom_left_bytes is None


def test_bad_arguments_are_refused_before_measuring(monkeypatch):
    monkeypatch.setattr(mb, "measure_captures", lambda *a: pytest.fail("measured"))
    for kwargs, match in (({"pools": ("shared", "pooled")}, "pools"),
                          ({"utilization": 0}, "utilization"),
                          ({"max_seqs": (100,)}, "block_size"),
                          ({"size_lists": {"x": [2, 2]}}, "capture sizes"),
                          ({"dtype": "float8"}, "dtype")):
        with pytest.raises(ValueError, match=match):
            mb.measure_memory_budget("gpt2", **kwargs)


def test_a_point_without_the_ways_of_its_known_sizes_is_refused(monkeypatch):
    monkeypatch.setattr(mb, "_need_cuda", lambda what: None)
    monkeypatch.setattr(mb, "measure_captures", _fake_captures([]))
    data = to_jsonable(mb.measure_memory_budget("gpt2", {"mine": [1, 2]}, max_seqs=(32,)))
    del data["points"][0]["ways"]["measured"]
    with pytest.raises(records.SchemaError, match=r"points\[0\]\.ways"):
        records.parse("memory_budget_gpt2", data)


def test_lesson_rows(monkeypatch):
    monkeypatch.setattr(mb, "_need_cuda", lambda what: None)
    monkeypatch.setattr(mb, "measure_captures", _fake_captures([]))
    data = mb.measure_memory_budget("gpt2", {"mine": [1, 2, 4, 8]}, max_seqs=(32, 64))
    rows = budget_rows(data)
    assert [(r["max_seq"], r["pool"]) for r in rows] == [(32, "shared"), (32, "private"),
                                                         (64, "shared"), (64, "private")]
    r = rows[1]
    assert r["graphs measured (MiB)"] == 15.0 and r["vLLM estimate (MiB)"] == 20.0
    assert r["vLLM estimate, second read as free memory (MiB)"] == 8 + 3 * 6
    assert rows[0]["vLLM estimate, second read as free memory (MiB)"] == 8 + 3 * 2
    assert r["estimate / measured"] == 1.33 and r["blocks lost to the estimate"] == 9
    assert (r["KV blocks, measured"], r["KV blocks, estimate"]) == (13537, 13528)
    assert r["requests of 32 tokens, measured"] == (r["KV blocks, measured"] - 1) // 2
    assert rows[3]["capture out of memory"] and rows[3]["graphs measured (MiB)"] is None
    ups = startup_rows(data)
    assert [(u["max_seq"], u["sizes"]) for u in ups] == [(32, 4), (64, 4)]
    assert ups[0]["lazy: largest first-request wait (ms)"] == 12.0
    assert ups[0]["warm-up + capture, summed (s)"] == 0.031  # 4 x 4 ms + 15 ms of warm-up
    assert startup_rows(data, pool="private") == [ups[0]]  # at 64 the capture ran out of memory
    assert estimate_errors(data)[("mine", 32, "shared")] == 11 / 8


def test_startup_inversions_name_lists_with_fewer_sizes_that_took_longer():
    from labkit.measure.results import load_reference
    rec = load_reference("memory_budget_small")
    rows = {(r["list"], r["max_seq"]): r for r in startup_rows(rec)}
    inv = startup_inversions(rec)
    for i in inv:
        assert i["fewer sizes"] < i["more sizes"] and i["fewer (s)"] > i["more (s)"]
        assert rows[(i["fewer"], i["max_seq"])]["eager start-up (s)"] == i["fewer (s)"]
    want = {(a, b, s) for (a, s), ra in rows.items() for (b, s2), rb in rows.items()
            if s == s2 and ra["sizes"] < rb["sizes"]
            and ra["eager start-up (s)"] > rb["eager start-up (s)"]}
    assert {(i["fewer"], i["more"], i["max_seq"]) for i in inv} == want


def test_graph_update_verdict_reports_what_torch_offers():
    v = mb.graph_update_verdict()
    assert "replay" in v["cuda_graph_methods"] and "capture_begin" in v["cuda_graph_methods"]
    assert v["raw_handles"] == ("raw_cuda_graph_exec" in v["cuda_graph_methods"])
    assert v["update_possible"] == (v["raw_handles"] and v["keep_graph"]
                                    and v["bindings_exec_update"])
    if v["cuda_bindings"] is None:
        assert not v["bindings_exec_update"]


@pytest.mark.gpu
def test_measure_memory_budget_on_the_gpu():
    data = mb.measure_memory_budget("small", {"few": [1, 2, 4, 8]}, max_seqs=(64,))
    rec = records.parse("memory_budget_small", data)
    shared, private = rec.point("few", 64, "shared"), rec.point("few", 64, "private")
    assert shared.sample_sizes == [8, 4] and len(shared.sample_bytes) == 2
    assert shared.second_device_bytes is not None
    assert shared.measured_bytes and private.measured_bytes
    assert shared.measured_bytes <= private.measured_bytes
    assert private.sample_bytes[0] <= private.measured_bytes  # the largest pool is one of them
    assert set(shared.capture_s) == {1, 2, 4, 8} and shared.startup_s > 0
    assert rec.activation_bytes[64] > 0 and rec.total_bytes > rec.weights_bytes[64]


def test_the_lazy_capture_record_parses():
    from labkit.measure import records

    run = {"built_s": 0.5, "lazy_capture_s": {"1": 0.05}, "median_step_s": 0.001,
           "longest_steps_s": [0.06, 0.002], "ttft_ms": {"median": 3.0, "p90": 5.0, "p99": 9.0},
           "itl_ms": {"median": 1.0, "p90": 2.0, "p99": 4.0}}
    rec = records.parse("lazy_test", {"preset": "test", "dtype": "float32", "trace": "t",
                                      "sizes": [1, 2], "requests": 3,
                                      "runs": {"startup": run, "lazy": run}})
    assert rec.runs["lazy"]["lazy_capture_s"] == {"1": 0.05} and rec.sizes == [1, 2]
    with pytest.raises(records.SchemaError, match="runs"):
        records.parse("lazy_test", {"preset": "test", "dtype": "float32", "trace": "t",
                                    "sizes": [1], "requests": 1})
