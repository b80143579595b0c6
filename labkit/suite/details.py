"""Folded ``<details>`` blocks (the notebooks' hints) in nbconvert exports.

nbconvert ends an HTML block at a blank line, so a hint's text would show below a closed
"Hint": :class:`FoldDetailsPreprocessor` renders the inner markdown into the ``<details>``.
"""

from __future__ import annotations

import re

from nbconvert.preprocessors import Preprocessor

_BLOCK = re.compile(
    r"^(?P<open><details\b[^>]*>)[ \t]*(?P<summary><summary\b[^>]*>.*?</summary>)?"
    r"(?P<body>.*?)^[ \t]*</details>[ \t]*$",
    re.S | re.M | re.I)
_BLANK = re.compile(r"\n[ \t]*(?=\n)")


def _render(markdown: str) -> str:
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return markdown2html_mistune(markdown).strip()


def fold_details(source: str) -> str:
    """``source`` (a markdown cell) with each ``<details>`` block's inner markdown rendered to
    HTML inside it, no blank line left (a block holding another ``<details>`` is left as it is)."""

    def repl(m: re.Match[str]) -> str:
        body = m.group("body")
        if re.search(r"<details\b", body, re.I):
            return m.group(0)
        inner = _render(body) if body.strip() else ""
        # a blank line would end the HTML block; an empty comment keeps <pre> lines as they are
        inner = _BLANK.sub("\n<!-- -->", inner)
        parts = [m.group("open") + (m.group("summary") or "")]
        if inner:
            parts.append(f'<div class="labkit-details-body">\n{inner}\n</div>')
        parts.append("</details>")
        return "\n".join(parts)

    return _BLOCK.sub(repl, source)


class FoldDetailsPreprocessor(Preprocessor):
    """Folds the ``<details>`` blocks of markdown cells (:func:`fold_details`)."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown" and "<details" in cell.source.lower():
            cell.source = fold_details(cell.source)
        return cell, resources
