"""Exported decks and pages DRAW their charts in a real (headless) Chromium with every outside
address blocked, and kaleido draws static images with the same browser.

Nothing is installed here: the tests use ``/usr/bin/chromium`` (or ``$BROWSER_PATH``) and are
skipped without it. Each check loads the page offline and looks at the rendered DOM (plotly's
``main-svg`` inside a ``js-plotly-plot`` div) and at a screenshot's pixels (the eager series'
red must be on screen).
"""

from __future__ import annotations

import html as htmllib
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import nbformat
import pytest

from labkit.support.paths import repo_root
from labkit.suite import report, slides
from labkit.teach.plots import COLORS
from pngutil import read_png
from test_slides import exported_fixture, web_assets_or_skip

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


# ----------------------------------------------------------------------------- deck 03, hints, run pages

DECK_SIZE = "1400,900"  # the window size at which no slide may overflow
MIN_FIT_SCALE = 0.6  # slides scaled down further than this would be hard to read

# appended to a copy of a deck: visits every slide, then writes what it measured into the page
_MEASURE_JS = r"""
<script>
(function () {
  function go(Reveal) {
    Reveal.configure({transition: 'none', backgroundTransition: 'none'});  // boxes at rest
    var slides = [], out = [], cfg = Reveal.getConfig(), k = 0;
    Reveal.getHorizontalSlides().forEach(function (h, i) {
      var vs = h.querySelectorAll(':scope > section');
      if (vs.length) { vs.forEach(function (v, j) { slides.push([i, j, v]); }); }
      else { slides.push([i, 0, h]); }
    });
    function step() {
      if (k >= slides.length) {
        var pre = document.createElement('pre');
        pre.id = 'labkit-measure';
        pre.textContent = JSON.stringify({width: cfg.width, height: cfg.height, slides: out});
        document.body.appendChild(pre);
        return;
      }
      var s = slides[k];
      Reveal.slide(s[0], s[1], 1000);
      setTimeout(function () {
        var el = s[2], r = el.getBoundingClientRect();
        var box = document.querySelector('.reveal .slides').getBoundingClientRect();
        var head = el.querySelector('h1, h2, h3, h4');
        out.push({h: s[0], v: s[1], present: el.classList.contains('present'),
                  label: ((head || el).textContent || '').trim().replace(/\s+/g, ' ').slice(0, 60),
                  scrollH: el.scrollHeight, scrollW: el.scrollWidth,
                  top: r.top - box.top, bottom: r.bottom - box.bottom,
                  left: r.left - box.left, right: r.right - box.right,
                  scale: parseFloat(el.dataset.labkitScale || '1')});
        k += 1;
        step();
      }, 1500);
    }
    step();
  }
  var t = setInterval(function () {
    var Reveal = window.Reveal;
    if (Reveal && Reveal.isReady()) { clearInterval(t); go(Reveal); }
  }, 500);
})();
</script>
"""


def hint_texts(nb_path: Path) -> list[str]:
    """The plain text of each hint (``<details>`` block) in a notebook's markdown cells."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    nb = nbformat.read(str(nb_path), as_version=4)
    texts = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for m in re.finditer(r"<details\b[^>]*>\s*<summary>.*?</summary>(.*?)</details>",
                             cell.source, re.S):
            texts.append(plain(markdown2html_mistune(m.group(1))))
    return texts


def plain(html: str) -> str:
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", html)).split())


def folded_blocks(dom: str) -> list[str]:
    """Plain text of every ``<details>`` element that is closed (no ``open`` attribute)."""
    return [plain(m.group(2)) for m in re.finditer(r"<details\b([^>]*)>(.*?)</details>", dom, re.S)
            if "open" not in m.group(1)]


def page_requests(url: str, tmp: Path, **kw) -> list[str]:
    """Every network URL the page asked for while it ran, from Chromium's network log (requests
    with an initiator: the browser's own background requests have none; file:// loads are not
    network requests and are not logged)."""
    log = tmp / "netlog.json"
    proc = run_chromium(url, f"--log-net-log={log}", "--dump-dom", **kw)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = json.loads(log.read_text(encoding="utf-8", errors="replace"))["events"]
    return sorted({e["params"]["url"] for e in events
                   if "url" in (e.get("params") or {}) and "initiator" in e["params"]
                   and e["params"]["initiator"] != "not an origin"})


@pytest.fixture(scope="module")
def deck03(tmp_path_factory):
    """Notebook 03 executed here (CPU), exported as a deck, a page and a run page."""
    chromium()
    modules = web_assets_or_skip()
    source = repo_root() / "notebooks" / "03_capture_replay.ipynb"
    root = tmp_path_factory.mktemp("deck03")
    executed = slides.execute_notebook(source, root / "executed" / source.name, timeout=600)
    out = root / "slides"
    slides.copy_assets(out, modules)
    deck, page = slides.export_notebook(executed, out, html=True, name=source.stem)
    run_page = report.export_notebook_html(executed, root / "run" / "html" / f"{source.stem}.html")
    return {"source": source, "deck": deck, "page": page, "run_page": run_page}


def test_deck_shows_no_hint_and_no_exercise_check(deck03):
    """A deck is for the speaker: the hints and the exercise checks' TODO lines stay off it."""
    hints = hint_texts(deck03["source"])
    assert len(hints) >= 2 and all(hints), hints
    dom, _ = rendered_dom(deck03["deck"].as_uri(), size=DECK_SIZE)
    text = plain(dom)
    assert not [h for h in hints if h in text]
    assert "not answered yet" not in text and "[TODO]" not in text


@pytest.mark.parametrize("which", ["page", "run_page"])
def test_hints_are_folded_with_their_text_inside(deck03, which):
    hints = hint_texts(deck03["source"])
    assert len(hints) >= 2 and all(hints), hints
    dom, _ = rendered_dom(deck03[which].as_uri(), size=DECK_SIZE)
    blocks = folded_blocks(dom)
    for hint in hints:
        assert any(hint in b for b in blocks), f"hint not inside a closed <details>: {hint!r}"
    # nothing of a hint shows outside its <details>
    outside = plain(re.sub(r"<details\b.*?</details>", " ", dom, flags=re.S))
    assert not [h for h in hints if h in outside]


def measure_deck(deck: Path) -> dict:
    """Every slide of ``deck`` at :data:`DECK_SIZE`: its size, position and fitted scale."""
    probe = deck.with_name(deck.name.replace(".slides.html", ".measure.slides.html"))
    probe.write_text(deck.read_text(encoding="utf-8").replace("</html>", _MEASURE_JS + "</html>"),
                     encoding="utf-8")
    try:
        dom, log = rendered_dom(probe.as_uri(), size=DECK_SIZE, budget_ms=400_000, timeout=600)
    finally:
        probe.unlink()
    m = re.search(r'<pre id="labkit-measure">(.*?)</pre>', dom, re.S)
    assert m, f"{deck.name} did not finish its slides: " + log[-2000:]
    return json.loads(htmllib.unescape(m.group(1)))


def misfits(got: dict) -> tuple[list[str], list[str]]:
    """Slides that overflow the slide, and slides scaled below :data:`MIN_FIT_SCALE`, named
    ``#/h/v "label"`` (the slide's address in the deck and its first heading)."""
    def name(s):
        return f'#/{s["h"]}/{s["v"]} "{s.get("label", "")}"'
    over = [name(s) + f" ({s['scrollW']}x{s['scrollH']})" for s in got["slides"]
            if s["scrollH"] > got["height"] + 1 or s["scrollW"] > got["width"] + 1
            or s["top"] < -2 or s["bottom"] > 2 or s["left"] < -2 or s["right"] > 2]
    small = [name(s) + f" (scale {s['scale']:.2f})" for s in got["slides"]
             if s["scale"] < MIN_FIT_SCALE]
    return over, small


def test_no_slide_of_deck_03_overflows(deck03):
    got = measure_deck(deck03["deck"])
    assert len(got["slides"]) >= 10 and all(s["present"] for s in got["slides"])
    over, small = misfits(got)
    assert not over, f"slides overflowing the {got['width']}x{got['height']} slide: {over}"
    assert not small, f"slides scaled below {MIN_FIT_SCALE} to fit: {small}"


SUITE_DECKS = [p.stem for p in sorted((repo_root() / "notebooks").glob("[0-9][0-9]_*.ipynb"))]


@pytest.fixture(scope="module")
def suite_decks(tmp_path_factory):
    """Every suite notebook exported as a deck, from the newest complete run made after the
    notebooks last changed (``labkit run`` before the tests saves executing them here), else
    executed here once."""
    chromium()
    modules = web_assets_or_skip()
    sources = [repo_root() / "notebooks" / f"{stem}.ipynb" for stem in SUITE_DECKS]
    run, _ = slides.newest_complete_run(sources)
    newest = max(p.stat().st_mtime for p in sources)
    if run is not None and (run / "run.json").stat().st_mtime < newest:
        run = None  # the notebooks changed after that run
    root = tmp_path_factory.mktemp("suite-decks")
    out = root / "slides"
    slides.copy_assets(out, modules)
    return {"run": run, "root": root, "out": out, "sources": {p.stem: p for p in sources}}


@pytest.mark.slow
@pytest.mark.parametrize("stem", SUITE_DECKS)
def test_no_slide_of_any_deck_overflows(suite_decks, stem):
    """Each deck of the suite at 1400x900: no slide overflows, none is scaled below the
    readability scale. A failure names the slides (``#/h/v`` and their first heading)."""
    src = suite_decks["sources"][stem]
    run = suite_decks["run"]
    executed = run / "notebooks" / src.name if run is not None else None
    if executed is None or not executed.is_file():
        executed = slides.execute_notebook(src, suite_decks["root"] / "executed" / src.name,
                                           timeout=900)
    deck, = slides.export_notebook(executed, suite_decks["out"], html=False, name=stem)
    got = measure_deck(deck)
    assert got["slides"] and all(s["present"] for s in got["slides"])
    over, small = misfits(got)
    assert not over, f"{stem}: slides overflowing the {got['width']}x{got['height']} slide: {over}"
    assert not small, f"{stem}: slides scaled below {MIN_FIT_SCALE} to fit: {small}"


def test_run_page_loads_nothing_from_the_network(deck03, tmp_path):
    page = deck03["run_page"]
    assert slides.find_remote_urls(page.read_text(encoding="utf-8"), page.parent) == []
    remote = [u for u in page_requests(page.as_uri(), tmp_path, size="1280,2400")
              if not u.startswith(("data:", "blob:"))]
    assert not remote, remote
    text = page.read_text(encoding="utf-8")
    assert re.findall(r'<script src="([^"]+)"', text) == ["assets/plotly.min.js"]
    dom, log = rendered_dom(page.as_uri(), size="1280,2400")
    assert drawn_charts(dom) >= 3, "plotly did not draw the run page's charts"
    assert 'type="range"' in dom and "labkit-widget" in dom, "the slider is not shown"
    assert not network_errors(log), network_errors(log)


def test_run_page_without_npm_draws_every_chart_offline(tmp_path, monkeypatch):
    """What `make run` writes on a machine without npm or the web assets: the page of a
    notebook with a chart and a widget draws both charts offline."""
    from test_slides import _widget_notebook, make_fixture_notebook

    chromium()
    monkeypatch.setenv(slides.WEB_DIR_ENV, str(tmp_path / "no-web"))
    monkeypatch.setattr(slides.assets.shutil, "which", lambda name: None)
    src = make_fixture_notebook(tmp_path / "99_fixture.ipynb")
    executed = slides.execute_notebook(src, tmp_path / "run" / "notebooks" / src.name, timeout=300)
    widget = tmp_path / "run" / "notebooks" / "97_widget.ipynb"
    nbformat.write(_widget_notebook(), str(widget))
    html = tmp_path / "run" / "html"
    pages = [report.export_notebook_html(p, html / f"{p.stem}.html") for p in (executed, widget)]
    assert sorted(p.name for p in (html / "assets").iterdir()) == ["plotly.min.js"]
    for page, charts in zip(pages, (2, 1)):
        dom, log = rendered_dom(page.as_uri(), size="1280,2400")
        assert drawn_charts(dom) == charts, page.name
        assert not network_errors(log), network_errors(log)
    png = screenshot(pages[0].as_uri(), tmp_path / "page.png", size="1280,2400")
    assert_not_blank(png)


def test_run_page_shows_each_said_paragraph_once(deck03):
    """A paragraph written by ``nb.say`` shows once on a run page: its rendered output, with
    the cell's source (the same sentence as a template) folded away."""
    executed = deck03["run_page"].parents[2] / "executed" / deck03["source"].name
    nb = nbformat.read(str(executed), as_version=4)
    snippets = []
    for cell in nb.cells:
        said = [o["data"]["text/markdown"] for o in cell.get("outputs", [])
                if cell.cell_type == "code" and "nb.say(" in cell.source
                and "text/markdown" in (o.get("data") or {})]
        for text in said:  # a stretch of words with no number: in the source and the output
            words = plain(text).split(" ")
            run = next((words[i:i + 10] for i in range(len(words)) if all(
                re.fullmatch(r"[A-Za-z][A-Za-z,;:'.-]*", w) for w in words[i:i + 10])), [])
            line = " ".join(run)
            if len(line) > 25 and line in plain(cell.source):
                snippets.append(line)
    assert len(snippets) >= 2, snippets
    dom, _ = rendered_dom(deck03["run_page"].as_uri(), size=DECK_SIZE)
    shown = plain(re.sub(r"<details\b(?![^>]*\bopen)[^>]*>.*?</details>", " ", dom, flags=re.S))
    assert {s: shown.count(s) for s in snippets} == dict.fromkeys(snippets, 1)
