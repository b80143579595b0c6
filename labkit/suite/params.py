"""Parameters of the suite's notebooks: what a notebook declares (:func:`declared_parameters`),
what the command line gives (:func:`parse_param_items`, :func:`load_param_file`) and the checks
between them (:func:`assign_parameters`), all before anything runs.

**Rules**: the last ``;``-separated part of a parameters-cell assignment's comment may be a rule::

    n_steps = 300            # decode steps drawn from the trace; >= 1
    record_preset = "gpt2"   # which record to chart; choices: "gpt2", "small"
    max_size = None          # largest candidate size (None: the trace's largest); int >= 1 or None

A rule is ``[TYPE] [choices: LITERAL, ... | BOUND[, BOUND]] [or None]`` with TYPE one of
``int float str bool list`` (default: the default value's type), BOUND one of ``>= N``,
``> N``, ``<= N``, ``< N``, and LITERALs written as in Python. For a list, choices and bounds
apply to each item, its items must have the type of the default's items, and it must not be
empty. ``or None`` also allows None (``-p name=null``).
"""

from __future__ import annotations

import ast
import difflib
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Mapping, Sequence

from labkit.suite.engine import SuiteError, display_path


@dataclass(frozen=True)
class Rule:
    """What a parameter's rule allows besides its type (see the module docstring)."""

    choices: tuple = ()
    bounds: tuple[tuple[str, float], ...] = ()
    nullable: bool = False
    item_kind: str | None = None
    text: str = ""

    def describe(self, kind: str | None) -> str:
        """The allowed values in words, e.g. ``int >= 1``, ``one of 'gpt2', 'small'``."""
        what = []
        if self.choices:
            what.append("one of " + ", ".join(repr(c) for c in self.choices))
        if self.bounds:
            what.append(" ".join(f"{op} {_num(v)}" for op, v in self.bounds))
        base = kind or "any value"
        if kind == "list":
            items = self.item_kind or "values"
            base = (f"a non-empty list of {items}" if (self.choices or self.bounds)
                    else f"a list of {items}")
            text = base + (", each " + " and ".join(what) if what else "")
        else:
            text = (" ".join([base, *what]) if self.bounds and not self.choices
                    else (what[0] if self.choices else base))
        return text + (" or null" if self.nullable else "")


@dataclass(frozen=True)
class Parameter:
    """One name of a notebook's ``parameters`` cell: its default's source text, the type a
    value must have (None: any) and its :class:`Rule`."""

    name: str
    default: str
    kind: str | None
    rule: Rule = field(default_factory=Rule)


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(v)


_TYPES = ("int", "float", "str", "bool", "list")
_BOUND = r"(?:>=|<=|>|<)\s*-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE]-?\d+)?"
_RULE = re.compile(
    rf"^(?:(?P<type>{'|'.join(_TYPES)})\b\s*)?"
    rf"(?:choices:\s*(?P<choices>.+?)|(?P<bounds>{_BOUND}(?:\s*,?\s*{_BOUND})?))?"
    r"\s*(?P<none>or None)?\s*$")


class RuleError(ValueError):
    """A rule in a parameters cell that cannot be read."""


def parse_rule(text: str) -> tuple[str | None, Rule] | None:
    """``(type or None, Rule)`` for a rule's text, or None when ``text`` is no rule (prose)."""
    text = text.strip()
    m = _RULE.match(text)
    if not text or m is None or not any(m.group(g) for g in ("type", "choices", "bounds", "none")):
        return None
    choices: tuple = ()
    if m.group("choices"):
        try:
            value = ast.literal_eval(f"[{m.group('choices')}]")
        except (ValueError, SyntaxError):
            raise RuleError(f"rule {text!r}: the choices are not Python literals "
                            '(write e.g. choices: "gpt2", "small")') from None
        choices = tuple(value)
    bounds = tuple((op, float(v)) for op, v in
                   re.findall(r"(>=|<=|>|<)\s*(-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE]-?\d+)?)",
                              m.group("bounds") or ""))
    return m.group("type"), Rule(choices, bounds, bool(m.group("none")), None, text)


def _comments(source: str) -> dict[int, str]:
    """``{line number: comment text}`` of a cell's source (``#`` left out)."""
    out: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = tok.string[1:].strip()
    except (tokenize.TokenError, SyntaxError):
        pass
    return out


def _rule_text(comment: str) -> str:
    return comment.rsplit(";", 1)[-1] if comment else ""


def _item_kind(node: ast.AST) -> str | None:
    if not isinstance(node, (ast.List, ast.Tuple)) or not node.elts:
        return None
    kinds = {_kind(e) for e in node.elts}
    if kinds == {"int"}:
        return "int"
    if kinds <= {"int", "float"}:
        return "float"
    return kinds.pop() if len(kinds) == 1 and None not in kinds else None


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
    """The names the notebook's ``parameters`` cell assigns, with defaults and types."""
    source = _parameters_cell(Path(notebook))
    if source is None:
        return {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return _papermill_parameters(Path(notebook))
    found: dict[str, Parameter] = {}
    comments = _comments(source)
    for node in tree.body:
        value: ast.expr | None
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
        rule = Rule()
        comment = comments.get(node.end_lineno or node.lineno) or comments.get(node.lineno, "")
        try:
            parsed = parse_rule(_rule_text(comment))
        except RuleError as exc:
            raise SuiteError(f"notebook {display_path(Path(notebook))}, parameter "
                             f"{getattr(targets[0], 'id', '?')}: {exc}") from None
        if parsed is not None:
            rkind, rule = parsed
            kind = rkind or kind
        if kind == "list":  # a list's items have the type of the default's items
            item = _item_kind(value) if value is not None else None
            rule = Rule(rule.choices, rule.bounds, rule.nullable, item, rule.text)
        for target in targets:
            if isinstance(target, ast.Name):
                found.setdefault(target.id, Parameter(target.id, text or "", kind, rule))
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


def _type_hint(name: str, value: Any, kind: str) -> str:
    if kind == "str":
        shown = str(value) if str(value).isprintable() and "'" not in str(value) else "your text"
        return f"quote text: -p {name}='\"{shown}\"'"
    example = {"int": "20", "float": "0.5", "bool": "true", "list": "[1, 8]",
               "dict": "{a: 1}"}[kind]
    article = "an" if kind == "int" else "a"
    return f"give {article} {kind}, e.g. -p {name}={example}"


def _yaml(value: Any) -> str:
    import json

    return json.dumps(value) if not isinstance(value, str) or not value.isidentifier() else value


def _allowed(value: Any, rule: Rule) -> str | None:
    """Why one (scalar) value breaks ``rule``'s choices or bounds (None when it does not)."""
    if rule.choices and value not in rule.choices:
        return f"{value!r} is not allowed"
    for op, bound in rule.bounds:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"{value!r} is not a number"
        ok = {">=": value >= bound, ">": value > bound, "<=": value <= bound,
              "<": value < bound}[op]
        if not ok:
            return f"{value!r} is not {op} {_num(bound)}"
    return None


def _fits(value: Any, kind: str) -> bool:
    return {"int": isinstance(value, int) and not isinstance(value, bool),
            "float": isinstance(value, (int, float)) and not isinstance(value, bool),
            "bool": isinstance(value, bool), "str": isinstance(value, str),
            "list": isinstance(value, (list, tuple)), "dict": isinstance(value, dict)}[kind]


def _example(param: Parameter) -> str:
    rule = param.rule
    if rule.choices:
        first = rule.choices[0]
        return f"-p {param.name}=[{_yaml(first)}]" if param.kind == "list" else \
            f"-p {param.name}={_yaml(first)}"
    return f"-p {param.name}={param.default}" if param.default and len(param.default) < 40 \
        and "*" not in param.default else ""


def value_problem(value: Any, param: Parameter) -> tuple[str, str] | None:
    """``(problem, how to fix it)`` when ``value`` does not fit ``param`` (None when it does)."""
    kind, rule = param.kind, param.rule
    allowed = rule.describe(kind)
    default = f" (default {param.default})" if param.default else ""
    example = _example(param)
    fix = f"give e.g. {example}" if example else f"give {allowed}"
    if value is None:
        if rule.nullable or kind is None:
            return None
        return f"expects {allowed}{default}, got null", fix
    if value == "None" and (rule.nullable or kind not in (None, "str")):
        return (f"expects {allowed}{default}, got the text 'None'",
                f"YAML writes None as null: -p {param.name}=null" if rule.nullable else fix)
    if kind is not None and not _fits(value, kind):
        got = f"{type(value).__name__} {value!r}"
        return f"expects {allowed}{default}, got {got}", (
            fix if rule.choices or rule.bounds else _type_hint(param.name, value, kind))
    if kind == "list":
        items = list(value)
        if not items and (rule.choices or rule.bounds):
            return f"expects {allowed}{default}, got an empty list", fix
        for i, item in enumerate(items):
            if rule.item_kind and not _fits(item, rule.item_kind):
                return (f"expects {allowed}{default}, got {item!r} (a {type(item).__name__}) "
                        f"at position {i + 1} of {list(value)!r}", fix)
            why = _allowed(item, rule)
            if why:
                return f"expects {allowed}{default}: {why} (in {list(value)!r})", fix
        return None
    why = _allowed(value, rule)
    if why:
        return f"expects {allowed}{default}: {why}", fix
    return None


def unknown_parameter_error(names: Sequence[str],
                            declared: Mapping[Path, Mapping[str, Any]]) -> SuiteError:
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
    """Per notebook, the parameters it declares, each checked against its type and rule; a
    name no notebook declares (unless in ``may_skip``) or a bad value raises :class:`SuiteError`."""
    known = set().union(*(set(d) for d in declared.values())) if declared else set()
    skip = set(may_skip)
    unknown = [k for k in params if k not in known and k not in skip]
    if unknown:
        raise unknown_parameter_error(unknown, declared)
    per_nb: dict[Path, dict] = {}
    for nb, names in declared.items():
        mine = {k: v for k, v in params.items() if k in names}
        for k, v in mine.items():
            problem = value_problem(v, names[k])
            if problem:
                raise SuiteError(f"parameter {k!r} of notebook {nb.stem} {problem[0]}: "
                                 f"{problem[1]}")
        per_nb[nb] = mine
    return per_nb

