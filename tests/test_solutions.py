"""The worked solutions are right and in step with the student notebooks.

* structure: every notebook ``notebooks/NN_x.ipynb`` has ``notebooks/solutions/NN_x.ipynb`` with
  the same cells, the same exercise ids in the same order, answers where the student copy has
  TODOs, and every other cell identical;
* strict mode catches a wrong answer: a solution notebook with one answer broken fails when
  executed with ``LABKIT_STRICT_EXERCISES=1``, the unbroken one passes;
* ``make test-notebooks`` runs the solutions strictly and the student notebooks leniently.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from labkit.teach.exercises import STRICT_ENV

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = NOTEBOOKS / "solutions"
STUDENT = sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))

EXERCISE_ID = re.compile(r"""\bnb\.check\(\s*["'](\d+\.\d+)["']""")
HEADING_ID = re.compile(r"^#+\s*Exercise\s+(\d+\.\d+)\b", re.M)
# an answer left open: `x = ...`, `"a": ...,` or a bare `...` statement (not `is not ...`)
PLACEHOLDER = re.compile(r"(^|=|:)\s*\.\.\.\s*([,}#]|$)", re.M)


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def exercise_ids(nb: nbformat.NotebookNode) -> list[str]:
    return [i for c in nb.cells if c.cell_type == "code" for i in EXERCISE_ID.findall(c.source)]


def is_exercise_cell(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and bool(EXERCISE_ID.search(cell.source))


def test_every_notebook_has_a_solution_and_back():
    assert STUDENT, "no notebooks found"
    assert {p.name for p in STUDENT} == {p.name for p in SOLUTIONS.glob("*.ipynb")}


@pytest.mark.parametrize("student", STUDENT, ids=lambda p: p.stem)
def test_solution_has_the_same_exercises_answered(student: Path):
    nb, sol = read(student), read(SOLUTIONS / student.name)
    ids = exercise_ids(nb)
    assert len(ids) >= 2 and len(set(ids)) == len(ids), f"{student.name}: exercise ids {ids}"
    assert exercise_ids(sol) == ids, f"{student.name}: the solution's exercises differ"
    headings = [i for c in nb.cells if c.cell_type == "markdown"
                for i in HEADING_ID.findall(c.source)]
    assert headings == ids, f"{student.name}: headings {headings} vs checks {ids}"
    assert len(nb.cells) == len(sol.cells), f"{student.name}: cell counts differ"
    for k, (a, b) in enumerate(zip(nb.cells, sol.cells)):
        if is_exercise_cell(a):
            assert is_exercise_cell(b), f"{student.name} cell {k}: no exercise in the solution"
            assert "TODO" in a.source and PLACEHOLDER.search(a.source), \
                f"{student.name} cell {k}: the student copy has no open answer"
            assert "TODO" not in b.source and not PLACEHOLDER.search(b.source), \
                f"{student.name} cell {k}: the solution leaves an answer open"
            assert a.source != b.source
        else:
            assert (a.cell_type, a.source, a.metadata.get("tags")) == \
                (b.cell_type, b.source, b.metadata.get("tags")), \
                f"{student.name} cell {k}: differs from the solution (only exercises may)"


def test_placeholder_pattern():
    for text in ("x = ...  # TODO", 'answers = {"a": ..., "b": ...}', "    ...  # TODO: do it",
                 "y = ..."):
        assert PLACEHOLDER.search(text), text
    for text in ("if my_sizes is not ...:", "x = f(a, ...)[0]", "print('...')"):
        assert not PLACEHOLDER.search(text), text


# ---------------------------------------------------------------------------- strict execution


def execute(nb: nbformat.NotebookNode, folder: Path) -> None:
    """Run every cell of ``nb`` in a fresh kernel (which inherits this process's environment)."""
    from nbclient import NotebookClient

    NotebookClient(nb, kernel_name="python3", timeout=600,
                   resources={"metadata": {"path": str(folder)}}).execute()


@pytest.fixture
def strict_kernel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STRICT_ENV, "1")
    monkeypatch.setenv("LABKIT_CPU_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))


@pytest.mark.slow
def test_strict_mode_fails_a_broken_solution_and_passes_the_right_one(tmp_path, strict_kernel_env):
    from nbclient.exceptions import CellExecutionError

    path = tmp_path / "00_setup.ipynb"
    shutil.copy(SOLUTIONS / path.name, path)
    nb = read(path)
    cell = next(c for c in nb.cells if 'nb.check("0.3"' in c.source)
    line = next(ln for ln in cell.source.splitlines() if ln.strip().startswith("slots = "))
    cell.source = cell.source.replace(line, "    slots = cfg.max_batch  # broken: no scratch slot")
    assert "# broken" in cell.source
    with pytest.raises(CellExecutionError) as info:
        execute(nb, tmp_path)
    msg = str(info.value)
    assert "StrictExerciseError" in msg
    found = re.search(r"exercise '0\.3 find the bug: the KV-cache formula', check 'test model "
                      r"\(float32\)': expected (\d+), got (\d+)", msg)
    assert found, msg[-2000:]
    assert int(found.group(2)) * 9 == int(found.group(1)) * 8  # 8 of the test model's 9 slots

    good = read(path)                             # the unbroken copy
    execute(good, tmp_path)
    text = "".join(o.get("text", "") for c in good.cells if c.cell_type == "code"
                   for o in c.outputs if o.get("output_type") == "stream")
    assert "[PASS] 0.3 find the bug: the KV-cache formula: test model (float32)" in text
    assert "[TODO]" not in text and "0.3 find the bug: the KV-cache formula: 3/3 checks" in text


# ---------------------------------------------------------------------------- CI wiring


def test_make_test_notebooks_runs_every_learner_copy_and_the_solutions_strictly():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", "test-notebooks", "VENV=venv-for-dry-run"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert "scripts/ci_notebooks.py build/ci-notebooks" in out, out
    pytest_lines = [ln for ln in out.splitlines() if "-m pytest" in ln and "--nbval" in ln]
    assert len(pytest_lines) == 1, out
    assert f"{STRICT_ENV}=1 " in pytest_lines[0] and "build/ci-notebooks/" in pytest_lines[0]


def _ci_module():
    spec = importlib.util.spec_from_file_location("ci_notebooks", ROOT / "scripts" / "ci_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("student", STUDENT, ids=lambda p: p.stem)
def test_the_ci_notebook_runs_every_cell_of_both_copies(student: Path):
    nb, sol = read(student), read(SOLUTIONS / student.name)
    both = _ci_module().combined(nb, sol)
    sources = [c.source for c in both.cells]
    # every cell of the solution, in order, and every learner exercise cell right before its answer
    assert [c.source for c in both.cells if not c.id.startswith("ci-")] == \
        [c.source for c in sol.cells]
    for a, b in zip(nb.cells, sol.cells):
        if a.source != b.source:
            i = sources.index(b.source)
            assert sources[i - 2] == a.source and "= '0'" in sources[i - 3] \
                and "= '1'" in sources[i - 1], student.name
    nbformat.validate(both)
