"""Parameters of the suite's notebooks: what a notebook declares, what the command line gives,
and the checks between them, all before anything runs.

* :func:`declared_parameters` reads a notebook's cell tagged ``parameters``: names, default
  source text, the type a value must have (from the default's syntax or an annotation).
* :func:`parse_param_items` reads ``-p key=value`` (values are YAML); :func:`load_param_file`
  reads ``-f file.yaml``.
* :func:`assign_parameters` gives each notebook the names it declares and raises
  :class:`labkit.suite.engine.SuiteError` for a name no selected notebook declares (closest
  names suggested) or a value of the wrong type (int accepted where float is expected).
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from labkit.suite.engine import SuiteError, display_path


@dataclass(frozen=True)
class Parameter:
    """One name of a notebook's ``parameters`` cell: its default's source text and the type a
    value must have (``int``, ``float``, ``bool``, ``str``, ``list``, ``dict``; None: any)."""

    name: str
    default: str
    kind: str | None


_NUMERIC = ("int", "float")


def _kind(node: ast.AST) -> str | None:
    """The type of a default value, from its syntax (no evaluation)."""
    if isinstance(node, ast.Constant):
        v = node.value
        if v is None or isinstance(v, (bytes, complex)):
            return None
        return type(v).__name__ if type(v).__name__ in ("bool", "int", "float", "str") else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _kind(node.operand)
        return inner if inner in _NUMERIC else None
    if isinstance(node, ast.BinOp):
        left, right = _kind(node.left), _kind(node.right)
        if left in _NUMERIC and right in _NUMERIC:
            return "float" if "float" in (left, right) or isinstance(node.op, ast.Div) else "int"
        if left == right == "str" and isinstance(node.op, ast.Add):
            return "str"
        return None
    if isinstance(node, (ast.List, ast.Tuple, ast.ListComp)):
        return "list"
    if isinstance(node, (ast.Dict, ast.DictComp)):
        return "dict"
    return None


_ANNOTATIONS = {"int": "int", "float": "float", "bool": "bool", "str": "str", "list": "list",
                "tuple": "list", "dict": "dict"}


def _parameters_cell(notebook: Path) -> str | None:
    import nbformat

    try:
        nb = nbformat.read(str(notebook), as_version=4)
    except Exception as exc:  # not JSON, not a notebook
        raise SuiteError(f"notebook {display_path(notebook)} cannot be read "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}): "
                         "give a valid .ipynb file") from None
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            return cell.source
    return None


def declared_parameters(notebook: Path) -> dict[str, Parameter]:
    """The names assigned at the top level of the notebook's cell tagged ``parameters``, with
    their defaults and expected types (``{}`` without such a cell)."""
    source = _parameters_cell(Path(notebook))
    if source is None:
        return {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return _papermill_parameters(Path(notebook))
    found: dict[str, Parameter] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value, note = node.targets, node.value, None
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
            note = _ANNOTATIONS.get(node.annotation.id) if isinstance(node.annotation, ast.Name) \
                else None
        else:
            continue
        kind = note or (_kind(value) if value is not None else None)
        text = ast.get_source_segment(source, value) if value is not None else ""
        for target in targets:
            if isinstance(target, ast.Name):
                found.setdefault(target.id, Parameter(target.id, text or "", kind))
            else:  # a, b = 1, 2: names without a checkable type
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        found.setdefault(n.id, Parameter(n.id, "", None))
    return found


def _papermill_parameters(notebook: Path) -> dict[str, Parameter]:
    """papermill's line-by-line view, for a parameters cell that is not valid Python."""
    import logging

    import papermill

    log = logging.getLogger("papermill")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        found = papermill.inspect_notebook(str(notebook))
    except ValueError:
        found = {}
    finally:
        log.setLevel(level)
    return {name: Parameter(name, str(p.get("default") or ""), None) for name, p in found.items()}


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_param_value(name: str, text: str) -> Any:
    """``text`` of ``-p name=text`` as a YAML value (numbers, booleans, lists, text)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        shown = text if text.isprintable() and "'" not in text else "your text"
        raise SuiteError(
            f"parameter {name!r}: value {text!r} is not valid YAML ({mark}): close brackets "
            f"and quotes (e.g. -p {name}=[1,2]), or quote text: -p {name}='\"{shown}\"'"
        ) from None


def parse_param_items(items: Iterable[str] | None) -> dict[str, Any]:
    """``-p key=value`` items as ``{key: YAML value}``; the last of a repeated key wins."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise SuiteError(f"parameter {item!r} is not key=value: write e.g. -p repeats=20")
        key, value = item.split("=", 1)
        key = key.strip()
        if not _NAME.fullmatch(key):
            raise SuiteError(f"parameter name {key!r} (in {item!r}) is not a Python name: "
                             "use the name as the notebook's parameters cell spells it, "
                             "e.g. -p repeats=20")
        out[key] = parse_param_value(key, value)
    return out


def load_yaml_mapping(path: Path, what: str, example: str) -> dict:
    """A YAML file holding a mapping with string keys (``{}`` for an empty file)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise SuiteError(f"{what} {display_path(path)} does not exist: give the path of a YAML "
                         f"file (e.g. one holding '{example}')")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise SuiteError(f"{what} {display_path(path)} is not valid YAML{at} ({problem}): "
                         f"fix the file (it holds e.g. '{example}')") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise SuiteError(f"{what} {display_path(path)} must be a YAML mapping of name: value "
                         f"(e.g. '{example}'), not {type(data).__name__}")
    return data


def load_param_file(path: Path | None) -> dict:
    """A YAML mapping ``{parameter: value}`` (``{}`` for None)."""
    if path is None:
        return {}
    data = load_yaml_mapping(path, "parameter file", "repeats: 5")
    for key in data:
        if not _NAME.fullmatch(key):
            raise SuiteError(f"parameter file {display_path(Path(path))}: {key!r} is not a "
                             "Python name: use the names of the notebooks' parameters cells")
    return data


def type_problem(value: Any, param: Parameter) -> str | None:
    """Why ``value`` does not fit ``param``'s type (None when it does): int is accepted where
    float is expected; a list where the default is a tuple."""
    kind = param.kind
    if kind is None:
        return None
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
        "list": isinstance(value, (list, tuple)),
        "dict": isinstance(value, dict),
    }[kind]
    if ok:
        return None
    got = "null" if value is None else f"{type(value).__name__} {value!r}"
    return f"expects {kind} (default {param.default}), got {got}"


def _type_hint(name: str, value: Any, kind: str) -> str:
    if kind == "str":
        shown = str(value) if str(value).isprintable() and "'" not in str(value) else "your text"
        return f"quote text: -p {name}='\"{shown}\"'"
    example = {"int": "20", "float": "0.5", "bool": "true", "list": "[1, 8]",
               "dict": "{a: 1}"}[kind]
    article = "an" if kind == "int" else "a"
    return f"give {article} {kind}, e.g. -p {name}={example}"


def unknown_parameter_error(names: Sequence[str], declared: Mapping[Path, Mapping[str, Any]]) -> SuiteError:
    """The error for parameter names no selected notebook declares (closest names suggested)."""
    known = sorted(set().union(*(set(d) for d in declared.values()))) if declared else []
    parts = []
    for name in names:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        parts.append(f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    nbs = ", ".join(p.stem for p in declared) or "none"
    return SuiteError(f"unknown parameter {', '.join(parts)}: no selected notebook ({nbs}) "
                      f"declares it; known: {', '.join(known) or 'none'}. A notebook's parameters "
                      "are the names assigned in its cell tagged 'parameters'")


def assign_parameters(params: Mapping[str, Any],
                      declared: Mapping[Path, Mapping[str, Parameter]], *,
                      may_skip: Iterable[str] = ()) -> dict[Path, dict]:
    """Per notebook, the parameters it declares, each checked against the default's type.

    A name may reach several notebooks; a name unknown to ALL of them (unless in ``may_skip``),
    or a value of the wrong type for one of them, raises :class:`SuiteError` (naming the
    parameter, the notebook and the expected type).
    """
    known = set().union(*(set(d) for d in declared.values())) if declared else set()
    skip = set(may_skip)
    unknown = [k for k in params if k not in known and k not in skip]
    if unknown:
        raise unknown_parameter_error(unknown, declared)
    per_nb: dict[Path, dict] = {}
    for nb, names in declared.items():
        mine = {k: v for k, v in params.items() if k in names}
        for k, v in mine.items():
            problem = type_problem(v, names[k])
            if problem:
                raise SuiteError(f"parameter {k!r} of notebook {nb.stem} {problem}: "
                                 f"{_type_hint(k, v, names[k].kind or 'str')}")
        per_nb[nb] = mine
    return per_nb
