"""Every numbered notebook (student and solution) ends with a References section of sources."""

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


def test_every_numbered_notebook_is_covered():
    numbers = {int(p.name[:2]) for p in NOTEBOOKS}
    assert len(numbers) >= 13 and numbers == set(range(max(numbers) + 1))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_notebook_has_references_with_a_source(path: Path):
    body = references(path)
    items = [ln for ln in body.splitlines() if ln.startswith("- ")]
    assert items, f"{path.name}: the References section lists nothing"
    assert LINK.search(body) or SOURCE_PATH.search(body), \
        f"{path.name}: the References section has no link and no source path"



def test_a_record_the_h200_folder_lacks_comes_from_the_h100_folder_and_says_so():
    from labkit.teach.notebook import NotebookContext, load_reference_for, reference_or_none

    ctx = NotebookContext("17_past_launch", "cpu", "h200")
    rec = reference_or_none(ctx, "past_launch_gpt2")  # filed on an H100 only
    assert rec is not None and rec.env["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert load_reference_for(ctx, "triton_gpt2").env["gpu_name"].endswith("H200")  # H200 first
    assert reference_or_none(ctx, "no_such_record") is None
    two = NotebookContext("14_tensor_parallel", "cpu", "h200x2")  # no fallback for two GPUs
    assert reference_or_none(two, "past_launch_gpt2") is None
    with pytest.raises(FileNotFoundError, match="h200x2"):
        load_reference_for(two, "past_launch_gpt2")


def test_a_field_only_a_fallback_record_holds_is_read_from_that_record(tmp_path, monkeypatch):
    from labkit.measure import results
    from labkit.teach.notebook import NotebookContext, reference_holding

    ctx = NotebookContext("18_engines_2026", "cpu", "h200")
    for gpu, data in (("h200", {"times": 1}), ("h100-80gb-hbm3", {"times": 2, "host_times": 3})):
        results.save_result("fieldtest_demo", data, {}, tmp_path / gpu)
        (tmp_path / gpu / "results" / "fieldtest_demo.json").rename(
            tmp_path / gpu / "fieldtest_demo.json")
    monkeypatch.setattr(results, "reference_dir", lambda gpu="h200": tmp_path / gpu)
    assert reference_holding(ctx, "fieldtest_demo", "times").data["times"] == 1  # H200 first
    assert reference_holding(ctx, "fieldtest_demo", "host_times").data["host_times"] == 3
    assert reference_holding(ctx, "fieldtest_demo", "no_such_field") is None
    assert reference_holding(ctx, "no_such_record", "times") is None
