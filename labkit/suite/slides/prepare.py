"""Making an executed notebook ready for an offline export: parameter cells dropped, plotly.js
moved out of the outputs into the page head once, every chart rebuilt from its plotly JSON
(:func:`prepare_notebook`), and the head's scripts (:func:`head_html`).
Part of :mod:`labkit.suite.slides`.
"""

from __future__ import annotations

import re
from typing import Sequence

from labkit.suite.slides.assets import LOCAL_URLS
from labkit.suite.slides.offline import _PLOTLY_BANNER, _SCRIPT_BLOCK

#: Tags of cells left out of every export.
DROP_TAGS = ("parameters", "injected-parameters")

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


