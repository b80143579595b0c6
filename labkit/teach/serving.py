"""Notebook 13: serving a request trace, its latencies and verdicts, and the charts.

One module per notebook topic: its lessons (pure: records and numbers to rows) and its
charts (plotly figures from records).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import statistics
from typing import Any

from labkit.measure.records import ServeLoad, view
from labkit.measure.serve import metric
from labkit.teach.lessons import record_data
from labkit.teach.plots import base_layout, plotly_go, series_colors
from labkit.teach.verdicts import Assessment, CANNOT, compare_runs, Difference, timing_verdict


# ---------------------------------------------------------------------- lessons serving
# Per-run values, rows and verdicts of notebook 13 (serving). A *run source* is a serve ...

#: (column, dotted metric key) of the mode table
HEADLINE: tuple[tuple[str, str], ...] = (
    ("TTFT p50 ms", "ttft_ms.median"), ("TTFT p99 ms", "ttft_ms.p99"),
    ("TPOT p50 ms", "tpot_ms.median"), ("TPOT p99 ms", "tpot_ms.p99"),
    ("E2EL p99 ms", "e2el_ms.p99"), ("out tok/s", "output_throughput"))


def runs_of(source: Any, key: str) -> list[float]:
    """``key`` of every recorded run of ``source`` (``repeats``, else ``metrics``), if set."""
    d = record_data(source)
    runs = d.get("repeats") or [d["metrics"]]
    return [v for v in (metric(m, key) for m in runs) if v is not None]


def compare(a: Any, b: Any, key: str, *, interleaved: bool) -> Difference:
    """``key`` of ``a``'s runs against ``b``'s (``interleaved``: two arms of one record)."""
    return compare_runs(runs_of(a, key), runs_of(b, key), interleaved=interleaved)


def arms_of(record: Any) -> dict[str, dict]:
    """The arms of an interleaved record by label (``{}`` for any other record)."""
    return dict(record_data(record).get("arms") or {})


def _fmt(values: Sequence[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    digits = 1 if abs(med) >= 10 else 2
    text = f"{med:.{digits}f}"
    return text if len(values) < 2 else \
        f"{text} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def mode_rows(sources: Mapping[str, Any]) -> list[dict[str, str]]:
    """One row per run source: mode, breaker, runs, the :data:`HEADLINE` metrics, hit rate."""
    rows = []
    for name, src in sources.items():
        d = record_data(src)
        m = d["metrics"]
        row = {"run": name, "mode": d["mode"], "breaker": "on" if d.get("breaker") else "off",
               "runs": str(len(d.get("repeats") or [m]))}
        row |= {col: _fmt(runs_of(d, key)) for col, key in HEADLINE}
        row |= {"graph hit": f"{100 * m.get('graph_hit_rate', 0.0):.0f}%",
                "padded waste": f"{100 * m.get('padded_waste', 0.0):.1f}%",
                "eager fallbacks": str(m.get("eager_fallbacks", 0))}
        rows.append(row)
    return rows


def load_rows(load: Any) -> list[dict[str, str]]:
    """One row per (mode, rate) of a load curve: offered and served req/s, TTFT and TPOT."""
    rec = view(load, ServeLoad)
    cols = (("served req/s", "request_throughput"), ("TTFT p50 ms", "ttft_ms.median"),
            ("TTFT p99 ms", "ttft_ms.p99"), ("TPOT p50 ms", "tpot_ms.median"))
    return [{"mode": p.mode, "offered req/s": f"{p.rate:g}",
             **{c: _fmt([v] if (v := metric(p.metrics, k)) is not None else []) for c, k in cols}}
            for p in rec.points]


def tpot_of(token_times_s: Sequence[float]) -> float | None:
    """TPOT in seconds as vLLM's benchmark defines it: (last - first) / (tokens - 1)."""
    t = [float(x) for x in token_times_s]
    return None if len(t) < 2 else (t[-1] - t[0]) / (len(t) - 1)


def ttft_of(arrival_s: float, token_times_s: Sequence[float]) -> float:
    """TTFT in seconds: the first token's time minus the arrival."""
    if not token_times_s:
        raise ValueError("no token times: the request produced no token")
    return float(token_times_s[0]) - float(arrival_s)


# ----------------------------------------------------------------------------- seed 001


def pair(records: Mapping[str, Any], ab: str, labels: tuple[str, str],
         separate: tuple[str, str]) -> tuple[Any, Any, bool]:
    """(a, b, interleaved): arms ``labels`` of record ``ab``, else the ``separate`` records."""
    if records.get(ab) is None:
        return records[separate[0]], records[separate[1]], False
    return arms_of(records[ab])[labels[0]], arms_of(records[ab])[labels[1]], True


def check_breaker(records: Mapping[str, Any]) -> Assessment:
    """"A circuit breaker keeps latency safe": ``holds`` if TPOT p99 is measurably lower."""
    off, on, inter = pair(records, "serve_breaker_ab", ("breaker off", "breaker on"),
                          ("serve_capped", "serve_breaker"))
    diff = {k: compare(on, off, k, interleaved=inter)
            for k in ("tpot_ms.p99", "ttft_ms.median", "output_throughput")}
    ev = {"interleaved": inter, "runs": diff["tpot_ms.p99"].runs, "differences": diff,
          "trips": len(record_data(on).get("breaker_trips_s") or []),
          "hit_rate": {k: record_data(r)["metrics"].get("graph_hit_rate")
                       for k, r in (("off", off), ("on", on))}}
    verdict = timing_verdict(diff["tpot_ms.p99"], lower="holds", higher="false")
    return Assessment("false" if verdict == "holds" and not ev["trips"] else verdict, ev)


def check_graphs_p99(records: Mapping[str, Any]) -> Assessment:
    """Seed 001's P99 210 -> 43 ms from several optimisations together: :data:`CANNOT`; graphs
    alone (full vs eager P99s, ``serve_graphs_ab``) in ``evidence["graphs_alone"]``."""
    eager, full, inter = pair(records, "serve_graphs_ab", ("eager", "full"),
                              ("serve_eager", "serve_full"))
    diff = {k: compare(full, eager, k, interleaved=inter)
            for k in ("ttft_ms.p99", "tpot_ms.p99", "e2el_ms.p99")}
    return Assessment(CANNOT, {"interleaved": inter, "graphs_alone": diff,
                               "graphs_alone_verdict": {k: timing_verdict(
                                   d, lower="holds", higher="false") for k, d in diff.items()}})


def check_gpu_busy(records: Mapping[str, Any]) -> Assessment:
    """Seed 001's GPU utilisation 58% -> 89%: :data:`CANNOT` (``nvidia-smi`` counts kernel
    time, which no record holds), with ``gpu_busy_share`` (time in decode steps per wall
    time, full vs eager) as evidence; ``untested (not recorded)`` without it."""
    try:
        eager, full, inter = pair(records, "serve_graphs_ab", ("eager", "full"),
                                  ("serve_eager", "serve_full"))
    except KeyError:
        return Assessment("untested (not recorded)", {})
    if not runs_of(eager, "gpu_busy_share") or not runs_of(full, "gpu_busy_share"):
        return Assessment("untested (not recorded)", {"interleaved": inter})
    d = compare(full, eager, "gpu_busy_share", interleaved=inter)
    return Assessment(CANNOT, {"interleaved": inter, "difference": d})


# ---------------------------------------------------------------------- plots serving
# Charts of notebook 13: the latency–load curve, monitoring series, one metric per run.

MODE_COLORS = {"eager": "#d62728", "full": "#1f77b4", "exact": "#17becf", "piecewise": "#2ca02c"}
RUN_COLORS = ["#d62728", "#17becf", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def latency_load_chart(load: Any, *, key: str = "ttft_ms.p99", subtitle: str = ""):
    """Latency ``key`` and served requests/s over the offered rate, one line per mode."""
    go = plotly_go()
    from plotly.subplots import make_subplots

    rec = view(load, ServeLoad)
    fig = make_subplots(rows=1, cols=2, subplot_titles=(key.replace("_ms.", " ms "),
                                                        "served requests/s"))
    colours = series_colors(list(rec.modes), MODE_COLORS)
    for mode in rec.modes:
        line = dict(color=colours[mode])
        for col, k in ((1, key), (2, "request_throughput")):
            fig.add_trace(go.Scatter(x=rec.rates, y=rec.series(mode, k), name=mode,
                                     mode="lines+markers", line=line, showlegend=col == 1),
                          row=1, col=col)
    fig.add_trace(go.Scatter(x=rec.rates, y=rec.rates, name="served = offered",
                             mode="lines", line=dict(color="#999999", dash="dot")), row=1, col=2)
    fig.update_xaxes(type="log", title_text="offered rate (requests/s)")
    fig.update_yaxes(type="log", row=1, col=1)
    fig = base_layout(fig, "Latency–load curve", "", "", subtitle=subtitle)
    return fig.update_layout(margin=dict(t=110))  # the panel titles under the two-line title


def monitoring_chart(runs: Mapping[str, Any], *, subtitle: str = ""):
    """Graph hit rate, padding waste and eager fallbacks per window, one line per run."""
    go = plotly_go()
    from plotly.subplots import make_subplots

    if not runs:
        raise ValueError("no runs to chart; pass {label: serve record}")
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("graph hit rate (%)", "padded rows (% of rows computed)",
                                        "eager fallbacks (steps per window)"))
    for i, (name, rec) in enumerate(runs.items()):
        d, c = record_data(rec), RUN_COLORS[i % len(RUN_COLORS)]
        w = d.get("windows") or []
        x = [v["start_s"] for v in w]
        for row, ys in ((1, [100 * v["graph_hit_rate"] for v in w]),
                        (2, [100 * v["padded_waste"] for v in w]),
                        (3, [v["eager_fallbacks"] for v in w])):
            fig.add_trace(go.Scatter(x=x, y=ys, name=name, mode="lines+markers",
                                     line=dict(color=c, shape="hv"), showlegend=row == 1),
                          row=row, col=1)
        if trips := d.get("breaker_trips_s") or []:
            fig.add_trace(go.Scatter(x=trips, y=[0] * len(trips), mode="markers",
                                     name=f"{name}: breaker trips",
                                     marker=dict(symbol="x", size=10, color=c)), row=1, col=1)
    fig.update_xaxes(title_text="time since the start (s)", row=3, col=1)
    fig.update_layout(height=650, margin=dict(t=110))  # the panel titles under the title
    return base_layout(fig, "Monitoring: what a serving dashboard would plot", "", "",
                       subtitle=subtitle)


def runs_chart(sources: Mapping[str, Any], key: str = "ttft_ms.median", *, subtitle: str = ""):
    """``key`` of every recorded run of each source, in the order served (log scale)."""
    go = plotly_go()
    fig = go.Figure()
    for i, (name, src) in enumerate(sources.items()):
        ys = runs_of(src, key)
        fig.add_trace(go.Scatter(x=list(range(1, len(ys) + 1)), y=ys, name=name,
                                 mode="lines+markers",
                                 line=dict(color=RUN_COLORS[i % len(RUN_COLORS)])))
    fig.update_xaxes(dtick=1)
    return base_layout(fig, f"{key.replace('_ms.', ' ms ')} of each recorded run", "run",
                       key.replace("_ms.", " (ms) "), subtitle=subtitle, log_y=True)
