"""Plotly figure builders with one visual style: generic ones here, one submodule per topic."""

from __future__ import annotations

from typing import Any
from collections.abc import Collection, Mapping, Sequence

from labkit.teach.lessons import record_provenance, stat

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


def register_template() -> None:
    """Install the ``labkit`` plotly template and make it the default."""
    import plotly.graph_objects as go
    import plotly.io as pio

    if TEMPLATE not in pio.templates:
        base = pio.templates["plotly_white"]
        t = go.layout.Template(base)
        t.layout.font = dict(family="Inter, Helvetica, Arial, sans-serif", size=14)
        t.layout.colorway = list(COLORS.values())
        # the legend under the plot: above it, it runs into two-line titles (title + source)
        t.layout.margin = dict(l=60, r=20, t=70, b=110)
        t.layout.legend = dict(orientation="h", yanchor="top", y=-0.25, x=0)
        t.layout.hoverlabel = dict(namelength=-1)
        pio.templates[TEMPLATE] = t
    pio.templates.default = TEMPLATE


def plotly_go() -> Any:
    """``plotly.graph_objects``, with the ``labkit`` template installed."""
    register_template()
    import plotly.graph_objects as go

    return go


def color(key: str) -> str:
    return COLORS.get(key, "#444444")


def label(key: str) -> str:
    return LABELS.get(key, key)


def base_layout(fig, title: str, x: str, y: str, *, subtitle: str = "", log_x: bool = False,
                log_y: bool = False):
    """Apply the suite's title/axes conventions; ``subtitle`` holds the provenance line."""
    text = title if not subtitle else f"{title}<br><sup>{subtitle}</sup>"
    fig.update_layout(title=dict(text=text), template=TEMPLATE, xaxis_title=x, yaxis_title=y)
    if log_x:
        fig.update_xaxes(type="log")
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def finish(fig, title: str, x: str, y: str, *, subtitle: str | None = None, record: Any = None,
           **kw):
    """:func:`base_layout` with room for a two-line title (the legend sits under the plot);
    ``subtitle`` defaults to ``record``'s provenance line."""
    subtitle = record_provenance(record) if subtitle is None else subtitle
    fig = base_layout(fig, title, x, y, subtitle=subtitle, **kw)
    if subtitle:
        fig.update_layout(margin=dict(t=100))
    return fig


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
    """One line per series (keys: methods of :data:`COLORS`), ``errors[key]``: (p10s, p90s)."""
    go = plotly_go()
    fig = go.Figure()
    for key, ys in series.items():
        err = _whiskers(ys, *errors[key]) if errors and key in errors else None
        fig.add_trace(go.Scatter(x=list(x), y=list(ys), name=label(key), mode="lines+markers",
                                 line=dict(color=color(key)), error_y=err))
    return base_layout(fig, title, x_title, y_title, subtitle=subtitle, log_x=log_x, log_y=log_y)


def bars(categories: Sequence, series: Mapping[str, Sequence[float]], *, title: str,
         x_title: str, y_title: str, subtitle: str = "", text_fmt: str = ".3g"):
    """Grouped bars, one group per category, one bar per series."""
    go = plotly_go()
    fig = go.Figure()
    for key, ys in series.items():
        fig.add_trace(go.Bar(x=[str(c) for c in categories], y=list(ys), name=label(key),
                             marker_color=color(key), texttemplate=f"%{{y:{text_fmt}}}",
                             textposition="outside"))
    fig.update_layout(barmode="group")
    return base_layout(fig, title, x_title, y_title, subtitle=subtitle)


def table(rows: Sequence[Mapping], columns: Sequence[str] | None = None, *, title: str = ""):
    """A plotly table of dict rows (renders in exports, unlike a widget)."""
    go = plotly_go()
    if not rows:
        raise ValueError("no rows to show")
    columns = list(columns or rows[0].keys())
    cells = [[r.get(c, "") for r in rows] for c in columns]
    fig = go.Figure(go.Table(header=dict(values=columns, fill_color="#e8eef7", align="left"),
                             cells=dict(values=cells, align="left")))
    fig.update_layout(title=title, template=TEMPLATE, margin=dict(l=10, r=10, t=40, b=10))
    return fig
