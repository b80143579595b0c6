"""labkit.suite.images: every key chart (and its generic fallback) builds from the reference
records, read through labkit.measure.records; no browser needed."""

from __future__ import annotations

import pytest

from labkit.measure.results import load_reference, reference_dir
from labkit.suite import images

CHARTS = [c for c in images.key_charts() if (reference_dir("h200") / f"{c.record}.json").exists()]


@pytest.mark.parametrize("chart", CHARTS, ids=lambda c: c.stem)
def test_key_chart_and_fallback_build_from_the_reference(chart, capsys):
    res = load_reference(chart.record)
    fig = chart.build(res)
    assert fig.data, chart.stem
    assert "using the generic chart" not in capsys.readouterr().err  # the builder itself ran
    if chart.fallback is not None:
        generic = chart.fallback(res)
        assert generic.data and "H200" in generic.layout.title.text


def test_generic_decode_chart_shows_the_recorded_medians():
    res = load_reference("decode_small")
    fig = images._generic_decode(res)
    assert [t.name for t in fig.data] == ["eager", "graph replay"]
    assert list(fig.data[1].y) == [t["median"] for t in res.data["times"]["graph"]]


def test_generic_pool_chart_in_mib():
    res = load_reference("pool_memory_gpt2")
    fig = images._generic_pools(res)
    raw = res.data
    want = [raw[k]["total_bytes"] / 2**20
            for k in ("private", "shared_largest_first", "shared_smallest_first")]
    assert [t.y[0] for t in fig.data] == want
