"""``labkit slides``: export executed notebooks to reveal.js decks and HTML pages that work
OFFLINE (no CDN address left in the page), charts included.

* The executed notebooks come from a run folder (``runs/<stamp>/notebooks/NN_x.ipynb``, made by
  ``labkit run``): the one given, else the newest COMPLETE run (status ok, every notebook asked
  for executed, not one run of a sweep; :func:`choose_run`), and the result says which. Without
  one, the notebooks are executed here (the suite engine, :mod:`labkit.suite.engine`, into a
  temporary folder), so a CPU machine still gets decks showing the recorded reference charts. Notebooks are named as for
  ``labkit run`` (``03``, ``03_capture_replay``, ``solutions/03``, ``workshop_90min``, a path).
* Cells tagged ``parameters`` / ``injected-parameters`` are dropped; the cells' slideshow
  metadata makes the slides (``skip`` cells are left out of decks).
* reveal.js, require.js, jQuery, the Jupyter widgets HTML manager and MathJax 3 are local
  copies: ``scripts/fetch_web_assets.sh`` (npm) puts them into ``build/web/node_modules``
  (git-ignored; ``$LABKIT_WEB_DIR`` overrides ``build/web``), and each export copies what it
  needs to ``<out>/assets/``, referenced by relative URLs. Mermaid is not loaded (JupyterLab
  renders mermaid diagrams; decks show their source). MathJax is loaded only by pages whose
  markdown holds TeX.
* plotly.js is put into the page head exactly once. The ``plotly_mimetype+notebook`` renderer
  emits the library with the first chart shown; moved to the head, it still loads when that
  cell is a ``skip`` cell, a later fragment or dropped. Every chart is rebuilt from its plotly
  JSON output, so decks draw the charts whatever plotly renderer the notebook ran with.
* Hints (``<details>`` blocks of markdown) are folded with their text inside, as in JupyterLab
  (:mod:`labkit.suite.details`, a preprocessor of both exporters; the notebooks are unchanged).
* A slide whose content is taller or wider than the slide (1280x800) is scaled down to fit,
  never scrolled or cut off (the reveal template's ``fitSlide``).
* The run pages of ``labkit run`` (:func:`labkit.suite.report.export_notebook_html`) are made
  with the same exporter and copy only the assets they need (:func:`page_asset_parts`).
* :func:`find_remote_urls` / :func:`check_offline` list any http(s) address a page would still
  load a script, style, font or module from; the export fails loudly if one remains.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from labkit import envvars
from labkit.paths import repo_root
from labkit.suite.details import FoldDetailsPreprocessor
from labkit.suite.engine import DEFAULT_PLOTLY_RENDERER, execute_notebook as _execute, find_notebooks
from labkit.suite.engine import RUN_FILE, SOLUTIONS, SWEEP_FILE, SuiteError, display_path

#: Folder (under the output folder) that receives the JavaScript/CSS copies.
ASSETS_DIR = "assets"
#: Environment variable naming the folder that holds ``node_modules`` (default ``build/web``).
WEB_DIR_ENV = envvars.WEB_DIR
#: Tags of cells left out of every export.
DROP_TAGS = ("parameters", "injected-parameters")
#: reveal.js theme: ``white`` loads its fonts from local files (``simple`` would use a web font).
REVEAL_THEME = "white"

# files copied from node_modules: (source under node_modules, destination under assets/)
_COPY_FILES: tuple[tuple[str, str], ...] = (
    ("reveal.js/dist/reveal.js", "reveal.js/dist/reveal.js"),
    ("reveal.js/dist/reveal.css", "reveal.js/dist/reveal.css"),
    ("reveal.js/dist/reset.css", "reveal.js/dist/reset.css"),
    ("reveal.js/plugin/notes/notes.js", "reveal.js/plugin/notes/notes.js"),
    ("requirejs/require.js", "require.js"),
    ("jquery/dist/jquery.min.js", "jquery.min.js"),
    ("@jupyter-widgets/html-manager/dist/embed-amd.js", "html-manager/embed-amd.js"),
    ("mathjax/es5/tex-svg-full.js", "mathjax/tex-svg-full.js"),
)
# folders copied whole (source, destination, file suffixes to copy)
_COPY_DIRS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("reveal.js/dist/theme", "reveal.js/dist/theme",
     (".css", ".woff", ".woff2", ".ttf", ".eot", ".svg", ".otf")),
    # fonts the widget manager's bundled CSS refers to (relative to embed-amd.js)
    ("@jupyter-widgets/html-manager/dist", "html-manager",
     (".woff", ".woff2", ".ttf", ".eot", ".svg")),
)

#: URLs (relative to the exported page) of the local copies.
LOCAL_URLS = {
    "reveal_url_prefix": f"{ASSETS_DIR}/reveal.js",
    "require_js_url": f"{ASSETS_DIR}/require.js",
    "jquery_url": f"{ASSETS_DIR}/jquery.min.js",
    "widget_renderer_url": f"{ASSETS_DIR}/html-manager/embed-amd.js",
    "mathjax_url": f"{ASSETS_DIR}/mathjax/tex-svg-full.js",
}

_PLOTLY_BANNER = re.compile(r"\*\s*plotly\.js v\d+\.\d+\.\d+")


class SlidesError(RuntimeError):
    """An export could not be made (missing assets, a notebook that fails, ...)."""


class RemoteAssetError(SlidesError):
    """An exported page still loads something from the network."""


# ----------------------------------------------------------------------------- paths


def web_dir() -> Path:
    """Folder holding ``node_modules`` with the web assets (``build/web`` or ``$LABKIT_WEB_DIR``)."""
    return envvars.web_dir() or repo_root() / "build" / "web"


def fetch_script() -> Path:
    return repo_root() / "scripts" / "fetch_web_assets.sh"


def pinned_packages() -> dict[str, str]:
    """``{package: version}`` pinned in ``scripts/fetch_web_assets.sh`` (empty without it)."""
    try:
        text = fetch_script().read_text(encoding="utf-8")
    except OSError:
        return {}
    block = re.search(r"^PACKAGES=\((.*?)^\)", text, re.S | re.M)
    specs = re.findall(r'"((?:@[\w.-]+/)?[\w.-]+)@([\w.-]+)"', block.group(1)) if block else []
    return dict(specs)


def _installed_version(node_modules: Path, name: str) -> str | None:
    import json

    try:
        return json.loads((node_modules / name / "package.json").read_text("utf-8")).get("version")
    except (OSError, ValueError):
        return None


def missing_assets(node_modules: Path) -> list[str]:
    """What ``node_modules`` lacks for the exports: missing files, and packages at another
    version than the one pinned in ``scripts/fetch_web_assets.sh`` (empty when complete)."""
    need = [src for src, _ in _COPY_FILES] + [src for src, _, _ in _COPY_DIRS]
    out = [p for p in need if not (node_modules / p).exists()]
    for name, version in pinned_packages().items():
        have = _installed_version(node_modules, name)
        if have is not None and have != version:
            out.append(f"{name}@{version} (found {have})")
    return out


def ensure_web_assets(*, fetch: bool = True, quiet: bool = False) -> Path:
    """``node_modules`` with every asset the exports need; runs ``scripts/fetch_web_assets.sh``
    (npm) when some are missing and ``fetch`` is true. Raises :class:`SlidesError` saying what to
    do when they cannot be had."""
    base = web_dir()
    modules = base / "node_modules"
    missing = missing_assets(modules)
    if not missing:
        return modules
    if not fetch:
        raise SlidesError(f"web assets missing in {modules}: {', '.join(missing)}; "
                          "run `bash scripts/fetch_web_assets.sh`")
    script = fetch_script()
    if not script.is_file():
        raise SlidesError(f"web assets missing in {modules} and {script} not found: run labkit "
                          "from a checkout of its repository")
    if shutil.which("npm") is None:
        raise SlidesError(
            "offline slides need local copies of reveal.js, require.js, jQuery, the widgets HTML "
            "manager and MathJax, fetched once with npm, which is not installed. Install Node.js "
            "(it includes npm): `apt-get install nodejs npm` on Debian/Ubuntu, `brew install node` "
            "on macOS, `conda install -c conda-forge nodejs` in a conda environment, or an "
            "installer from nodejs.org; then re-run (or run `bash scripts/fetch_web_assets.sh`).")
    if not quiet:
        print(f"labkit slides: fetching web assets into {base} (npm, once)", file=sys.stderr)
    proc = subprocess.run(["bash", str(script), str(base)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SlidesError(f"{script.name} failed (exit {proc.returncode}):\n"
                          f"{(proc.stdout + proc.stderr).strip()[-3000:]}")
    missing = missing_assets(modules)
    if missing:
        raise SlidesError(f"{script.name} ran but {modules} still lacks: {', '.join(missing)}")
    return modules


def _copy_if_changed(src: Path, dst: Path) -> None:
    if dst.exists():
        s, d = src.stat(), dst.stat()
        if s.st_size == d.st_size and int(s.st_mtime) == int(d.st_mtime):
            return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def page_asset_parts(info: dict) -> list[str]:
    """The parts of ``assets/`` (see :func:`copy_assets`) an HTML page (not a deck) of a
    prepared notebook needs: none, or ``require.js`` and ``html-manager`` for saved widgets and
    ``mathjax`` for TeX (``info`` from :func:`prepare_notebook`)."""
    parts = []
    if info.get("widgets"):
        parts += ["require.js", "html-manager"]
    if info.get("math"):
        parts.append("mathjax")
    return parts


def _part(dst: str) -> str:
    return dst.split("/", 1)[0]


def copy_assets(out_dir: Path, node_modules: Path | None = None,
                parts: Iterable[str] | None = None) -> Path:
    """Copy the assets an export needs into ``<out_dir>/assets`` (unchanged files are skipped):
    all of them, or only the ``parts`` named (first folder or file name under ``assets/``:
    ``reveal.js``, ``require.js``, ``jquery.min.js``, ``html-manager``, ``mathjax``)."""
    wanted = None if parts is None else set(parts)
    modules = node_modules if node_modules is not None else ensure_web_assets()
    dest = Path(out_dir) / ASSETS_DIR
    for src, dst in _COPY_FILES:
        if wanted is None or _part(dst) in wanted:
            _copy_if_changed(modules / src, dest / dst)
    for src, dst, suffixes in _COPY_DIRS:
        if wanted is not None and _part(dst) not in wanted:
            continue
        root = modules / src
        for f in sorted(root.rglob("*")):
            if f.is_file() and f.suffix.lower() in suffixes:
                _copy_if_changed(f, dest / dst / f.relative_to(root))
    return dest


# ----------------------------------------------------------------------------- remote addresses

_REMOTE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # <script src=...>, <img src=...>, <iframe src=...>, and JS "xxxSrc = 'https://...'"
    ("src", re.compile(r"""src\s*=\s*["'](https?:)?//[^"'\s>]+""", re.I)),
    # <link href=...> (stylesheets, icons, preloads)
    ("link", re.compile(r"""<link\b[^>]*?\bhref\s*=\s*["'](https?:)?//[^"'\s>]+""", re.I)),
    # CSS @import and url(...) (fonts, images)
    ("css", re.compile(r"""@import\s+(url\()?\s*["']?(https?:)?//[^"')\s;]+""", re.I)),
    ("css", re.compile(r"""url\(\s*["']?https?://[^"')\s]+""", re.I)),
    # ES modules: import x from "https://...", import("https://..."), import "https://..."
    ("module", re.compile(r"""\bimport\b[^;'"()]*?\(?\s*["']https?://[^"'\s]+""")),
    # require.js: paths / dependency lists with an address
    ("require", re.compile(r"""\b(?:require|requirejs|define)\s*\(\s*\[[^\]]*?["']https?://[^"']+""")),
    ("require", re.compile(r"""\bpaths\s*:\s*\{[^}]*?["']https?://[^"']+""")),
)
_URL = re.compile(r"""(?:https?:)?//[^"'\s)>;]+""")
_SCRIPT_BLOCK = re.compile(r"<script\b[^>]*>(.*?)</script>", re.S | re.I)


def _without_plotlyjs(html: str) -> str:
    """``html`` with the inline plotly.js bundle left out (its source names many addresses, e.g.
    map-tile servers, that a chart without maps never loads)."""
    def repl(m: re.Match[str]) -> str:
        body = m.group(1)
        return "<script></script>" if len(body) > 100_000 and _PLOTLY_BANNER.search(body[:2000]) \
            else m.group(0)
    return _SCRIPT_BLOCK.sub(repl, html)


def find_remote_urls(html: str, base_dir: Path | None = None) -> list[str]:
    """Every http(s) (or protocol-relative) address ``html`` would load a script, style sheet,
    font, image or module from, sorted and without repeats. Plain links (``<a href>``) and
    XML namespaces are not loads and are not listed. With ``base_dir``, local style sheets the
    page links to are scanned too (``@import`` of a web font, for instance)."""
    text = _without_plotlyjs(html)
    found: set[str] = set()
    for _, pat in _REMOTE_PATTERNS:
        for m in pat.finditer(text):
            # the address itself is the last URL in the match
            urls = _URL.findall(m.group(0))
            if urls:
                found.add(urls[-1])
    if base_dir is not None:
        for href in re.findall(r"""<link\b[^>]*?\bhref\s*=\s*["']([^"':]+\.css)["']""", html, re.I):
            css = (Path(base_dir) / href).resolve()
            if css.is_file():
                for u in find_remote_urls(css.read_text(encoding="utf-8", errors="replace")):
                    found.add(f"{u} (via {href})")
    return sorted(found)


def check_offline(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Raise :class:`RemoteAssetError` listing every page in ``paths`` that still loads a script,
    style or font from the network (see :func:`find_remote_urls`)."""
    problems = []
    for p in paths:
        p = Path(p)
        urls = find_remote_urls(p.read_text(encoding="utf-8"), base_dir=p.parent)
        if urls:
            problems.append(f"{p}:\n" + "\n".join(f"    {u}" for u in urls))
    if problems:
        raise RemoteAssetError("exported pages would load these from the network (not offline):\n"
                               + "\n".join(problems))


def count_plotlyjs(html: str) -> int:
    """How many copies of the plotly.js library ``html`` embeds."""
    return len(_PLOTLY_BANNER.findall(html))


# ----------------------------------------------------------------------------- notebooks

_MATH = re.compile(r"\$\$.+?\$\$|(?<![\\$\w])\$[^$\s][^$\n]*?(?<!\s)\$(?![\w$])|\\\(|\\\[|\\begin\{",
                   re.S)


def has_math(nb) -> bool:
    """True when a markdown cell holds TeX (``$...$``, ``$$...$$``, ``\\(``, ``\\[``)."""
    return any(c.cell_type == "markdown" and _MATH.search(c.source) for c in nb.cells)


def _is_plotlyjs_output(out) -> bool:
    html = (out.get("data") or {}).get("text/html", "")
    html = "".join(html) if isinstance(html, list) else html
    return len(html) > 100_000 and "plotly-graph-div" not in html and bool(
        _PLOTLY_BANNER.search(html[:5000]))


def _extract_plotlyjs(html: str) -> str:
    """The library's source from the renderer's output (``<script>...plotly.js...</script>``)."""
    for m in _SCRIPT_BLOCK.finditer(html):
        if _PLOTLY_BANNER.search(m.group(1)[:2000]):
            return m.group(1)
    return ""


def _chart_html(fig_json: dict) -> str:
    import plotly.io as pio

    return pio.to_html(fig_json, include_plotlyjs=False, include_mathjax=False, full_html=False,
                       default_width="100%", default_height=525, validate=False,
                       config={"responsive": True})


_REMOTE_SCRIPT_TAG = re.compile(
    r"""<script\b[^>]*\bsrc\s*=\s*["'](?:https?:)?//[^"']*["'][^>]*>\s*</script>""", re.I)


def prepare_notebook(nb, drop_tags: Sequence[str] = DROP_TAGS) -> tuple[object, dict]:
    """Make an executed notebook ready for an offline export (in place); returns ``(nb, info)``.

    Drops cells tagged with one of ``drop_tags`` (:data:`DROP_TAGS` by default); removes the plotly.js library from the outputs
    (it goes into the page head once); rebuilds every chart's HTML from its plotly JSON without
    MathJax or library copies; strips remote ``<script src>`` tags left in chart HTML.
    ``info``: ``{"charts": int, "plotlyjs": str (library source or ''), "math": bool,
    "widgets": bool}`` (``widgets``: the notebook saved widget state, drawn by the widgets
    manager).
    """
    nb.cells = [c for c in nb.cells if not set(drop_tags) & set(c.metadata.get("tags", []))]
    plotlyjs = ""
    charts = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data") or {}
            if _is_plotlyjs_output(out):
                html = data["text/html"]
                plotlyjs = plotlyjs or _extract_plotlyjs("".join(html) if isinstance(html, list) else html)
                continue
            fig = data.get("application/vnd.plotly.v1+json")
            if fig is not None:
                data["text/html"] = _chart_html(dict(fig))
                charts += 1
            elif "text/html" in data:
                html = data["text/html"]
                html = "".join(html) if isinstance(html, list) else html
                if "plotly-graph-div" in html:
                    charts += 1
                data["text/html"] = _REMOTE_SCRIPT_TAG.sub("", html)
            kept.append(out)
        cell.outputs = kept
    if charts and not plotlyjs:
        from plotly.offline import get_plotlyjs

        plotlyjs = get_plotlyjs()
    return nb, {"charts": charts, "plotlyjs": plotlyjs, "math": has_math(nb),
                "widgets": "widgets" in nb.metadata}


def head_html(info: dict, mathjax_url: str = LOCAL_URLS["mathjax_url"]) -> str:
    """The page head's scripts for a prepared notebook (``info`` from :func:`prepare_notebook`):
    plotly.js once, and the local MathJax when the markdown holds TeX."""
    parts = ["<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>"]
    if info.get("math"):
        parts.append(
            "<script>window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], "
            "displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']], processEscapes: true, "
            "processEnvironments: true, tags: 'ams'}, svg: {fontCache: 'global'}};</script>\n"
            f'<script src="{mathjax_url}"></script>\n'
            # the widgets manager (and old plotly outputs) call the MathJax 2 API
            "<script>if (window.MathJax && !window.MathJax.Hub) { window.MathJax.Hub = {"
            "Config: function () {}, getAllJax: function () { return []; }, Rerender: function () {},"
            " Queue: function () { for (var i = 0; i < arguments.length; i++) { var a = arguments[i];"
            " if (Array.isArray(a) && a[0] === 'Typeset' && window.MathJax.typesetPromise) {"
            " window.MathJax.typesetPromise(a[2] ? [a[2]] : undefined); } } } }; }</script>")
    if info.get("plotlyjs"):
        parts.append(f"<script>{info['plotlyjs']}</script>")
    return "\n".join(parts)


# Templates: the stock ones minus mermaid and MathJax 2 (CDN), plus the head HTML above.
# The reveal footer is the stock one without its MathJax 2 calls, resizing charts on each slide.
_TEMPLATES = {
    "labkit_reveal.html.j2": r"""{%- extends 'index.html.j2' -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_mathjax -%}
{{ resources.labkit_head }}
<style>.reveal .slides h1, .reveal .slides h2, .reveal .slides h3, .reveal .slides h4 { text-transform: none; }
:root { --jp-code-font-size: 17px; --jp-cell-prompt-width: 90px; }
.reveal .slides section > .labkit-fit { transform-origin: 0 0; }
.reveal details > summary { cursor: pointer; }</style>
{%- endblock html_head_js_mathjax -%}
{% block footer_js %}
<script>
require({waitSeconds: 30},
  ["{{ resources.reveal.url_prefix }}/dist/reveal.js", "{{ resources.reveal.url_prefix }}/plugin/notes/notes.js"],
  function (Reveal, RevealNotes) {
    Reveal.initialize({
      controls: true, progress: true, history: true, hash: true,
      transition: "{{ resources.reveal.transition | default('slide', true) }}",
      slideNumber: "{{ resources.reveal.number | default('', true) }}",
      plugins: [RevealNotes],
      width: {{ resources.reveal.width | default('1280', true) }},
      height: {{ resources.reveal.height | default('800', true) }}
    });
    function resizeCharts(slide) {
      if (!window.Plotly || !slide) { return; }
      slide.querySelectorAll('.js-plotly-plot').forEach(function (gd) { window.Plotly.Plots.resize(gd); });
    }
    // Fit a slide whose content is taller or wider than the slide (width x height): its
    // content is wrapped and scaled down (the largest scale, found by bisection, at which
    // nothing overflows; the wrapper gets wider as it shrinks, so text wraps as on a wider
    // slide). Done when a slide is shown and again when its content changes size (widgets
    // and charts are drawn after the page loads).
    var MIN_SCALE = {{ resources.labkit_min_scale | default(0.5, true) }};
    function fitSlide(section) {
      if (!section || section.querySelector('section')) { return; }
      var cfg = Reveal.getConfig(), wrap = section.querySelector(':scope > .labkit-fit');
      if (!wrap) {
        wrap = document.createElement('div');
        wrap.className = 'labkit-fit';
        while (section.firstChild) { wrap.appendChild(section.firstChild); }
        section.appendChild(wrap);
        if (window.ResizeObserver) {
          var pending = false;
          new ResizeObserver(function () {
            if (pending || !section.classList.contains('present')) { return; }
            pending = true;
            window.requestAnimationFrame(function () { pending = false; fitSlide(section); });
          }).observe(wrap);
        }
      }
      function fits(scale) {
        wrap.style.marginBottom = '';
        wrap.style.transform = scale < 1 ? 'scale(' + scale + ')' : '';
        wrap.style.width = scale < 1 ? (100 / scale) + '%' : '';
        if (scale < 1) { wrap.style.marginBottom = (-(1 - scale) * wrap.offsetHeight) + 'px'; }
        return section.scrollHeight <= cfg.height && section.scrollWidth <= cfg.width;
      }
      var scale = 1;
      if (!fits(1)) {
        var lo = MIN_SCALE, hi = 1;
        for (var i = 0; i < 8; i++) {
          var mid = (lo + hi) / 2;
          if (fits(mid)) { lo = mid; } else { hi = mid; }
        }
        scale = lo;
        fits(scale);
      }
      if (section.dataset.labkitScale !== String(scale)) {
        section.dataset.labkitScale = String(scale);
        Reveal.layout();
      }
    }
    function show(slide) { fitSlide(slide); resizeCharts(slide); }
    Reveal.on('ready', function (e) { show(e.currentSlide); });
    Reveal.on('slidechanged', function (e) { show(e.currentSlide); });
  });
</script>
{% endblock footer_js %}
""",
    "labkit_lab.html.j2": r"""{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}
{%- if resources.labkit_require -%}<script src="{{ resources.require_js_url }}"></script>{%- endif -%}
{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_mathjax -%}
{{ resources.labkit_head }}
{%- endblock html_head_js_mathjax -%}
""",
}


def make_exporters(prefix: str = ASSETS_DIR):
    """``(SlidesExporter, HTMLExporter)`` configured for local assets under ``prefix``."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter, SlidesExporter
    from traitlets.config import Config

    urls = {k: v.replace(ASSETS_DIR, prefix, 1) for k, v in LOCAL_URLS.items()}
    c = Config()
    for cls in ("SlidesExporter", "HTMLExporter"):
        c[cls].require_js_url = urls["require_js_url"]
        c[cls].jquery_url = urls["jquery_url"]
        c[cls].widget_renderer_url = urls["widget_renderer_url"]
        c[cls].mathjax_url = urls["mathjax_url"]
        c[cls].embed_images = True
        c[cls].exclude_anchor_links = True
    c.SlidesExporter.reveal_url_prefix = urls["reveal_url_prefix"]
    c.SlidesExporter.reveal_theme = REVEAL_THEME
    c.SlidesExporter.reveal_number = "c/t"
    c.SlidesExporter.reveal_width = "1280"
    c.SlidesExporter.reveal_height = "800"
    # belt and braces: the cells are dropped in prepare_notebook too
    c.TagRemovePreprocessor.enabled = True
    c.TagRemovePreprocessor.remove_cell_tags = set(DROP_TAGS)
    loader = DictLoader(_TEMPLATES)
    # hints (<details> blocks) folded with their text inside, as JupyterLab shows them
    c.SlidesExporter.preprocessors = [FoldDetailsPreprocessor]
    c.HTMLExporter.preprocessors = [FoldDetailsPreprocessor]
    slides = SlidesExporter(config=c, extra_loaders=[loader], template_file="labkit_reveal.html.j2",
                            mermaid_js_url="", mermaid_layout_elk_js_url="")
    html = HTMLExporter(config=c, extra_loaders=[loader], template_name="lab",
                        template_file="labkit_lab.html.j2",
                        mermaid_js_url="", mermaid_layout_elk_js_url="")
    return slides, html


def export_notebook(nb_path: Path, out_dir: Path, *, html: bool = True,
                    name: str | None = None) -> list[Path]:
    """Export one EXECUTED notebook to ``<out_dir>/<name>.slides.html`` (and ``<name>.html``).
    The assets must already be in ``<out_dir>/assets`` (:func:`copy_assets`)."""
    import nbformat

    name = name or Path(nb_path).stem
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    slides_exp, html_exp = make_exporters()
    written = []
    for exporter, suffix in ((slides_exp, ".slides.html"), (html_exp, ".html")):
        if suffix == ".html" and not html:
            continue
        nb = nbformat.read(str(nb_path), as_version=4)
        nb, info = prepare_notebook(nb)
        resources = {"metadata": {"name": name, "path": str(Path(nb_path).parent)},
                     "labkit_head": head_html(info), "labkit_require": info["widgets"]}
        body, _ = exporter.from_notebook_node(nb, resources=resources)
        target = out_dir / f"{name}{suffix}"
        target.write_text(body, encoding="utf-8")
        written.append(target)
    return written


# ----------------------------------------------------------------------------- run folders

#: The ``kind`` a ``labkit run`` folder's ``run.json`` has (a sweep's ``sweep.json`` has another).
RUN_KIND = "labkit-run"


def read_run_record(run_dir: Path) -> dict | None:
    """``run_dir/run.json`` as a dict, or None when it is missing or unreadable."""
    import json

    try:
        rec = json.loads((Path(run_dir) / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("notebooks"), list) else None


def _entry_for(record: dict, source: Path) -> dict | None:
    """The run's entry for ``source`` (same name; a solution matches only a solution)."""
    for e in record.get("notebooks", []):
        if not isinstance(e, dict) or e.get("name") != source.stem:
            continue
        given = e.get("input")
        if not given or (Path(str(given)).parent.name == SOLUTIONS) == (source.parent.name == SOLUTIONS):
            return e
    return None


def held_notebooks(run_dir: Path, sources: Sequence[Path], record: dict | None = None
                   ) -> dict[Path, Path]:
    """``{source: executed notebook}`` for every source ``run_dir`` holds executed with status
    ok (its ``notebooks/<name>.ipynb``)."""
    record = record if record is not None else read_run_record(run_dir) or {}
    out = {}
    for src in sources:
        entry = _entry_for(record, src)
        cand = Path(run_dir) / "notebooks" / src.name
        if entry is not None and entry.get("status") == "ok" and cand.is_file():
            out[src] = cand
    return out


def why_not_complete(run_dir: Path, sources: Sequence[Path], *, sweep_ok: bool = False
                     ) -> str | None:
    """Why ``run_dir`` is not a complete run for ``sources`` (None when it is): a complete run
    has a ``run.json`` with status ok, is no member of a sweep (unless ``sweep_ok``) and holds
    every source executed."""
    record = read_run_record(run_dir)
    if record is None or record.get("kind", RUN_KIND) != RUN_KIND:
        return f"no {RUN_FILE} of a `labkit run`"
    if record.get("status") != "ok":
        return f"status {record.get('status')!r}"
    sweep = record.get("sweep")
    if sweep and not sweep_ok:
        where = sweep.get("sweep_dir") if isinstance(sweep, dict) else None
        return f"one run of the sweep {where}" if where else "one run of a sweep"
    lacks = [s.stem for s in sources if s not in held_notebooks(run_dir, sources, record)]
    if lacks:
        return f"lacks {_names(lacks)}"
    return None


def _started(run_dir: Path) -> tuple[str, str]:
    rec = read_run_record(run_dir) or {}
    return (str(rec.get("started") or ""), run_dir.name)


def newest_complete_run(sources: Sequence[Path], root: Path | None = None, *,
                        sweep_ok: bool = False) -> tuple[Path | None, list[str]]:
    """The newest complete run (:func:`why_not_complete`) under ``root`` (default ``runs/``)
    for ``sources``, by its start time, or None; and one line for each newer run passed over
    (``"<folder>: <why>"``)."""
    root = Path(root) if root is not None else repo_root() / "runs"
    runs = [d for d in root.iterdir() if (d / RUN_FILE).is_file()] if root.is_dir() else []
    passed: list[str] = []
    for d in sorted(runs, key=_started, reverse=True):
        why = why_not_complete(d, sources, sweep_ok=sweep_ok)
        if why is None:
            return d, passed
        passed.append(f"{d.name}: {why}")
    return None, passed


def check_run_dir(run_dir: Path) -> Path:
    """``run_dir`` when it is a ``labkit run`` folder (``run.json`` and ``notebooks/``); else
    raises :class:`SuiteError` naming the path, what it is and what to pass instead."""
    run_dir = Path(run_dir).expanduser()
    shown = display_path(run_dir)
    if not run_dir.is_dir():
        raise SuiteError(f"run folder {shown} does not exist: pass a folder made by `labkit run` "
                         "(runs/<stamp>/), or leave --run out to use the newest complete run")
    if (run_dir / SWEEP_FILE).is_file():
        members = _sweep_runs(run_dir)
        which = f" (its runs: {', '.join(members)})" if members else ""
        raise SuiteError(f"{shown} is a sweep folder, not a run folder: pass one of its runs"
                         f"{which}")
    record = read_run_record(run_dir)
    if record is None or record.get("kind", RUN_KIND) != RUN_KIND or not (run_dir / "notebooks").is_dir():
        raise SuiteError(f"{shown} is not a run folder (it has no readable {RUN_FILE} and "
                         "notebooks/): pass a folder made by `labkit run` (runs/<stamp>/)")
    return run_dir


def _sweep_runs(sweep_dir: Path) -> list[str]:
    """Folder names of the runs a sweep folder's ``sweep.json`` lists."""
    import json

    try:
        items = json.loads((sweep_dir / SWEEP_FILE).read_text(encoding="utf-8")).get("runs", [])
        return [str(i["run"]) for i in items if isinstance(i, dict) and i.get("run")]
    except (OSError, ValueError, AttributeError):
        return []


def _names(stems: Sequence[str]) -> str:
    return ", ".join(stems) if len(stems) <= 4 else f"{', '.join(stems[:3])} and {len(stems) - 3} more"


def choose_run(sources: Sequence[Path], run_dir: Path | None = None, root: Path | None = None
               ) -> tuple[Path | None, str]:
    """The run folder to take the executed ``sources`` from, and one line saying which and why.

    ``run_dir`` given: that folder (checked by :func:`check_run_dir`; a partial run or a sweep's
    run is fine, the notebooks it lacks are executed). Else the newest complete run under
    ``root`` (:func:`newest_complete_run`), or None when there is none.
    """
    if run_dir is not None:
        run_dir = check_run_dir(run_dir)
        return run_dir, f"using run {display_path(run_dir)} (as given)"
    found, passed = newest_complete_run(sources, root)
    skipped = ""
    if passed:
        skipped = "; passed over newer: " + "; ".join(passed[:3]) + (
            f"; and {len(passed) - 3} more" if len(passed) > 3 else "")
    what = _names([s.stem for s in sources])
    if found is None:
        return None, (f"no complete run holds {what}: executing here (`labkit run` makes a run; "
                      f"--run PATH picks one){skipped}")
    return found, f"using run {display_path(found)} (the newest complete run holding {what}){skipped}"


def _is_executed(path: Path) -> bool:
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    return any(c.cell_type == "code" and (c.get("outputs") or c.get("execution_count"))
               for c in nb.cells)


def execute_notebook(src: Path, dest: Path, *, timeout: int = 1800) -> Path:
    """Execute ``src`` (in its own folder, as JupyterLab would) into ``dest`` with the suite
    engine (papermill, the plotly renderer exports need). Results the notebook saves go to a
    folder beside ``dest``, never into ``runs/``. Raises :class:`SlidesError` when it fails."""
    dest = Path(dest)
    res = _execute(Path(src), dest, run_dir=dest.parent / "run", timeout=timeout,
                   plotly_renderer=DEFAULT_PLOTLY_RENDERER)
    if not res.ok:
        cell = (res.error_record or {}).get("source") or ""
        where = f"\nin the cell:\n{cell[-1500:]}" if cell else ""
        raise SlidesError(f"executing {src} failed ({res.error}); fix it or export a run that "
                          f"has it (`labkit run`){where}")
    return dest


@dataclass
class _Job:
    name: str
    executed: Path | None
    source: Path


@dataclass
class SlidesResult:
    """What :func:`export_slides` did: the files written, the run folder the executed notebooks
    came from (None: none), the line saying which run and why, and the notebooks executed here."""

    files: list[Path]
    run_dir: Path | None
    run_note: str
    executed_here: list[str] = field(default_factory=list)


def export_slides(run_dir: Path | None = None, out_dir: Path = Path("build/slides"),
                  notebooks: Sequence[str] | None = None, html: bool = True, *,
                  runs_root: Path | None = None,
                  echo: Callable[[str], None] | None = None) -> SlidesResult:
    """Export notebooks as offline reveal.js decks ``<out_dir>/NN_x.slides.html`` (and HTML pages
    ``<out_dir>/NN_x.html`` when ``html``); returns a :class:`SlidesResult`.

    The executed notebooks come from ``run_dir`` when given (it must be a ``labkit run`` folder;
    the notebooks it lacks are executed here), else from the newest COMPLETE run under
    ``runs_root`` (default ``runs/``; see :func:`choose_run`), else every notebook is executed
    here. ``echo`` receives the line saying which run is used, before any work. Fails with
    :class:`RemoteAssetError` if a page would still load anything from the network.
    """
    envvars.check_environment()
    out_dir = Path(out_dir)
    sources = find_notebooks(notebooks)
    run_dir, run_note = choose_run(sources, run_dir, runs_root)
    if echo is not None:
        echo(run_note)
    record = read_run_record(run_dir) if run_dir is not None else None
    held = held_notebooks(run_dir, sources, record) if run_dir is not None else {}

    jobs = []
    for src in sources:
        executed = held.get(src)
        if executed is None and run_dir is not None:
            entry = _entry_for(record or {}, src)
            why = f"status {entry.get('status')!r}" if entry else "not run"
            print(f"labkit slides: {display_path(run_dir)} lacks {src.stem} executed ({why}); "
                  f"executing {src.name} here", file=sys.stderr)
        if executed is None and _is_executed(src):
            executed = src
        jobs.append(_Job(src.stem, executed, src))

    modules = ensure_web_assets()
    copy_assets(out_dir, modules)
    written: list[Path] = []
    failed: list[str] = []
    executed_here: list[str] = []
    with tempfile.TemporaryDirectory(prefix="labkit-slides-") as tmp:
        for job in jobs:
            nb_path = job.executed
            if nb_path is None:
                print(f"labkit slides: executing {job.source.name}", file=sys.stderr)
                executed_here.append(job.name)
                try:
                    nb_path = execute_notebook(job.source, Path(tmp) / job.name / job.source.name)
                except SlidesError as exc:  # export the others, then report
                    print(f"labkit slides: {exc}", file=sys.stderr)
                    failed.append(job.source.name)
                    continue
            written += export_notebook(nb_path, out_dir, html=html, name=job.name)
    check_offline(written)
    if failed:
        done = "".join(f"\n  {p}" for p in written) or " none"
        raise SlidesError(f"{len(failed)} notebook(s) failed to execute: {', '.join(failed)} "
                          f"(errors above). Written:{done}")
    return SlidesResult(written, run_dir, run_note, executed_here)
