"""labkit.suite.images: every key chart builds from the reference records; no browser needed."""

from __future__ import annotations

import pytest

from labkit.measure.results import load_reference, reference_dir
from labkit.suite import images

CHARTS = [c for c in images.key_charts() if (reference_dir("h200") / f"{c.record}.json").exists()]


@pytest.mark.parametrize("chart", CHARTS, ids=lambda c: c.stem)
def test_key_chart_builds_from_the_reference(chart):
    fig = chart.build(load_reference(chart.record))
    assert fig.data, chart.stem
