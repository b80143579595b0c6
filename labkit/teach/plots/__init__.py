"""Plotly figure builders with one visual style: generic ones here, one submodule per topic."""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Collection, Mapping, Sequence

from labkit.teach.lessons import record_provenance, stat
from labkit.teach.plots.tables import Table, table

__all__ = ["COLORS", "LABELS", "PALETTE", "TEMPLATE", "Table", "bars", "base_layout",
           "check_methods", "color", "finish", "label", "lines", "log_ticks", "plotly_go",
           "provenances", "readable_log_axes", "register_template", "series_colors",
           "stats_bar", "stats_error_bars", "table"]

# one colour per method, the same in every chart of the suite
COLORS: dict[str, str] = {
    "eager": "#d62728", "graph": "#1f77b4", "dispatcher": "#2ca02c", "compile": "#9467bd",
    "private": "#ff7f0e", "shared_largest_first": "#1f77b4", "shared_smallest_first": "#17becf",
    "cpu": "#7f7f7f", "gpu": "#1f77b4", "reference": "#8c564b"}
LABELS: dict[str, str] = {
    "eager": "eager", "graph": "graph replay", "dispatcher": "padding dispatcher",
    "compile": "torch.compile (reduce-overhead)", "private": "private pools",
    "shared_largest_first": "shared pool, largest first",
    "shared_smallest_first": "shared pool, smallest first"}
TEMPLATE = "labkit"
#: Top margin (px) that holds a two-line title (title and provenance line).
TWO_LINE_TITLE_TOP = 100
#: Colours, in order, of series that have none of their own (red, the eager colour, and grey
#: last).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#e377c2",
           "#bcbd22", "#d62728", "#7f7f7f")


def register_template() -> None:
    """Install the ``labkit`` plotly template and make it the default."""
    import plotly.graph_objects as go
    import plotly.io as pio

    if TEMPLATE not in pio.templates:
        base = pio.templates["plotly_white"]
        t = go.layout.Template(base)
        t.layout.font = dict(family="Inter, Helvetica, Arial, sans-serif", size=14)
        t.layout.colorway = list(PALETTE)
        # the legend at the foot of the figure (container coordinates): plotly moves the plot
        # up by the legend's height, so at any height it sits under the x axis's tick labels
        # and title and never on them (above the plot it would run into two-line titles)
        t.layout.margin = dict(l=60, r=20, t=70, b=10)
        t.layout.legend = dict(orientation="h", yref="container", yanchor="bottom", y=0,
                               xanchor="left", x=0)
        t.layout.xaxis.automargin = True
        t.layout.yaxis.automargin = True
        t.layout.hoverlabel = dict(namelength=-1)
        pio.templates[TEMPLATE] = t
    pio.templates.default = TEMPLATE


def plotly_go() -> Any:
    """``plotly.graph_objects``, with the ``labkit`` template installed."""
    register_template()
    import plotly.graph_objects as go

    return go


def color(key: str, default: str = "#444444") -> str:
    """The suite's colour of a method ``key`` (``default`` for other keys)."""
    return COLORS.get(key, default)


def series_colors(keys: Sequence[str], known: Mapping[str, str] | None = None) -> dict[str, str]:
    """A colour per key: its own from ``known`` (default :data:`COLORS`), the others the next
    :data:`PALETTE` colours that no key of this figure has already."""
    known = COLORS if known is None else known
    out = {k: known[k] for k in keys if k in known}
    free = [c for c in PALETTE if c.lower() not in {v.lower() for v in out.values()}] or \
        list(PALETTE)
    for i, k in enumerate(k for k in keys if k not in out):
        out[k] = free[i % len(free)]
    return {k: out[k] for k in keys}


def label(key: str) -> str:
    return LABELS.get(key, key)


def base_layout(fig, title: str, x: str, y: str, *, subtitle: str = "", log_x: bool = False,
                log_y: bool = False):
    """Apply the suite's title/axes conventions; ``subtitle`` holds the provenance line (the
    top margin made room for the title's second line); log axes made readable
    (:func:`readable_log_axes`)."""
    text = title if not subtitle else f"{title}<br><sup>{subtitle}</sup>"
    fig.update_layout(title=dict(text=text), template=TEMPLATE, xaxis_title=x, yaxis_title=y)
    if subtitle and (fig.layout.margin.t or 0) < TWO_LINE_TITLE_TOP:
        fig.update_layout(margin=dict(t=TWO_LINE_TITLE_TOP))
    if log_x:
        fig.update_xaxes(type="log")
    if log_y:
        fig.update_yaxes(type="log")
    return readable_log_axes(fig)


#: Mantissas of log-axis ticks, densest first: 1-2-5, 1-3, powers of ten.
_LOG_STEPS = ((1, 2, 5), (1, 3), (1,))
#: The most tick labels :func:`log_ticks` puts on an axis.
MAX_LOG_TICKS = 7


def tick_label(v: float) -> str:
    """``v`` as a tick label: whole numbers with thousands separated, else up to 3 digits."""
    return f"{v:,.0f}" if v >= 1 else f"{v:.3g}"


def log_ticks(lo: float, hi: float, max_ticks: int = MAX_LOG_TICKS) -> list[float]:
    """Tick values for a log axis over ``[lo, hi]``: 1-2-5 per decade, else 1-3, else powers of
    ten (every second, third... decade when there are still too many); at least two."""
    if not (0 < lo <= hi) or not math.isfinite(hi):
        return []
    e0, e1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))

    def ticks(mantissas: Sequence[float], every: int = 1) -> list[float]:
        return [m * 10.0 ** e for e in range(e0, e1 + 1) if (e - e0) % every == 0
                for m in mantissas if lo / 1.0001 <= m * 10.0 ** e <= hi * 1.0001]

    for mantissas in _LOG_STEPS:
        got = ticks(mantissas)
        if len(got) <= max_ticks:
            break
    every = 1
    while len(got) > max_ticks:
        every += 1
        got = ticks((1,), every)
    if len(got) < 2:  # within one 1-2-5 step: every digit
        got = ticks(range(1, 10)) or got
    if len(got) < 2:
        got = sorted({*got, *(float(f"{v:.2g}") for v in (lo, hi))})
    return got


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _values(trace: Any, letter: str) -> list[float]:
    """The positive numbers a trace puts on its ``letter`` axis, whiskers included."""
    raw = [_num(v) for v in (getattr(trace, letter, None) or ())]
    vals = [v for v in raw if v is not None]
    err = getattr(trace, f"error_{letter}", None)
    if err is not None and err.array is not None and len(err.array) == len(raw):
        minus = err.arrayminus if err.arrayminus is not None else err.array
        for v, up, down in zip(raw, err.array, minus):
            if v is not None:
                vals += [v + (_num(up) or 0), v - (_num(down) or 0)]
    return [v for v in vals if v > 0]


def readable_log_axes(fig):
    """Every log axis of ``fig`` without tick values of its own gets 1-2-5 (or decade) ticks
    over its traces' range (:func:`log_ticks`), whole-number labels and faint minor gridlines
    at every digit, instead of plotly's small digit labels between the decades."""
    for name in [k for k in fig.layout.to_plotly_json() if k[1:5] == "axis"]:
        axis = fig.layout[name]
        if axis.type != "log" or axis.tickvals is not None:
            continue
        letter, ref = name[0], name[0] + name[5:]
        vals = [v for t in fig.data
                if (getattr(t, f"{letter}axis", None) or letter) == ref
                for v in _values(t, letter)]
        if not vals:
            continue
        ticks = log_ticks(min(vals), max(vals))
        axis.update(tickvals=ticks, ticktext=[tick_label(v) for v in ticks],
                    minor=dict(dtick="D1", showgrid=True, gridcolor="rgba(0,0,0,0.05)"))
    return fig


def finish(fig, title: str, x: str, y: str, *, subtitle: str | None = None, record: Any = None,
           **kw):
    """:func:`base_layout` whose ``subtitle`` defaults to ``record``'s provenance line."""
    subtitle = record_provenance(record) if subtitle is None else subtitle
    return base_layout(fig, title, x, y, subtitle=subtitle, **kw)


def provenances(records: Sequence[Any]) -> str:
    """The distinct provenance lines of ``records``, joined by ``; ``."""
    return "; ".join(dict.fromkeys(p for r in records if (p := record_provenance(r))))


def _whiskers(m: Sequence[Any], lo: Sequence[Any], hi: Sequence[Any]) -> dict:
    """Plotly ``error_y``: ``lo`` below, ``hi`` above each ``m`` (0 where one is missing)."""
    return dict(type="data", symmetric=False,
                array=[h - x if h is not None and x is not None else 0 for h, x in zip(hi, m)],
                arrayminus=[x - low if low is not None and x is not None else 0
                            for low, x in zip(lo, m)])


def stats_error_bars(stats: Sequence[Any]) -> dict:
    """Plotly ``error_y`` from Stats: p10 below, p90 above the median (0 where missing)."""
    return _whiskers([stat(s) for s in stats], [stat(s, "p10") for s in stats],
                     [stat(s, "p90") for s in stats])


def stats_bar(x: Sequence, stats: Sequence[Any], name: str, colour: str, **kw: Any):
    """A bar per ``x`` (as text) at the median of ``stats``, p10–p90 whiskers."""
    return plotly_go().Bar(x=[str(b) for b in x], y=[stat(s) for s in stats], name=name,
                           marker_color=colour, error_y=stats_error_bars(stats), **kw)


def check_methods(kind: str, methods: Sequence[str], have: Collection[str], what: str = "method"
                  ) -> None:
    """A ``KeyError`` naming the ``methods`` a ``kind`` record lacks and those it has."""
    if missing := [m for m in methods if m not in have]:
        raise KeyError(f"the {kind} record has no {what}(s) {missing}; it has {list(have)}")


def lines(x: Sequence, series: Mapping[str, Sequence[float]], *, title: str, x_title: str,
          y_title: str, errors: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
          subtitle: str = "", log_x: bool = False, log_y: bool = False):
    """One line per series (a method of :data:`COLORS` in its colour, any other key in one of
    :data:`PALETTE`), ``errors[key]``: (p10s, p90s)."""
    go = plotly_go()
    fig = go.Figure()
    colours = series_colors(list(series))
    for key, ys in series.items():
        err = _whiskers(ys, *errors[key]) if errors and key in errors else None
        fig.add_trace(go.Scatter(x=list(x), y=list(ys), name=label(key), mode="lines+markers",
                                 line=dict(color=colours[key]), error_y=err))
    return base_layout(fig, title, x_title, y_title, subtitle=subtitle, log_x=log_x, log_y=log_y)


def bars(categories: Sequence, series: Mapping[str, Sequence[float]], *, title: str,
         x_title: str, y_title: str, subtitle: str = "", text_fmt: str = ",.3~r"):
    """Grouped bars, one group per category, one bar per series (coloured as in :func:`lines`)."""
    go = plotly_go()
    fig = go.Figure()
    colours = series_colors(list(series))
    for key, ys in series.items():
        fig.add_trace(go.Bar(x=[str(c) for c in categories], y=list(ys), name=label(key),
                             marker_color=colours[key], texttemplate=f"%{{y:{text_fmt}}}",
                             textposition="outside"))
    fig.update_layout(barmode="group")
    return base_layout(fig, title, x_title, y_title, subtitle=subtitle)
