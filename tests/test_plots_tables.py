"""labkit.teach.plots: HTML tables (cell formatting, escaping), readable log axes, a colour for
every series, the legend's place in the template."""

from __future__ import annotations

import math

import pytest

from labkit.teach.plots import (PALETTE, Table, bars, lines, log_ticks, plotly_go,
                                readable_log_axes, series_colors, table)
from labkit.teach.plots.tables import MISSING, cell_text


@pytest.mark.parametrize("value, text", [
    (None, MISSING), (float("nan"), MISSING), ("None", MISSING), ("null", MISSING),
    (12.3456789, "12.35"), (1234.5678, "1,235"), (0.000123456, "0.0001235"), (619.0, "619"),
    (-9.876, "-9.876"), (1024, "1024"), (123456, "123,456"), (True, "True"),
    (float("inf"), "∞"), ("addmm_", "addmm_"), ([1, 2], "[1, 2]")])
def test_cell_text(value, text):
    assert cell_text(value) == text


def test_table_is_html_with_every_cell_and_the_title():
    t = table([{"kernel": "addmm_", "µs": 12.3456, "GB/s": None},
               {"kernel": "<b>x</b>", "µs": 1234.5678, "GB/s": 2891.07}], title="Kernels & µs")
    assert isinstance(t, Table) and t.columns == ["kernel", "µs", "GB/s"]
    html = t._repr_html_()
    assert "<table" in html and "Kernels &amp; µs</caption>" in html
    assert ">addmm_</td>" in html and "&lt;b&gt;x&lt;/b&gt;" in html  # shown as written
    assert ">12.35</td>" in html and ">1,235</td>" in html and f">{MISSING}</td>" in html
    assert "null" not in html and "None" not in html
    # numeric columns right-aligned, text left
    assert html.count("text-align:right") == 2 * 3
    text = repr(t)
    assert text.splitlines()[0] == "Kernels & µs" and "addmm_" in text and "1,235" in text


def test_table_columns_and_missing_keys():
    t = table([{"a": 1, "b": 2}, {"a": 3}], columns=["b", "a"])
    assert t.cells() == [["2", "1"], ["", "3"]]
    with pytest.raises(ValueError, match="no rows"):
        table([])


@pytest.mark.parametrize("lo, hi, want", [
    (1, 300, [1, 3, 10, 30, 100, 300]),
    (100, 2e5, [100, 300, 1000, 3000, 1e4, 3e4, 1e5]),
    (40, 60, [40, 50, 60]),
    (1, 1e9, [1, 100, 1e4, 1e6, 1e8]),
    (5, 90, [5, 10, 20, 50]),
])
def test_log_ticks(lo, hi, want):
    got = log_ticks(lo, hi)
    assert [round(g, 9) for g in got] == want
    assert 2 <= len(got) <= 7


def test_log_axes_get_readable_ticks_unless_they_have_their_own():
    go = plotly_go()
    fig = lines([1, 8, 64], {"eager": [700, 800, 950], "graph": [90, 95, 300]}, title="t",
                x_title="batch", y_title="µs", log_x=True, log_y=True)
    assert list(fig.layout.yaxis.tickvals) == [100, 200, 500]
    assert list(fig.layout.yaxis.ticktext) == ["100", "200", "500"]
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 5, 10, 20, 50]
    own = go.Figure(go.Scatter(x=[1, 1000], y=[1, 2]))
    own.update_xaxes(type="log", tickvals=[1, 1000])
    assert list(readable_log_axes(own).layout.xaxis.tickvals) == [1, 1000]


def test_every_series_gets_a_colour():
    assert series_colors(["eager", "graph"]) == {"eager": "#d62728", "graph": "#1f77b4"}
    got = series_colors(["weights", "KV read", "logits + KV write + embeddings"])
    assert len(set(got.values())) == 3 and set(got.values()) <= set(PALETTE)
    mixed = series_colors(["eager", "other"])
    assert mixed["other"] != mixed["eager"]
    fig = bars([1, 8], {"weights": [1, 1], "KV read": [0.1, 0.8]}, title="t", x_title="b",
               y_title="MB")
    colours = [t.marker.color for t in fig.data]
    assert "#444444" not in colours and len(set(colours)) == 2


def test_template_puts_the_legend_at_the_foot_of_the_figure():
    fig = plotly_go().Figure()
    legend = fig.layout.template.layout.legend
    assert (legend.yref, legend.y, legend.yanchor, legend.orientation) == (
        "container", 0, "bottom", "h")
    assert fig.layout.template.layout.xaxis.automargin is True
    assert not math.isnan(fig.layout.template.layout.margin.b)


def test_a_column_with_large_integers_separates_thousands_in_every_row():
    t = table([{"n": 7417, "m": 7417}, {"n": 20928, "m": 12}])
    assert t.cells() == [["7,417", "7417"], ["20,928", "12"]]
