"""Exported decks and pages DRAW their charts in a real (headless) Chromium with every outside
address blocked, and kaleido draws static images with the same browser.

Nothing is installed here: the tests use ``/usr/bin/chromium`` (or ``$BROWSER_PATH``) and are
skipped without it. Each check loads the page offline and looks at the rendered DOM (plotly's
``main-svg`` inside a ``js-plotly-plot`` div) and at a screenshot's pixels (the eager series'
red must be on screen).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from labkit.teach.plots import COLORS
from pngutil import read_png
from test_slides import exported_fixture

pytestmark = pytest.mark.browser

SKIP_REASON = "Chromium not installed (apt-get install chromium)"
CHART_SLIDE = 1  # the fixture deck's chart is on its second slide (#/1)
EAGER_RGB = tuple(int(COLORS["eager"][i:i + 2], 16) for i in (1, 3, 5))


def chromium() -> str:
    env = os.environ.get("BROWSER_PATH")
    for path in (env, "/usr/bin/chromium"):
        if path and os.access(path, os.X_OK):
            return path
    pytest.skip(SKIP_REASON)


def run_chromium(url: str, *args: str, size: str = "1280,800", budget_ms: int = 8000,
                 timeout: int = 180) -> subprocess.CompletedProcess:
    """Headless Chromium on ``url`` with every host name unresolvable (offline) and console
    messages logged to stderr."""
    with tempfile.TemporaryDirectory(prefix="labkit-chromium-") as profile:
        cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", f"--user-data-dir={profile}",
               "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
               f"--window-size={size}", f"--virtual-time-budget={budget_ms}",
               "--enable-logging=stderr", "--v=0", *args, url]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def rendered_dom(url: str, **kw) -> tuple[str, str]:
    """``(DOM without script bodies, console log)`` after the page ran."""
    proc = run_chromium(url, "--dump-dom", **kw)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = re.sub(r"<script\b[^>]*>.*?</script>", "<script></script>", proc.stdout, flags=re.S)
    return dom, proc.stderr


def screenshot(url: str, out: Path, **kw) -> Path:
    proc = run_chromium(url, f"--screenshot={out}", **kw)
    assert proc.returncode == 0 and out.is_file(), proc.stderr[-2000:]
    return out


def drawn_charts(dom: str) -> int:
    """Plotly charts that were drawn: ``js-plotly-plot`` divs holding a ``main-svg``."""
    n = 0
    for m in re.finditer(r'<div[^>]*class="[^"]*\bjs-plotly-plot\b[^"]*"', dom):
        if re.search(r'class="main-svg"', dom[m.end():m.end() + 20_000]):
            n += 1
    return n


def assert_not_blank(png: Path, *, min_colours: int = 20, min_red: int = 30) -> None:
    img = read_png(png)
    colours = img.colours()
    assert len(colours) >= min_colours, f"{png.name}: {len(colours)} colours: blank?"
    top_share = max(colours.values()) / sum(colours.values())
    assert top_share < 0.98, f"{png.name}: one colour covers {top_share:.0%}: blank?"
    red = img.count_near(EAGER_RGB, tol=40)
    assert red >= min_red, f"{png.name}: {red} pixels of the eager series' colour: no chart drawn"


def network_errors(log: str) -> list[str]:
    return [line for line in log.splitlines()
            if "ERR_NAME_NOT_RESOLVED" in line or "ERR_INTERNET_DISCONNECTED" in line]


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    chromium()
    return exported_fixture(tmp_path_factory)


def test_deck_draws_the_chart_offline(pages):
    dom, log = rendered_dom(pages["deck"].as_uri() + f"#/{CHART_SLIDE}")
    assert drawn_charts(dom) == 2, "plotly did not draw the deck's charts"
    assert 'class="reveal' in dom and "present" in dom  # reveal.js ran
    assert "<mjx-container" in dom  # MathJax (local) typeset the title's TeX
    assert not network_errors(log), network_errors(log)


def test_deck_chart_slide_screenshot(pages, tmp_path):
    png = screenshot(pages["deck"].as_uri() + f"#/{CHART_SLIDE}", tmp_path / "deck.png")
    assert_not_blank(png)
    title = screenshot(pages["deck"].as_uri() + "#/0", tmp_path / "title.png")
    assert read_png(title).count_near(EAGER_RGB, tol=40) < 30  # the chart is on #/1 only


def test_html_page_draws_the_charts_offline(pages, tmp_path):
    dom, log = rendered_dom(pages["html"].as_uri())
    assert drawn_charts(dom) == 2
    assert not network_errors(log), network_errors(log)
    png = screenshot(pages["html"].as_uri(), tmp_path / "page.png", size="1280,2400")
    assert_not_blank(png)


def test_static_image_export(tmp_path, monkeypatch):
    """kaleido draws a PNG and an SVG with the system Chromium (never a downloaded one)."""
    monkeypatch.setenv("BROWSER_PATH", chromium())
    from labkit.suite.images import figure_bytes
    from labkit.teach.plots import lines, register_template

    register_template()
    fig = lines([1, 8, 64], {"eager": [1200, 1210, 1300], "graph": [170, 180, 260]},
                title="Step time", x_title="batch size", y_title="µs")
    png = tmp_path / "chart.png"
    png.write_bytes(figure_bytes(fig, "png", width=800, height=450, scale=1))
    img = read_png(png)
    assert (img.width, img.height) == (800, 450)
    assert_not_blank(png)
    svg = figure_bytes(fig, "svg", width=800, height=450).decode()
    assert svg.lstrip().startswith("<svg") and "main-svg" in svg
    assert not re.search(r"""(?:href|src)=["']https?://""", svg)


def test_export_images_from_reference_records(tmp_path, monkeypatch):
    """`labkit images` draws the key charts from reference records (a made-up record in a
    temporary data folder here) and skips those without a record."""
    from labkit.suite import images
    from labkit.measure.results import save_result

    monkeypatch.setenv("BROWSER_PATH", chromium())
    data = tmp_path / "data"
    ref = data / "reference" / "h200"
    ref.mkdir(parents=True)
    monkeypatch.setenv("LABKIT_DATA", str(data))

    def stats(m):
        return {"median": m, "p10": 0.9 * m, "p90": 1.1 * m, "mean": m, "n": 5, "unit": "us"}

    rec = {"preset": "small", "config": {"n_layer": 4, "d_model": 256}, "dtype": "bfloat16",
           "batch_sizes": [1, 8, 64], "kernels_per_step": 68,
           "times": {"eager": [stats(1200), stats(1210), stats(1300)],
                     "graph": [stats(170), stats(180), stats(260)]},
           "checks": {"graph_tokens_equal_eager": True}}
    p = save_result("decode_small", rec, run_dir=tmp_path / "run",
                    env={"tier": "gpu", "gpu_name": "TEST FIXTURE GPU"})
    p.rename(ref / p.name)
    written = images.export_images(tmp_path / "img", "png")
    assert [w.name for w in written] == ["02_decode_step_small.png"]
    assert_not_blank(written[0])
