"""The nbconvert exporters of a reveal.js deck and a JupyterLab-style page, with templates that
load only local assets and no widget manager, require.js or jQuery (:func:`make_exporters`),
and the export of one executed notebook (:func:`export_notebook`).
"""

from __future__ import annotations

from pathlib import Path

from labkit.suite.details import FoldDetailsPreprocessor
from labkit.suite.slides.assets import LOCAL_URLS
from labkit.suite.slides.deck import CHART_HEIGHT, deck_notebook
from labkit.suite.slides.prepare import DROP_TAGS, head_html, prepare_notebook

#: reveal.js theme: ``white`` loads its fonts from local files (``simple`` would use a web font).
REVEAL_THEME = "white"
#: The slide's size in the deck's own pixels (reveal.js scales it to the window).
SLIDE_WIDTH, SLIDE_HEIGHT = 1280, 800
#: A chart is not shrunk below this height (px) to fit its slide; the slide is scaled instead.
MIN_CHART_HEIGHT = 280

# Templates: the stock ones minus mermaid, MathJax 2, require.js, jQuery and the widget manager
# (widgets are drawn statically), plus the head HTML (head_html). The reveal footer loads
# reveal.js with plain script tags and fits every slide (charts first, then the whole slide).
_TEMPLATES = {
    "labkit_reveal.html.j2": r"""{%- extends 'index.html.j2' -%}
{%- block html_head_js_jquery -%}{%- endblock html_head_js_jquery -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}
{{ resources.labkit_head }}
<style>.reveal .slides h1, .reveal .slides h2, .reveal .slides h3,
.reveal .slides h4 { text-transform: none; }
:root { --jp-code-font-size: 17px; --jp-cell-prompt-width: 90px; }
.reveal .slides section > .labkit-fit { transform-origin: 0 0; }
.reveal .jp-InputPrompt, .reveal .jp-OutputPrompt { display: none; }
.reveal details > summary { cursor: pointer; }
.labkit-nolink-note { color: #777; font-size: 0.8em; }</style>
{%- endblock html_head_js_mathjax -%}
{% block footer_js %}
<script src="{{ resources.reveal.url_prefix }}/dist/reveal.js"></script>
<script src="{{ resources.reveal.url_prefix }}/plugin/notes/notes.js"></script>
<script>
(function () {
    var Reveal = window.Reveal;
    Reveal.initialize({
      controls: true, progress: true, history: true, hash: true,
      transition: "{{ resources.reveal.transition | default('slide', true) }}",
      slideNumber: "{{ resources.reveal.number | default('', true) }}",
      plugins: window.RevealNotes ? [window.RevealNotes] : [],
      width: {{ resources.reveal.width | default('1280', true) }},
      height: {{ resources.reveal.height | default('800', true) }}
    });
    function resizeCharts(slide) {
      if (!window.Plotly || !slide) { return; }
      slide.querySelectorAll('.js-plotly-plot').forEach(function (gd) {
        window.Plotly.Plots.resize(gd);
      });
    }
    var MIN_SCALE = {{ resources.labkit_min_scale | default(0.5, true) }};
    var MIN_CHART = {{ resources.labkit_min_chart | default(280, true) }};
    // Charts are sized to the slide: while the slide (at scale 1) is taller than the deck,
    // its charts give up height, each down to MIN_CHART pixels.
    function fitCharts(section, wrap, cfg) {
      var plots = Array.prototype.slice.call(wrap.querySelectorAll('.plotly-graph-div'));
      if (!plots.length || !window.Plotly) { return; }
      plots.forEach(function (gd) {
        if (!gd.dataset.labkitHeight) { gd.dataset.labkitHeight = String(gd.offsetHeight || 460); }
      });
      var excess = section.scrollHeight - cfg.height;
      if (excess <= 0) { return; }
      var each = Math.ceil(excess / plots.length);
      plots.forEach(function (gd) {
        var full = parseFloat(gd.dataset.labkitHeight), h = Math.max(MIN_CHART, full - each);
        if (h >= gd.offsetHeight) { return; }
        gd.style.height = h + 'px';
        gd.style.overflow = 'hidden';
        if (gd.classList.contains('js-plotly-plot')) { window.Plotly.relayout(gd, {height: h}); }
      });
    }
    // Fit a slide whose content is taller or wider than the slide (width x height): charts
    // first (fitCharts), then the content is wrapped and scaled down (the largest scale,
    // found by bisection, at which nothing overflows; the wrapper gets wider as it shrinks,
    // so text wraps as on a wider slide). Done when a slide is shown and again when its
    // content changes size (charts are drawn after the page loads).
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
      if (!fits(1)) { fitCharts(section, wrap, cfg); }
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
    function show(slide) { resizeCharts(slide); fitSlide(slide); }
    Reveal.on('ready', function (e) { show(e.currentSlide); });
    Reveal.on('slidechanged', function (e) { show(e.currentSlide); });
})();
</script>
{% endblock footer_js %}
""",
    "labkit_lab.html.j2": r"""{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}
{{ resources.labkit_head }}
<style>details.labkit-source > summary { cursor: pointer; color: #666; font-size: 0.85em;
margin: 2px 0 2px var(--jp-cell-prompt-width, 64px); }
.labkit-nolink-note { color: #777; font-size: 0.9em; }</style>
{%- endblock html_head_js_mathjax -%}
{% block input_group -%}
{%- if (cell.metadata.get("labkit") or {}).get("fold_source") -%}
<details class="labkit-source"><summary>code</summary>
{{ super() }}
</details>
{%- else -%}
{{ super() }}
{%- endif -%}
{% endblock input_group %}
""",
}


def make_exporters():
    """``(SlidesExporter, HTMLExporter)`` configured for the local assets under ``assets/``."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter, SlidesExporter
    from traitlets.config import Config

    c = Config()
    for cls in ("SlidesExporter", "HTMLExporter"):
        c[cls].mathjax_url = LOCAL_URLS["mathjax_url"]
        c[cls].require_js_url = ""
        c[cls].jquery_url = ""
        c[cls].widget_renderer_url = ""
        c[cls].embed_images = True
        c[cls].exclude_anchor_links = True
    c.SlidesExporter.reveal_url_prefix = LOCAL_URLS["reveal_url_prefix"]
    c.SlidesExporter.reveal_theme = REVEAL_THEME
    c.SlidesExporter.reveal_number = "c/t"
    c.SlidesExporter.reveal_width = str(SLIDE_WIDTH)
    c.SlidesExporter.reveal_height = str(SLIDE_HEIGHT)
    # belt and braces: the cells are dropped in prepare_notebook too
    c.TagRemovePreprocessor.enabled = True
    c.TagRemovePreprocessor.remove_cell_tags = set(DROP_TAGS)
    loader = DictLoader(_TEMPLATES)
    # hints (<details> blocks) folded with their text inside, as JupyterLab shows them
    c.SlidesExporter.preprocessors = [FoldDetailsPreprocessor]
    c.HTMLExporter.preprocessors = [FoldDetailsPreprocessor]
    try:
        slides = SlidesExporter(config=c, extra_loaders=[loader],
                                template_file="labkit_reveal.html.j2",
                                mermaid_js_url="", mermaid_layout_elk_js_url="")
        html = HTMLExporter(config=c, extra_loaders=[loader], template_name="lab",
                            template_file="labkit_lab.html.j2",
                            mermaid_js_url="", mermaid_layout_elk_js_url="")
    except ValueError as exc:
        if "template sub-directory" not in str(exc):
            raise
        raise ValueError(f"{' '.join(str(exc).split())}: nbconvert's templates are not where "
                         "Jupyter looks (they install under <prefix>/share/jupyter/nbconvert/"
                         "templates). Install nbconvert into this environment (`make setup`, or "
                         "pip install --force-reinstall nbconvert), or point JUPYTER_PATH at the "
                         "share/jupyter folder that holds them") from None
    return slides, html


def export_notebook(nb_path: Path, out_dir: Path, *, html: bool = True,
                    name: str | None = None) -> list[Path]:
    """Export one EXECUTED notebook to the deck ``<out_dir>/<name>.slides.html`` and the page
    ``<name>.html``; the assets must already be in ``<out_dir>/assets``."""
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
        deck = suffix == ".slides.html"
        nb, info = prepare_notebook(nb, chart_height=CHART_HEIGHT if deck else 525)
        if deck:
            deck_notebook(nb)
        resources = {"metadata": {"name": name, "path": str(Path(nb_path).parent)},
                     "labkit_head": head_html(info), "labkit_min_chart": MIN_CHART_HEIGHT}
        body, _ = exporter.from_notebook_node(nb, resources=resources)
        target = out_dir / f"{name}{suffix}"
        target.write_text(body, encoding="utf-8")
        written.append(target)
    return written
