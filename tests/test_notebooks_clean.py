"""Notebooks are stored clean: no outputs, no execution counts, the standard python3 kernel, a
papermill `parameters` cell, valid slideshow metadata. Fix a failure with `make clean-notebooks`
(outputs) or by editing the notebook's metadata."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(
    p for p in NB_DIR.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
) if NB_DIR.is_dir() else []
SLIDE_TYPES = {"slide", "subslide", "fragment", "skip", "notes", "-"}
NAME_RE = re.compile(r"^(\d{2}|workshop)_[a-z0-9_]+\.ipynb$")
EXECUTION_KEYS = {"execution", "papermill"}  # bookkeeping added when a notebook is executed


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_notebooks_dir_exists():
    assert NB_DIR.is_dir(), "notebooks/ is missing (a git clone has it once it holds a notebook)"
    assert all(p.suffix == ".ipynb" and p.is_file() for p in NOTEBOOKS)


def _read(path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    assert nb.nbformat == 4, f"{rel(path)}: nbformat {nb.nbformat}, expected 4"
    nbformat.validate(nb)
    return nb


if NOTEBOOKS:
    ids = [rel(p) for p in NOTEBOOKS]

    @pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
    def test_name(path):
        assert NAME_RE.match(path.name), f"{rel(path)}: name it NN_topic.ipynb (lower case)"

    @pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
    def test_no_outputs(path):
        nb = _read(path)
        dirty = []
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None):
                dirty.append(i)
            if EXECUTION_KEYS & set(cell.metadata):
                dirty.append(i)
        assert not dirty, f"{rel(path)}: cells {sorted(set(dirty))} hold outputs; run `make clean-notebooks`"
        assert "widgets" not in nb.metadata, f"{rel(path)}: saved widget state; run `make clean-notebooks`"
        assert "papermill" not in nb.metadata, f"{rel(path)}: papermill metadata; run `make clean-notebooks`"

    @pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
    def test_cell_ids_are_unique(path):
        """nbformat renames a repeated id when it reads the notebook (a copied cell keeps its
        id), so an executed copy no longer matches its source cell by id."""
        seen = [c["id"] for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
        repeated = sorted({i for i in seen if seen.count(i) > 1})
        assert not repeated, f"{rel(path)}: cell ids {repeated} repeat; give each cell its own"

    @pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
    def test_kernelspec(path):
        ks = _read(path).metadata.get("kernelspec", {})
        assert ks.get("name") == "python3", f"{rel(path)}: kernelspec name {ks.get('name')!r}"
        assert ks.get("display_name") == "Python 3 (ipykernel)", (
            f"{rel(path)}: kernelspec display_name {ks.get('display_name')!r}"
        )
        assert ks.get("language", "python") == "python"

    @pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
    def test_parameters_cell(path):
        cells = _read(path).cells
        tagged = [i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{rel(path)}: {len(tagged)} cells tagged 'parameters', expected 1"
        assert cells[tagged[0]].cell_type == "code", f"{rel(path)}: the parameters cell is not code"
        injected = [i for i, c in enumerate(cells) if "injected-parameters" in c.metadata.get("tags", [])]
        assert not injected, f"{rel(path)}: papermill's injected-parameters cell was saved"

    @pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
    def test_slideshow_metadata(path):
        for i, cell in enumerate(_read(path).cells):
            if "slideshow" not in cell.metadata:
                continue
            show = cell.metadata["slideshow"]
            assert isinstance(show, dict) and set(show) <= {"slide_type"}, (
                f"{rel(path)} cell {i}: slideshow metadata {show!r}"
            )
            assert show.get("slide_type") in SLIDE_TYPES, (
                f"{rel(path)} cell {i}: slide_type {show.get('slide_type')!r} not in {sorted(SLIDE_TYPES)}"
            )
