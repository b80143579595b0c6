"""Offline slide and HTML export (labkit.suite.slides).

The unit tests need nothing; the export tests execute a small fixture notebook (a plotly chart
made with labkit.teach.plots, slideshow metadata, a parameters cell). Decks need reveal.js (and
MathJax for TeX), which ``scripts/fetch_web_assets.sh`` fetches with npm (those tests are
skipped, saying so, without npm); run pages need nothing from npm.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from labkit.suite import report, slides
from labkit.suite.details import fold_details
from labkit.suite.engine import SuiteError, find_notebooks

PARAM_MARKER = "PARAM_MARKER_7731"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
NPM_SKIP = ("npm not installed: offline slides fetch reveal.js, require.js, jQuery, the widgets "
            "HTML manager and MathJax once with npm (install Node.js, e.g. apt-get install nodejs npm)")


# ----------------------------------------------------------------------------- fixtures


def make_fixture_notebook(path: Path) -> Path:
    """A small notebook like the suite's: title slide (with TeX), parameters cell, the set-up
    cell (``skip``), a chart slide (the 2nd slide, ``#/1``; its cell emits plotly.js),
    a bar chart slide and a speaker-notes cell."""

    def md(src, kind="slide"):
        c = nbformat.v4.new_markdown_cell(src)
        c.metadata["slideshow"] = {"slide_type": kind}
        return c

    def code(src, kind="-", tags=()):
        c = nbformat.v4.new_code_cell(src)
        c.metadata["slideshow"] = {"slide_type": kind}
        if tags:
            c.metadata["tags"] = list(tags)
        return c

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.cells = [
        md("# 99 · Fixture deck\nA step costs $t = n \\cdot c$ launches."),
        code(f"{PARAM_MARKER} = 3", "skip", ["parameters"]),
        code("from labkit.teach.notebook import configure_plotly\nconfigure_plotly()", "skip"),
        md("## Launch-bound decode", "slide"),
        code("from labkit.teach.plots import lines\n"
             "lines([1, 8, 64], {'eager': [1200, 1210, 1300], 'graph': [170, 180, 260]},\n"
             "      title='Step time', x_title='batch size', y_title='µs').show()"),
        md("## Bars", "slide"),
        code("from labkit.teach.plots import bars\n"
             "bars([1, 8], {'eager': [3, 2], 'graph': [1, 1]}, title='B', x_title='x',"
             " y_title='y').show()"),
        md("Say: the red line is eager.", "notes"),
    ]
    nbformat.write(nb, str(path))
    return path


_CACHE: dict[str, Path] = {}


def executed_fixture(tmp_path_factory) -> tuple[Path, Path]:
    """``(source, executed)`` fixture notebook, executed once per test session."""
    if "executed" not in _CACHE:
        root = tmp_path_factory.mktemp("slides-fixture")
        src = make_fixture_notebook(root / "99_fixture.ipynb")
        _CACHE["source"] = src
        _CACHE["executed"] = slides.execute_notebook(src, root / "executed" / "99_fixture.ipynb",
                                                     timeout=300)
    return _CACHE["source"], _CACHE["executed"]


def web_assets_or_skip() -> Path:
    try:
        return slides.ensure_web_assets(quiet=True)
    except slides.SlidesError:
        if shutil.which("npm") is None:
            pytest.skip(NPM_SKIP)
        raise


def exported_fixture(tmp_path_factory) -> dict[str, Path]:
    """The fixture exported once per session: ``{"deck", "html", "out"}``."""
    if "deck" not in _CACHE:
        modules = web_assets_or_skip()
        _, executed = executed_fixture(tmp_path_factory)
        out = tmp_path_factory.mktemp("slides-out")
        slides.copy_assets(out, modules)
        deck, html = slides.export_notebook(executed, out, html=True, name="99_fixture")
        _CACHE.update(deck=deck, html=html, out=out)
    return {k: _CACHE[k] for k in ("deck", "html", "out")}


@pytest.fixture
def exported(tmp_path_factory):
    return exported_fixture(tmp_path_factory)


# ----------------------------------------------------------------------------- unit tests

REMOTE_PAGE = """<html><head>
<script src="https://cdn-a.example.com/ajax/libs/require.js/2.1.10/require.min.js"></script>
<link rel="stylesheet" href="https://cdn-b.example.com/reveal.js@4.0.2/dist/reveal.css">
<style>@import url(https://fonts.googleapis.com/css?family=Lato);</style>
<script type="module">import mermaid from 'https://cdn.example.org/mermaid.esm.min.mjs';</script>
<script>require.config({paths: {plotly: 'https://cdn.plot.ly/plotly-2.0.0.min'}});
var widgetRendererSrc = 'https://cdn-b.example.com/@jupyter-widgets/html-manager@*/dist/embed-amd.js';</script>
<script src="//cdn.example.org/protocol-relative.js"></script>
</head><body>
<a href="https://example.org/docs">a link is not a load</a>
<svg xmlns="http://www.w3.org/2000/svg"></svg>
<script src="assets/require.js"></script>
</body></html>"""


def test_find_remote_urls_lists_every_load():
    urls = slides.find_remote_urls(REMOTE_PAGE)
    for expected in ("https://cdn-a.example.com/ajax/libs/require.js/2.1.10/require.min.js",
                     "https://cdn-b.example.com/reveal.js@4.0.2/dist/reveal.css",
                     "https://fonts.googleapis.com/css?family=Lato",
                     "https://cdn.example.org/mermaid.esm.min.mjs",
                     "https://cdn.plot.ly/plotly-2.0.0.min",
                     "https://cdn-b.example.com/@jupyter-widgets/html-manager@*/dist/embed-amd.js",
                     "//cdn.example.org/protocol-relative.js"):
        assert expected in urls, (expected, urls)
    assert not [u for u in urls if "example.org/docs" in u or "w3.org" in u], urls
    assert not any("assets/" in u for u in urls)


def test_find_remote_urls_ignores_the_inline_plotly_library():
    lib = "/**\n* plotly.js v4.1.1\n*/\n" + "var tiles='https://tiles.example.org/x.png';\n" * 5000
    page = f"<html><head><script>{lib}</script></head><body></body></html>"
    assert slides.find_remote_urls(page) == []
    assert slides.count_plotlyjs(page) == 1


def test_find_remote_urls_follows_local_stylesheets(tmp_path):
    (tmp_path / "theme.css").write_text("@import url(https://fonts.example.org/css);\n")
    page = '<link rel="stylesheet" href="theme.css">'
    assert slides.find_remote_urls(page) == []
    assert slides.find_remote_urls(page, base_dir=tmp_path) == [
        "https://fonts.example.org/css (via theme.css)"]


def test_check_offline_fails_loudly(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text(REMOTE_PAGE)
    good = tmp_path / "good.html"
    good.write_text('<script src="assets/require.js"></script>')
    slides.check_offline([good])
    with pytest.raises(slides.RemoteAssetError) as err:
        slides.check_offline([good, bad])
    assert "bad.html" in str(err.value) and "cdn-b.example.com/reveal.js" in str(err.value)
    assert "good.html" not in str(err.value)


def test_has_math():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("costs 5 µs, no TeX here")]
    assert not slides.has_math(nb)
    nb.cells.append(nbformat.v4.new_markdown_cell("the time $t = n c$"))
    assert slides.has_math(nb)


def _fake_executed_notebook() -> nbformat.NotebookNode:
    lib = "/**\n* plotly.js v9.9.9\n*/\n" + "x" * 200_000
    fig = {"data": [{"type": "scatter", "x": [1, 2], "y": [3, 4]}], "layout": {}}
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(f"{PARAM_MARKER} = 1")
    params.metadata["tags"] = ["parameters"]
    injected = nbformat.v4.new_code_cell(f"{PARAM_MARKER} = 2")
    injected.metadata["tags"] = ["injected-parameters"]
    setup = nbformat.v4.new_code_cell("configure_plotly()")
    setup.outputs = [nbformat.v4.new_output("display_data", data={
        "text/html": f"<script>window.PlotlyConfig = {{}};</script><script>{lib}</script>"})]
    chart = nbformat.v4.new_code_cell("fig.show()")
    chart.outputs = [nbformat.v4.new_output("display_data", data={
        "application/vnd.plotly.v1+json": fig,
        "text/html": '<div><script src="https://cdn-a.example.com/ajax/libs/mathjax/3.2.2/es5/'
                     'tex-svg.min.js"></script><div class="plotly-graph-div"></div></div>'})]
    nb.cells = [params, injected, setup, chart]
    return nb


def test_prepare_notebook_drops_the_library_and_parameters():
    nb, info = slides.prepare_notebook(_fake_executed_notebook())
    sources = [c.source for c in nb.cells]
    assert not any(PARAM_MARKER in s for s in sources)
    assert info == {"charts": 1, "widgets": 0, "math": False}
    assert nb.cells[0].outputs == []  # the library left its cell (the page loads the shared copy)
    chart_html = nb.cells[1].outputs[0]["data"]["text/html"]
    assert "plotly-graph-div" in chart_html and "Plotly.newPlot" in chart_html
    assert slides.find_remote_urls(chart_html) == [] and slides.count_plotlyjs(chart_html) == 0
    head = slides.head_html(info)
    assert '<script src="assets/plotly.min.js"></script>' in head
    assert slides.count_plotlyjs(head) == 0 and "mathjax" not in head


def test_the_shared_plotlyjs_comes_from_the_plotly_wheel(tmp_path, monkeypatch):
    import plotly

    monkeypatch.setenv(slides.WEB_DIR_ENV, str(tmp_path / "no-web"))
    monkeypatch.setattr(slides.assets.shutil, "which", lambda name: None)  # no npm
    wheel = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert slides.plotlyjs_file() == wheel.resolve()
    dest = slides.copy_assets(tmp_path / "html", parts=[slides.PLOTLY_FILE])
    assert sorted(p.name for p in dest.iterdir()) == ["plotly.min.js"]
    assert (dest / "plotly.min.js").read_bytes() == wheel.read_bytes()
    assert slides.count_plotlyjs((dest / "plotly.min.js").read_text(encoding="utf-8")[:3000]) == 1
    assert slides.page_asset_parts({"charts": 2, "widgets": 1, "math": False}) == ["plotly.min.js"]
    assert slides.page_asset_parts({"charts": 0, "widgets": 1, "math": False}) == []


def _widget_notebook() -> nbformat.NotebookNode:
    """An executed notebook whose cell shows a VBox (a selection slider at its 3rd value over
    an Output widget holding a line of text and a chart), with the saved widget state."""
    fig = {"data": [{"type": "bar", "x": [1, 2], "y": [3, 4]}], "layout": {}}
    state = {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_s", "IPY_MODEL_o"]}},
        "s": {"model_name": "SelectionSliderModel", "state": {
            "description": "batch size", "_options_labels": ["1", "8", "64"], "index": 2}},
        "o": {"model_name": "OutputModel", "state": {"outputs": [
            {"output_type": "stream", "name": "stdout", "text": "WIDGET_TEXT_5151\n"},
            {"output_type": "display_data", "metadata": {},
             "data": {"application/vnd.plotly.v1+json": fig}}]}},
        "l": {"model_name": "LayoutModel", "state": {}},
    }
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "state": state, "version_major": 2, "version_minor": 0}}
    cell = nbformat.v4.new_code_cell("explore(...)")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": "box", "version_major": 2,
                                                     "version_minor": 0},
        "text/plain": "VBox(...)"})]
    gone = nbformat.v4.new_code_cell("w")
    gone.outputs = [nbformat.v4.new_output("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": "nope"},
        "text/plain": "IntSlider(value=3)"})]
    nb.cells = [cell, gone]
    return nb


def test_widgets_are_drawn_from_their_saved_state():
    nb, info = slides.prepare_notebook(_widget_notebook())
    assert "widgets" not in nb.metadata  # so no page loads the widget manager
    assert info["widgets"] == 1 and info["charts"] == 1
    html = nb.cells[0].outputs[0]["data"]["text/html"]
    assert "application/vnd.jupyter.widget-view+json" not in nb.cells[0].outputs[0]["data"]
    assert 'type="range"' in html and 'value="2"' in html and 'max="2"' in html and "disabled" in html
    assert ">batch size<" in html and ">64<" in html  # the label and the value it was left at
    assert html.index("WIDGET_TEXT_5151") < html.index("plotly-graph-div")
    assert "Plotly.newPlot" in html and slides.count_plotlyjs(html) == 0
    # a view whose state was not saved shows what the kernel said it was
    assert "IntSlider(value=3)" in nb.cells[1].outputs[0]["data"]["text/html"]


def test_sources_are_found_by_the_suite_engine(tmp_path, monkeypatch):
    for name in ("00_setup", "03_capture_replay", "workshop_90min"):
        make_fixture_notebook(tmp_path / f"{name}.ipynb")
    assert [p.name for p in find_notebooks(None, tmp_path)] == [
        "00_setup.ipynb", "03_capture_replay.ipynb"]
    got = find_notebooks(["3", "workshop_90min", "00_setup.ipynb"], tmp_path)
    assert [p.stem for p in got] == ["03_capture_replay", "workshop_90min", "00_setup"]
    with pytest.raises(SuiteError, match="'07' matches no notebook"):
        find_notebooks(["07"], tmp_path)
    # export_slides rejects a bad name before fetching assets or writing anything
    monkeypatch.setattr(slides, "ensure_web_assets", lambda **k: pytest.fail("assets fetched"))
    with pytest.raises(SuiteError, match="'99_nope'"):
        slides.export_slides(out_dir=tmp_path / "out", notebooks=["99_nope"])
    assert not (tmp_path / "out").exists()


def test_fetch_script_pins_every_package_the_exports_copy():
    pins = slides.pinned_packages()
    assert pins.get("reveal.js", "").startswith("4.")  # what nbconvert's reveal template expects
    for src, _ in slides.assets._COPY_FILES:
        parts = src.split("/")
        name = "/".join(parts[:2]) if src.startswith("@") else parts[0]
        assert name in pins, f"{name} is copied into decks but not pinned in fetch_web_assets.sh"


def test_missing_npm_gives_install_advice(tmp_path, monkeypatch):
    monkeypatch.setenv(slides.WEB_DIR_ENV, str(tmp_path / "web"))
    monkeypatch.setattr(slides.assets.shutil, "which", lambda name: None)
    with pytest.raises(slides.SlidesError, match=r"Install Node.js"):
        slides.ensure_web_assets(quiet=True)


# ----------------------------------------------------------------------------- exports


def test_deck_and_page_exist_with_local_assets(exported):
    deck, html, out = exported["deck"], exported["html"], exported["out"]
    assert deck.name == "99_fixture.slides.html" and deck.stat().st_size > 100_000
    assert html.name == "99_fixture.html" and html.stat().st_size > 100_000
    for page in (deck, html):
        text = page.read_text(encoding="utf-8")
        local = re.findall(r"""(?:src|href)\s*=\s*["'](assets/[^"']+)["']""", text)
        local += re.findall(r"""["'](assets/reveal\.js)/""", text)
        assert local, f"{page.name} references no local asset"
        for ref in local:
            assert (out / ref).exists(), f"{page.name} refers to {ref}, which was not copied"
    assert (out / "assets/reveal.js/dist/reveal.js").is_file()
    assert (out / "assets/reveal.js/plugin/notes/notes.js").is_file()


def test_no_remote_script_or_style(exported):
    for page in (exported["deck"], exported["html"]):
        assert slides.find_remote_urls(page.read_text(encoding="utf-8"), page.parent) == []
    slides.check_offline([exported["deck"], exported["html"]])


def test_plotlyjs_is_one_shared_file(exported):
    for page in (exported["deck"], exported["html"]):
        text = page.read_text(encoding="utf-8")
        assert slides.count_plotlyjs(text) == 0, page.name  # not embedded: loaded from assets/
        assert text.count('<script src="assets/plotly.min.js"></script>') == 1, page.name
        assert text.count('class="plotly-graph-div"') == 2, page.name
        assert "require.js" not in text and "jquery" not in text.lower()
    assert (exported["out"] / "assets" / "plotly.min.js").stat().st_size > 1_000_000


def test_parameters_cell_dropped_and_slides_made(exported):
    deck = exported["deck"].read_text(encoding="utf-8")
    assert PARAM_MARKER not in deck and PARAM_MARKER not in exported["html"].read_text()
    assert "configure_plotly" not in deck  # the `skip` set-up cell is not on a slide
    assert "Launch-bound decode" in deck and "Step time" in deck
    assert deck.count("<section") >= 3
    assert '<aside class="notes">' in deck
    assert "Reveal.initialize" in deck and "assets/mathjax/" in deck  # the title has TeX
    assert 'src="assets/reveal.js/dist/reveal.js"' in deck


def test_export_slides_uses_the_run_folder(tmp_path, tmp_path_factory, monkeypatch):
    web_assets_or_skip()
    source, executed = executed_fixture(tmp_path_factory)
    run = tmp_path / "runs" / "20260101-000000-cpu"
    (run / "notebooks").mkdir(parents=True)
    shutil.copy(executed, run / "notebooks" / source.name)
    (run / "run.json").write_text(json.dumps({"notebooks": [{"name": source.stem,
                                                             "status": "ok"}]}))

    def no_execution(*a, **k):
        raise AssertionError("the run folder's executed notebook should have been used")

    monkeypatch.setattr(slides, "execute_notebook", no_execution)
    out = tmp_path / "slides"
    result = slides.export_slides(run_dir=run, out_dir=out, notebooks=[str(source)], html=False)
    assert [p.name for p in result.files] == ["99_fixture.slides.html"]
    assert result.run_dir == run and result.executed_here == []
    assert (out / "assets" / "reveal.js" / "dist" / "reveal.js").is_file()
    assert (out / "assets" / "plotly.min.js").is_file()


def test_export_slides_executes_without_a_run(tmp_path, tmp_path_factory, monkeypatch):
    web_assets_or_skip()
    source, executed = executed_fixture(tmp_path_factory)
    calls = []

    def fake_execute(src, dest, **kw):
        calls.append(Path(src).name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(executed, dest)
        return dest

    monkeypatch.setattr(slides, "execute_notebook", fake_execute)
    result = slides.export_slides(run_dir=None, out_dir=tmp_path / "s", notebooks=[str(source)],
                                  html=True, runs_root=tmp_path / "no-runs")
    assert calls == ["99_fixture.ipynb"]
    assert sorted(p.name for p in result.files) == ["99_fixture.html", "99_fixture.slides.html"]
    assert result.run_dir is None and result.executed_here == ["99_fixture"]
    assert result.run_note.startswith("no complete run holds 99_fixture")


# ----------------------------------------------------------------------------- run selection


def make_run(root: Path, name: str, notebooks: dict[str, str], *, status: str = "ok",
             started: str = "2026-01-01T00:00:00+00:00", sweep: dict | None = None,
             kind: str = "labkit-run") -> Path:
    """A run folder as ``labkit run`` writes it: ``run.json`` and ``notebooks/<name>.ipynb``
    for each notebook (``{stem: status}``) that has status ok."""
    run = root / name
    (run / "notebooks").mkdir(parents=True)
    entries = []
    for stem, st in notebooks.items():
        entries.append({"name": stem, "input": f"notebooks/{stem}.ipynb", "status": st,
                        "output": f"notebooks/{stem}.ipynb" if st == "ok" else None})
        if st == "ok":
            nbformat.write(nbformat.v4.new_notebook(), str(run / "notebooks" / f"{stem}.ipynb"))
    (run / "run.json").write_text(json.dumps({
        "schema": 1, "kind": kind, "run": name, "status": status, "started": started,
        "sweep": sweep, "notebooks": entries}))
    return run


@pytest.fixture
def suite(tmp_path):
    """Two source notebooks and a runs/ folder: an older complete run, then newer runs that
    are no use: a failed one, one run of a sweep, one lacking a notebook, one still running
    (the newest), a bench-like folder without run.json and a sweep folder."""
    (tmp_path / "nbs").mkdir()
    src = [make_fixture_notebook(tmp_path / "nbs" / f"{n}.ipynb")
           for n in ("00_setup", "01_launch_overhead")]
    both = {"00_setup": "ok", "01_launch_overhead": "ok"}
    root = tmp_path / "runs"
    make_run(root, "20260101-000000-cpu", both, started="2026-01-01T00:00:00+00:00")
    make_run(root, "20260102-000000-cpu", {"00_setup": "ok", "01_launch_overhead": "failed"},
             status="failed", started="2026-01-02T00:00:00+00:00")
    make_run(root, "20260103-000000-cpu", both, started="2026-01-03T00:00:00+00:00",
             sweep={"index": 1, "of": 2, "sweep_dir": "sweep-20260103-000000",
                    "combination": {"repeats": 5}})
    make_run(root, "20260104-000000-cpu", {"00_setup": "ok"}, started="2026-01-04T00:00:00+00:00")
    make_run(root, "20260105-000000-cpu", {"00_setup": "ok", "01_launch_overhead": "pending"},
             status="running", started="2026-01-05T00:00:00+00:00")
    (root / "20260106-000000-bench" / "results").mkdir(parents=True)
    sweep = root / "sweep-20260103-000000"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps({"kind": "labkit-sweep", "runs": [
        {"index": 1, "run": "20260103-000000-cpu"}]}))
    return src, root


def test_newest_complete_run_passes_over_partial_failed_and_sweep_runs(suite):
    src, root = suite
    found, passed = slides.newest_complete_run(src, root)
    assert found == root / "20260101-000000-cpu"
    assert passed == ["20260105-000000-cpu: status 'running'",
                      "20260104-000000-cpu: lacks 01_launch_overhead",
                      "20260103-000000-cpu: one run of the sweep sweep-20260103-000000",
                      "20260102-000000-cpu: status 'failed'"]
    # asked for 00 only, the run lacking 01 is complete
    assert slides.newest_complete_run(src[:1], root)[0] == root / "20260104-000000-cpu"
    assert slides.newest_complete_run(src, root / "missing") == (None, [])


def test_choose_run_says_which_run_and_why(suite):
    src, root = suite
    run, note = slides.choose_run(src, None, root)
    assert run == root / "20260101-000000-cpu"
    assert "using run" in note and "20260101-000000-cpu" in note
    assert "newest complete run holding 00_setup, 01_launch_overhead" in note
    assert "20260105-000000-cpu: status 'running'" in note
    # an explicit run is used as it is, even one of a sweep
    run, note = slides.choose_run(src, root / "20260103-000000-cpu", root)
    assert run == root / "20260103-000000-cpu" and note.endswith("(as given)")
    run, note = slides.choose_run(src, None, root / "missing")
    assert run is None and note.startswith("no complete run holds 00_setup, 01_launch_overhead")


def test_a_solution_run_is_not_taken_for_the_notebook(tmp_path):
    nb = make_fixture_notebook(tmp_path / "00_setup.ipynb")
    run = make_run(tmp_path / "runs", "20260101-000000-cpu", {"00_setup": "ok"})
    record = json.loads((run / "run.json").read_text())
    record["notebooks"][0]["input"] = "notebooks/solutions/00_setup.ipynb"
    (run / "run.json").write_text(json.dumps(record))
    assert slides.why_not_complete(run, [nb]) == "lacks 00_setup"


@pytest.mark.parametrize("make, needle", [
    (lambda root: root / "nowhere", "does not exist"),
    (lambda root: root / "20260106-000000-bench", "is not a run folder"),
    (lambda root: root / "sweep-20260103-000000", "is a sweep folder, not a run folder: pass one "
                                                  "of its runs (its runs: 20260103-000000-cpu)"),
])
def test_run_that_is_not_a_run_folder_is_an_error_naming_it(suite, make, needle):
    src, root = suite
    path = make(root)
    with pytest.raises(SuiteError) as err:
        slides.choose_run(src, path, root)
    assert str(path) in str(err.value) and needle in str(err.value)


def _no_export(monkeypatch, executed: list[str]) -> None:
    """Stub out the assets and the export itself (run selection is what is tested)."""
    def fake_export(nb_path, out_dir, *, html=True, name=None):
        return [Path(out_dir) / f"{name}.slides.html"]

    def fake_execute(src, dest, **kw):
        executed.append(Path(src).stem)
        return dest

    monkeypatch.setattr(slides, "ensure_web_assets", lambda **k: Path("node_modules"))
    monkeypatch.setattr(slides, "copy_assets", lambda out, modules=None: Path(out) / "assets")
    monkeypatch.setattr(slides, "export_notebook", fake_export)
    monkeypatch.setattr(slides, "check_offline", lambda paths: None)
    monkeypatch.setattr(slides, "execute_notebook", fake_execute)


def test_export_slides_takes_the_newest_complete_run_and_executes_nothing(suite, tmp_path,
                                                                          monkeypatch):
    src, root = suite
    executed: list[str] = []
    _no_export(monkeypatch, executed)
    lines: list[str] = []
    result = slides.export_slides(out_dir=tmp_path / "out", notebooks=[str(p) for p in src],
                                  runs_root=root, echo=lines.append)
    assert executed == [] and result.executed_here == []
    assert result.run_dir == root / "20260101-000000-cpu"
    assert lines == [result.run_note] and "20260101-000000-cpu" in lines[0]
    assert [p.name for p in result.files] == ["00_setup.slides.html",
                                              "01_launch_overhead.slides.html"]


def test_export_slides_with_a_partial_run_given_executes_what_it_lacks(suite, tmp_path,
                                                                       monkeypatch, capsys):
    src, root = suite
    executed: list[str] = []
    _no_export(monkeypatch, executed)
    result = slides.export_slides(root / "20260102-000000-cpu", tmp_path / "out",
                                  [str(p) for p in src])
    assert executed == ["01_launch_overhead"] and result.executed_here == ["01_launch_overhead"]
    assert result.run_dir == root / "20260102-000000-cpu"
    assert "lacks 01_launch_overhead executed (status 'failed')" in capsys.readouterr().err


# ----------------------------------------------------------------------------- hints and run pages

HINT_CELL = ("### Exercise\nDo it.\n\n<details><summary>Hint</summary>\n\n"
             "Use **HINT_WORD_4411** and `rec[\"x\"]`.\n</details>")


def test_fold_details_renders_the_hint_inside():
    folded = fold_details(HINT_CELL)
    block = folded[folded.index("<details>"):]
    assert block.index("HINT_WORD_4411") < block.index("</details>")
    assert "<strong>HINT_WORD_4411</strong>" in block and "<code>rec[&quot;x&quot;]</code>" in block
    assert not re.search(r"\n[ \t]*\n", block), "a blank line would end the HTML block"
    assert folded.startswith("### Exercise\nDo it.\n\n")  # the rest of the cell is untouched
    # a code block keeps its empty line (as an empty comment), a block without a body stays empty
    code = fold_details("<details><summary>H</summary>\n\n```\na\n\nb\n```\n</details>")
    assert "a\n<!-- -->\nb" in code and not re.search(r"\n[ \t]*\n", code)
    assert fold_details("<details><summary>H</summary>\n</details>") == \
        "<details><summary>H</summary>\n</details>"
    assert fold_details("no hint here") == "no hint here"


def _hint_notebook(path: Path, extra_output: dict | None = None) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    md = nbformat.v4.new_markdown_cell(HINT_CELL)
    md.metadata["slideshow"] = {"slide_type": "slide"}
    code = nbformat.v4.new_code_cell("x = 1")
    if extra_output:
        code.outputs = [nbformat.v4.new_output("display_data", data=extra_output)]
    nb.cells = [md, code]
    nbformat.write(nb, str(path))
    return path


def _details_blocks(html: str) -> list[str]:
    return re.findall(r"<details>(.*?)</details>", html, re.S)


def test_exports_fold_hints_and_leave_the_notebook_as_it_was(tmp_path):
    src = _hint_notebook(tmp_path / "98_hint.ipynb")
    before = src.read_text(encoding="utf-8")
    slides_exp, html_exp = slides.make_exporters()
    for exporter in (slides_exp, html_exp):
        nb = nbformat.read(str(src), as_version=4)
        body, _ = exporter.from_notebook_node(nb, resources={"labkit_head": ""})
        blocks = _details_blocks(body)
        assert len(blocks) == 1 and "<strong>HINT_WORD_4411</strong>" in blocks[0], blocks
    out = report.export_notebook_html(src, tmp_path / "run" / "html" / "98_hint.html")
    blocks = _details_blocks(out.read_text(encoding="utf-8"))
    assert len(blocks) == 1 and "HINT_WORD_4411" in blocks[0]
    assert src.read_text(encoding="utf-8") == before  # JupyterLab sees the notebook unchanged


def test_run_page_without_math_or_widgets_needs_no_assets(tmp_path):
    src = _hint_notebook(tmp_path / "98_hint.ipynb")
    out = report.export_notebook_html(src, tmp_path / "html" / "98_hint.html")
    text = out.read_text(encoding="utf-8")
    assert slides.find_remote_urls(text, out.parent) == []
    assert "<script src=" not in text  # no require.js, no MathJax: nothing to load
    assert not (tmp_path / "html" / slides.ASSETS_DIR).exists()


def test_run_page_with_a_remote_script_is_refused(tmp_path):
    src = _hint_notebook(tmp_path / "98_hint.ipynb", extra_output={
        "text/html": '<link rel="stylesheet" href="https://cdn.example.org/lib.css"><p>x</p>'})
    target = tmp_path / "html" / "98_hint.html"
    with pytest.raises(slides.RemoteAssetError, match=r"cdn.example.org/lib.css"):
        report.export_notebook_html(src, target)
    assert not target.exists()


def test_run_page_copies_only_what_it_needs(tmp_path):
    web_assets_or_skip()
    src = _hint_notebook(tmp_path / "98_hint.ipynb")
    nb = nbformat.read(str(src), as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("A step costs $t = n c$."))
    nbformat.write(nb, str(src))
    out = report.export_notebook_html(src, tmp_path / "html" / "98_hint.html")
    text = out.read_text(encoding="utf-8")
    assert 'src="assets/mathjax/tex-svg-full.js"' in text and "plotly.min.js" not in text
    assets = tmp_path / "html" / slides.ASSETS_DIR
    assert sorted(p.name for p in assets.iterdir()) == ["mathjax"]


def test_run_page_with_tex_and_no_mathjax_is_written_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv(slides.WEB_DIR_ENV, str(tmp_path / "web"))
    monkeypatch.setattr(slides.assets.subprocess, "run", lambda *a, **k: pytest.fail("fetched"))
    src = _hint_notebook(tmp_path / "98_hint.ipynb")
    nb = nbformat.read(str(src), as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("A step costs $t = n c$."))
    nbformat.write(nb, str(src))
    notes: list[str] = []
    out = report.export_notebook_html(src, tmp_path / "html" / "98_hint.html", notes=notes)
    text = out.read_text(encoding="utf-8")
    assert "$t = n c$" in text and "mathjax" not in text.lower().replace("mathjaxconfig", "")
    assert len(notes) == 1 and "98_hint" in notes[0] and "TeX shown as written" in notes[0]
    assert not (tmp_path / "web").exists()


def test_run_page_with_charts_and_widgets_needs_no_npm(tmp_path, monkeypatch):
    """The page `labkit run` writes for a notebook with a chart and a widget: written with npm
    and the web assets absent, loading only the shared plotly.js beside it."""
    monkeypatch.setenv(slides.WEB_DIR_ENV, str(tmp_path / "web"))
    monkeypatch.setattr(slides.assets.shutil, "which", lambda name: None)
    monkeypatch.setattr(slides.assets.subprocess, "run", lambda *a, **k: pytest.fail("fetched"))
    src = tmp_path / "97_widget.ipynb"
    nbformat.write(_widget_notebook(), str(src))
    out = report.export_notebook_html(src, tmp_path / "run" / "html" / "97_widget.html")
    text = out.read_text(encoding="utf-8")
    assert re.findall(r'<script src="([^"]+)"', text) == ["assets/plotly.min.js"]
    assert "WIDGET_TEXT_5151" in text and 'type="range"' in text
    assert "embed-amd" not in text and "widget-state+json" not in text
    assert slides.find_remote_urls(text, out.parent) == []
    assert sorted(p.name for p in (out.parent / "assets").iterdir()) == ["plotly.min.js"]
    assert not (tmp_path / "web").exists()


# ----------------------------------------------------------------------------- deck rules


def _deck_fixture() -> nbformat.NotebookNode:
    """An executed notebook as the suite writes them: title, parameters, set-up, a section
    whose first cell is left out, a slide with two charts, a statement, an exercise, a code
    cell tagged for the slide, a long printout and a long markdown cell."""
    fig = {"data": [{"type": "scatter", "x": [1], "y": [2]}], "layout": {}}

    def chart():
        return nbformat.v4.new_output("display_data", data={"application/vnd.plotly.v1+json": fig})

    def md(src, kind="-", tags=()):
        c = nbformat.v4.new_markdown_cell(src)
        c.metadata.update(slideshow={"slide_type": kind}, tags=list(tags))
        return c

    def code(src, kind="-", tags=(), outputs=()):
        c = nbformat.v4.new_code_cell(src)
        c.metadata.update(slideshow={"slide_type": kind}, tags=list(tags))
        c.outputs = list(outputs)
        return c

    long_text = "\n\n".join(f"Paragraph {i}: " + "word " * 60 for i in range(12))
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        md("# 99 · Title", "slide"),
        code("repeats = 3", "skip", ["parameters"]),
        code("from labkit.teach.notebook import setup\nnb = setup('99_x')", "-",
             outputs=[nbformat.v4.new_output("stream", name="stdout", text="tier: cpu\n")]),
        code("x = 1  # no output", "slide"),                      # left out: starts the slide
        md("## 1. Charts"),                                      # ... so this one does
        code("two_charts()", outputs=[chart(), chart()]),        # split: one chart per slide
        md("The takeaway.", "fragment"),
        code("nb.state('it holds', True, 'x')", tags=["statement"],
             outputs=[nbformat.v4.new_output("stream", name="stdout", text="STATEMENT_OUT\n")]),
        code("answer = ...  # TODO\nExercise('1.1 x').check(answer)",
             outputs=[nbformat.v4.new_output("stream", name="stdout", text="TODO 1.1\n")]),
        code("SHOWN_CODE_7 = 1", "subslide", ["slide-code"]),
        code("print(rows)", outputs=[nbformat.v4.new_output(
            "stream", name="stdout", text="".join(f"row {i}\n" for i in range(40)))]),
        md(long_text, "slide"),
    ]
    return nb


def test_deck_rules_choose_what_each_slide_shows():
    from labkit.suite.slides.deck import STREAM_LINES, TEXT_LINES, slide_type, text_lines

    nb = slides.deck_notebook(_deck_fixture())
    text = "\n".join(c.source for c in nb.cells)
    outs = "".join(str(c.get("outputs", "")) for c in nb.cells)
    assert "setup(" not in text and "repeats" not in text and "Exercise(" not in text
    assert "STATEMENT_OUT" not in outs and "TODO 1.1" not in outs and "tier: cpu" not in outs
    shown = [c for c in nb.cells if c.cell_type == "code"
             and not (c.metadata.get("transient") or {}).get("remove_source")]
    assert [c.source for c in shown] == ["SHOWN_CODE_7 = 1"]  # code hidden unless slide-code
    kinds = [(c.cell_type, slide_type(c)) for c in nb.cells]
    assert kinds[:4] == [("markdown", "slide"), ("markdown", "slide"), ("code", "-"),
                         ("code", "subslide")]  # the left-out cell's slide start passed on
    charts = [c for c in nb.cells if c.cell_type == "code" and c.outputs and
              "application/vnd.plotly.v1+json" in (c.outputs[0].get("data") or {})]
    assert len(charts) == 2 and all(len(c.outputs) == 1 for c in charts)
    printed = next(c for c in nb.cells if "print(rows)" in c.source).outputs[0]["text"]
    assert printed.count("row ") == STREAM_LINES and "28 more line(s)" in printed
    parts = [c for c in nb.cells if c.source.startswith("Paragraph")]
    assert len(parts) >= 2 and slide_type(parts[0]) == "slide"
    assert all(slide_type(p) == "subslide" for p in parts[1:])
    assert all(text_lines(p.source) <= TEXT_LINES for p in parts)
    assert "\n\n".join(p.source for p in parts) == _deck_fixture().cells[-1].source


def test_deck_rules_keep_fences_hints_and_lists_whole():
    from labkit.suite.slides.deck import _split_markdown

    fence = "```\n" + "\n".join(f"line {i}" for i in range(10)) + "\n\nmore\n```"
    src = "## T\n\n" + ("text " * 100 + "\n\n") * 3 + fence + "\n\n<details><summary>Hint</summary>\n\nh\n</details>"
    parts = _split_markdown(src, 8)
    assert parts[0] == "## T" and any(fence in p for p in parts)
    assert any("<details><summary>Hint</summary>\n\nh\n</details>" in p for p in parts)
    items = "\n".join(f"- item {i} " + "w " * 50 for i in range(12))
    parts = _split_markdown(items, 6)
    assert len(parts) > 1 and all(p.startswith("- item") for p in parts)
    assert "\n".join(parts) == items  # cut between items, tight lists stay tight


def _exercise_notebook():
    """An executed notebook with a new-style exercise (tagged ``exercise``, checked by
    ``nb.check``), its task and hint, an old-style check printed from an untagged cell, and
    a paragraph written by ``nb.say``."""
    def md(src, kind="-"):
        c = nbformat.v4.new_markdown_cell(src)
        c.metadata["slideshow"] = {"slide_type": kind}
        return c

    def code(src, outputs, tags=(), kind="-"):
        c = nbformat.v4.new_code_cell(src)
        c.metadata.update(slideshow={"slide_type": kind}, tags=list(tags))
        c.outputs = outputs
        return c

    def out(text):
        return nbformat.v4.new_output("stream", name="stdout", text=text)

    say_md = nbformat.v4.new_output("display_data", data={
        "text/markdown": "The step took 512 µs: SAID_PARAGRAPH_5.",
        "text/plain": "<IPython.core.display.Markdown object>"})
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.cells = [
        md("# 97 · Exercises", "slide"),
        md("### Exercise 97.1 — Predict\n\nTASK_TEXT_1 before the chart.\n\n"
           "<details><summary>Hint</summary>\n\nHINT_TEXT_2 look at the bars.\n\n</details>",
           "subslide"),
        code('guess = ...  # TODO: "lower" or "higher"\n\nnb.check("97.1", guess=guess)',
             [out("[TODO] 97.1 Predict: guess -- not answered yet (replace the ... / None)\n"
                  "97.1 Predict: 0/1 checks passed -- keep going\n")], ["exercise"]),
        md("<details><summary>Hint</summary>\nONLY_HINT_3\n</details>"),
        code('ex.check("ranking", ranking, by_gain)\nprint("KEPT_LINE_4")',
             [out("[TODO] 3.2 where: ranking -- not answered yet | hint: rec['x']\n"
                  "KEPT_LINE_4\n")]),
        code('t = 512\nnb.say("The step took {t} µs: SAID_PARAGRAPH_5.", t=t)', [say_md]),
    ]
    return nb


def test_decks_show_exercise_code_without_its_checks_and_no_hints():
    nb = slides.deck_notebook(_exercise_notebook())
    text = "\n".join(c.source for c in nb.cells)
    outs = "".join(str(c.get("outputs", "")) for c in nb.cells)
    assert "TASK_TEXT_1" in text and "<details" not in text
    assert "HINT_TEXT_2" not in text and "ONLY_HINT_3" not in text
    ex = next(c for c in nb.cells if "nb.check(" in c.source)
    assert ex.outputs == [] and not (ex.metadata.get("transient") or {}).get("remove_source")
    assert "not answered yet" not in outs and "checks passed" not in outs
    assert "KEPT_LINE_4" in outs  # the rest of a printout stays


def test_drop_details_removes_the_hint_blocks():
    from labkit.suite.slides.deck import drop_details

    src = "Task.\n\n<details><summary>Hint</summary>\n\nh\n\n</details>\n\nAfter."
    assert drop_details(src) == "Task.\n\nAfter."
    assert drop_details("no hint") == "no hint"


def test_pages_show_a_said_paragraph_once(tmp_path):
    """The source of a cell whose output is the paragraph it writes (``nb.say``) is folded on
    a page (a click shows it); other code stays open."""
    path = tmp_path / "97_ex.ipynb"
    nbformat.write(_exercise_notebook(), path)
    out = report.export_notebook_html(path, tmp_path / "html" / "97_ex.html")
    text = out.read_text(encoding="utf-8")
    folded = re.findall(r'<details class="labkit-source">(.*?)</details>', text, re.S)
    assert len(folded) == 1 and "SAID_PARAGRAPH_5" in folded[0]
    outside = re.sub(r'<details class="labkit-source">.*?</details>', "", text, flags=re.S)
    assert outside.count("SAID_PARAGRAPH_5") == 1  # the rendered paragraph, once
    assert "KEPT_LINE_4" in outside  # other code is shown as it is
    nb = nbformat.read(str(path), as_version=4)
    nb.cells[4].metadata["jupyter"] = {"source_hidden": True}  # hidden in JupyterLab: folded
    assert slides.prepare_notebook(nb)[0].cells[4].metadata["labkit"]["fold_source"]


def test_web_assets_are_fetched_once_when_asked_at_the_same_time(tmp_path, monkeypatch):
    """Parallel callers (test workers, two terminals) wait for one fetch instead of unpacking
    into the same folder at once."""
    import threading

    from labkit.suite.slides import assets

    log = tmp_path / "fetches.log"
    make = [f'mkdir -p "$1/node_modules/{name}" && printf \'{{"version": "{version}"}}\' '
            f'> "$1/node_modules/{name}/package.json"'
            for name, version in assets.pinned_packages().items()]
    make += [f'mkdir -p "$(dirname "$1/node_modules/{src}")" && touch "$1/node_modules/{src}"'
             for src, _ in assets._COPY_FILES]
    make += [f'mkdir -p "$1/node_modules/{assets._THEME_DIR}"']
    script = tmp_path / "fake_fetch.sh"
    script.write_text(f'echo start >> "{log}"; sleep 0.3\n' + "\n".join(make) +
                      f'\necho end >> "{log}"\n')
    monkeypatch.setenv("LABKIT_WEB_DIR", str(tmp_path / "web"))
    monkeypatch.setattr(assets, "fetch_script", lambda: script)
    monkeypatch.setattr(assets.shutil, "which", lambda name: "/usr/bin/" + name)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(assets.ensure_web_assets(quiet=True)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [tmp_path / "web" / "node_modules"] * 3
    assert log.read_text().split() == ["start", "end"]
    assert assets.missing_assets(tmp_path / "web" / "node_modules") == []


def test_missing_nbconvert_templates_name_the_fix(monkeypatch, tmp_path):
    """Where nbconvert's templates are not installed where Jupyter looks (a ``pip --target``
    install, say), making the exporters fails with a message that says how to fix it."""
    from nbconvert.exporters.templateexporter import TemplateExporter

    monkeypatch.setattr(TemplateExporter, "get_prefix_root_dirs", lambda self: [str(tmp_path)])
    with pytest.raises(ValueError, match="No template sub-directory") as got:
        slides.make_exporters()
    assert "JUPYTER_PATH" in str(got.value) and "make setup" in str(got.value)
    assert "\n" not in str(got.value)
