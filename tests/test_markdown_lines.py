"""Markdown lines that a renderer turns into something else than the author wrote.

A wrapped line that begins with ``#`` and no space (``#177108), ...`` after a line break in a
list of pull requests) is a paragraph in CommonMark but a heading in renderers that do not
require the space (the run pages and slides showed it as a giant heading). Every line of every
notebook's markdown, outside fenced code, must not start with ``#`` followed by anything but
``#`` or a space.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + \
    sorted((ROOT / "notebooks" / "solutions").glob("*.ipynb"))
HASH_WORD = re.compile(r"^\s*#+[^#\s]")


def bad_lines(markdown: str) -> list[str]:
    """Lines outside fenced code that start with ``#`` glued to a word or number."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and HASH_WORD.match(line):
            out.append(line)
    return out


def test_bad_lines_finds_a_wrapped_issue_number_only():
    assert bad_lines("see PR\n  #177108), #184989") == ["  #177108), #184989"]
    assert bad_lines("## 1. A heading\n### Exercise 1.2 — x\ntext #12 inside") == []
    assert bad_lines("```python\n#comment\n```") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_markdown_line_starts_with_a_glued_hash(path: Path):
    nb = nbformat.read(path, as_version=4)
    found = [(c.get("id"), line) for c in nb.cells if c.cell_type == "markdown"
             for line in bad_lines(c.source)]
    assert not found, f"{path.name}: rewrap so no line starts with '#' + a word: {found}"
