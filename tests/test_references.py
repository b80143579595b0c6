"""Every notebook 00–11 (student and solution) ends with a References section of sources."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + \
    sorted((ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb"))

HEADING = re.compile(r"^#+\s*References\s*$", re.M)
LINK = re.compile(r"https://\S+")
SOURCE_PATH = re.compile(r"`[\w./-]+/[\w.-]+\.(py|md)`")


def references(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "markdown" and HEADING.search(c.source)]
    assert len(cells) == 1, f"{path.name}: {len(cells)} References sections, expected one"
    return HEADING.split(cells[0], 1)[1]


def test_all_notebooks_are_covered():
    numbers = {p.name[:2] for p in NOTEBOOKS}
    assert {f"{i:02d}" for i in range(12)} | {"14"} <= numbers  # 12, 13: other issues


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_notebook_has_references_with_a_source(path: Path):
    body = references(path)
    items = [ln for ln in body.splitlines() if ln.startswith("- ")]
    assert items, f"{path.name}: the References section lists nothing"
    assert LINK.search(body) or SOURCE_PATH.search(body), \
        f"{path.name}: the References section has no link and no source path"

