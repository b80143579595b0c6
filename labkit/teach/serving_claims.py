"""Seed 001's serving claims, checked against labkit's serving records (notebook 13).

Seed 001 (one of the three seed articles; its text is not in the repository, the figures are
as quoted in issue 12) claims that CUDA graphs cut **P99 latency from 210 ms to 43 ms**, give
**3.2x the QPS**, and proposes **monitoring** (graph hit rate) with a **circuit breaker** that
turns graphs off when the hit rate collapses. Each check reads records only:

* :func:`check_p99` — eager vs graph P99 of TTFT, TPOT and E2EL (``serve_eager``,
  ``serve_full``);
* :func:`check_qps` — the capacity (most requests/s served) of graphs vs eager on the
  latency–load curve (``serving_load_<preset>``);
* :func:`check_breaker` — the same bursty trace with graph misses, without and with the
  breaker (``serve_capped``, ``serve_breaker``).

Verdicts are those of :mod:`labkit.teach.claims` (``holds``, ``partly``, ``false``,
``depends``, ``untested``), and so is the evaluation (:func:`evaluate_serving` runs
:func:`labkit.teach.claims.evaluate`: a claim whose records are missing is ``untested``, with
the missing records named). The only numbers typed in here are the seed's and the tolerances.
"""

from __future__ import annotations

from typing import Any, Mapping

from labkit.teach.claims import Assessment, Claim, evaluate
from labkit.teach.lessons.serving import capacity, ratio

#: seed 001's figures: P99 latency without and with graphs (ms) and the QPS factor
SEED_001_P99_MS = (210.0, 43.0)
SEED_001_QPS = 3.2
#: a measured factor within this share of the claimed one counts as "the same"
FACTOR_TOL = 0.2
#: the breaker "helps" when it cuts TPOT p99 by more than this share without losing throughput
BREAKER_GAIN = 0.05
P99_KEYS = ("ttft_ms.p99", "tpot_ms.p99", "e2el_ms.p99")
#: where the claims come from (a claim's ``origin``)
ORIGIN = "seed 001, as quoted in issue 12 (the article is not stored here)"


def check_p99(records: Mapping[str, Any]) -> Assessment:
    """Eager P99 / graph P99 for TTFT, TPOT and E2EL against the claimed 210/43 = 4.9x."""
    eager, graph = records.get("serve_eager"), records.get("serve_full")
    if eager is None or graph is None:
        return Assessment("untested", {}, "needs serve_eager and serve_full records")
    claimed = SEED_001_P99_MS[0] / SEED_001_P99_MS[1]
    per = {k: ratio(eager, graph, k) for k in P99_KEYS}
    got = {k: v["ratio"] for k, v in per.items() if v["ratio"] is not None}
    evidence = {"claimed_factor": claimed, "claimed_ms": list(SEED_001_P99_MS),
                "factors": per}
    if not got:
        return Assessment("untested", evidence, "the records hold no P99 latencies")
    close = [k for k, r in got.items() if r >= claimed * (1 - FACTOR_TOL)]
    text = ", ".join(f"{k.split('_')[0].upper()} {r:.1f}x" for k, r in got.items())
    if all(r < 1.2 for r in got.values()):
        verdict, why = "false", "graphs do not cut the P99 latencies here"
    elif len(close) == len(got):
        verdict, why = "holds", "every P99 falls at least as much as claimed"
    elif close:
        verdict, why = "depends", ("the factor depends on which latency is meant: "
                                   + ", ".join(k.split("_")[0].upper() for k in close)
                                   + " reach the claimed factor, the others do not")
    else:
        verdict, why = "partly", "right in direction, smaller than claimed"
    return Assessment(verdict, evidence,
                      f"claimed {SEED_001_P99_MS[0]:.0f} -> {SEED_001_P99_MS[1]:.0f} ms "
                      f"({claimed:.1f}x, latency not named); measured eager/graph P99: {text}. "
                      f"{why}. The milliseconds belong to labkit's "
                      f"{getattr(graph, 'data', graph).get('preset', 'tiny')} model, not to the "
                      "seed's (unnamed) one, so only the factor is compared.")


def check_qps(records: Mapping[str, Any]) -> Assessment:
    """Graph capacity / eager capacity (most requests/s served on the load curve) against
    the claimed 3.2x."""
    load = next((v for k, v in records.items() if k.startswith("serving_load_")), None)
    if load is None:
        return Assessment("untested", {}, "needs a serving_load_<preset> record")
    eager, graph = capacity(load, "eager"), capacity(load, "full")
    evidence = {"claimed_factor": SEED_001_QPS, "eager": eager, "graph": graph}
    if not eager["req_per_s"] or not graph["req_per_s"]:
        return Assessment("untested", evidence, "the load curve has no throughput")
    f = graph["req_per_s"] / eager["req_per_s"]
    evidence["factor"] = f
    bound = "" if graph["saturated"] else (" (graphs never saturated on this curve: the "
                                            "factor is a lower bound)")
    if f < 1.2 and graph["saturated"]:
        verdict = "false"
    elif f >= SEED_001_QPS * (1 - FACTOR_TOL):
        verdict = "holds"
    elif not graph["saturated"]:
        verdict = "depends"
    else:
        verdict = "partly"
    return Assessment(verdict, evidence,
                      f"claimed {SEED_001_QPS}x QPS; measured capacity: eager "
                      f"{eager['req_per_s']:.1f} req/s, graphs {graph['req_per_s']:.1f} req/s "
                      f"= {f:.1f}x{bound}. Prefill runs eager in both modes, so graphs raise "
                      "only the decode part of the capacity.")


def check_breaker(records: Mapping[str, Any]) -> Assessment:
    """Does the circuit breaker help on a trace where graphs miss (batches above the
    largest captured size)? Compares TPOT p50/p99 and output throughput with and without."""
    off, on = records.get("serve_capped"), records.get("serve_breaker")
    if off is None or on is None:
        return Assessment("untested", {}, "needs serve_capped and serve_breaker records")
    d_off, d_on = getattr(off, "data", off), getattr(on, "data", on)
    trips = len(d_on.get("breaker_trips_s") or [])
    r99 = ratio(on, off, "tpot_ms.p99")["ratio"]
    r50 = ratio(on, off, "tpot_ms.median")["ratio"]
    rt = ratio(on, off, "output_throughput")["ratio"]
    evidence = {"trips": trips, "tpot_p99_on_over_off": r99, "tpot_p50_on_over_off": r50,
                "throughput_on_over_off": rt,
                "hit_rate": {"off": d_off["metrics"].get("graph_hit_rate"),
                             "on": d_on["metrics"].get("graph_hit_rate")}}
    if None in (r99, r50, rt):
        return Assessment("untested", evidence, "the records hold no TPOT or throughput")
    helps = r99 < 1 - BREAKER_GAIN and rt >= 1 - BREAKER_GAIN
    if trips == 0:
        verdict, why = "false", "the breaker never tripped: it changed nothing"
    elif helps:
        verdict, why = "holds", "it cut TPOT p99 without losing throughput"
    else:
        verdict, why = "false", ("it did not help: the dispatcher already runs each missed "
                                 "batch eagerly, step by step, and an open breaker also runs "
                                 "eagerly the batches a graph would have served")
    return Assessment(verdict, evidence,
                      f"breaker tripped {trips} time(s); with it TPOT p50 x{r50:.2f}, p99 "
                      f"x{r99:.2f}, output throughput x{rt:.2f} of the run without; graph hit "
                      f"rate {100 * (evidence['hit_rate']['off'] or 0):.0f}% -> "
                      f"{100 * (evidence['hit_rate']['on'] or 0):.0f}%. {why}.")


SERVING_CLAIMS: tuple[Claim, ...] = (
    Claim("001-p99", "CUDA graphs cut P99 latency from 210 ms to 43 ms",
          "eager vs padded graphs on the same trace, P99 of TTFT / TPOT / E2EL",
          ("serve_eager", "serve_full"), check_p99, origin=ORIGIN,
          context="seed 001; the article does not say which latency its P99 is"),
    Claim("001-qps", "CUDA graphs give 3.2x the QPS",
          "most requests/s served on the latency–load curve, graphs vs eager",
          ("serving_load_gpt2",), check_qps, context="seed 001", origin=ORIGIN),
    Claim("001-breaker", "a circuit breaker that turns graphs off when the hit rate collapses "
          "keeps latency safe", "bursty trace with graph misses, breaker off vs on",
          ("serve_capped", "serve_breaker"), check_breaker, context="seed 001",
          origin=ORIGIN),
)


def evaluate_serving(records: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per :data:`SERVING_CLAIMS` entry, as :func:`labkit.teach.claims.evaluate`
    gives it (id, claim, measurement, records, verdict, evidence, explanation ...): a claim
    whose records are missing from ``records`` is ``untested``, its explanation naming them."""
    return [evaluate(c, records) for c in SERVING_CLAIMS]
