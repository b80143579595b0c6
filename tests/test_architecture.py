"""The package's shape: the decode engine at the top, the plumbing under it, three rooms built on
it (serving, distributed decode, the roofline probes) and three wings, imports one way, no circles, no SystemExit in
library code, every module saying its one job in its docstring (read from the source with ast,
nothing imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "labkit"
#: a module may import only modules of its own rank or below
RANK = {"support": 0, "core": 1, "serving": 2, "distributed": 2, "roofline": 2,
        "measure": 3, "teach": 4, "suite": 5}


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _wing(module: str) -> str:
    if module == "labkit.__main__":  # `python -m labkit`: the command line
        return "suite"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANK else "core"


def _sources() -> dict[str, ast.Module]:
    return {_module(p): ast.parse(p.read_text(encoding="utf-8"), str(p))
            for p in sorted(PKG.rglob("*.py"))}


def _imports(tree: ast.Module, *, top_level_only: bool) -> list[tuple[str, int]]:
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("labkit"):
            out.append((node.module, node.lineno))
            out.extend((f"{node.module}.{a.name}", node.lineno) for a in node.names)
        elif isinstance(node, ast.Import):
            out.extend((a.name, node.lineno) for a in node.names if a.name.startswith("labkit"))
    return out


SOURCES = _sources()


def _resolve(name: str) -> str | None:
    """The labkit module an imported name refers to (a module, or the module of a name)."""
    while name and name not in SOURCES:
        name = name.rpartition(".")[0]
    return name or None


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_every_module_says_its_job(module):
    """Modules are split by job, not by length: each opens with a docstring saying its one
    job (CONTRIBUTING.md lists them)."""
    doc = ast.get_docstring(SOURCES[module]) or ""
    assert len(doc.split()) >= 5, f"{module} has no docstring saying what its one job is"


def test_the_wings_exist_and_the_core_is_at_the_top():
    assert {"labkit.measure", "labkit.teach", "labkit.suite"} <= set(SOURCES)
    core = {m for m in SOURCES if _wing(m) == "core" and m.count(".") == 1}
    assert {"labkit.model", "labkit.kvcache", "labkit.batch", "labkit.timing", "labkit.graphs",
            "labkit.piecewise", "labkit.mixed", "labkit.runner", "labkit.fused", "labkit.sizes",
            "labkit.kernels"} <= core
    rooms = {m for m in SOURCES if m.count(".") == 1} - core
    assert rooms == {"labkit.measure", "labkit.teach", "labkit.suite", "labkit.support",
                     "labkit.serving", "labkit.distributed", "labkit.roofline",
                     "labkit.__main__"}


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_imports_go_one_way(module):
    wing = _wing(module)
    for name, line in _imports(SOURCES[module], top_level_only=False):
        target = _resolve(name)
        if target is None or target == "labkit":
            continue
        assert RANK[_wing(target)] <= RANK[wing], (
            f"{module}:{line} imports {target}: the {wing} wing may not import the "
            f"{_wing(target)} wing (suite -> teach -> measure -> serving, distributed, "
            "roofline -> core -> support)")


@pytest.mark.parametrize("module", sorted(m for m in SOURCES if m != "labkit.suite.cli"))
def test_no_function_local_labkit_imports(module):
    tree = SOURCES[module]
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [
                a.name for a in node.names]
            assert not any(n.startswith("labkit") for n in names), (
                f"{module}:{node.lineno} imports labkit inside a function; import it at the "
                "top so the real graph shows")


def test_no_import_circle():
    graph = {m: {t for n, _ in _imports(tree, top_level_only=True)
                 if (t := _resolve(n)) and t != m and t != "labkit"}
             for m, tree in SOURCES.items()}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in graph.get(m, ()):
            if state.get(t) == 1:
                raise AssertionError("import circle: " + " -> ".join([*path, m, t]))
            if t not in state:
                visit(t, [*path, m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


@pytest.mark.parametrize("module", sorted(m for m in SOURCES
                                          if m not in ("labkit.suite.cli", "labkit.__main__")))
def test_no_system_exit_outside_the_cli(module):
    for node in ast.walk(SOURCES[module]):
        if isinstance(node, ast.Name) and node.id == "SystemExit":
            raise AssertionError(f"{module}:{node.lineno} uses SystemExit; raise an exception "
                                 "naming the problem and the fix, and let labkit.suite.cli "
                                 "choose the exit code")
