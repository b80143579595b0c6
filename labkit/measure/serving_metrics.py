"""Serving metrics of a run, as vLLM's serving benchmark reports them.

Definitions follow ``BenchmarkMetrics`` in ``vllm/benchmarks/serve.py``, per request with
arrival time ``a``, token times ``t_0 .. t_{n-1}`` (seconds from the start of the run):

* TTFT (time to first token) = ``t_0 - a``;
* TPOT (time per output token, first token excluded) = ``(t_{n-1} - t_0) / (n - 1)``,
  for requests with ``n > 1``;
* ITL (inter-token latency) = every gap ``t_k - t_{k-1}``, pooled over all requests;
* E2EL (end-to-end latency) = ``t_{n-1} - a``;
* output (request) throughput = output tokens (requests) / the time of the last token.

Each latency is summarised by mean, median, P90 and P99 in ms (NumPy's linear percentiles, as
vLLM). Pure functions of a run's data.
"""

from __future__ import annotations

import itertools
import math
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

PERCENTILES = (50, 90, 99)


def summarize(values_s: Sequence[float]) -> dict[str, float | None]:
    """``mean``, ``median``, ``p90``, ``p99`` of ``values_s`` (seconds) in ms."""
    if len(values_s) == 0:
        return {"mean": None, "median": None, "p90": None, "p99": None}
    ms = np.asarray(values_s, dtype=float) * 1e3
    p50, p90, p99 = (float(np.percentile(ms, q)) for q in PERCENTILES)
    return {"mean": float(ms.mean()), "median": p50, "p90": p90, "p99": p99}


def _get(r: Any, key: str) -> Any:
    return r[key] if isinstance(r, Mapping) else getattr(r, key)


def _tokens(s: Any) -> int:
    """A step's real tokens (records before chunked prefill: one a row, ``batch``)."""
    v = s.get("tokens") if isinstance(s, Mapping) else getattr(s, "tokens", None)
    return int(_get(s, "batch") if v is None else v)


def latencies(requests: Sequence[Any]) -> dict[str, list[float]]:
    """Per-request TTFT, TPOT, E2EL and the pooled ITL gaps (s); requests without a token
    left out."""
    out: dict[str, list[float]] = {"ttft": [], "tpot": [], "itl": [], "e2el": []}
    for i, r in enumerate(requests):
        a, times = float(_get(r, "arrival_s")), [float(t) for t in _get(r, "token_times_s")]
        if not times:
            continue
        if any(b < a_ for a_, b in itertools.pairwise(times)) or times[0] < a:
            raise ValueError(f"request {i}: token times {times} go back in time or start before "
                             f"its arrival {a}; give times in order, after the arrival")
        out["ttft"].append(times[0] - a)
        out["e2el"].append(times[-1] - a)
        if len(times) > 1:
            out["tpot"].append((times[-1] - times[0]) / (len(times) - 1))
            out["itl"].extend(b - a_ for a_, b in itertools.pairwise(times))
    return out


def request_metrics(requests: Sequence[Any]) -> dict[str, Any]:
    """vLLM's request-level metrics: counts, ``duration_s``, throughputs and the ``ttft_ms``,
    ``tpot_ms``, ``itl_ms``, ``e2el_ms`` summaries."""
    lat = latencies(requests)
    done = [r for r in requests if len(_get(r, "token_times_s"))]
    total = sum(len(_get(r, "token_times_s")) for r in done)
    duration = max((float(_get(r, "token_times_s")[-1]) for r in done), default=0.0)
    rate = (lambda n: n / duration) if duration > 0 else (lambda n: None)
    return {"completed": len(done), "total_output": total, "duration_s": duration,
            "request_throughput": rate(len(done)), "output_throughput": rate(total),
            **{f"{k}_ms": summarize(v) for k, v in lat.items()}}


def step_windows(steps: Sequence[Any], window_s: float) -> list[dict[str, Any]]:
    """Steps cut into windows of ``window_s`` seconds (by start time): per non-empty window
    ``start_s``, ``steps``, ``graph_hit_rate``, ``padded_waste``, ``eager_fallbacks``,
    ``mean_batch``."""
    if isinstance(window_s, bool) or not isinstance(window_s, (int, float)) \
            or not math.isfinite(window_s) or window_s <= 0:
        raise ValueError(f"window_s must be a positive number of seconds, got {window_s!r}")
    bins: dict[int, list[Any]] = {}
    for s in steps:
        bins.setdefault(int(float(_get(s, "start_s")) // window_s), []).append(s)
    out = []
    for k in sorted(bins):
        ss = bins[k]
        rows = sum(int(_get(s, "batch")) for s in ss)
        real = sum(_tokens(s) for s in ss)
        computed = sum(int(_get(s, "padded")) for s in ss)
        hits = sum(bool(_get(s, "graph")) for s in ss)
        out.append({"start_s": k * window_s, "steps": len(ss), "graph_hit_rate": hits / len(ss),
                    "padded_waste": (computed - real) / computed if computed else 0.0,
                    "eager_fallbacks": len(ss) - hits, "mean_batch": rows / len(ss)})
    return out


def run_metrics(requests: Sequence[Any], steps: Sequence[Any]) -> dict[str, Any]:
    """:func:`request_metrics` plus the whole run's ``steps``, ``graph_hit_rate``,
    ``padded_waste`` and ``eager_fallbacks``."""
    real = sum(_tokens(s) for s in steps)
    computed = sum(int(_get(s, "padded")) for s in steps)
    hits = sum(bool(_get(s, "graph")) for s in steps)
    return {**request_metrics(requests), "steps": len(steps),
            "graph_hit_rate": hits / len(steps) if steps else 0.0,
            "padded_waste": (computed - real) / computed if computed else 0.0,
            "eager_fallbacks": len(steps) - hits}


def gpu_busy(step_ms: Sequence[float] | None, duration_s: float) -> dict[str, Any]:
    """``gpu_busy_s``, ``gpu_busy_share`` of ``duration_s`` and ``gpu_step_ms`` from each
    decode step's GPU ms (``None``: not timed, then ``{}``)."""
    if step_ms is None:
        return {}
    busy = float(sum(step_ms)) / 1e3
    return {"gpu_busy_s": busy, "gpu_busy_share": busy / duration_s if duration_s > 0 else None,
            "gpu_step_ms": summarize([float(v) / 1e3 for v in step_ms])}
