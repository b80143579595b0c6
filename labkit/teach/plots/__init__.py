"""Plotly figure builders with one visual style.

``register_template()`` installs the ``labkit`` template (called by the notebook set-up).
Every builder takes plain data (lists, dicts from result records) and returns a
``plotly.graph_objects.Figure``; topic-specific builders live in submodules
(``labkit.teach.plots.<topic>``) and use :data:`COLORS` and :func:`base_layout` from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# one colour per method, the same in every chart of the suite
COLORS: dict[str, str] = {
    "eager": "#d62728",
    "graph": "#1f77b4",
    "dispatcher": "#2ca02c",
    "compile": "#9467bd",
    "private": "#ff7f0e",
    "shared_largest_first": "#1f77b4",
    "shared_smallest_first": "#17becf",
    "cpu": "#7f7f7f",
    "gpu": "#1f77b4",
    "reference": "#8c564b",
}
LABELS: dict[str, str] = {
    "eager": "eager",
    "graph": "graph replay",
    "dispatcher": "padding dispatcher",
    "compile": "torch.compile (reduce-overhead)",
    "private": "private pools",
    "shared_largest_first": "shared pool, largest first",
    "shared_smallest_first": "shared pool, smallest first",
}
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


def lines(x: Sequence, series: Mapping[str, Sequence[float]], *, title: str, x_title: str,
          y_title: str, errors: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
          subtitle: str = "", log_x: bool = False, log_y: bool = False):
    """One line per series (keys are method names from :data:`COLORS`).

    ``errors[key] = (low, high)`` draws asymmetric error bars (p10/p90 around the median).
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    for key, ys in series.items():
        err = None
        if errors and key in errors:
            lo, hi = errors[key]
            err = dict(type="data", symmetric=False,
                       array=[h - y for h, y in zip(hi, ys)],
                       arrayminus=[y - lo_ for lo_, y in zip(lo, ys)])
        fig.add_trace(go.Scatter(x=list(x), y=list(ys), name=label(key), mode="lines+markers",
                                 line=dict(color=color(key)), error_y=err))
    return base_layout(fig, title, x_title, y_title, subtitle=subtitle, log_x=log_x, log_y=log_y)


def bars(categories: Sequence, series: Mapping[str, Sequence[float]], *, title: str,
         x_title: str, y_title: str, subtitle: str = "", text_fmt: str = ".3g"):
    """Grouped bars, one group per category, one bar per series."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for key, ys in series.items():
        fig.add_trace(go.Bar(x=[str(c) for c in categories], y=list(ys), name=label(key),
                             marker_color=color(key), texttemplate=f"%{{y:{text_fmt}}}",
                             textposition="outside"))
    fig.update_layout(barmode="group")
    return base_layout(fig, title, x_title, y_title, subtitle=subtitle)


def table(rows: Sequence[Mapping], columns: Sequence[str] | None = None, *, title: str = ""):
    """A plotly table of dict rows (renders in exports, unlike a widget)."""
    import plotly.graph_objects as go

    if not rows:
        raise ValueError("no rows to show")
    columns = list(columns or rows[0].keys())
    cells = [[r.get(c, "") for r in rows] for c in columns]
    fig = go.Figure(go.Table(header=dict(values=columns, fill_color="#e8eef7", align="left"),
                             cells=dict(values=cells, align="left")))
    fig.update_layout(title=title, template=TEMPLATE, margin=dict(l=10, r=10, t=40, b=10))
    return fig
