"""Charts of notebook 13 (serving under load).

* :func:`latency_load_chart` — TTFT p99 and served requests/s per offered rate and mode,
  from a ``serving_load_<preset>`` record;
* :func:`monitoring_chart` — graph hit rate, padded-row waste and eager fallbacks over time,
  one line per run, from the ``windows`` of ``serve_<name>`` records (or of a live run);
* :func:`percentile_bars` — TPOT (or another latency) p50 and p99 per run.
"""

from __future__ import annotations

from typing import Any, Mapping

from labkit.measure.records import ServeLoad, view
from labkit.teach.lessons import record_data
from labkit.teach.lessons.serving import metric
from labkit.teach.plots import base_layout, register_template

MODE_COLORS = {"eager": "#d62728", "full": "#1f77b4", "exact": "#17becf",
               "piecewise": "#2ca02c", "none": "#7f7f7f"}
RUN_COLORS = ["#d62728", "#17becf", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def latency_load_chart(load: Any, *, key: str = "ttft_ms.p99", subtitle: str = ""):
    """Two panels over the offered request rate: latency ``key`` (log scale) and served
    requests/s, one line per mode; the dotted diagonal is "served = offered"."""
    register_template()
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rec = view(load, ServeLoad)
    fig = make_subplots(rows=1, cols=2, subplot_titles=(key.replace("_ms.", " ms "),
                                                        "served requests/s"))
    for mode in rec.modes:
        c = MODE_COLORS.get(mode, "#444444")
        fig.add_trace(go.Scatter(x=rec.rates, y=rec.series(mode, key), name=mode,
                                 mode="lines+markers", line=dict(color=c)), row=1, col=1)
        fig.add_trace(go.Scatter(x=rec.rates, y=rec.series(mode, "request_throughput"),
                                 name=mode, mode="lines+markers", line=dict(color=c),
                                 showlegend=False), row=1, col=2)
    fig.add_trace(go.Scatter(x=rec.rates, y=rec.rates, name="served = offered",
                             mode="lines", line=dict(color="#999999", dash="dot")), row=1, col=2)
    fig.update_xaxes(type="log", title_text="offered rate (requests/s)")
    fig.update_yaxes(type="log", row=1, col=1)
    return base_layout(fig, "Latency–load curve", "", "", subtitle=subtitle)


def monitoring_chart(runs: Mapping[str, Any], *, subtitle: str = ""):
    """Three stacked panels over time (window start, s): graph hit rate, padded-row waste and
    eager fallbacks per window; ``runs`` maps a label to a serve record (or its data), each
    with ``windows`` (:func:`labkit.measure.serving_metrics.step_windows`); breaker trips are
    marked on the hit-rate panel."""
    register_template()
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not runs:
        raise ValueError("no runs to chart; pass {label: serve record}")
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("graph hit rate (%)", "padded rows (% of rows computed)",
                                        "eager fallbacks (steps per window)"))
    for i, (name, rec) in enumerate(runs.items()):
        d = record_data(rec)
        w = d.get("windows") or []
        if not w:
            continue
        c = RUN_COLORS[i % len(RUN_COLORS)]
        x = [v["start_s"] for v in w]
        for row, ys in ((1, [100 * v["graph_hit_rate"] for v in w]),
                        (2, [100 * v["padded_waste"] for v in w]),
                        (3, [v["eager_fallbacks"] for v in w])):
            fig.add_trace(go.Scatter(x=x, y=ys, name=name, mode="lines+markers",
                                     line=dict(color=c, shape="hv"), showlegend=row == 1),
                          row=row, col=1)
        trips = d.get("breaker_trips_s") or []
        if trips:
            fig.add_trace(go.Scatter(x=trips, y=[0] * len(trips), mode="markers",
                                     name=f"{name}: breaker trips",
                                     marker=dict(symbol="x", size=10, color=c)), row=1, col=1)
    fig.update_xaxes(title_text="time since the start (s)", row=3, col=1)
    fig.update_layout(height=650)
    return base_layout(fig, "Monitoring: what a serving dashboard would plot", "", "",
                       subtitle=subtitle)


def percentile_bars(runs: Mapping[str, Any], *, latency: str = "tpot", subtitle: str = ""):
    """``latency`` (``ttft``, ``tpot``, ``itl``, ``e2el``) p50 and p99 in ms per run."""
    register_template()
    import plotly.graph_objects as go

    names = list(runs)
    fig = go.Figure()
    for q, shade in (("median", "#9ecae1"), ("p99", "#08519c")):
        ys = [metric(record_data(runs[n])["metrics"], f"{latency}_ms.{q}") for n in names]
        fig.add_trace(go.Bar(x=names, y=ys, name="p50" if q == "median" else "p99",
                             marker_color=shade, texttemplate="%{y:.2f}",
                             textposition="outside"))
    fig.update_layout(barmode="group")
    return base_layout(fig, f"{latency.upper()} per run", "", f"{latency.upper()} (ms)",
                       subtitle=subtitle)
