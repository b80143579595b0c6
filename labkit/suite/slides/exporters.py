"""The nbconvert exporters: a reveal.js deck and a JupyterLab-style HTML page of a prepared
notebook, with templates that load only local assets (:func:`make_exporters`), and the export
of one executed notebook (:func:`export_notebook`). Part of :mod:`labkit.suite.slides`.
"""

from __future__ import annotations

from pathlib import Path

from labkit.suite.details import FoldDetailsPreprocessor
from labkit.suite.slides.assets import ASSETS_DIR, LOCAL_URLS
from labkit.suite.slides.prepare import DROP_TAGS, head_html, prepare_notebook

#: reveal.js theme: ``white`` loads its fonts from local files (``simple`` would use a web font).
REVEAL_THEME = "white"

# Templates: the stock ones minus mermaid and MathJax 2 (CDN), plus the head HTML (head_html).
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

