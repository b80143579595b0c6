"""Tests of labkit.teach.seed_claims: every seed claim's verdict from the H200 reference
records, the contrary cases on edited copies, and that notebook 09 shows the table."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from labkit.measure.results import load_reference
from labkit.teach import claims, seed_claims as sc

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def refs() -> dict:
    return {n: load_reference(n).data for n in sc.needed_records()}


@pytest.fixture(scope="module")
def rows(refs) -> dict:
    return {r["id"]: r for r in sc.evaluate_seed(refs)}


EXPECTED = {
    "002-pointer-rebinding": "false", "002-conditional-nodes": "partly",
    "002-paged-zero-copy": "partly", "002-introduced-version": "false",
    "002-launch-cost-zero": "false", "001-mode-switch": "cannot be checked here",
    "001-graph-pool": "partly", "001-piecewise": "false", "001-compiled-capture": "holds",
    "001-autocast": "partly", "000-coverage-80": "cannot be checked here",
    "000-replay-allocates": "false",
}


def test_every_claim_has_seed_evidence_and_origin():
    ids = [c.id for c in sc.SEED_CLAIMS]
    assert len(ids) == len(set(ids)) == 13
    for c in sc.SEED_CLAIMS:
        assert sc.seed_of(c) in ("000", "001", "002")
        assert sc.evidence_of(c), c.id
        assert c.origin.startswith(f"seed {sc.seed_of(c)}, as summarised in issue 10")
    # every seed is represented
    assert {sc.seed_of(c) for c in sc.SEED_CLAIMS} == {"000", "001", "002"}


def test_reference_verdicts(rows):
    got = {k: v["verdict"] for k, v in rows.items() if k in EXPECTED}
    assert got == EXPECTED
    for r in rows.values():
        assert r["verdict"] in claims.VERDICTS and r["explanation"].strip()
    json.dumps(list(rows.values()))


def test_breaker_row_is_serving_claims_verdict(refs, rows):
    from labkit.teach.serving_claims import check_breaker

    a = check_breaker(refs)
    assert rows["001-circuit-breaker"]["verdict"] == a.verdict
    assert rows["001-circuit-breaker"]["explanation"] == a.explanation


def test_pointer_rebinding_reads_the_pitfall(refs, rows):
    d = next(p for p in refs["pitfalls"]["pitfalls"] if p["name"] == "input_rebound")["details"]
    ev = rows["002-pointer-rebinding"]["evidence"]
    assert ev["replay_returned"] == d["stale"] and ev["expected"] == d["expected"]
    assert ev["rebound_input_ignored"] is True
    seen = copy.deepcopy(refs["pitfalls"])
    for p in seen["pitfalls"]:
        if p["name"] == "input_rebound":
            p["details"]["stale"] = p["details"]["expected"]
    assert sc.check_pointer_rebinding({"pitfalls": seen}).verdict == "partly"


def test_launch_cost_ratio_from_record(refs, rows):
    d = refs["launch_overhead"]
    ev = rows["002-launch-cost-zero"]["evidence"]
    assert ev["eager_over_node"] == pytest.approx(d["gpu_per_eager_kernel"]["median"]
                                                  / d["gpu_per_graph_node"]["median"])
    assert ev["gpu_per_graph_node_us"] > 0
    cpu = copy.deepcopy(d)
    cpu["gpu_per_graph_node"] = None
    assert sc.check_launch_cost_zero({"launch_overhead": cpu}).verdict == "untested"


def test_paged_ratios_from_record(refs, rows):
    ev = rows["002-paged-zero-copy"]["evidence"]
    run = refs["paged_gpt2"]["runs"][-1]
    i = refs["paged_gpt2"]["batch_sizes"].index(ev["batch"])
    assert ev["paged_over_in_place"] == pytest.approx(
        run["times"]["paged"][i]["median"] / run["times"]["slot_in_place"][i]["median"])
    assert "block table" in rows["002-paged-zero-copy"]["explanation"]


def test_conditional_reads_the_probe(refs, rows):
    ev = rows["002-conditional-nodes"]["evidence"]
    probe = refs["multistep_gpt2"]["conditional"]
    assert ev["if_node"] == probe["if_node"] and ev["while_node"] == probe["while_node"]
    both = copy.deepcopy(refs["multistep_gpt2"])
    both["conditional"].update(if_node=True, while_node=True, if_node_demo={})
    assert sc.check_conditional_nodes({"multistep_gpt2": both}).verdict == "holds"


def test_piecewise_and_compile_from_records(refs, rows):
    ev = rows["001-piecewise"]["evidence"]
    assert ev["graphs_per_step"]["piecewise"] == refs["modes_gpt2"]["graphs_per_step"]["piecewise"]
    assert ev["step_us"]["full"] == refs["modes_gpt2"]["times"]["full"][0]["median"]
    ev = rows["001-compiled-capture"]["evidence"]
    assert all(ev["tokens_equal_eager"].values())
    bad = copy.deepcopy(refs["roofline_small"])
    bad["checks"]["compile_manual_graph_tokens_equal_eager"] = False
    assert sc.check_compiled_capture({"roofline_small": bad}).verdict == "partly"


def test_autocast_and_pool_claims(refs, rows):
    assert rows["001-autocast"]["evidence"]["cache_on_stale"] is True
    ev = rows["001-graph-pool"]["evidence"]
    assert ev["graph_pool_class_in_torch"] is False and ev["overwritten"] is True
    import torch

    assert hasattr(torch.cuda, "graph_pool_handle") and not hasattr(torch.cuda, "GraphPool")
    ev = rows["000-replay-allocates"]["evidence"]
    assert ev["same_address"] is True and ev["replays"] == len(
        refs["pitfalls"]["address_demo"]["replay_output_ptrs"])


def test_missing_records_are_untested():
    got = {r["id"]: r["verdict"] for r in sc.evaluate_seed({})}
    assert got["002-introduced-version"] == "false"          # a source, no record
    assert got["002-pointer-rebinding"] == "untested"
    assert got["001-circuit-breaker"] == "untested"


@pytest.mark.parametrize("check, reason", [
    (sc.check_pointer_rebinding, "no pitfalls record"),
    (sc.check_conditional_nodes, "no multistep record"),
    (sc.check_paged_zero_copy, "no paged record"),
    (sc.check_launch_cost_zero, "no launch_overhead record"),
    (sc.check_graph_pool_class, "no pool_memory record"),
    (sc.check_piecewise_meaning, "no modes record"),
    (sc.check_compiled_capture, "no roofline record"),
    (sc.check_autocast_capture, "no pitfalls record"),
])
def test_a_check_without_its_record_is_untested_and_names_it(check, reason):
    a = check({"unrelated": {}})
    assert (a.verdict, a.evidence, a.explanation) == ("untested", {}, reason)


def test_a_check_finds_its_record_by_prefix_and_the_pitfall_by_case(refs):
    other = {"multistep_small": refs["multistep_gpt2"]}
    assert sc.check_conditional_nodes(other).evidence["record"] == "multistep_small"
    no_cases = {**refs["pitfalls"], "pitfalls": []}
    for check, case in ((sc.check_pointer_rebinding, "input_rebound"),
                        (sc.check_autocast_capture, "autocast")):
        a = check({"pitfalls": no_cases})
        assert a.verdict == "untested"
        assert a.explanation == f"the pitfalls record has no {case} case"


def test_seed_rows_have_the_columns(rows):
    table = sc.seed_rows(list(rows.values()))
    assert [list(r) for r in table][0] == ["claim", "seed", "verdict", "evidence", "why"]
    assert all(r["evidence"] for r in table)
    assert any('("goes to zero")' in r["claim"] for r in table)


# ---------------------------------------------------------------------------- fixed verdicts


def test_speedup_verdict_says_how_the_gain_shrinks_with_model_size():
    recs = {n: load_reference(n).data for n in ("decode_small", "decode_gpt2",
                                                "roofline_small", "roofline_gpt2")}
    a = claims.check_replay_speedup(recs)
    by = {s["kind"]: s for s in a.evidence["by_model_size"]}
    assert set(by) == {"decode", "roofline"}
    small, big = recs["decode_small"], recs["decode_gpt2"]
    want = [g / s for g, s in zip(big["speedup_vs_eager"]["graph"],
                                  small["speedup_vs_eager"]["graph"])]
    assert by["decode"]["ratio"] == pytest.approx(want)
    assert by["decode"]["larger"] == "gpt2" and by["decode"]["larger_layers"] == 12
    assert "With model size the gain shrinks" in a.explanation


def test_pool_verdicts_read_both_pool_records():
    recs = {n: load_reference(n).data for n in ("pool_memory_small", "pool_memory_gpt2")}
    a = claims.check_shared_pool_max(recs)
    assert {p["record"] for p in a.evidence["per_record"]} == set(recs)
    for p in a.evidence["per_record"]:
        d = recs[p["record"]]
        assert p["largest_first_over_max"] == pytest.approx(
            d["shared_largest_first"]["total_bytes"] / d["largest_private_bytes"])
    b = claims.check_largest_first(recs)
    assert b.verdict == "partly"
    for p in b.evidence["per_record"]:
        d = recs[p["record"]]
        assert p["smallest_first_over_largest_first"] == pytest.approx(
            d["shared_smallest_first"]["total_bytes"] / d["shared_largest_first"]["total_bytes"])
    if all(p["smallest_first_over_largest_first"] <= 1 + claims.MEMORY_TOL
           for p in b.evidence["per_record"]):
        assert "same size in either order" in b.explanation
        assert "largest first helps" not in b.explanation


def test_pool_max_untested_when_the_record_cannot_tell():
    one = claims.pool_record_from_mib({1: 1.0, 8: 20.0}, [20.0, 20.0], [1.0, 20.0])
    a = claims.check_shared_pool_max({"pool_memory_x": one})
    assert a.verdict == "untested" and "cannot tell max from sum" in a.explanation


def test_seed_evaluation_is_the_claims_evaluation(refs):
    c = sc.SEED_CLAIMS[0]
    row = sc.evaluate_seed(refs, [c])[0]
    assert row == {**claims.evaluate(c, refs), "seed": "002", "checked_against": "pitfalls"}
    assert sc.CANNOT == claims.CANNOT == claims.VERDICTS[-1]
    assert sc.needed_records([]) == [] and sc.needed_records()[0] == "pitfalls"


def test_gather_records_reuses_this_runs_records_then_references(tmp_path, monkeypatch,
                                                                  capsys):
    from labkit.measure import results

    monkeypatch.setenv("LABKIT_RUN_DIR", str(tmp_path / "run"))
    data = load_reference("pitfalls").data
    results.save_result("pitfalls", data, {}, env={"tier": "gpu", "gpu_name": "NVIDIA H200"})

    class Ctx:  # the tiers of labkit.teach.notebook.NotebookContext
        live, reference_gpu = True, "no_such_gpu"

    got = sc.gather_records(Ctx(), ["pitfalls", "paged_gpt2"])
    assert got["pitfalls"].data == data and got["paged_gpt2"] is None
    out = capsys.readouterr().out
    assert "pitfalls: measured earlier in this run" in out and "paged_gpt2: not recorded" in out
    Ctx.live = False
    assert sc.gather_records(Ctx(), ["pitfalls"]) == {"pitfalls": None}


# ---------------------------------------------------------------------------- notebook


@pytest.mark.parametrize("path", ["notebooks/09_claims_vs_measurements.ipynb",
                                  "notebooks/solutions/09_claims_vs_measurements.ipynb"])
def test_notebook_09_shows_the_seed_claims(path):
    nb = json.loads((ROOT / path).read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "seed_claims.evaluate_seed(all_records)" in code and "seed_claims.seed_rows(" in code
    # every record the seed claims read reaches them (the first gather holds some of them)
    assert "all_records = {**seed_records, **records}" in code
    text = "\n".join("".join(c["source"]) for c in nb["cells"])
    for seed in ("000", "001", "002"):
        assert f"seed {seed}" in text
