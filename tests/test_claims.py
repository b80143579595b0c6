"""Tests of labkit.teach.claims: each verdict function on synthetic records built here."""

from __future__ import annotations

import json

import pytest

from labkit.teach import claims

MIB = 2 ** 20


def _stats(us: float) -> dict:
    return {"median": us, "p10": us, "p90": us, "mean": us, "n": 1, "unit": "us"}


def decode_record(speedups: list[float], sizes=(1, 8, 64)) -> dict:
    """A decode record whose graph replay is ``speedups`` times faster than eager (graph
    steps of 1 µs, eager steps of ``speedup`` µs)."""
    return {"preset": "x", "batch_sizes": list(sizes), "kernels_per_step": 68,
            "times": {"eager": [_stats(s) for s in speedups],
                      "graph": [_stats(1.0) for _ in speedups]},
            "speedup_vs_eager": {"graph": list(speedups), "eager": [1.0] * len(sizes)},
            "checks": {"graph_tokens_equal_eager": True}}


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


def pitfalls_record(identical=True, absolute=True, stale=True) -> dict:
    base = 0x7F0000000000
    ptrs = [base + 512] * 3 if identical else [base + 512, base + 1024, base + 512]
    seg = {"segment_base": base, "segment_size": 2 * MIB, "offset_in_segment": 512,
           "segment_pool_id": [0, 1]}
    return {
        "pitfalls": [
            {"name": "input_rebound", "fixed_ok": True, "error": "", "what": "", "fix": "",
             "details": {"stale": [2.0], "previous_step": [2.0] if stale else [3.0]}},
            {"name": "output_overwritten", "fixed_ok": True, "error": "", "what": "",
             "fix": "", "details": {"shared_pool": {"reused_address": True}}},
        ],
        "address_demo": {
            "replay_output_ptrs": ptrs, "identical_across_replays": identical,
            "absolute": absolute,
            "graphs": [{"graph": "A", "output_ptr": ptrs[0], "output_segment": seg,
                        "pool_id": [0, 1]}],
        },
    }


# ---------------------------------------------------------------------------- 5-8x


@pytest.mark.parametrize("speedups, verdict", [
    ([6.0, 7.0, 5.5], "holds"),
    ([7.0, 3.0, 1.5], "depends"),
    ([2.0, 1.5, 1.2], "false"),
    ([9.0, 10.0, 12.0], "false"),
])
def test_replay_speedup_verdicts(speedups, verdict):
    a = claims.check_replay_speedup({"decode_small": decode_record(speedups)})
    assert a.verdict == verdict
    assert a.evidence["min"] == min(speedups) and a.evidence["max"] == max(speedups)
    assert f"{min(speedups):.1f}x" in a.explanation


def test_replay_speedup_uses_every_decode_record():
    recs = {"decode_small": decode_record([7.0, 6.0, 5.0]),
            "decode_gpt2": decode_record([8.0, 3.0, 2.0]),
            "pool_memory_gpt2": {}}
    a = claims.check_replay_speedup(recs)
    assert set(a.evidence["per_record"]) == {"decode_small", "decode_gpt2"}
    assert a.evidence["n_points"] == 6 and a.evidence["n_inside_claim"] == 4
    assert a.verdict == "depends"
    assert a.evidence["falls_with_batch"] == ["gpt2", "small"]
    assert "gpt2: 8.0x at bs 1 to 2.0x at bs 64; small: 7.0x at bs 1 to 5.0x at bs 64" \
        in a.explanation


def test_replay_speedup_does_not_claim_a_trend_that_is_not_there():
    a = claims.check_replay_speedup({"decode_small": decode_record([3.0, 6.0, 5.0])})
    assert a.evidence["falls_with_batch"] == [] and "falls" not in a.explanation


def test_replay_speedup_without_graph_is_untested():
    eager_only = decode_record([6.0, 7.0, 5.5])
    del eager_only["times"]["graph"], eager_only["speedup_vs_eager"]["graph"]
    assert claims.check_replay_speedup({"decode_small": eager_only}).verdict == "untested"


# ---------------------------------------------------------------------------- max not sum


PRIVATE = {1: 10.0, 2: 12.0, 4: 14.0, 8: 20.0}   # sum 56, max 20


def test_shared_pool_partly_when_only_largest_first_is_max():
    rec = pool_record(PRIVATE, lf_growth=[20.0, 20.0, 20.0, 20.5],
                      sf_growth=[10.0, 14.0, 22.0, 30.0])
    a = claims.check_shared_pool_max({"pool_memory_gpt2": rec})
    assert a.verdict == "partly"
    assert a.evidence["sum_private_mib"] == pytest.approx(56.0, abs=1e-3)
    assert a.evidence["max_private_mib"] == pytest.approx(20.0, abs=1e-3)
    assert a.evidence["largest_first_over_max"] == pytest.approx(20.5 / 20, rel=1e-3)
    assert "largest graph is captured first" in a.explanation


def test_shared_pool_holds_when_both_orders_are_max():
    rec = pool_record(PRIVATE, [20.0] * 4, [10.0, 12.0, 15.0, 21.0])
    assert claims.check_shared_pool_max({"pool_memory_gpt2": rec}).verdict == "holds"


def test_shared_pool_false_when_no_saving():
    rec = pool_record(PRIVATE, [20.0, 35.0, 50.0, 57.0], [10.0, 30.0, 50.0, 60.0])
    assert claims.check_shared_pool_max({"pool_memory_gpt2": rec}).verdict == "false"


def test_shared_pool_partly_between_max_and_sum():
    rec = pool_record(PRIVATE, [20.0, 24.0, 28.0, 30.0], [10.0, 20.0, 30.0, 40.0])
    a = claims.check_shared_pool_max({"pool_memory_gpt2": rec})
    assert a.verdict == "partly" and "above the max" in a.explanation


def test_pool_record_prefers_gpt2_but_takes_another():
    rec = pool_record(PRIVATE, [20.0] * 4, [20.0] * 4)
    a = claims.check_shared_pool_max({"pool_memory_small": rec})
    assert a.evidence["record"] == "pool_memory_small"


# ---------------------------------------------------------------------------- largest first


def test_largest_first_partly_when_pool_grows():
    rec = pool_record(PRIVATE, [20.0, 20.0, 20.0, 20.5], [10.0, 14.0, 22.0, 30.0])
    a = claims.check_largest_first({"pool_memory_gpt2": rec})
    assert a.verdict == "partly"
    assert a.evidence["smallest_first_growth_steps"] == 3
    assert a.evidence["smallest_first_pool_mib_after_each"][0] == [1, pytest.approx(10.0)]
    assert a.evidence["largest_first_pool_mib_after_each"][0] == [8, pytest.approx(20.0)]
    assert a.evidence["largest_first_share_after_first_capture"] == pytest.approx(20 / 20.5)


def test_largest_first_false_when_it_costs_more():
    rec = pool_record(PRIVATE, [20.0, 30.0, 40.0, 50.0], [10.0, 14.0, 18.0, 20.0])
    assert claims.check_largest_first({"pool_memory_gpt2": rec}).verdict == "false"


def test_largest_first_holds_when_pool_never_grows():
    rec = pool_record(PRIVATE, [20.0] * 4, [20.0] * 4)
    assert claims.check_largest_first({"pool_memory_gpt2": rec}).verdict == "holds"


# ---------------------------------------------------------------------------- offsets


def test_offsets_claim_false_with_fixed_absolute_addresses():
    a = claims.check_offsets_not_addresses({"pitfalls": pitfalls_record()})
    assert a.verdict == "false"
    assert a.evidence["output_ptr_hex"] == hex(0x7F0000000000 + 512)
    assert a.evidence["rebound_input_ignored"] is True
    assert "0x7f0000000200" in a.explanation


def test_offsets_claim_holds_if_addresses_moved():
    a = claims.check_offsets_not_addresses({"pitfalls": pitfalls_record(identical=False)})
    assert a.verdict == "holds"


def test_offsets_claim_partly_without_absolute_evidence():
    a = claims.check_offsets_not_addresses({"pitfalls": pitfalls_record(absolute=False)})
    assert a.verdict == "partly"


def test_offsets_claim_untested_without_demo():
    assert claims.check_offsets_not_addresses({"pitfalls": {"pitfalls": []}}).verdict == \
        "untested"
    assert claims.check_offsets_not_addresses({}).verdict == "untested"


# ---------------------------------------------------------------------------- engine args


def test_engine_args_false_against_listed_names(monkeypatch):
    monkeypatch.setattr(claims, "vllm_option_names",
                        lambda: (set(claims.VLLM_CUDAGRAPH_NAMES), "listed"))
    a = claims.check_engine_args({})
    assert a.verdict == "false" and a.evidence["exist_in_vllm"] == []
    assert "enforce_eager" in a.explanation


def test_engine_args_partly_if_some_exist(monkeypatch):
    monkeypatch.setattr(claims, "vllm_option_names",
                        lambda: ({"enforce_eager", "graph_pool_size"}, "installed vllm"))
    a = claims.check_engine_args({})
    assert a.verdict == "partly" and a.evidence["exist_in_vllm"] == ["graph_pool_size"]


# ---------------------------------------------------------------------------- evaluate


def full_records() -> dict:
    return {
        "decode_small": decode_record([7.0, 5.0, 2.0]),
        "decode_gpt2": decode_record([8.0, 4.0, 1.5]),
        "pool_memory_small": pool_record(PRIVATE, [20.0, 20.0, 20.0, 20.5],
                                         [10.0, 14.0, 22.0, 30.0]),
        "pool_memory_gpt2": pool_record(PRIVATE, [20.0, 20.0, 20.0, 20.5],
                                        [10.0, 14.0, 22.0, 30.0]),
        "pitfalls": pitfalls_record(),
    }


def test_evaluate_all_and_table():
    res = claims.evaluate_all(full_records())
    assert [r["id"] for r in res] == [c.id for c in claims.CLAIMS]
    verdicts = {r["id"]: r["verdict"] for r in res}
    assert verdicts == {"replay_5_8x": "depends", "pool_max_not_sum": "partly",
                        "largest_first_sizes_pool": "partly", "pool_offsets": "false",
                        "engine_args": "false"}
    json.dumps(res)
    rows = claims.verdict_rows(res)
    assert rows[0]["checked against"] == "decode_small, decode_gpt2"
    assert rows[-1]["checked against"] == "vLLM source"
    assert claims.verdict_counts(res) == {"partly": 2, "false": 2, "depends": 1}


def test_evaluate_missing_records_is_untested():
    res = {r["id"]: r for r in claims.evaluate_all({})}
    assert res["pool_max_not_sum"]["verdict"] == "untested"
    assert res["pool_max_not_sum"]["evidence"] == {"missing": ["pool_memory_small",
                                                              "pool_memory_gpt2"]}
    assert res["replay_5_8x"]["verdict"] == "untested"
    # one of the two decode records is enough
    one = claims.evaluate(claims.claim("replay_5_8x"), {"decode_gpt2": decode_record([6.0] * 3)})
    assert one["verdict"] == "holds"


def test_evaluate_accepts_result_objects_and_bad_records():
    class R:  # a stand-in for labkit.measure.results.Result
        def __init__(self, data):
            self.data = data

    res = claims.evaluate(claims.claim("pool_max_not_sum"),
                          {"pool_memory_gpt2": R(full_records()["pool_memory_gpt2"])})
    assert res["verdict"] == "partly"
    bad = claims.evaluate(claims.claim("pool_max_not_sum"), {"pool_memory_gpt2": {"x": 1}})
    assert bad["verdict"] == "untested" and "expected fields" in bad["explanation"]


def test_claim_lookup_and_needed_records():
    assert claims.claim("pool_offsets").records == ("pitfalls",)
    with pytest.raises(KeyError, match="no claim"):
        claims.claim("nope")
    assert claims.needed_records() == ["decode_small", "decode_gpt2", "pool_memory_small",
                                       "pool_memory_gpt2", "pitfalls"]
    assert set(claims.record_specs()) == set(claims.needed_records())


def test_assessment_rejects_unknown_verdict():
    with pytest.raises(ValueError, match="not one of"):
        claims.Assessment("maybe", {}, "")


def test_pool_record_from_mib_matches_hand_built():
    lf, sf = [20.0, 20.0, 20.0, 20.5], [10.0, 14.0, 22.0, 30.0]
    built = claims.pool_record_from_mib(PRIVATE, lf, sf, preset="gpt2")
    assert built == pool_record(PRIVATE, lf, sf)
    with pytest.raises(ValueError, match="one pool size per capture"):
        claims.pool_record_from_mib(PRIVATE, lf[:2], sf)


def test_describe_mentions_verdict_and_evidence():
    res = claims.evaluate(claims.claim("pool_max_not_sum"), full_records())
    text = claims.describe(res)
    assert "VERDICT  : PARTLY" in text and "pool_memory_gpt2" in text
    assert "CONTEXT  :" in text


def test_gather_records_cpu_tier_loads_references(tmp_path, monkeypatch):
    import shutil

    from labkit.measure import results

    ref = tmp_path / "reference" / "h200"
    ref.mkdir(parents=True)
    for name, data in full_records().items():
        path = results.save_result(name, data, {}, run_dir=tmp_path / "run",
                                   env={"tier": "gpu", "gpu_name": "NVIDIA H200"})
        shutil.copy(path, ref / f"{name}.json")
    monkeypatch.setenv("LABKIT_DATA", str(tmp_path))

    class Ctx:  # the CPU tier of labkit.teach.notebook.NotebookContext
        live, reference_gpu = False, "h200"

    got = claims.gather_records(Ctx())
    assert list(got) == claims.needed_records()
    assert got["pitfalls"].data == full_records()["pitfalls"]
    with pytest.raises(KeyError, match="no measurement known"):
        claims.gather_records(Ctx(), ["nope"])


def test_gather_records_gpu_tier_reuses_this_runs_results(tmp_path, monkeypatch):
    from labkit.measure import results

    run = tmp_path / "run"
    monkeypatch.setenv("LABKIT_RUN_DIR", str(run))
    recs = full_records()
    for name in ("decode_small", "decode_gpt2", "pool_memory_small", "pool_memory_gpt2"):
        results.save_result(name, recs[name], {}, env={"tier": "gpu", "gpu_name": "NVIDIA H200"})
    measured = []

    def fake_specs():  # "pitfalls" was not saved in this run: it is measured (here: faked)
        return {n: ((lambda n=n: measured.append(n) or recs[n]), {}) for n in recs}

    monkeypatch.setattr(claims, "record_specs", fake_specs)

    class Ctx:  # the GPU tier of labkit.teach.notebook.NotebookContext
        live, reference_gpu = True, "h200"

    got = claims.gather_records(Ctx())
    assert measured == ["pitfalls"]
    assert {n: r.data for n, r in got.items()} == recs
    assert (run / "results" / "pitfalls.json").is_file()
    measured.clear()
    claims.gather_records(Ctx(), reuse_run=False)
    assert measured == claims.needed_records()


def test_record_specs_use_the_records_defaults():
    from labkit.measure import records

    specs = claims.record_specs()
    assert list(specs) == claims.needed_records()
    for name, (fn, params) in specs.items():
        assert callable(fn) and params == records.default_params(name)


def _notebook_text(name: str) -> str:
    import nbformat
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "notebooks" / name
    return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)


def test_every_claim_quotes_the_article_as_notebook_09_does_and_names_its_origin():
    intro = " ".join(_notebook_text("09_claims_vs_measurements.ipynb").split())
    for c in claims.CLAIMS:
        assert c.quote, f"{c.id}: no quote"
        assert c.origin == claims.SEED_ORIGIN and "not stored in this repository" in c.origin
        words = c.quote.split(", ") if c.id == "engine_args" else [c.quote]
        for w in words:   # the quote is the notebook's own, not a new one
            assert w in intro, f"{c.id}: {w!r} is not what notebook 09 quotes"


def test_describe_shows_the_quote_and_its_origin():
    r = claims.evaluate(claims.claim("pool_offsets"), {})
    text = claims.describe(r)
    assert 'QUOTED   : "records offsets, not addresses" (one of the three seed articles' in text
    assert r["quote"] == "records offsets, not addresses" and r["origin"] == claims.SEED_ORIGIN
