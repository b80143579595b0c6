"""Making an executed notebook ready for an offline export (:func:`prepare_notebook`), and the
head's scripts and styles (:func:`head_html`).
"""

from __future__ import annotations

import html as htmllib
import re
from collections.abc import Sequence

from nbformat import from_dict

from labkit.suite.slides.assets import LOCAL_URLS
from labkit.suite.slides.offline import _PLOTLY_BANNER
from labkit.suite.slides.widgets import WIDGET_CSS, WIDGET_VIEW, static_widget_html, widget_states

#: Tags of cells left out of every export.
DROP_TAGS = ("parameters", "injected-parameters")
#: Height (px) of a chart on a page.
PAGE_CHART_HEIGHT = 525
#: Cell metadata key (under ``labkit``) of a code cell whose source a page folds away.
FOLD_SOURCE = "fold_source"

# a call of nb.say / say: the cell's source holds the paragraph its output shows
_SAY_CALL = re.compile(r"(?:^|[^\w.])(?:\w+\.)?say\(", re.M)

_MATH = re.compile(r"\$\$.+?\$\$|(?<![\\$\w])\$[^$\s][^$\n]*?(?<!\s)\$(?![\w$])"
                   r"|\\\(|\\\[|\\begin\{", re.S)


def has_math(nb) -> bool:
    """True when a markdown cell holds TeX (``$...$``, ``$$...$$``, ``\\(``, ``\\[``)."""
    return any(c.cell_type == "markdown" and _MATH.search(c.source) for c in nb.cells)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def _is_chart(data: dict) -> bool:
    return ("application/vnd.plotly.v1+json" in data
            or "plotly-graph-div" in _text(data.get("text/html")))


def _is_plotlyjs_output(out) -> bool:
    html = _text((out.get("data") or {}).get("text/html", ""))
    return len(html) > 100_000 and "plotly-graph-div" not in html and bool(
        _PLOTLY_BANNER.search(html[:5000]))


def chart_html(fig_json: dict, height: int = PAGE_CHART_HEIGHT) -> str:
    """A chart's HTML from its plotly JSON (the page loads the library once), ``height`` pixels
    high unless the figure sets its own."""
    import plotly.io as pio

    return pio.to_html(fig_json, include_plotlyjs=False, include_mathjax=False, full_html=False,
                       default_width="100%", default_height=height, validate=False,
                       config={"responsive": True})


_REMOTE_SCRIPT_TAG = re.compile(
    r"""<script\b[^>]*\bsrc\s*=\s*["'](?:https?:)?//[^"']*["'][^>]*>\s*</script>""", re.I)


def output_html(out: dict, chart_height: int = PAGE_CHART_HEIGHT) -> str:
    """One saved output (an nbformat output dict, e.g. inside an Output widget) as HTML."""
    kind = out.get("output_type")
    if kind == "stream":
        return f"<pre>{htmllib.escape(_text(out.get('text')))}</pre>"
    if kind == "error":
        name, value = (htmllib.escape(str(out.get(k))) for k in ("ename", "evalue"))
        return f"<pre>{name}: {value}</pre>"
    data = out.get("data") or {}
    if "application/vnd.plotly.v1+json" in data:
        return chart_html(dict(data["application/vnd.plotly.v1+json"]), chart_height)
    if "text/html" in data:
        return _REMOTE_SCRIPT_TAG.sub("", _text(data["text/html"]))
    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            b64 = "".join(_text(data[mime]).split())
            return f'<img src="data:{mime};base64,{b64}">'
    if "image/svg+xml" in data:
        return _text(data["image/svg+xml"])
    if "text/markdown" in data:
        from nbconvert.filters.markdown_mistune import markdown2html_mistune

        return markdown2html_mistune(_text(data["text/markdown"]))
    if "text/plain" in data:
        return f"<pre>{htmllib.escape(_text(data['text/plain']))}</pre>"
    return ""


def _shows_markdown(cell) -> bool:
    return any("text/markdown" in (o.get("data") or {}) for o in cell.get("outputs", []))


def fold_sources(nb) -> int:
    """Mark the code cells whose source a page folds (shown on a click): those the notebook
    hides (``jupyter.source_hidden``) and those whose output is the paragraph their source
    writes (a ``say(...)`` call shown as markdown), so each paragraph shows once; returns how
    many."""
    n = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        hidden = bool((cell.metadata.get("jupyter") or {}).get("source_hidden"))
        if hidden or (_SAY_CALL.search(cell.source) and _shows_markdown(cell)):
            cell.metadata.setdefault("labkit", {})[FOLD_SOURCE] = True
            n += 1
    return n


def prepare_notebook(nb, drop_tags: Sequence[str] = DROP_TAGS, *,
                     chart_height: int = PAGE_CHART_HEIGHT) -> tuple[object, dict]:
    """Make an executed notebook ready for an offline export, in place: cells tagged
    ``drop_tags`` dropped, plotly.js copies removed, charts rebuilt, widgets made static, remote
    ``<script src>`` tags stripped, sources that repeat their output's paragraph marked to be
    folded (:func:`fold_sources`); returns ``(nb, info)`` (counts of charts, widgets, math)."""
    nb.cells = [c for c in nb.cells if not set(drop_tags) & set(c.metadata.get("tags", []))]
    states = widget_states(nb)
    charts = widgets = 0

    def render(out: dict) -> str:
        nonlocal charts
        charts += _is_chart(out.get("data") or {})
        return output_html(out, chart_height)

    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data") or {}
            if _is_plotlyjs_output(out):
                continue
            if WIDGET_VIEW in data:
                view = data[WIDGET_VIEW] or {}
                static = static_widget_html(str(view.get("model_id")), states, render)
                if static is None:  # no saved state: what the kernel said it was
                    static = f"<pre>{htmllib.escape(_text(data.get('text/plain')))}</pre>"
                else:
                    widgets += 1
                kept.append(from_dict({"output_type": "display_data", "metadata": {},
                                       "data": {"text/html": static}}))
                continue
            charts += _is_chart(data)
            if "application/vnd.plotly.v1+json" in data or "text/html" in data:
                # a chart rebuilt from its JSON, or the HTML without remote script tags
                data["text/html"] = output_html(out, chart_height)
            kept.append(out)
        cell.outputs = kept
    nb.metadata.pop("widgets", None)
    fold_sources(nb)
    return nb, {"charts": charts, "widgets": widgets, "math": has_math(nb)}


def head_html(info: dict, *, mathjax_url: str | None = LOCAL_URLS["mathjax_url"]) -> str:
    """The page head's scripts and styles: the shared plotly.js for charts, the local MathJax
    for TeX (``mathjax_url`` None: TeX shown as written), the static widgets' style."""
    parts = ["<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>",
             f"<style>{WIDGET_CSS}</style>"]
    if info.get("math") and mathjax_url:
        parts.append(
            "<script>window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], "
            "displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']], processEscapes: true, "
            "processEnvironments: true, tags: 'ams'}, svg: {fontCache: 'global'}};</script>\n"
            f'<script src="{mathjax_url}"></script>')
    if info.get("charts"):
        parts.append(f'<script src="{LOCAL_URLS["plotly_url"]}"></script>')
    return "\n".join(parts)
