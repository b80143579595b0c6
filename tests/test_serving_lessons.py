"""Notebook 13's pure helpers on hand-made records: the mode table, ratios with the spread of
repeated runs, capacity on a load curve, TPOT/TTFT from timestamps, seed 001's verdicts and the
charts."""

from __future__ import annotations

import copy

import pytest

from labkit.teach import claims, serving_claims as sc
from labkit.teach.lessons import serving as ls
from labkit.teach.plots import serving as ps


def metrics(ttft99: float, tpot50: float, tpot99: float, e2el99: float, out: float,
            req: float, hit: float = 1.0, waste: float = 0.0, fallbacks: int = 0) -> dict:
    return {"completed": 10, "total_output": 100, "duration_s": 1.0,
            "ttft_ms": {"mean": 1.0, "median": 1.0, "p90": 1.0, "p99": ttft99},
            "tpot_ms": {"mean": tpot50, "median": tpot50, "p90": tpot99, "p99": tpot99},
            "itl_ms": {"mean": 1.0, "median": 1.0, "p90": 1.0, "p99": tpot99},
            "e2el_ms": {"mean": 1.0, "median": 1.0, "p90": 1.0, "p99": e2el99},
            "output_throughput": out, "request_throughput": req, "steps": 5,
            "graph_hit_rate": hit, "padded_waste": waste, "eager_fallbacks": fallbacks}


def serve(mode: str, m: dict, repeats: list[dict] | None = None, *, breaker=None,
          trips=()) -> dict:
    return {"mode": mode, "trace": "t", "clock": "real", "preset": "gpt2", "requests": [],
            "steps": [], "metrics": m, "repeats": repeats or [m], "breaker": breaker,
            "breaker_trips_s": list(trips),
            "windows": [{"start_s": 0.0, "steps": 3, "graph_hit_rate": m["graph_hit_rate"],
                         "padded_waste": m["padded_waste"],
                         "eager_fallbacks": m["eager_fallbacks"], "mean_batch": 4.0}]}


EAGER = serve("eager", metrics(100, 8.0, 20.0, 900, 1000, 10, hit=0.0, fallbacks=5),
              [metrics(100, 8.0, 20.0, 900, 1000, 10), metrics(110, 9.0, 22.0, 950, 900, 9),
               metrics(90, 7.0, 18.0, 850, 1100, 11)])
FULL = serve("full", metrics(50, 1.0, 4.0, 300, 3000, 30, waste=0.1),
             [metrics(50, 1.0, 4.0, 300, 3000, 30), metrics(55, 1.1, 5.0, 320, 2900, 29),
              metrics(45, 0.9, 3.0, 280, 3100, 31)])


def load(eager_tput, full_tput, rates=(10.0, 100.0)) -> dict:
    pts = []
    for mode, tp in (("eager", eager_tput), ("full", full_tput)):
        for r, t in zip(rates, tp):
            pts.append({"mode": mode, "rate": r, "metrics": metrics(10, 1, 2, 3, 4, t)})
    return {"modes": ["eager", "full"], "rates": list(rates), "points": pts}


def test_served_line_says_how_long_a_run_took_against_its_arrivals():
    rec = copy.deepcopy(FULL)
    rec["metrics"].update(completed=2400, total_output=174791, duration_s=124.07)
    assert ls.served_line("serve_2min_full", rec) == (
        "serve_2min_full (full): 2400 requests, 174,791 tokens served in 124.1 s")
    assert ls.served_line("serve_2min_full", rec, 124.04).endswith(
        "served in 124.1 s for 124.0 s of arrivals (+0.0 s after the last arrival)")
    with pytest.raises(Exception, match="metrics"):
        ls.served_line("bad", {**rec, "metrics": None})


def test_mode_rows_show_medians_with_spread():
    rows = ls.mode_rows({"serve_eager": EAGER, "serve_full": FULL})
    assert rows[0]["TPOT p50 ms"] == "8.00 (7.00–9.00)" and rows[0]["runs"] == "3"
    assert rows[1]["graph hit"] == "100%" and rows[1]["padded waste"] == "10.0%"
    assert rows[0]["eager fallbacks"] == "5" and rows[0]["breaker"] == "off"
    one = serve("full", metrics(50, 1.0, 4.0, 300, 3000, 30), breaker={"window": 4})
    assert ls.mode_rows({"x": one})[0]["TPOT p50 ms"] == "1.00"
    assert ls.mode_rows({"x": one})[0]["breaker"] == "on"


def test_ratio_and_its_range():
    r = ls.ratio(EAGER, FULL, "tpot_ms.median")
    assert r["ratio"] == pytest.approx(8.0) and r["low"] == pytest.approx(7.0 / 1.1)
    assert r["high"] == pytest.approx(9.0 / 0.9)
    assert ls.ratio(EAGER, FULL, "nope.p99") == {"ratio": None, "low": None, "high": None}


def test_capacity_and_saturation():
    rec = load([9.0, 40.0], [10.0, 95.0])
    assert ls.capacity(rec, "eager") == {"mode": "eager", "req_per_s": 40.0, "at_rate": 100.0,
                                         "saturated": True}
    assert ls.capacity(rec, "full")["saturated"] is False
    with pytest.raises(ValueError, match="piecewise"):
        ls.capacity(rec, "piecewise")
    assert [r["served req/s"] for r in ls.load_rows(rec)] == ["9.00", "40.0", "10.0", "95.0"]


def test_tpot_and_ttft_from_timestamps():
    assert ls.tpot_of([1.0, 1.5, 2.5]) == pytest.approx(0.75)
    assert ls.tpot_of([3.0]) is None
    assert ls.ttft_of(0.5, [1.0, 2.0]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="no token"):
        ls.ttft_of(0.0, [])


def test_p99_verdicts():
    a = sc.check_p99({"serve_eager": EAGER, "serve_full": FULL})
    # TTFT 2x, TPOT 5x, E2EL 3x against 4.9x: only TPOT reaches it
    assert a.verdict == "depends" and "TPOT" in a.explanation
    strong = copy.deepcopy(FULL)
    for m in [strong["metrics"], *strong["repeats"]]:
        m["ttft_ms"]["p99"], m["e2el_ms"]["p99"] = 10.0, 100.0
    assert sc.check_p99({"serve_eager": EAGER, "serve_full": strong}).verdict == "holds"
    assert sc.check_p99({"serve_eager": EAGER, "serve_full": EAGER}).verdict == "false"
    assert sc.check_p99({"serve_eager": EAGER}).verdict == "untested"


def test_qps_verdicts():
    assert sc.check_qps({"serving_load_gpt2": load([9, 20], [10, 70])}).verdict == "holds"
    assert sc.check_qps({"serving_load_gpt2": load([9, 20], [10, 40])}).verdict == "partly"
    assert sc.check_qps({"serving_load_gpt2": load([9, 20], [10, 21])}).verdict == "false"
    # graphs never saturated: only a lower bound
    assert sc.check_qps({"serving_load_gpt2": load([9, 20], [10, 95])}).verdict == "holds"
    assert sc.check_qps({"serving_load_gpt2": load([9, 20], [10, 40], rates=(10, 42))}
                        ).verdict == "depends"
    assert sc.check_qps({}).verdict == "untested"


def test_breaker_verdicts():
    off = serve("full", metrics(50, 2.0, 9.0, 300, 1000, 10, hit=0.6))
    worse = serve("full", metrics(50, 2.5, 9.5, 300, 950, 10, hit=0.4), breaker={"w": 1},
                  trips=[0.5])
    better = serve("full", metrics(50, 2.0, 6.0, 300, 1000, 10, hit=0.6), breaker={"w": 1},
                   trips=[0.5])
    never = serve("full", metrics(50, 2.0, 9.0, 300, 1000, 10, hit=0.6), breaker={"w": 1})
    get = lambda on: sc.check_breaker({"serve_capped": off, "serve_breaker": on})  # noqa: E731
    assert get(worse).verdict == "false" and "did not help" in get(worse).explanation
    assert get(better).verdict == "holds"
    assert get(never).verdict == "false" and "never tripped" in get(never).explanation
    rows = sc.evaluate_serving({"serve_capped": off, "serve_breaker": worse})
    assert [r["verdict"] for r in rows] == ["untested", "untested", "false"]


def test_a_serving_claim_without_its_record_is_untested_and_names_it():
    off = serve("full", metrics(50, 2.0, 9.0, 300, 1000, 10, hit=0.6))
    rows = {r["id"]: r for r in sc.evaluate_serving({"serve_capped": off, "serve_eager": EAGER,
                                                     "serve_full": None})}
    for cid, missing in (("001-breaker", ["serve_breaker"]),
                         ("001-p99", ["serve_full"]),          # None counts as missing
                         ("001-qps", ["serving_load_gpt2"])):
        r = rows[cid]
        assert r["verdict"] == "untested" and r["evidence"] == {"missing": missing}
        assert all(m in r["explanation"] for m in missing)


def test_serving_rows_are_the_shared_claims_evaluation():
    recs = {"serve_eager": EAGER, "serve_full": FULL}
    rows = sc.evaluate_serving(recs)
    assert rows == [claims.evaluate(c, recs) for c in sc.SERVING_CLAIMS]
    assert rows[0]["verdict"] == sc.check_p99(recs).verdict == "depends"
    assert rows[0]["origin"] == sc.ORIGIN and rows[0]["records"] == ["serve_eager", "serve_full"]


def test_charts_build():
    fig = ps.latency_load_chart(load([9, 20], [10, 70]))
    assert len(fig.data) == 5  # 2 modes x 2 panels + the diagonal
    fig = ps.monitoring_chart({"eager": EAGER, "breaker": serve(
        "full", metrics(1, 1, 1, 1, 1, 1), breaker={"w": 1}, trips=[0.1, 0.2])})
    assert len(fig.data) == 7  # 3 panels x 2 runs + the trips
    assert len(ps.percentile_bars({"e": EAGER, "f": FULL}).data) == 2
    with pytest.raises(ValueError, match="no runs"):
        ps.monitoring_chart({})
