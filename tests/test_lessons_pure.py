"""The teaching topic modules (one per notebook topic: labkit.teach.launch, .memory, ...) are
pure (they measure, profile and capture nothing), and the measurement wing never imports the
teaching wing. Checked on the source, without importing it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "labkit"
TOPICS = ("lessons", "launch", "decode", "memory", "sizing", "pitfalls", "compile", "modes",
          "paged", "roofline", "serving", "tp", "mixed", "deploying", "past_launch",
          "engines2026")
LESSONS = [PKG / "teach" / f"{name}.py" for name in TOPICS]
MEASURE = sorted((PKG / "measure").glob("*.py"))

# what runs, times, profiles or captures: the lessons may not use it
NOT_IN_LESSONS = ("labkit.measure.bench", "labkit.measure.lesson_runs", "labkit.measure.pitfalls",
                  "labkit.graphs", "labkit.timing", "labkit.runner", "torch.cuda",
                  "torch.profiler", "torch.utils._python_dispatch", "time")
# names whose use in a lesson means it runs or times something
RUNNING_CALLS = ("capture_decode_graphs", "time_any", "time_cuda", "perf_counter",
                 "synchronize", "decode_step", "prefill")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def called_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lessons_import_nothing_that_measures(path: Path):
    bad = {m for m in imported_modules(path)
           if any(m == b or m.startswith(b + ".") for b in NOT_IN_LESSONS)}
    assert not bad, f"teach/{path.name} imports {sorted(bad)}: move the live part to " \
                    "labkit/measure/lesson_runs.py"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lessons_run_nothing(path: Path):
    bad = called_names(path) & set(RUNNING_CALLS)
    assert not bad, f"teach/{path.name} calls {sorted(bad)}: it runs or times something"


@pytest.mark.parametrize("path", MEASURE, ids=lambda p: p.stem)
def test_measure_never_imports_teach(path: Path):
    bad = {m for m in imported_modules(path) if m.startswith(("labkit.teach", "labkit.suite"))}
    assert not bad, f"measure/{path.name} imports {sorted(bad)} (imports go suite -> teach " \
                    "-> measure -> core)"


def test_the_checks_see_a_violation(tmp_path: Path):
    bad = tmp_path / "bad.py"
    bad.write_text("from labkit.measure.bench import step_inputs\nimport time\n"
                   "def f(m, t):\n    return m.decode_step(*t)\n")
    assert {"labkit.measure.bench", "time"} <= imported_modules(bad)
    assert "decode_step" in called_names(bad)


@pytest.mark.parametrize("nb", sorted((PKG.parent / "notebooks").glob("[0-9]*.ipynb")),
                         ids=lambda p: p.stem)
def test_each_notebook_reads_its_topic_code_from_at_most_two_modules(nb: Path):
    """A maintainer follows a notebook's lessons and charts into one or two topic modules."""
    import json
    import re

    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    used = {m for names in re.findall(r"^from labkit\.teach import ([^\n]+)", code, re.M)
            for m in (n.strip().split(" as ")[0] for n in names.split(","))
            if m in TOPICS or m == "claims"}
    used |= set(re.findall(r"^from labkit\.teach\.(\w+) import", code, re.M)) & set(TOPICS)
    used.discard("lessons")  # the shared record helpers
    assert 1 <= len(used) <= 2 or nb.stem == "00_setup", (nb.stem, sorted(used))
    assert len(used) <= 2, (nb.stem, sorted(used))
    assert not re.search(r"labkit\.teach\.(lessons|plots)\.\w+ import|"
                         r"from labkit\.teach\.(lessons|plots) import \w+ as", code)
