"""Charts of ``modes_<preset>`` records: eager (NONE) vs PIECEWISE vs FULL vs attention-only
graphs — step time per batch size, graph launches per step, pool memory.

Inputs are records (a :class:`labkit.measure.results.Result` or its ``data`` dict); a Result's
provenance becomes the subtitle unless ``subtitle`` is given.
"""

from __future__ import annotations

from typing import Any, Sequence

from labkit.measure.records import Modes, view
from labkit.teach.lessons import record_provenance
from labkit.teach.lessons import modes as lm
from labkit.teach.plots import color
from labkit.teach.plots.timing import finish, stats_error_bars

#: one colour per capture mode (eager and FULL keep the suite's eager and graph colours)
MODE_COLORS: dict[str, str] = {"eager": color("eager"), "piecewise": "#ff7f0e",
                               "full": color("graph"), "attention_only": "#8c564b"}


def _sub(record: Any, subtitle: str | None) -> str:
    return record_provenance(record) if subtitle is None else subtitle


def _label(mode: str) -> str:
    return lm.MODE_LABELS.get(mode, mode)


def step_time_bars(record: Any, *, modes: Sequence[str] | None = None,
                   subtitle: str | None = None, log_y: bool = False):
    """Median decode-step time per batch size, one bar per mode (p10–p90 whiskers), labelled
    with the speed-up over eager."""
    import plotly.graph_objects as go

    d = view(record, Modes)
    s = lm.summary(d)
    modes = list(modes or s["modes"])
    missing = [m for m in modes if m not in d.times]
    if missing:
        raise KeyError(f"the modes record has no mode(s) {missing}; it has {d.methods}")
    cats = [str(b) for b in s["batch_sizes"]]
    fig = go.Figure()
    for m in modes:
        text = [f"{t:,.0f} µs" + (f"<br>{x:.1f}×" if x and m != "eager" else "")
                if t is not None else "" for t, x in zip(s["step_us"][m],
                                                          s["speedup_vs_eager"][m])]
        fig.add_trace(go.Bar(x=cats, y=s["step_us"][m], name=_label(m),
                             marker_color=MODE_COLORS.get(m, "#444444"),
                             error_y=stats_error_bars(d.times[m]), text=text,
                             textposition="outside"))
    fig.update_layout(barmode="group")
    return finish(fig, f"Decode step per capture mode ({d.preset}, {d.n_layer} layers)",
                  "batch size", "µs per step (median)", subtitle=_sub(record, subtitle),
                  log_y=log_y)


def _per_mode_bars(record: Any, values: dict, text: list[str], title: str, y: str,
                   subtitle: str | None):
    import plotly.graph_objects as go

    modes = list(values)
    fig = go.Figure(go.Bar(x=[_label(m) for m in modes], y=[values[m] or 0 for m in modes],
                           text=text, textposition="outside", showlegend=False,
                           marker_color=[MODE_COLORS.get(m, "#444444") for m in modes]))
    return finish(fig, title, "", y, subtitle=_sub(record, subtitle))


def launches_bars(record: Any, *, subtitle: str | None = None):
    """Graph launches per decode step per mode (by construction; the profiler's count, when
    recorded, is shown next to it)."""
    s = lm.summary(record)
    g, counted = s["graphs_per_step"], s["graph_launches_counted"]
    text = [("n/a" if g[m] is None else str(g[m]))
            + ("" if counted.get(m) is None else f" (profiler: {counted[m]})") for m in g]
    return _per_mode_bars(record, g, text, f"Graph launches per decode step ({s['n_layer']} "
                          "layers)", "graph launches per step", subtitle)


def pool_bars(record: Any, *, subtitle: str | None = None):
    """Bytes of each mode's shared graph pool for all its batch sizes, in MiB (eager: none)."""
    s = lm.summary(record)
    mib = s["pool_mib"]
    text = ["no pool" if v is None else f"{v:.1f} MiB" for v in mib.values()]
    n = len(s["batch_sizes"])
    return _per_mode_bars(record, mib, text, f"Graph pool memory for {n} batch size"
                          f"{'s' if n != 1 else ''}", "MiB", subtitle)
