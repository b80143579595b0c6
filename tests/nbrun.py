"""Run a notebook as CI's CPU tier does, in a fresh kernel that reads its references from a
given data folder; the tests that file stand-in or altered records share it."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

from labkit.teach.exercises import STRICT_ENV

ROOT = Path(__file__).resolve().parents[1]


def run_on_references(notebook: Path, data: Path, folder: Path,
                      monkeypatch: pytest.MonkeyPatch, *, strict: bool) -> str:
    """Execute ``notebook`` on the CPU tier with ``LABKIT_DATA=data`` and ``folder`` as its
    working folder (exercises strict or lenient); its stream output. A failing cell raises
    nbclient's ``CellExecutionError``."""
    from nbclient import NotebookClient

    monkeypatch.setenv("LABKIT_DATA", str(data))
    monkeypatch.setenv("LABKIT_FORCE_TIER", "cpu")
    monkeypatch.setenv("LABKIT_CPU_THREADS", "1")
    monkeypatch.setenv(STRICT_ENV, "1" if strict else "0")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    nb = nbformat.read(notebook, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=600,
                   resources={"metadata": {"path": str(folder)}}).execute()
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.outputs if o.get("output_type") == "stream")
