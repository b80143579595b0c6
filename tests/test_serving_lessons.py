"""Notebook 13's pure helpers on hand-made records: per-run values and their comparison, the
mode table, TPOT/TTFT from timestamps, seed 001's verdicts (weak evidence refused) and the
charts."""

from __future__ import annotations

import pytest

from labkit.measure.results import load_reference
from labkit.teach import serving as ls
from labkit.teach import serving as ps
from labkit.teach.verdicts import CANNOT


def metrics(ttft50: float, tpot99: float, out: float, hit: float = 1.0,
            busy: float | None = None) -> dict:
    m = {"completed": 10, "total_output": 100, "duration_s": 1.0,
         "ttft_ms": {"mean": ttft50, "median": ttft50, "p90": ttft50, "p99": 2 * ttft50},
         "tpot_ms": {"mean": 1.0, "median": tpot99 / 2, "p90": tpot99, "p99": tpot99},
         "itl_ms": {"mean": 1.0, "median": 1.0, "p90": 1.0, "p99": tpot99},
         "e2el_ms": {"mean": 1.0, "median": 1.0, "p90": 1.0, "p99": 10 * tpot99},
         "output_throughput": out, "request_throughput": out / 10, "steps": 5,
         "graph_hit_rate": hit, "padded_waste": 0.1, "eager_fallbacks": 0}
    if busy is not None:
        m["gpu_busy_share"] = busy
    return m


def serve(mode: str, runs: list[dict], *, breaker=None, trips=()) -> dict:
    return {"mode": mode, "trace": "t", "clock": "real", "requests": [], "steps": [],
            "metrics": runs[0], "repeats": runs, "breaker": breaker,
            "breaker_trips_s": list(trips),
            "windows": [{"start_s": 0.0, "steps": 3, "graph_hit_rate": runs[0]["graph_hit_rate"],
                         "padded_waste": 0.1, "eager_fallbacks": 1, "mean_batch": 4.0}]}


def ab(arms: dict[str, dict]) -> dict:
    first = next(iter(arms.values()))
    return {**first, "interleaved": True, "warmup_runs": 1, "arms": arms,
            "order": [list(arms)] * len(first["repeats"])}


EAGER = serve("eager", [metrics(250, 24, 1100, 0.0), metrics(7, 6.5, 1360, 0.0),
                        metrics(7, 5.1, 1360, 0.0)])
FULL = serve("full", [metrics(6, 1.6, 1550), metrics(6, 1.5, 1540), metrics(10, 2.4, 1540)])


def test_runs_of_reads_every_recorded_run():
    assert ls.runs_of(EAGER, "ttft_ms.median") == [250, 7, 7]
    old = {**FULL, "repeats": []}      # an older record: its metrics are its one run
    assert ls.runs_of(old, "tpot_ms.p99") == [1.6]
    assert ls.runs_of(EAGER, "gpu_busy_share") == []


def test_compare_refuses_separate_records_and_one_run():
    d = ls.compare(FULL, EAGER, "tpot_ms.p99", interleaved=False)
    assert d.word == "untested (not interleaved)" and d.ratio == pytest.approx(1.6 / 6.5)
    assert ls.compare(FULL, EAGER, "tpot_ms.p99", interleaved=True).word == "a lower"
    one = serve("full", [metrics(6, 1.6, 1550)])
    assert ls.compare(one, EAGER, "tpot_ms.p99", interleaved=True).word == "untested (1 run)"


def test_mode_rows_show_medians_with_spread():
    rows = ls.mode_rows({"serve_eager": EAGER, "serve_full": FULL})
    assert rows[0]["runs"] == "3" and rows[0]["TTFT p50 ms"] == "7.00 (7.00–250.00)"
    assert rows[1]["TPOT p99 ms"] == "1.60 (1.50–2.40)" and rows[1]["breaker"] == "off"
    assert rows[0]["graph hit"] == "0%" and rows[1]["padded waste"] == "10.0%"


def test_tpot_and_ttft_from_timestamps():
    assert ls.tpot_of([1.0, 1.5, 2.5]) == pytest.approx(0.75)
    assert ls.tpot_of([1.0]) is None
    assert ls.ttft_of(0.25, [1.0, 2.0]) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="no token"):
        ls.ttft_of(0.0, [])


def test_breaker_verdict_refuses_one_run_and_separate_records():
    off = serve("full", [metrics(393, 17.8, 966, 0.72)])
    on = serve("full", [metrics(7.7, 5.4, 1170, 0.80)], breaker={"window": 32}, trips=[3.6])
    a = ls.check_breaker({"serve_capped": off, "serve_breaker": on})
    assert a.verdict == "untested (1 run)" and a.evidence["runs"] == 1
    assert a.evidence["trips"] == 1 and not a.evidence["interleaved"]
    assert a.evidence["hit_rate"] == {"off": 0.72, "on": 0.80}


@pytest.mark.parametrize("on_tpot, trips, verdict", [
    ([5.0, 5.2, 5.1], [1.0], "holds"),      # measurably lower TPOT p99, it tripped
    ([9.0, 9.5, 9.2], [1.0], "false"),      # measurably higher
    ([7.0, 8.5, 7.5], [1.0], "false"),      # inside the spread: no difference measured
    ([5.0, 5.2, 5.1], [], "false"),         # lower, but it never tripped: not its doing
])
def test_breaker_verdict_on_interleaved_arms(on_tpot, trips, verdict):
    off = serve("full", [metrics(7, v, 1000) for v in (8.0, 8.2, 7.9)])
    on = serve("full", [metrics(7, v, 1000) for v in on_tpot], breaker={"window": 32},
               trips=trips)
    a = ls.check_breaker({"serve_breaker_ab": ab({"breaker off": off, "breaker on": on})})
    assert a.verdict == verdict and a.evidence["interleaved"] and a.evidence["runs"] == 3


def test_p99_claim_cannot_be_checked_and_graphs_alone_need_interleaving():
    a = ls.check_graphs_p99({"serve_eager": EAGER, "serve_full": FULL})
    assert a.verdict == CANNOT
    assert set(a.evidence["graphs_alone_verdict"].values()) == {"untested (not interleaved)"}
    a = ls.check_graphs_p99({"serve_graphs_ab": ab({"eager": EAGER, "full": FULL})})
    assert a.verdict == CANNOT and a.evidence["interleaved"]
    assert a.evidence["graphs_alone_verdict"]["tpot_ms.p99"] == "holds"


def test_gpu_busy_claim_untested_until_recorded_then_not_checkable():
    """The records time decode steps (CUDA events around each step, an eager step's idle gaps
    included), not the kernels' running time that utilisation counts: the claim cannot be
    checked; the comparison of the step share is kept as evidence."""
    assert ls.check_gpu_busy({}).verdict == "untested (not recorded)"
    assert ls.check_gpu_busy({"serve_eager": EAGER, "serve_full": FULL}).verdict == \
        "untested (not recorded)"
    e = serve("eager", [metrics(7, 6, 1000, 0.0, busy=b) for b in (0.60, 0.58, 0.61)])
    f = serve("full", [metrics(6, 1.6, 1500, busy=b) for b in (0.30, 0.29, 0.33)])
    both = ls.check_gpu_busy({"serve_graphs_ab": ab({"eager": e, "full": f})})
    assert both.verdict == CANNOT and both.evidence["difference"].word == "a lower"
    swapped = ls.check_gpu_busy({"serve_graphs_ab": ab({"eager": f, "full": e})})
    assert swapped.verdict == CANNOT and swapped.evidence["difference"].word == "a higher"
    apart = ls.check_gpu_busy({"serve_eager": e, "serve_full": f})
    assert apart.verdict == CANNOT and \
        apart.evidence["difference"].word == "untested (not interleaved)"


def test_the_h200_references_verdicts():
    recs = {n: load_reference(n) for n in ("serve_eager", "serve_full", "serve_capped",
                                           "serve_breaker")}
    # separate records: one run each (breaker), not interleaved (graphs vs eager)
    assert ls.check_breaker(recs).verdict == "untested (1 run)"
    gpu = ls.check_gpu_busy(recs)
    assert gpu.verdict == CANNOT and gpu.evidence["difference"].word == "untested (not interleaved)"
    p99 = ls.check_graphs_p99(recs)
    assert p99.verdict == CANNOT and not p99.evidence["interleaved"]
    # recorded after a discarded warm-up run: no cold first run left
    ttft = ls.runs_of(recs["serve_eager"], "ttft_ms.median")
    assert max(ttft) < 2 * min(ttft)
    # the interleaved records decide
    recs.update({n: load_reference(n) for n in ("serve_graphs_ab", "serve_breaker_ab")})
    brk = ls.check_breaker(recs)
    assert brk.verdict == "false" and brk.evidence["runs"] == 3
    assert brk.evidence["differences"]["ttft_ms.median"].word == "a higher"
    gpu = ls.check_gpu_busy(recs)
    assert gpu.verdict == CANNOT and gpu.evidence["difference"].word == "a lower"


def test_load_rows():
    pts = [{"mode": m, "rate": r, "metrics": metrics(10, 2, t)}
           for m, tp in (("eager", (9, 20)), ("full", (10, 70))) for r, t in zip((10.0, 100.0), tp)]
    rows = ls.load_rows({"modes": ["eager", "full"], "rates": [10.0, 100.0], "points": pts})
    assert [(r["mode"], r["offered req/s"], r["served req/s"]) for r in rows] == [
        ("eager", "10", "0.90"), ("eager", "100", "2.00"), ("full", "10", "1.00"),
        ("full", "100", "7.00")]


def test_charts_build():
    pts = [{"mode": m, "rate": r, "metrics": metrics(10, 2, t)}
           for m, tp in (("eager", (9, 20)), ("full", (10, 70))) for r, t in zip((10.0, 100.0), tp)]
    fig = ps.latency_load_chart({"modes": ["eager", "full"], "rates": [10.0, 100.0],
                                 "points": pts})
    assert len(fig.data) == 5  # 2 modes x 2 panels + the diagonal
    brk = serve("full", [metrics(1, 1, 1)], breaker={"w": 1}, trips=[0.1, 0.2])
    assert len(ps.monitoring_chart({"eager": EAGER, "breaker": brk}).data) == 7
    fig = ps.runs_chart({"e": EAGER, "f": FULL}, "ttft_ms.median")
    assert [list(t.y) for t in fig.data] == [[250, 7, 7], [6, 6, 10]]
    with pytest.raises(ValueError, match="no runs"):
        ps.monitoring_chart({})
