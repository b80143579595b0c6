"""Tests of labkit.teach.claims: each verdict function on records built here (numbers and
verdicts, no wording), the evaluation, and the notebook's quotes."""

from __future__ import annotations

import json

import pytest

from labkit.measure.results import load_reference
from labkit.teach import claims

MIB = 2 ** 20


def _stats(us: float, spread: float = 0.05, n: int = 30) -> dict:
    return {"median": us, "p10": us * (1 - spread), "p90": us * (1 + spread), "mean": us,
            "n": n, "unit": "us"}


def decode_record(speedups: list[float], sizes=(1, 8, 64), n: int = 30,
                  eager_spread: float = 0.05) -> dict:
    """A decode record whose graph replay is ``speedups`` times faster than eager (graph
    steps of 100 µs, eager steps of ``100 * speedup`` µs), ``n`` samples each."""
    return {"preset": "x", "batch_sizes": list(sizes), "kernels_per_step": 50,
            "times": {"eager": [_stats(100 * s, eager_spread, n) for s in speedups],
                      "graph": [_stats(100.0, 0.01, n) for _ in speedups]},
            "speedup_vs_eager": {"graph": list(speedups), "eager": [1.0] * len(sizes)},
            "checks": {"graph_tokens_equal_eager": True}}


def launch_record(host_us: float = 10.0) -> dict:
    return {"device": "cuda", "host_per_launch": _stats(host_us), "launch_sync": None,
            "gpu_per_eager_kernel": _stats(8.0), "gpu_per_graph_node": _stats(1.0),
            "n_kernels": 200, "sweep": []}


def pool_record(private: dict[int, float], lf_growth: list[float], sf_growth: list[float]) -> dict:
    """Built by hand here (not with claims.pool_record_from_mib, which is tested against it)."""
    sizes = sorted(private)
    return {
        "preset": "gpt2", "sizes": sizes,
        "private": {"per_size_bytes": {str(b): int(v * MIB) for b, v in private.items()},
                    "total_bytes": int(sum(private.values()) * MIB), "capture_s": {}},
        "largest_private_bytes": int(max(private.values()) * MIB),
        "shared_largest_first": {
            "total_bytes": int(lf_growth[-1] * MIB), "capture_s": {},
            "growth_bytes": {str(b): int(v * MIB) for b, v in zip(sizes[::-1], lf_growth)}},
        "shared_smallest_first": {
            "total_bytes": int(sf_growth[-1] * MIB), "capture_s": {},
            "growth_bytes": {str(b): int(v * MIB) for b, v in zip(sizes, sf_growth)}},
    }


def pitfalls_record(identical=True, absolute=True, in_kernel=True) -> dict:
    base = 0x7F0000000000
    ptrs = [base + 512] * 3 if identical else [base + 512, base + 1024, base + 512]
    seg = {"segment_base": base, "segment_size": 2 * MIB, "offset_in_segment": 512,
           "segment_pool_id": [0, 1]}
    return {"pitfalls": [],
            "address_demo": {"replay_output_ptrs": ptrs, "identical_across_replays": identical,
                             "absolute": absolute,
                             "kernel_args": {"output_ptr_found": in_kernel},
                             "graphs": [{"graph": "A", "output_ptr": ptrs[0],
                                         "output_segment": seg, "pool_id": [0, 1]}]}}


# ---------------------------------------------------------------------------- 5-8x


@pytest.mark.parametrize("speedups, verdict", [
    ([6.0, 7.0, 5.5], "holds"),
    ([13.0, 7.0, 4.5], "depends"),
    ([9.0, 10.0, 12.0], "depends"),
])
def test_replay_speedup_verdicts(speedups, verdict):
    a = claims.check_replay_speedup({"decode_small": decode_record(speedups),
                                     "launch_overhead": launch_record(11.0)})
    assert a.verdict == verdict
    assert a.evidence["min"] == min(speedups) and a.evidence["max"] == max(speedups)
    assert a.evidence["host_us_per_launch"] == 11.0
    per = a.evidence["per_record"]["decode_small"]
    assert per["words"] == ["a lower"] * 3
    assert per["eager_us_per_kernel"] == pytest.approx([100 * s / 50 for s in speedups])


def test_replay_speedup_refuses_weak_evidence():
    one = claims.check_replay_speedup({"decode_small": decode_record([6.0] * 3, n=1)})
    assert one.verdict == "untested (1 run)"
    # spreads that overlap: the graph is not measurably faster at that point
    close = claims.check_replay_speedup({"decode_small": decode_record([1.05, 6.0, 6.0],
                                                                       eager_spread=0.2)})
    assert close.verdict == "false"
    assert close.evidence["per_record"]["decode_small"]["words"][0] == "no difference measured"
    assert close.evidence["host_us_per_launch"] is None


def test_replay_speedup_reads_every_decode_record_and_needs_one():
    a = claims.check_replay_speedup({"decode_small": decode_record([7.0, 6.0, 5.0]),
                                     "decode_gpt2": decode_record([8.0, 3.0, 2.0])})
    assert set(a.evidence["per_record"]) == {"decode_small", "decode_gpt2"}
    assert (a.evidence["n_points"], a.evidence["n_inside_claim"]) == (6, 4)
    with pytest.raises(KeyError):
        claims.check_replay_speedup({"pool_memory_gpt2": {}})


# ---------------------------------------------------------------------------- pools, in bytes


PRIVATE = {1: 10.0, 2: 12.0, 4: 14.0, 8: 20.0}   # sum 56, max 20


@pytest.mark.parametrize("lf, sf, verdict", [
    ([20.0] * 4, [10.0, 12.0, 14.0, 20.0], "holds"),        # exactly the max, both orders
    ([20.0, 20.0, 20.0, 20.5], [10.0, 14.0, 18.0, 20.0], "partly"),  # half a MiB above it
    ([20.0, 24.0, 28.0, 30.0], [10.0, 20.0, 30.0, 40.0], "partly"),  # between max and sum
    ([20.0, 35.0, 50.0, 57.0], [10.0, 30.0, 50.0, 60.0], "false"),   # at or above the sum
])
def test_shared_pool_verdicts_compare_bytes(lf, sf, verdict):
    a = claims.check_shared_pool_max({"pool_memory_gpt2": pool_record(PRIVATE, lf, sf)})
    assert a.verdict == verdict
    p = a.evidence["per_record"][0]
    assert (p["sum_private"], p["largest_private"]) == (56 * MIB, 20 * MIB)
    assert p["n_at_smallest"] == 1 and p["smallest_private"] == 10 * MIB


def test_shared_pool_with_one_graph_cannot_tell_max_from_sum():
    rec = pool_record({1: 10.0}, [10.0], [10.0])
    assert claims.check_shared_pool_max({"pool_memory_small": rec}).verdict == "untested"


@pytest.mark.parametrize("lf, sf, verdict", [
    ([20.0] * 4, [10.0, 12.0, 14.0, 20.0], "partly"),   # same end, the pool grows
    ([20.0] * 4, [10.0, 14.0, 22.0, 30.0], "holds"),    # smallest first ends larger
    ([20.0, 30.0, 40.0, 50.0], [10.0, 14.0, 18.0, 20.0], "false"),
])
def test_largest_first_verdicts(lf, sf, verdict):
    a = claims.check_largest_first({"pool_memory_gpt2": pool_record(PRIVATE, lf, sf)})
    assert a.verdict == verdict
    p = a.evidence["per_record"][0]
    assert p["smallest_first_after_each"] == [int(v * MIB) for v in sf]
    assert p["largest_first_after_each"] == [int(v * MIB) for v in lf]


def test_pool_checks_on_the_h200_references():
    recs = {n: load_reference(n) for n in ("pool_memory_small", "pool_memory_gpt2")}
    assert claims.check_shared_pool_max(recs).verdict == "holds"
    assert claims.check_largest_first(recs).verdict == "partly"


# ---------------------------------------------------------------------------- offsets, names


@pytest.mark.parametrize("kw, verdict", [({}, "false"), ({"identical": False}, "holds"),
                                         ({"absolute": False, "in_kernel": False}, "partly")])
def test_offsets_claim(kw, verdict):
    a = claims.check_offsets_not_addresses({"pitfalls": pitfalls_record(**kw)})
    assert a.verdict == verdict
    assert a.evidence["output_ptr"] == 0x7F0000000000 + 512 and a.evidence["replays"] == 3


def test_offsets_claim_untested_without_demo():
    rec = {"pitfalls": [], "address_demo": {"error": "no CUDA"}}
    assert claims.check_offsets_not_addresses({"pitfalls": rec}).verdict == "untested"


def test_engine_args(monkeypatch):
    monkeypatch.setattr(claims, "vllm_option_names",
                        lambda: (set(claims.VLLM_CUDAGRAPH_NAMES), "listed"))
    a = claims.check_engine_args({})
    assert a.verdict == "false" and a.evidence["exist_in_vllm"] == []
    monkeypatch.setattr(claims, "vllm_option_names",
                        lambda: ({"enforce_eager", "graph_pool_size"}, "installed vllm"))
    a = claims.check_engine_args({})
    assert a.verdict == "partly" and a.evidence["exist_in_vllm"] == ["graph_pool_size"]


# ---------------------------------------------------------------------------- evaluate


def full_records() -> dict:
    return {"decode_small": decode_record([13.0, 8.0, 7.0]),
            "decode_gpt2": decode_record([7.0, 6.0, 4.5]), "launch_overhead": launch_record(),
            "pool_memory_small": pool_record(PRIVATE, [20.0] * 4, [10.0, 12.0, 14.0, 20.0]),
            "pool_memory_gpt2": pool_record(PRIVATE, [20.0] * 4, [10.0, 12.0, 14.0, 20.0]),
            "pitfalls": pitfalls_record()}


def test_evaluate_all():
    res = claims.evaluate_all(full_records())
    assert [r["id"] for r in res] == [c.id for c in claims.CLAIMS]
    assert [r["verdict"] for r in res] == ["depends", "holds", "partly", "false", "false"]
    json.dumps([{k: v for k, v in r.items() if k != "evidence"} for r in res])


def test_evaluate_missing_or_bad_records_is_untested():
    res = {r["id"]: r for r in claims.evaluate_all({})}
    assert res["pool_max_not_sum"]["verdict"] == "untested (not recorded)"
    assert res["pool_max_not_sum"]["evidence"] == {"missing": ["pool_memory_small",
                                                              "pool_memory_gpt2"]}
    by_id = {c.id: c for c in claims.CLAIMS}
    one = claims.evaluate(by_id["replay_5_8x"], {"decode_gpt2": decode_record([6.0] * 3)})
    assert one["verdict"] == "holds"   # one decode record is enough
    bad = claims.evaluate(by_id["pool_max_not_sum"], {"pool_memory_gpt2": {"x": 1}})
    assert bad["verdict"] == "untested" and "error" in bad["evidence"]


def test_the_evidence_of_the_h200_references():
    recs = {n: load_reference(n) for n in claims.needed_records()}
    res = {r["id"]: r for r in claims.evaluate_all(recs)}
    assert [r["verdict"] for r in res.values()] == ["depends", "holds", "partly", "false",
                                                    "false"]
    ev = res["replay_5_8x"]["evidence"]
    assert ev["host_us_per_launch"] > 0 and ev["n_inside_claim"] < ev["n_points"]


def test_assessment_verdicts():
    assert claims.Assessment("untested (1 run)", {}).verdict == "untested (1 run)"
    with pytest.raises(ValueError, match="not one of"):
        claims.Assessment("maybe", {})


def test_pool_record_from_mib_matches_hand_built():
    lf, sf = [20.0, 20.0, 20.0, 20.5], [10.0, 14.0, 22.0, 30.0]
    assert claims.pool_record_from_mib(PRIVATE, lf, sf, preset="gpt2") == \
        pool_record(PRIVATE, lf, sf)
    with pytest.raises(ValueError, match="one pool size per capture"):
        claims.pool_record_from_mib(PRIVATE, lf[:2], sf)


def test_gather_records_cpu_tier_loads_references():
    class Ctx:  # the CPU tier of labkit.teach.notebook.NotebookContext
        live, reference_gpu = False, "h200"

    got = claims.gather_records(Ctx())
    assert list(got) == claims.needed_records()
    assert all(r.reference for r in got.values())


def test_gather_records_gpu_tier_reuses_this_runs_results(tmp_path, monkeypatch):
    from labkit.measure import results

    monkeypatch.setenv("LABKIT_RUN_DIR", str(tmp_path / "run"))
    recs = full_records()
    results.save_result("pitfalls", recs["pitfalls"], {}, env={"tier": "gpu"})
    measured = []
    monkeypatch.setattr(claims, "record_specs", lambda: {
        n: ((lambda n=n: measured.append(n) or recs[n]), {}) for n in recs})

    class Ctx:  # the GPU tier of labkit.teach.notebook.NotebookContext
        live, reference_gpu = True, "h200"

    got = claims.gather_records(Ctx())
    assert "pitfalls" not in measured and len(measured) == len(recs) - 1
    assert {n: r.data for n, r in got.items()} == recs
    measured.clear()
    claims.gather_records(Ctx(), reuse_run=False)
    assert sorted(measured) == sorted(recs)


def test_record_specs_use_the_records_defaults():
    from labkit.measure import records

    specs = claims.record_specs()
    assert list(specs) == claims.needed_records()
    for name, (fn, params) in specs.items():
        assert callable(fn) and params == records.default_params(name)


def test_every_claim_quotes_the_article_as_notebook_09_does():
    import nbformat
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "notebooks" / "09_claims_vs_measurements.ipynb"
    intro = " ".join(nbformat.read(path, as_version=4).cells[0].source.split())
    for c in claims.CLAIMS:
        for w in (c.quote.split(", ") if c.id == "engine_args" else [c.quote]):
            assert w in intro, f"{c.id}: {w!r} is not what notebook 09 quotes"
