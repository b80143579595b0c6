"""Exercises: the learner's cell holds no answer, every exercise is registered with its checks
in ``labkit.teach.answers``, and every notebook has at least two that make the learner think."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import tokenize
from pathlib import Path

import nbformat
import pytest

from labkit.teach import answers
from labkit.teach.answers.registry import REGISTRY, THINKING, exercise, run
from labkit.teach.exercises import Exercise

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
STUDENT = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
CHECK_CALL = re.compile(r"""\bnb\.check\(\s*["'](\d+\.\d+)["']""")
HEADING = re.compile(r"^#+\s*Exercise\s+(\d+\.\d+)\b", re.M)
# what a learner's cell must not hold: the checks themselves (they carry the expected answers)
CHECKS_IN_CELL = re.compile(r"\bExercise\(|\bex\.|\.check_true\(|\.check_one_of\(|"
                            r"\bStrictExerciseError\b")


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def number_of(path: Path) -> int:
    return int(path.name[:2])


def constants(source: str) -> set[object]:
    """The literal constants of a cell's code (comments and the exercise number left out)."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "check" and node.args):
            skip.add(id(node.args[0]))
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and id(node) not in skip
            and node.value is not ... and node.value is not None}


def container_literals(source: str) -> list[object]:
    """The list, tuple, set and dict literals of a cell's code (as values)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            with contextlib.suppress(ValueError):
                found.append(ast.literal_eval(node))
    return found


def answer_constants(student: str, solution: str) -> dict[str, object]:
    """Names the learner fills in (``x = ...`` in the student cell) whose worked answer is a
    plain literal, with that literal."""
    open_names = {t.id for node in ast.walk(ast.parse(student)) if isinstance(node, ast.Assign)
                  and isinstance(node.value, ast.Constant) and node.value.value is ...
                  for t in node.targets if isinstance(t, ast.Name)}
    found: dict[str, object] = {}
    for node in ast.walk(ast.parse(solution)):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id in open_names:
                    with contextlib.suppress(ValueError):
                        found[t.id] = ast.literal_eval(node.value)
    return found


def code_without_comments(source: str) -> str:
    return tokenize.untokenize(t for t in tokenize.generate_tokens(io.StringIO(source).readline)
                               if t.type != tokenize.COMMENT)


@pytest.mark.parametrize("student", STUDENT, ids=lambda p: p.stem)
def test_each_exercise_is_registered_and_called_once(student: Path):
    nb = read(student)
    called = [i for c in nb.cells if c.cell_type == "code" for i in CHECK_CALL.findall(c.source)]
    headings = [i for c in nb.cells if c.cell_type == "markdown"
                for i in HEADING.findall(c.source)]
    registered = sorted((k for k, r in REGISTRY.items() if r.notebook == number_of(student)),
                        key=lambda k: int(k.split(".")[1]))
    assert called == headings, f"{student.name}: headings {headings} vs nb.check calls {called}"
    assert called == registered, f"{student.name}: nb.check calls {called}, registered " \
                                 f"in labkit.teach.answers: {registered}"


@pytest.mark.parametrize("student", STUDENT, ids=lambda p: p.stem)
def test_at_least_two_exercises_make_the_learner_think(student: Path):
    kinds = [r.kind for r in REGISTRY.values() if r.notebook == number_of(student)]
    thinking = [k for k in kinds if k in THINKING]
    assert len(thinking) >= 2, f"{student.name}: exercises of kinds {kinds}"
    assert kinds.count("read") <= 1, f"{student.name}: more than one read-a-field exercise"


@pytest.mark.parametrize("student", STUDENT, ids=lambda p: p.stem)
def test_no_learner_cell_holds_its_answer(student: Path):
    nb, sol = read(student), read(NOTEBOOKS / "solutions" / student.name)
    for k, (a, b) in enumerate(zip(nb.cells, sol.cells)):
        if a.cell_type != "code":
            continue
        assert not CHECKS_IN_CELL.search(code_without_comments(a.source)), \
            f"{student.name} cell {k}: checks belong in labkit.teach.answers, not the cell"
        if not CHECK_CALL.search(a.source):
            continue
        assert "exercise" in a.metadata.get("tags", []), \
            f"{student.name} cell {k}: an exercise cell is tagged 'exercise'"
        shown = constants(a.source)
        for name, value in answer_constants(a.source, b.source).items():
            if isinstance(value, bool) or value in ("", 0):
                continue
            if isinstance(value, (list, tuple, set, dict)):   # unhashable: compare by value
                assert value not in container_literals(a.source), \
                    f"{student.name} cell {k}: the answer to {name} ({value!r}) is in the cell"
                continue
            assert value not in shown, \
                f"{student.name} cell {k}: the answer to {name} ({value!r}) is in the cell"


def test_no_answer_module_holds_an_exercise_of_another_notebook():
    for number, reg in REGISTRY.items():
        assert reg.fn.__module__ == f"labkit.teach.answers.n{reg.notebook:02d}", number


def test_run_names_a_wrong_number_a_wrong_notebook_and_wrong_names():
    with pytest.raises(KeyError, match=r"no exercise '99\.1'"):
        run("99.1")
    some = next(iter(REGISTRY.values()))
    with pytest.raises(ValueError, match=f"belongs to notebook {some.notebook:02d}"):
        run(some.number, some.notebook + 1)
    with pytest.raises(TypeError, match="not a name of this exercise: typo"):
        run(some.number, some.notebook, typo=1, **dict.fromkeys(some.names, ...))
    with pytest.raises(TypeError, match="missing"):
        run(some.number, some.notebook)


def test_register_refuses_a_bad_number_kind_or_a_second_registration():
    with pytest.raises(ValueError, match=r"NN\.M"):
        exercise("11", "x", "write")
    with pytest.raises(ValueError, match="kind"):
        exercise("98.1", "x", "guess")
    with pytest.raises(ValueError, match="registered twice"):
        exercise(next(iter(REGISTRY)), "x", "write")(lambda ex: None)


def test_a_wrong_answer_is_not_revealed(monkeypatch, capsys):
    monkeypatch.delenv("LABKIT_STRICT_EXERCISES", raising=False)
    ex = Exercise("0.0 demo")
    ex.check("number", 5, 4)
    ex.check_one_of("choice", "b", ["A", "c"])
    assert ex.check_one_of("any case", " a ", ["A"])
    out = capsys.readouterr().out
    assert "5 is not right yet" in out and "'b' is not right yet" in out
    assert "4" not in out.replace("0.0", "") and "'c'" not in out
    assert answers.KINDS[-1] == "read"


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a cell binds at any level, names it reads) — magics and shell lines skipped."""
    code = "\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!")))
    tree = ast.parse(code)
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store) else read).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return bound, read


@pytest.mark.parametrize("folder", ["", "solutions"])
@pytest.mark.parametrize("student", STUDENT, ids=lambda p: p.stem)
def test_no_later_cell_reads_what_an_exercise_cell_bound(student: Path, folder: str):
    """So a learner's open answer cannot break the cells after it, and CI may run each
    learner copy in the solution's kernel (scripts/ci_notebooks.py)."""
    nb = read(NOTEBOOKS / folder / student.name)
    last_binder: dict[str, bool] = {}          # name -> bound last by an exercise cell
    for k, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        is_ex = bool(CHECK_CALL.search(cell.source))
        bound, read_names = _names(cell.source)
        if not is_ex:
            leaked = sorted(n for n in read_names - bound if last_binder.get(n))
            assert not leaked, (f"{folder or 'notebooks'}/{student.name} cell {k} reads "
                                f"{leaked}, bound by an exercise cell: compute it again in a "
                                "cell of its own, so an unanswered exercise cannot break it")
        for n in bound:
            last_binder[n] = is_ex


def skeleton_functions(source: str) -> set[str]:
    """Functions a learner's cell hands out unwritten: a body of a docstring and ``...``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(
                s.value, ast.Constant) and isinstance(s.value.value, str))]
            if (len(body) == 1 and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant) and body[0].value.value is ...):
                found.add(node.name)
    return found


SKELETONS = [(number, name) for path in STUDENT for c in read(path).cells
             if c.cell_type == "code" for number in CHECK_CALL.findall(c.source)
             for name in sorted(skeleton_functions(c.source)) if name in REGISTRY[number].names]


def test_some_exercise_hands_out_a_skeleton_function():
    assert {n for n, _ in SKELETONS} >= {"5.1", "17.2", "18.1", "18.4"}


@pytest.mark.parametrize(("number", "name"), SKELETONS, ids=lambda v: str(v))
def test_an_unwritten_function_is_one_line_not_one_per_case(number: str, name: str,
                                                             monkeypatch, capsys):
    """A skeleton handed in as it is gets one 'not answered yet' line, before any context (the
    record, the cache; ``None`` here) is read: it is not run against every case, each failing
    its own way. The exercise's other answers, ``None``, are each one 'not answered' line."""
    monkeypatch.delenv("LABKIT_STRICT_EXERCISES", raising=False)

    def unwritten(*args: object) -> None:
        """The learner's cell as handed out."""
        ...

    others = {n: None for n in REGISTRY[number].names if n != name}
    ex = run(number, **{name: unwritten}, **others)
    out = capsys.readouterr().out.splitlines()
    todo = [ln for ln in out if ln.startswith("[TODO]")]
    assert len(todo) == len(ex.results) and not ex.passed
    assert all("not answered yet" in ln for ln in todo), todo
    assert sum("not answered yet (write the function's body)" in ln for ln in todo) == 1, todo
