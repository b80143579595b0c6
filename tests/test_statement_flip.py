"""CI fails when a recorded reference contradicts a statement of a notebook.

Notebook 04 states, checked by a ``statement`` cell, that both capture orders of the gpt2 pool
end within one segment of each other. A copy of ``data/`` whose ``pool_memory_gpt2.json``
makes the smallest-first pool three times larger must make the notebook fail with labkit's
``StatementError`` naming that statement; the unchanged copy must pass.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from nbrun import run_on_references

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "04_shared_pools.ipynb"
RECORD = Path("reference") / "h200" / "pool_memory_gpt2.json"
STATEMENT = "gpt2: both capture orders end within one 2 MiB segment of each other"


def execute(data: Path, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run notebook 04 in a fresh kernel that reads its references from ``data``."""
    run_on_references(NOTEBOOK, data, folder, monkeypatch, strict=False)


@pytest.fixture
def data_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "data", tmp_path / "data")
    return tmp_path / "data"


@pytest.mark.slow
def test_a_flipped_reference_value_fails_the_statement_that_depends_on_it(
        data_copy, tmp_path, monkeypatch):
    from nbclient.exceptions import CellExecutionError

    path = data_copy / RECORD
    rec = json.loads(path.read_text())
    layout = rec["data"]["shared_smallest_first"]
    assert layout["total_bytes"] == rec["data"]["shared_largest_first"]["total_bytes"]
    layout["total_bytes"] *= 3                       # smallest first now ends far larger
    path.write_text(json.dumps(rec))
    with pytest.raises(CellExecutionError) as info:
        execute(data_copy, tmp_path, monkeypatch)
    msg = str(info.value)
    assert "StatementError" in msg and STATEMENT in msg, msg[-3000:]
    assert "recorded reference shows" in msg


@pytest.mark.slow
def test_the_unflipped_copy_passes(data_copy, tmp_path, monkeypatch):
    execute(data_copy, tmp_path, monkeypatch)
