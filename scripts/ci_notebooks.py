"""Write the notebooks CI executes: each worked solution with its learner's copy folded in.

A student notebook and its solution differ only in their exercise cells (``tests/
test_solutions.py``), and no other cell reads a name an exercise cell assigns (``tests/
test_exercise_cells.py``). So one kernel runs both: before each worked exercise cell (checked
strictly, ``LABKIT_STRICT_EXERCISES=1``) the learner's open copy of that cell runs leniently, as
it does in the student notebook. Every cell of both notebooks is executed once, and each
notebook's set-up and measurements only once.

    python scripts/ci_notebooks.py OUT_DIR   # writes OUT_DIR/NN_topic.ipynb, workshop_*.ipynb
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
STRICT = "LABKIT_STRICT_EXERCISES"


def _strict_cell(on: bool, cell_id: str) -> nbformat.NotebookNode:
    why = "the worked answer is checked strictly" if on else "the learner copy runs leniently"
    cell = nbformat.v4.new_code_cell(
        f"import os as _labkit_ci_os\n_labkit_ci_os.environ[{STRICT!r}] = {'1' if on else '0'!r}"
        f"  # CI: {why}")
    cell.id = cell_id
    return cell


def combined(student: nbformat.NotebookNode,
             solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The solution notebook, each exercise cell preceded by the student's copy of it."""
    if len(student.cells) != len(solution.cells):
        raise ValueError("the student and solution notebooks have different cell counts; "
                         "tests/test_solutions.py says where they differ")
    out = nbformat.v4.new_notebook(metadata=solution.metadata)
    for k, (a, b) in enumerate(zip(student.cells, solution.cells)):
        if a.cell_type == "code" and a.source != b.source:
            learner = nbformat.v4.new_code_cell(a.source, metadata=a.metadata)
            learner.id = f"ci-learner-{k}"
            out.cells += [_strict_cell(False, f"ci-lenient-{k}"), learner,
                          _strict_cell(True, f"ci-strict-{k}")]
        out.cells.append(b)
    return out


def write_all(folder: Path) -> list[Path]:
    """Write every combined notebook and the workshop syllabi into ``folder``; the paths."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    paths = []
    for student in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        nb = combined(nbformat.read(student, as_version=4),
                      nbformat.read(NOTEBOOKS / "solutions" / student.name, as_version=4))
        nbformat.write(nb, folder / student.name)
        paths.append(folder / student.name)
    for other in sorted(NOTEBOOKS.glob("workshop_*.ipynb")):
        shutil.copy(other, folder / other.name)
        paths.append(folder / other.name)
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/ci_notebooks.py OUT_DIR")
    written = write_all(Path(sys.argv[1]))
    print(f"[ci] {len(written)} notebooks written to {sys.argv[1]}")
