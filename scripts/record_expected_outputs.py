"""Store the expected outputs of cells tagged ``nbval-check-output``; strip everything else.

nbval compares those cells' outputs against the stored ones, so they are the only outputs a
notebook keeps in git (deterministic CPU results such as token ids). Run on a machine
without a GPU (or with LABKIT_FORCE_TIER=cpu), after changing such a cell:

    python scripts/record_expected_outputs.py notebooks/00_setup.ipynb [...]
"""

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

CHECK = "nbval-check-output"


def record(path: Path) -> int:
    nb = nbformat.read(path, as_version=4)
    if not any(CHECK in c.metadata.get("tags", []) for c in nb.cells):
        return 0
    run = nbformat.read(path, as_version=4)
    NotebookClient(run, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    n = 0
    for src, done in zip(nb.cells, run.cells):
        if src.cell_type != "code":
            continue
        src.execution_count = None
        if CHECK in src.metadata.get("tags", []):
            src.outputs = [o for o in done.outputs if o.output_type == "stream"]
            src.execution_count = 1  # nbval skips comparing cells it thinks never ran
            n += 1
        else:
            src.outputs = []
    nbformat.write(nb, path)
    return n


if __name__ == "__main__":
    os.environ.setdefault("LABKIT_FORCE_TIER", "cpu")
    for arg in sys.argv[1:]:
        print(f"{arg}: {record(Path(arg))} checked cell(s) recorded")
