"""Rows and ratios of notebook 13 (serving under load), from ``serve_<name>`` and
``serving_load_<preset>`` records (pure: it reads records, it runs nothing).

* :func:`mode_rows` — one table row per run: TTFT/TPOT/ITL/E2EL percentiles, throughput,
  graph hit rate, padded waste, eager fallbacks (with the spread over repeated runs);
* :func:`ratio` — a ratio of two runs' metric with the range the repeated runs allow;
* :func:`capacity` — the most requests per second a mode served on the latency–load curve,
  and whether the top rate saturated it;
* :func:`load_rows`, :func:`tpot_of` (TPOT from token timestamps, as vLLM defines it).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from labkit.measure.records import Serve, ServeLoad, view
from labkit.teach.lessons import record_data

__all__ = ["metric", "spread_of", "mode_rows", "ratio", "capacity", "load_rows", "tpot_of",
           "ttft_of", "served_line", "HEADLINE"]

#: (column, dotted metric key) of the mode table
HEADLINE: tuple[tuple[str, str], ...] = (
    ("TTFT p50 ms", "ttft_ms.median"), ("TTFT p99 ms", "ttft_ms.p99"),
    ("TPOT p50 ms", "tpot_ms.median"), ("TPOT p99 ms", "tpot_ms.p99"),
    ("ITL p99 ms", "itl_ms.p99"), ("E2EL p99 ms", "e2el_ms.p99"),
    ("out tok/s", "output_throughput"), ("req/s", "request_throughput"))


def metric(metrics: Mapping[str, Any], key: str) -> float | None:
    """A metric by dotted key (``'tpot_ms.p99'``); ``None`` when absent."""
    v: Any = metrics
    for part in key.split("."):
        if not isinstance(v, Mapping) or part not in v:
            return None
        v = v[part]
    return None if v is None else float(v)


def spread_of(record: Any, key: str) -> tuple[float, float, float] | None:
    """(min, median, max) of ``key`` over a record's repeated runs (``None``: one run or no
    spread stored; the median of one run is its value)."""
    d = record_data(record)
    runs = d.get("repeats") or []
    vals = sorted(v for v in (metric(m, key) for m in runs) if v is not None)
    if len(vals) < 2:
        return None
    mid = len(vals) // 2
    med = vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2
    return vals[0], med, vals[-1]


def _value(record: Any, key: str) -> float | None:
    s = spread_of(record, key)
    return s[1] if s else metric(record_data(record)["metrics"], key)


def _fmt(v: float | None, spread: tuple[float, float, float] | None) -> str:
    if v is None:
        return "-"
    digits = 1 if abs(v) >= 10 else 2
    text = f"{v:.{digits}f}"
    return text if spread is None else f"{text} ({spread[0]:.{digits}f}–{spread[2]:.{digits}f})"


def mode_rows(records: Mapping[str, Any]) -> list[dict[str, str]]:
    """One row per ``name -> serve record``: mode, breaker, the :data:`HEADLINE` metrics
    (median over repeated runs, with min–max when there are several), graph hit rate, padded
    waste and eager fallbacks of the kept run."""
    rows = []
    for name, rec in records.items():
        d = record_data(rec)
        view(d, Serve)  # checks the fields
        m = d["metrics"]
        brk = "on" if d.get("breaker") else "off"
        row = {"run": name, "mode": d["mode"], "breaker": brk,
               "runs": str(max(1, len(d.get("repeats") or [])))}
        for col, key in HEADLINE:
            row[col] = _fmt(_value(rec, key), spread_of(rec, key))
        row["graph hit"] = f"{100 * m.get('graph_hit_rate', 0.0):.0f}%"
        row["padded waste"] = f"{100 * m.get('padded_waste', 0.0):.1f}%"
        row["eager fallbacks"] = str(m.get("eager_fallbacks", 0))
        rows.append(row)
    return rows


def served_line(name: str, record: Any, arrivals_s: float | None = None) -> str:
    """One line of a serve record: requests completed, tokens and the time the run took to
    serve them (its ``duration_s``, from the first arrival to the last token), against the
    span of the trace's arrivals when given: did the mode keep up with the traffic?"""
    d = record_data(record)
    view(d, Serve)
    m = d["metrics"]
    line = (f"{name} ({d['mode']}): {m['completed']} requests, {m['total_output']:,} tokens "
            f"served in {m['duration_s']:.1f} s")
    if arrivals_s:
        line += (f" for {arrivals_s:.1f} s of arrivals ({m['duration_s'] - arrivals_s:+.1f} s "
                 f"after the last arrival)")
    return line


def ratio(numerator: Any, denominator: Any, key: str) -> dict[str, float | None]:
    """``numerator / denominator`` of metric ``key`` (medians over repeated runs) and the
    range the repeats allow (``low`` = min/max, ``high`` = max/min); ``None`` when missing."""
    a, b = _value(numerator, key), _value(denominator, key)
    if a is None or b is None or b == 0:
        return {"ratio": None, "low": None, "high": None}
    sa, sb = spread_of(numerator, key), spread_of(denominator, key)
    lo_a, hi_a = (sa[0], sa[2]) if sa else (a, a)
    lo_b, hi_b = (sb[0], sb[2]) if sb else (b, b)
    return {"ratio": a / b, "low": lo_a / hi_b if hi_b else None,
            "high": hi_a / lo_b if lo_b else None}


def capacity(load: Any, mode: str) -> dict[str, Any]:
    """The highest request throughput ``mode`` reached over the load curve, the rate it was
    reached at, and whether the top rate saturated the mode (it served below 90% of the
    offered rate, so the figure is its capacity, not a lower bound)."""
    rec = view(load, ServeLoad)
    if mode not in rec.modes:
        raise ValueError(f"mode {mode!r} is not in this load curve; it has {rec.modes}")
    tput = rec.series(mode, "request_throughput")
    pairs = [(t, r) for t, r in zip(tput, rec.rates) if t is not None]
    if not pairs:
        return {"mode": mode, "req_per_s": None, "at_rate": None, "saturated": False}
    best, at = max(pairs)
    top_tput = tput[-1]
    saturated = top_tput is not None and top_tput < 0.9 * rec.rates[-1]
    return {"mode": mode, "req_per_s": best, "at_rate": at, "saturated": saturated}


def load_rows(load: Any) -> list[dict[str, str]]:
    """One row per (mode, rate) of a load curve: offered rate, served req/s, TTFT and TPOT
    p50/p99."""
    rec = view(load, ServeLoad)
    rows = []
    for p in rec.points:
        m = p.metrics
        row = {"mode": p.mode, "offered req/s": f"{p.rate:g}"}
        for col, key in (("served req/s", "request_throughput"), ("TTFT p50 ms", "ttft_ms.median"),
                         ("TTFT p99 ms", "ttft_ms.p99"), ("TPOT p50 ms", "tpot_ms.median"),
                         ("TPOT p99 ms", "tpot_ms.p99")):
            row[col] = _fmt(metric(m, key), None)
        rows.append(row)
    return rows


def tpot_of(token_times_s: Sequence[float]) -> float | None:
    """TPOT in seconds as vLLM's benchmark defines it: (last - first token time) / (tokens -
    1); ``None`` for a single token."""
    t = [float(x) for x in token_times_s]
    if len(t) < 2:
        return None
    return (t[-1] - t[0]) / (len(t) - 1)


def ttft_of(arrival_s: float, token_times_s: Sequence[float]) -> float:
    """TTFT in seconds: the first token's time minus the arrival."""
    if not token_times_s:
        raise ValueError("no token times: the request produced no token")
    return float(token_times_s[0]) - float(arrival_s)
