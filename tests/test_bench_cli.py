"""The benchmark's table, targets and merging, on hand-made records (no GPU needed)."""

import pytest

from labkit.measure import records
from labkit.measure.records import SchemaError
from labkit.suite.bench_cli import (BENCH_SIZES, RECORDED, bench_table, evaluate_targets,
                                    format_rows, merge_compile, plan)


def _stats(us):
    return {"median": us, "p10": us, "p90": us, "mean": us, "n": 1, "unit": "us"}


def _decode(eager, graph, disp):
    sizes = [1, 8]
    return {"preset": "small", "batch_sizes": sizes,
            "times": {"eager": [_stats(x) for x in eager], "graph": [_stats(x) for x in graph],
                      "dispatcher": [_stats(x) for x in disp]},
            "tokens_per_s": {}, "checks": {"graph_tokens_equal_eager": True}}


def test_merge_compile_by_batch_size():
    d = _decode([1000, 1200], [100, 150], [104, 160])
    c = {"preset": "small", "batch_sizes": [8], "times": {"compile": [_stats(120)]},
         "tokens_per_s": {"compile": [8 / 120e-6]}, "checks": {"compile_token_agreement": 1.0},
         "compile_s": 3.0}
    d["tokens_per_s"] = {"eager": [1 / 1000e-6, 8 / 1200e-6]}
    m = merge_compile(d, c)
    assert m["tokens_per_s"]["eager"] == d["tokens_per_s"]["eager"]
    assert m["tokens_per_s"]["compile"] == [None, 8 / (120 * 1e-6)]
    assert m["times"]["compile"][0] is None and m["times"]["compile"][1]["median"] == 120
    assert m["speedup_vs_eager"]["compile"] == [None, 10.0]
    assert m["compile_s"] == 3.0 and m["compile_batch_sizes"] == [8]
    rows = bench_table({"small": m})
    assert rows[0]["graph_speedup"] == 10.0 and "compile_us" not in rows[0]
    assert rows[1]["dispatcher_over_compile"] == 160 / 120


def test_targets_pass_and_fail_on_values():
    d = _decode([1000, 1200], [100, 150], [104, 160])
    d["times"]["compile"] = [_stats(90), _stats(200)]
    pool = {"sizes": [1, 2], "private": {"total_bytes": 150},
            "shared_largest_first": {"total_bytes": 105},
            "shared_smallest_first": {"total_bytes": 120}, "largest_private_bytes": 100}
    t = {r["target"]: r["pass"] for r in evaluate_targets({"small": d}, pool)}
    assert t["graph >= 5x eager at batch 1 (4-layer)"] is True
    assert t["dispatcher within 5% of raw replay at batch 1 (4-layer)"] is True
    # no cudagraph_skips field: nothing shows the compiled step used CUDA graphs -> not scored
    assert not any("torch.compile" in name for name in t)
    assert t["shared pool largest-first <= 1.1x largest private pool"] is True
    slow = _decode([300, 300], [100, 100], [120, 120])
    t2 = {r["target"]: r["pass"] for r in evaluate_targets({"small": slow}, None)}
    assert t2["graph >= 5x eager at batch 1 (4-layer)"] is False
    assert "PASS" in format_rows(evaluate_targets({"small": d}, pool))


def test_plan_runs_compile_apart_from_manual_graphs():
    names = [j.saved for j in plan(quick=True, record=False)]
    assert "decode_small" in names and "compile_times_small" in names
    kw = {j.saved: j.overrides for j in plan(quick=True, record=False)}
    assert kw["decode_small"]["methods"] == ["eager", "graph", "dispatcher"]
    assert kw["compile_times_small"]["methods"] == ["compile"]
    assert {j.saved: j.name for j in plan(quick=True, record=False)}[
        "compile_times_small"] == "decode_small"
    assert len(plan(quick=False, record=True)) > len(plan(quick=False, record=False))


def test_plan_measures_recorded_kinds_with_the_records_defaults():
    jobs = {j.saved: j for j in plan(quick=False, record=True)}
    for name in (*RECORDED, "pool_memory_gpt2"):
        assert jobs[name].name == name and jobs[name].overrides == {}, name
    # the bench table's decode: the record's recipe, at the bench's sizes and methods
    assert records.default_params("decode_gpt2", **jobs["decode_gpt2"].overrides) == {
        "preset": "gpt2", "dtype": "bfloat16", "batch_sizes": list(BENCH_SIZES), "repeats": 30,
        "methods": ["eager", "graph", "dispatcher"], "inner": 10}
    assert records.default_params("pool_memory_small")["sizes"] == [
        1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def test_merge_compile_refuses_a_record_without_times():
    d = _decode([1000, 1200], [100, 150], [104, 160])
    with pytest.raises(SchemaError, match=r"field 'data.times' is missing"):
        merge_compile(d, {"preset": "small", "batch_sizes": [8]})


def test_targets_include_the_few_sizes_compile_record():
    d = _decode([1000, 1200], [100, 150], [104, 160])
    few = {"batch_sizes": [1, 8], "times": {"dispatcher": [_stats(104), _stats(160)],
                                           "compile": [_stats(95), _stats(170)]},
           "compile_s": 10.0, "capture_s": 0.5}
    rows = evaluate_targets({"small": d}, None, few)
    assert not any("torch.compile" in r["target"] for r in rows)  # skips not recorded
    rows = evaluate_targets({"small": d}, None, {**few, "cudagraph_skips": []})
    got = {r["target"]: r["pass"] for r in rows if "torch.compile" in r["target"]}
    # only the first compiled size is scored: batch 8 was a dynamic-shape recompile
    assert got == {"dispatcher faster than torch.compile at batch 1 (4-layer, compile record, "
                   "dispatcher with device metadata; compile static-shaped, no CUDA graph "
                   "skipped)": False}
    skipped = {**few, "cudagraph_skips": ["cudagraph_skips"]}
    assert not any("torch.compile" in r["target"]
                   for r in evaluate_targets({"small": d}, None, skipped))


def test_fair_compile_size():
    from labkit.suite.bench_cli import fair_compile_size

    assert fair_compile_size({"batch_sizes": [1, 8], "cudagraph_skips": []}) == 1
    assert fair_compile_size({"batch_sizes": [1, 8, 64], "compile_batch_sizes": [8, 64],
                              "cudagraph_skips": []}) == 8
    assert fair_compile_size({"batch_sizes": [1, 8]}) is None
    assert fair_compile_size({"batch_sizes": [1], "cudagraph_skips": ["x"]}) is None
    assert fair_compile_size(None) is None


def test_summarize_bench_reads_the_run_through_the_records(tmp_path):
    import shutil

    from labkit.measure.results import load_result, reference_dir
    from labkit.suite.bench_cli import summarize_bench

    res = tmp_path / "results"
    res.mkdir()
    for name in ("decode_small", "decode_gpt2", "pool_memory_gpt2", "compile_small"):
        shutil.copy(reference_dir("h200") / f"{name}.json", res / f"{name}.json")
    path, gate = summarize_bench(tmp_path, [], {"quick": True})
    bench = load_result(path).record
    assert gate == {"small.graph_tokens_equal_eager": True, "gpt2.graph_tokens_equal_eager": True}
    assert [(r.model, r.batch) for r in bench.rows][:3] == [("small", 1), ("small", 8),
                                                            ("small", 64)]
    small = load_result(res / "decode_small.json").record
    assert bench.rows[0].graph_speedup == small.speedup_vs_eager("graph")[0]
    pool = load_result(res / "pool_memory_gpt2.json").record
    assert bench.pool_mib()["private"] == pytest.approx(pool.private.total_bytes / 2**20)
    assert bench.failed == []
    assert any("compile static-shaped" in t.target for t in bench.targets)


def test_contention_lines_name_the_records_of_a_busy_host(tmp_path):
    import json
    import shutil

    from labkit.measure.results import reference_dir
    from labkit.suite.bench_cli import contention_lines

    res = tmp_path / "results"
    res.mkdir()
    for name in ("decode_small", "decode_gpt2"):
        shutil.copy(reference_dir("h200") / f"{name}.json", res / f"{name}.json")
    assert contention_lines(tmp_path) == []  # these references hold no contention facts
    raw = json.loads((res / "decode_gpt2.json").read_text())
    raw["env"].update(gpu_processes=2, used_cuda=True)
    (res / "decode_gpt2.json").write_text(json.dumps(raw))
    lines = contention_lines(tmp_path)
    assert len(lines) == 1 and lines[0].startswith("[labkit bench] decode_gpt2: not an idle")


def test_engine_targets():
    small = _decode([1000, 1200], [170, 200], [174, 210])  # 1.024 and 1.05 over replay
    gpt2 = _decode([4000, 4100], [650, 700], [660, 710])
    gpt2["preset"] = "gpt2"
    pool = {"sizes": list(range(1, 11)), "private": {"total_bytes": 300},
            "shared_largest_first": {"total_bytes": 90 * 2**20},
            "shared_smallest_first": {"total_bytes": 120 * 2**20},
            "largest_private_bytes": 88 * 2**20}
    t = {r["target"]: r for r in evaluate_targets({"small": small, "gpt2": gpt2}, pool)}
    assert t["FULL graph step <= 180 us at batch 1 (small)"]["pass"] is True
    assert t["FULL graph step <= 680 us at batch 1 (gpt2)"]["pass"] is True
    assert "FULL graph step <= 1050 us at batch 64 (gpt2)" not in t  # not measured
    worst = t["dispatcher <= 1.03x raw replay at every size (small, worst)"]
    assert worst["pass"] is False and abs(worst["value"] - 1.05) < 1e-9
    assert t["dispatcher <= 1.03x raw replay at every size (gpt2, worst)"]["pass"] is True
    assert t["ten sizes, one shared pool largest-first <= 100 MiB (10 sizes)"]["pass"] is True
