"""Notebook 18's topic code (labkit.teach.engines2026) and exercise checks: the rows, verdicts
and charts of breakable, while_decode, lora_graphs and graph_memory records built on CPU with
the measuring functions' stand-ins (their GPU parts replaced); the CPU stand-in of breakable
capture and the toy step; the graders; and the notebook run on those records."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import torch
from test_breakable import _Eager
from test_graph_estimate import _stand_ins as graph_memory_stand_ins
from test_while_loop import _stand_ins as while_stand_ins
from nbrun import run_on_references

from labkit.breakable import break_graph, breakable_step
from labkit.measure import breakable as mb
from labkit.measure import graph_memory as gm
from labkit.measure import lora_graphs as lg
from labkit.measure import while_decode as wd
from labkit.measure.results import to_jsonable
from labkit.model import build_model, preset
from labkit.piecewise import piecewise_step
from labkit.teach import engines2026 as le
from labkit.teach.answers import n18
from labkit.teach.answers.registry import run
from labkit.teach.exercises import STRICT_ENV, StrictExerciseError
from labkit.timing import Stats

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20


def _stats(median: float, spread: float) -> Stats:
    """30 samples: p10 and p90 at ``median -+ spread``."""
    return Stats.from_samples([median - spread, median, median + spread] * 10)


def _timer(medians, spread: float = 0.5):
    """A ``time_cuda_interleaved`` stand-in: each function run once, its Stats from
    ``medians(name)``."""
    return lambda fns, **kw: {name: (fn(), _stats(medians(name), spread))[1]
                              for name, fn in fns.items()}


# ---------------------------------------------------------------------- stand-in records


def breakable_data(monkeypatch, per_break: float = 3.0, spread: float = 0.5,
                   host_per_break: float = 50.0) -> dict:
    """measure_breakable on CPU: steps run eagerly, a break costs ``per_break`` µs (the hand cut
    2 µs more than ``L`` breaks), the host issues FULL in 10 µs and ``host_per_break`` µs more
    per break, capturing a segment 0.01 s."""
    def fake_capture(model, name, sizes, batch, *, warmup, freeze_gc=True):
        shape = mb.variant_shape(name, model.cfg.n_layer)
        step = (model.decode if name == "full" else partial(piecewise_step, model)
                if name == "piecewise" else breakable_step(model, shape["breaks_at"]))
        return _Eager(batch, step), 0.2 + 0.01 * shape["segments"]

    def medians(name):
        if name == "full":
            return 100.0
        if name == "piecewise":
            return 102.0 + per_break * 2
        return 100.0 + per_break * int(name.removeprefix("breaks_"))

    monkeypatch.setattr(mb, "_need_cuda", lambda what: None)
    monkeypatch.setattr(mb, "_free", lambda: None)
    monkeypatch.setattr(mb, "make_model", lambda name, max_batch, dtype, **kw: build_model(
        preset(name, max_batch=max_batch, dtype=dtype, **kw), seed=1))
    monkeypatch.setattr(mb, "capture_variant", fake_capture)
    monkeypatch.setattr(mb, "time_cuda_interleaved", _timer(medians, spread))
    monkeypatch.setattr(mb, "time_host_issue_interleaved", _timer(
        lambda name: 10.0 if name == "full" else 10.0 + host_per_break * (
            2 if name == "piecewise" else int(name.removeprefix("breaks_"))), spread))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "cpu (stand-ins)")
    return mb.measure_breakable("test", batch_sizes=[2, 1], dtype="float32", context=8,
                                max_seq=32, repeats=2, inner=1, new_tokens=2,
                                capture_repeats=3, gc_sizes=[4, 1], heap_objects=[0, 1000])


WHILE_MS = {"host_loop": 300.0, "multistep": 150.0, "while_node": 120.0}


def while_data(monkeypatch, support=None) -> dict:
    """measure_while_decode on CPU (test_while_loop's stand-ins), the WHILE node fastest."""
    while_stand_ins(monkeypatch, wd, **({} if support is None else {"support": support}))
    monkeypatch.setattr(wd, "time_cuda_interleaved", _timer(WHILE_MS.__getitem__, 2.0))
    return wd.measure_while_decode("test", batch_sizes=[2, 1], max_steps=[6, 4],
                                   dtype="float32", max_seq=32, repeats=2, warmup=1)


LORA_US = {"plain": 100.0, "lora_idle": 130.0, "lora_active": 130.5}
LORA_POOLS = {"plain": 2 * MiB, "lora": 22 * MiB, "both": 22 * MiB}


def lora_data(monkeypatch, pools=None) -> dict:
    """measure_lora_graphs on CPU: LoRAGraphs eager, pools (``pools``, default
    :data:`LORA_POOLS`: the LoRA graphs' gathers take a 20 MiB segment) and timings stand-ins
    (the idle LoRA graph slower than plain, active and idle overlapping)."""
    pools = LORA_POOLS if pools is None else pools
    monkeypatch.setattr(lg, "_need_cuda", lambda what: None)
    monkeypatch.setattr(lg, "_free", lambda: None)
    monkeypatch.setattr(lg, "make_model", lambda name, max_batch, dtype, **kw: build_model(
        preset(name, max_batch=max_batch, dtype=dtype, **kw), seed=0))
    monkeypatch.setattr(lg, "pool_bytes_by_case", lambda model, adapters, sizes: {
        c: {"reserved_bytes": b, "active_bytes": 0,
            "graphs": len(sizes) * (2 if c == "both" else 1)} for c, b in pools.items()})
    monkeypatch.setattr(lg, "time_cuda_interleaved", _timer(LORA_US.__getitem__, 1.0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "cpu (stand-ins)")
    return lg.measure_lora_graphs("test", batch_sizes=[4, 1], dtype="float32", rank=4,
                                  context=8, max_seq=32, repeats=2, inner=1, new_tokens=4)


def graph_memory_data(monkeypatch) -> dict:
    """measure_graph_memory on a simulated allocator (test_graph_estimate's stand-ins)."""
    graph_memory_stand_ins(monkeypatch, [])
    return to_jsonable(gm.measure_graph_memory(
        "small", {"few": [8, 1, 4, 2], "many": [1, 2, 3, 5, 6, 8]}, max_seqs=(64, 32),
        small_cache_sizes=[4, 1, 2], profile_max_seq=16, repeats=2))


# ---------------------------------------------------------------------- verdicts


def test_verdicts_only_where_the_spreads_separate():
    a, b = _stats(100, 1).to_dict(), _stats(110, 1).to_dict()
    d = le.compare(a, b)
    assert le.verdict_word(d) == "faster" and le.spread_agrees(d)
    assert le.verdict_word(le.compare(b, a), "shorter", "longer") == "longer"
    near = le.compare(_stats(100, 5).to_dict(), _stats(103, 5).to_dict())
    assert le.verdict_word(near) == "no clear difference" and le.spread_agrees(near)
    one = {**a, "n": 1}
    assert le.verdict_word(le.compare(one, b)) == "untested (1 run)"
    assert le.spread_agrees(le.compare(one, b))  # untested states no direction
    assert le.verdict_word(le.compare(a, b, interleaved=False)) == "untested (not interleaved)"
    assert le.verdict_word(None) == "not timed" and not le.spread_agrees(None)
    assert "100.0 µs" in le.difference_text(d) and "30 samples" in le.difference_text(d)


# ---------------------------------------------------------------------- breakable


def test_breakable_rows_chart_and_cost(monkeypatch):
    d = breakable_data(monkeypatch)
    assert d["variants"] == ["full", "breaks_0", "breaks_1", "breaks_2", "piecewise"]
    assert le.breakable_checks_pass(d) and le.segments_match(d)
    rows = le.breakable_rows(d)
    assert len(rows) == 2 * 5 and rows[0]["batch"] == 1 and rows[0]["variant"] == "FULL"
    by = {(r["batch"], r["variant"]): r for r in rows}
    assert by[(1, "2 breaks")]["vs FULL"] == "slower"
    assert by[(1, "2 breaks")]["vs PIECEWISE"] == "faster"
    assert by[(1, "0 breaks")]["vs FULL"] == "no clear difference"
    assert by[(2, "PIECEWISE (hand cut)")]["segments"] == 3
    cost = le.break_cost(d, 1)
    assert cost["slope_us"] == pytest.approx(3.0) and cost["breaks"] == 2
    assert le.verdict_word(cost["difference"]) == "slower"
    assert "3.00 µs" in le.break_cost_sentence(cost)
    for b in (1, 2):
        for against in ("full", "piecewise", "breaks_0"):
            assert le.spread_agrees(le.breakable_compare(d, "breaks_2", against, b))
    fig = le.breakable_chart(d, subtitle="")
    assert len(fig.data) == 2 * 3 and list(fig.data[0].x) == [0, 1, 2]
    assert fig.data[2].x == (2,)  # PIECEWISE at L breaks


def test_pace_says_who_waits(monkeypatch):
    d = breakable_data(monkeypatch)  # GPU: 100 + 3 µs a break; host: 10 + 50 µs a break
    assert le.breakable_host_stats(d, "full", 1)["median"] == pytest.approx(10.0)
    assert le.pace(d, "full", 1) == "the GPU"                        # host 10, GPU 100 µs
    assert le.pace(d, "breaks_1", 1) == "the GPU (the host close behind)"  # 60 against 103
    assert le.pace(d, "breaks_2", 1) == "the host"                   # 110 against 106
    for v, b in (("full", 1), ("breaks_1", 2), ("breaks_2", 1)):
        who = le.pace(d, v, b)
        assert le.pace_holds(d, v, b, who)
        assert not any(le.pace_holds(d, v, b, other) for other in le.PACES if other != who)
    assert not le.pace_holds(d, "full", 1, "nobody")
    assert le.host_cost_per_break(d, 1) == pytest.approx(50.0)
    by = {(r["batch"], r["variant"]): r for r in le.pace_rows(d)}
    assert len(by) == 2 * 5 and by[(1, "2 breaks")]["µs per step"] == pytest.approx(106.0)
    assert by[(1, "2 breaks")]["host µs to issue"] == pytest.approx(110.0)
    assert by[(1, "2 breaks")]["pace set by"] == "the host"
    assert by[(2, "FULL")]["pace set by"] == "the GPU"
    text = le.pace_sentence(d, 1)
    assert text.startswith("Each break adds about **50 µs** of host time")
    assert "FULL: the host issues a step in 10.0 µs, the GPU runs it in 100.0 µs, so **the GPU**" \
        in text and "2 breaks: the host issues a step in 110.0 µs" in text
    assert text.count("**the host**") == 1
    cheap = breakable_data(monkeypatch, host_per_break=1.0)
    assert {le.pace(cheap, v, 1) for v in cheap["variants"]} == {"the GPU"}


def test_a_record_without_host_times_keeps_its_table(monkeypatch):
    d = breakable_data(monkeypatch)
    del d["host_times"]  # recorded before the host's time was
    assert le.pace(d, "breaks_2", 1) is None and le.pace_sentence(d, 1) == ""
    assert le.pace_rows(d) == [] and le.host_cost_per_break(d, 1) is None
    assert "pace set by" not in le.breakable_rows(d)[0]


def test_a_break_within_the_noise_has_no_cost(monkeypatch):
    d = breakable_data(monkeypatch, per_break=0.1, spread=1.0)
    cost = le.break_cost(d, 1)
    assert le.verdict_word(cost["difference"]) == "no clear difference"
    assert "No cost per break" in le.break_cost_sentence(cost)


def test_capture_and_gc_rows(monkeypatch):
    d = breakable_data(monkeypatch)
    rows = le.capture_rows(d)
    assert [r["segments"] for r in rows] == [1, 1, 2, 3, 3]
    assert rows[3]["vs FULL (capture)"] == "longer"   # 0.23 s against 0.21 s every time
    assert le.spread_agrees(le.capture_compare(d, "breaks_2"))
    assert le.gc_heaps(d) == [0, 1000]
    g = le.gc_rows(d)
    configs = 4 if mb.force_gc_available() else 2
    assert len(g) == 2 * configs
    assert all(len(r["collections (gen 0 / 1 / 2)"].split(" / ")) == 3 for r in g)
    assert all(r["frozen vs running"] == "" for r in g if r["collector"] == "running")
    d0 = le.gc_compare(d, 0, False)
    assert d0 is not None and le.spread_agrees(d0)
    assert len(le.gc_collections(d, 1000, False, True)) == 3
    assert le.gc_collections(d, 12345, False, True) == []


# ---------------------------------------------------------------------- the WHILE node


def test_while_rows_chart_and_checks(monkeypatch):
    d = while_data(monkeypatch)
    assert le.while_timed(d) and le.while_checks_pass(d) and le.steps_as_placed(d)
    rows = le.while_rows(d)
    assert len(rows) == 8 and rows[0]["batch"] == 1
    assert all(r["WHILE vs host loop"] == "faster" and r["WHILE vs multistep"] == "faster"
               for r in rows)
    i = le.largest_case(d, "never")
    assert (d["batch_sizes"][i], d["max_steps"][i], d["stop"][i]) == (2, 6, "never")
    assert le.while_steps(d, "multistep", i) == 6
    assert rows[i]["while_node µs/step"] == pytest.approx(120.0 / d["steps_run"][i], abs=0.01)
    early = le.largest_case(d, "early")
    assert le.while_steps(d, "while_node", early) <= 3
    assert le.case_label(d, early) == "batch 2, k = 6, early stop"
    assert le.while_case(d, 2, 6, "early") == early
    assert le.while_support_rows(d)[0]["route used"] == "cuda-python"
    fig = le.while_chart(d, subtitle="")
    assert len(fig.data) == 3 and len(fig.data[0].x) == 8


def test_a_verdict_record_names_torch_and_what_is_missing(monkeypatch):
    from test_while_loop import SUPPORT

    none = {**SUPPORT, "routes": [], "route": None, "cuda_python": None,
            "missing": ["cuda-python is not importable"]}
    monkeypatch.setattr(wd, "make_model", lambda *a, **kw: pytest.fail("nothing is built"))
    d = while_data(monkeypatch, support=none)
    assert not le.while_timed(d) and le.verdict_names_torch(d)
    assert le.while_rows(d) == [] and le.largest_case(d, "early") is None
    assert le.while_support_rows(d)[0]["routes"] == "none"
    d["verdict"] = d["verdict"].replace("cuda-python is not importable", "something")
    assert not le.verdict_names_torch(d)


# ---------------------------------------------------------------------- LoRA


def test_lora_rows_chart_and_checks(monkeypatch):
    d = lora_data(monkeypatch)
    assert le.lora_checks_pass(d) and le.lora_graph_counts_match(d)
    assert le.lora_pool_ratio(d) == pytest.approx(11.0) and le.lora_pool_ratio(d, "both") == 11
    assert le.lora_pools_text(d) == ("plain: 2 graphs in 2.0 MiB; lora: 2 graphs in 22.0 MiB; "
                                     "both: 4 graphs in 22.0 MiB")
    pools = le.lora_pool_rows(d)
    assert [r["× plain"] for r in pools] == [1.0, 11.0, 11.0]
    assert [r["pool reserved MiB"] for r in pools] == [2.0, 22.0, 22.0]
    times = le.lora_time_rows(d)
    assert [r["batch"] for r in times] == [1, 4]
    assert all(r["idle LoRA vs plain"] == "slower" and r["active vs idle"] ==
               "no clear difference" for r in times)
    fig = le.lora_chart(d, subtitle="")
    assert len(fig.data) == 3
    d["checks"]["lora_changes_tokens"] = False
    assert not le.lora_checks_pass(d)


# ---------------------------------------------------------------------- the estimate


def test_estimate_rows_errors_and_target(monkeypatch):
    d = graph_memory_data(monkeypatch)
    assert le.errors_agree(d)
    rows = le.estimate_rows(d)
    assert [(r["list"], r["max_seq"]) for r in rows] == [("few", 32), ("many", 32), ("few", 64),
                                                         ("many", 64)]
    assert rows[0]["labkit error %"] == "+0.0" and rows[0]["vLLM error %"] == "+12.5"
    assert rows[0]["measured MiB"] == 8.0 and rows[0]["vLLM estimate MiB"] == 9.0
    assert le.worst_abs_error(d) == 0.0 and le.within_target(d)
    span = le.error_span(d, "vllm")
    assert span == (min(e for e, _ in le.stored_errors(d)), max(e for e, _ in le.stored_errors(d)))
    closer, runs = le.closer_points(d)
    assert runs == 8 and closer == 8
    fig = le.estimate_chart(d, subtitle="")
    assert len(fig.data) == 2 and len(fig.data[0].x) == 4
    bad = json.loads(json.dumps(d))
    bad["points"][0]["runs"][0]["labkit_error_pct"] = 3.0
    assert not le.errors_agree(bad)


def test_the_estimate_profiled_against_a_small_cache(monkeypatch):
    d = graph_memory_data(monkeypatch)
    paged, slot = le.profiled_short_fall(d, "paged"), le.profiled_short_fall(d, "slot")
    assert paged["vllm_short"] and paged["labkit_short"]
    assert paged["labkit_errors"] == [-50.0, -50.0]
    assert not slot["labkit_short"]   # the slot layout reads its rows in place
    assert le.blocks_change_bytes(d, "paged") == [0, 0] and le.blocks_change_bytes(d, "slot") is None
    rows = {r["layout"]: r for r in le.small_cache_rows(d)}
    assert rows["paged"]["labkit, profiled small %"] == "-50.0"
    assert rows["slot"]["pool change, blocks alone %"] == "n/a"
    assert rows["paged"]["rows profiled → real"] == "16 → 64"


REFERENCES = sorted(p for kind in ("breakable", "while_decode", "lora_graphs", "graph_memory")
                    for p in (ROOT / "data" / "reference").glob(f"*/{kind}_*.json"))


@pytest.mark.parametrize("path", REFERENCES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_rows_and_charts_build_from_every_recorded_reference(path):
    from labkit.measure.results import load_reference

    rec = load_reference(path.stem, gpu=path.parent.name)
    kind = path.stem.rsplit("_", 1)[0]
    if kind == "breakable":
        assert le.breakable_rows(rec) and le.capture_rows(rec) and le.gc_rows(rec)
        assert le.breakable_checks_pass(rec) and le.segments_match(rec)
        assert le.breakable_chart(rec).data
    elif kind == "while_decode":
        assert le.while_support_rows(rec)
        if le.while_timed(rec):
            assert le.while_rows(rec) and le.while_checks_pass(rec) and le.while_chart(rec).data
        else:
            assert le.verdict_names_torch(rec)
    elif kind == "lora_graphs":
        assert le.lora_pool_rows(rec) and le.lora_time_rows(rec) and le.lora_chart(rec).data
        assert le.lora_checks_pass(rec) and le.lora_graph_counts_match(rec)
    else:
        assert le.estimate_rows(rec) and le.small_cache_rows(rec) and le.errors_agree(rec)
        assert le.estimate_chart(rec).data


# ---------------------------------------------------------------------- the CPU stand-in


def _decode_model():
    m = build_model(preset("test", max_batch=4), seed=0)
    for i in range(3):
        m.cache.reserve(i, 12)
        m.prefill(torch.tensor([[1 + i, 2, 3]]), torch.tensor([i]))
    return m


@pytest.mark.parametrize("breaks", [(), (1,), (0, 1)])
def test_the_standin_capture_of_the_decode_step_replays_eager(breaks):
    m = _decode_model()
    static = (torch.tensor([4, 5, 6]), torch.tensor([3, 3, 3]), torch.tensor([2, 0, 1]))
    kv = (m.k_cache.clone(), m.v_cache.clone())
    g = le.capture_standin(breakable_step(m, breaks), static)
    assert len(g.segments) == len(breaks) + 1 and [b.name for b in g.breaks] == \
        ["attention"] * len(breaks)
    assert len({id(s.pool()) for s in g.segments}) == 1   # one pool
    rows = le.segment_rows(g)
    assert [r["what"].split(" ")[0] for r in rows] == \
        ["segment", "break"] * len(breaks) + ["segment"]
    for new in ([7, 8, 9], [40, 3, 77]):
        m.k_cache.copy_(kv[0]), m.v_cache.copy_(kv[1])
        want = m.decode_step(torch.tensor(new), static[1], static[2]).clone()
        m.k_cache.copy_(kv[0]), m.v_cache.copy_(kv[1])
        static[0].copy_(torch.tensor(new))
        assert torch.equal(g.replay(), want)


def test_a_host_read_in_a_segment_is_refused_and_inside_a_break_allowed():
    x = torch.ones(4)

    def bad(x):
        return x * (x.sum().item())

    with pytest.raises(le.HostSyncError, match=r"item\(\) in bad"):
        le.capture_standin(bad, (x,))

    @break_graph
    def host_sum(y):
        return y + y.sum().item()

    g = le.capture_standin(lambda x: host_sum(x * 2) * 3, (x,))
    assert len(g.segments) == 2 and g.breaks[0].name == "host_sum"
    x.copy_(torch.arange(4.0))
    assert torch.equal(g.replay(), (torch.arange(4.0) * 2 + 12.0) * 3)
    for sync in ("tolist", "__bool__", "nonzero"):
        with pytest.raises(le.HostSyncError, match=sync):
            le.capture_standin(lambda x, s=sync: getattr(x, s)() and x, (x,))


def test_break_records_and_their_log():
    log: list = []

    @break_graph
    def plus(y):
        return y + 1

    g = le.capture_standin(lambda x: plus(x * 2) - 1, (torch.zeros(2),))
    recs = le.break_records(g, log)
    assert recs[0].name == "plus" and recs[0].output is g.breaks[0].output
    assert not hasattr(recs[0], "run")
    recs[0].fn(*recs[0].args)
    assert log == [("break", 0)]
    with pytest.raises(AttributeError):
        recs[0].output = torch.zeros(2)  # frozen: a replay copies into the static output


def test_the_toy_step_and_its_marks():
    assert "dynamic_scale" in le.toy_source() and "def __call__" in le.toy_source()
    none = le.try_marks([])
    assert not none["captured"] and "HostSyncError" in none["error"]
    assert "dynamic_scale" in none["error"]
    scale = le.try_marks("dynamic_scale")
    assert not scale["captured"] and "returned float" in scale["error"]
    q, layer = le.try_marks("quantize"), le.try_marks("layer")
    assert q["captured"] and q["equal_eager"] and q["segments"] == 3
    assert layer["captured"] and layer["equal_eager"] and layer["eager_ops"] > q["eager_ops"]
    assert not le.try_marks(["mlp", "norm"])["captured"]
    with pytest.raises(ValueError, match="no function"):
        le.try_marks("attention")
    with pytest.raises(TypeError, match="marks must be"):
        le.try_marks(3)
    assert n18.best_marks() == (["quantize"], q["eager_ops"])


# ---------------------------------------------------------------------- the graders


@pytest.fixture
def strict(monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "1")


def _replay(segments, breaks):
    for i, s in enumerate(segments):
        s.replay()
        if i < len(breaks):
            b = breaks[i]
            b.output.copy_(b.fn(*b.args, **b.kwargs))


def _replay_no_copy(segments, breaks):
    for i, s in enumerate(segments):
        s.replay()
        if i < len(breaks):
            breaks[i].fn(*breaks[i].args, **breaks[i].kwargs)


def _replay_segments_first(segments, breaks):
    for s in segments:
        s.replay()
    for b in breaks:
        b.output.copy_(b.fn(*b.args, **b.kwargs))


def test_18_1_accepts_the_replay_and_refuses_each_bug(strict):
    assert run("18.1", 18, replay=_replay).passed
    for bug in (_replay_no_copy, _replay_segments_first, lambda s, b: None):
        with pytest.raises(StrictExerciseError):
            run("18.1", 18, replay=bug)
    r = n18.replay_outcome(_replay_no_copy, (1,))
    assert r["order_ok"] and not r["logits_ok"]    # stale attention read by the next segment
    r = n18.replay_outcome(_replay_segments_first, (0, 1))
    assert not r["order_ok"] and r["order"][:2] == [("segment", 0), ("segment", 1)]


def test_18_1_reports_a_replay_that_raises(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)

    def boom(segments, breaks):
        raise RuntimeError("boom")

    assert not run("18.1", 18, replay=boom).passed
    assert not run("18.1", 18, replay=3).passed


def test_18_2_accepts_the_smallest_break_and_refuses_the_others(strict):
    assert run("18.2", 18, mark="quantize").passed
    assert run("18.2", 18, mark=["quantize", "dynamic_scale"]).passed   # nested: no more eager
    for wrong in ("dynamic_scale", "layer", "mlp", ["quantize", "mlp"], "attention", ...):
        with pytest.raises(StrictExerciseError):
            run("18.2", 18, mark=wrong)


def test_18_3_is_graded_by_the_record_and_open_without_one(strict, capsys, monkeypatch):
    assert run("18.3", 18, why="c", pool="d", idle_step="faster", rec=None).passed
    assert "no lora_graphs_small record" in capsys.readouterr().out
    with pytest.raises(StrictExerciseError):
        run("18.3", 18, why="a", pool="b", idle_step="slower", rec=None)
    with pytest.raises(StrictExerciseError):
        run("18.3", 18, why="c", pool="e", idle_step="slower", rec=None)
    d = lora_data(monkeypatch)   # 22 / 2 MiB
    assert n18.pool_band(1.4) == "b" and n18.pool_band(3.0) == "d"
    assert run("18.3", 18, why="c", pool="d", idle_step="slower", rec=d).passed
    for pool in ("b", "c"):
        with pytest.raises(StrictExerciseError):
            run("18.3", 18, why="c", pool=pool, idle_step="slower", rec=d)
    with pytest.raises(StrictExerciseError):
        run("18.3", 18, why="c", pool="d", idle_step="no clear difference", rec=d)
    edge = lora_data(monkeypatch, {"plain": 4 * MiB, "lora": 6 * MiB, "both": 6 * MiB})
    assert run("18.3", 18, why="c", pool="b", idle_step="slower", rec=edge).passed   # 1.5:
    assert run("18.3", 18, why="c", pool="c", idle_step="slower", rec=edge).passed   # either side


def _errors(sizes, vllm_bytes, grown, kept, measured):
    s, n = sorted(sizes), len(sizes)
    vllm = vllm_bytes[0] + (n - 1) * max(vllm_bytes[1], MiB) if n > 1 else vllm_bytes[0]
    if n == 1:
        labkit = grown[0]
    else:
        k_hi, k_lo = kept if kept is not None else (0, 0)
        labkit = grown[0] + grown[1] + sum(k_lo + (k_hi - k_lo) * (b - s[0]) / (s[-1] - s[0])
                                           for b in s[1:-1])
    return 100 * (vllm - measured) / measured, 100 * (labkit - measured) / measured


def test_18_4_accepts_both_errors_and_refuses_each_slip(strict):
    assert run("18.4", 18, errors=_errors).passed
    no_floor = lambda s, v, g, k, m: (100 * (v[0] + (len(s) - 1) * v[-1] - m) / m,  # noqa: E731
                                      _errors(s, v, g, k, m)[1])
    sum_of_graphs = lambda s, v, g, k, m: (_errors(s, v, g, k, m)[0],  # noqa: E731
                                           100 * (g[0] * len(s) - m) / m)
    for bug in (no_floor, sum_of_graphs, lambda *a: None):
        with pytest.raises(StrictExerciseError):
            run("18.4", 18, errors=bug)


# ---------------------------------------------------------------------- the notebook


def _reference(name: str, data: dict) -> dict:
    env = json.loads((ROOT / "data" / "reference" / "h200" / "triton_gpt2.json").read_text())
    return {"schema": env["schema"], "name": name, "created": "2026-01-01T00:00:00+00:00",
            "params": {}, "env": {**env["env"], "gpu_name": "stand-in"},
            "data": to_jsonable(data)}


@pytest.mark.slow
def test_the_notebook_runs_with_records_present(tmp_path, monkeypatch):
    """Notebook 18's solution on a data folder holding stand-in records for the small preset
    (the WHILE record for gpt2 a verdict): every record cell and statement runs, and a verdict
    the records contradict would fail it."""
    from test_while_loop import SUPPORT

    folder = tmp_path / "data" / "reference" / "h200"
    folder.mkdir(parents=True)
    with monkeypatch.context() as m:
        records = {"breakable_small": breakable_data(m), "while_decode_small": while_data(m),
                   "lora_graphs_small": lora_data(m), "graph_memory_small": graph_memory_data(m)}
    with monkeypatch.context() as m:
        m.setattr(wd, "make_model", lambda *a, **kw: pytest.fail("nothing is built"))
        records["while_decode_gpt2"] = while_data(m, support={
            **SUPPORT, "routes": [], "route": None, "missing": ["no WHILE binding"]})
    for name, data in records.items():
        (folder / f"{name}.json").write_text(json.dumps(_reference(name, data)))
    text = run_on_references(ROOT / "notebooks" / "solutions" / "18_engines_2026.ipynb",
                             tmp_path / "data", tmp_path, monkeypatch, strict=True)
    for name in records:
        assert f"no H200 reference recorded yet for {name}" not in text
    assert "no H200 reference recorded yet for breakable_gpt2" in text
    assert "checked: small, batch 1: the step with 2 breaks is slower than FULL" in text
    assert "checked: small, batch 1, k = 4, early stop: the WHILE node is faster than the " \
           "host loop" in text
    assert "checked: gpt2: no route on the GPU machine" in text
    assert "checked: small: labkit's estimate lies within 10%" in text
    assert "checked: small, paged: the rows change the graphs' pool" in text
    assert "[TODO]" not in text and "[PASS] 18.3" in text


def test_percents_are_signed_one_per_run():
    assert le.percents([-72.72727, None, 3.05]) == "-72.7%, +3.0%"
    assert le.percents([None]) == "n/a"
