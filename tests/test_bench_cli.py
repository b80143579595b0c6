"""The benchmark's table, targets and merging, on hand-made records (no GPU needed)."""

from labkit.suite.bench_cli import bench_table, evaluate_targets, format_rows, merge_compile, plan


def _stats(us):
    return {"median": us, "p10": us, "p90": us, "mean": us, "n": 1, "unit": "us"}


def _decode(eager, graph, disp):
    sizes = [1, 8]
    return {"batch_sizes": sizes,
            "times": {"eager": [_stats(x) for x in eager], "graph": [_stats(x) for x in graph],
                      "dispatcher": [_stats(x) for x in disp]},
            "tokens_per_s": {}, "checks": {"graph_tokens_equal_eager": True}}


def test_merge_compile_by_batch_size():
    d = _decode([1000, 1200], [100, 150], [104, 160])
    c = {"batch_sizes": [8], "times": {"compile": [_stats(120)]},
         "tokens_per_s": {"compile": [8 / 120e-6]}, "checks": {"compile_token_agreement": 1.0},
         "compile_s": 3.0}
    d["tokens_per_s"] = {"eager": [1, 1], "graph": [1, 1], "dispatcher": [1, 1]}
    m = merge_compile(d, c)
    assert m["times"]["compile"][0] is None and m["times"]["compile"][1]["median"] == 120
    assert m["speedup_vs_eager"]["compile"] == [None, 10.0]
    assert m["compile_s"] == 3.0 and m["compile_batch_sizes"] == [8]
    rows = bench_table({"small": m})
    assert rows[0]["graph_speedup"] == 10.0 and "compile_us" not in rows[0]
    assert rows[1]["dispatcher_over_compile"] == 160 / 120


def test_targets_pass_and_fail_on_values():
    d = _decode([1000, 1200], [100, 150], [104, 160])
    d["times"]["compile"] = [_stats(90), _stats(200)]
    pool = {"shared_largest_first": {"total_bytes": 105}, "largest_private_bytes": 100}
    t = {r["target"]: r["pass"] for r in evaluate_targets({"small": d}, pool)}
    assert t["graph >= 5x eager at batch 1 (4-layer)"] is True
    assert t["dispatcher within 5% of raw replay at batch 1 (4-layer)"] is True
    assert t["dispatcher faster than torch.compile at batch 1 (4-layer; compile over 2 sizes)"] is False
    assert t["dispatcher faster than torch.compile at batch 8 (4-layer; compile over 2 sizes)"] is True
    assert t["shared pool largest-first <= 1.1x largest private pool"] is True
    slow = _decode([300, 300], [100, 100], [120, 120])
    t2 = {r["target"]: r["pass"] for r in evaluate_targets({"small": slow}, None)}
    assert t2["graph >= 5x eager at batch 1 (4-layer)"] is False
    assert "PASS" in format_rows(evaluate_targets({"small": d}, pool))


def test_plan_runs_compile_apart_from_manual_graphs():
    names = [n for n, _, _ in plan(quick=True, record=False)]
    assert "decode_small" in names and "compile_times_small" in names
    kw = dict((n, k) for n, _, k in plan(quick=True, record=False))
    assert kw["decode_small"]["methods"] == ["eager", "graph", "dispatcher"]
    assert kw["compile_times_small"]["methods"] == ["compile"]
    assert len(plan(quick=False, record=True)) > len(plan(quick=False, record=False))


def test_targets_include_the_few_sizes_compile_record():
    d = _decode([1000, 1200], [100, 150], [104, 160])
    few = {"batch_sizes": [1, 8], "times": {"dispatcher": [_stats(104), _stats(160)],
                                           "compile": [_stats(95), _stats(170)]}}
    rows = evaluate_targets({"small": d}, None, few)
    got = {r["target"]: r["pass"] for r in rows if "torch.compile" in r["target"]}
    assert got == {"dispatcher faster than torch.compile at batch 1 (4-layer; compile over 2 sizes)": False,
                   "dispatcher faster than torch.compile at batch 8 (4-layer; compile over 2 sizes)": True}
