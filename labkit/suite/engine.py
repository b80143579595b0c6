"""The suite engine that ``labkit run``, ``labkit slides`` and ``labkit lab`` share.

* Finding notebooks: :func:`find_notebooks` turns ``03``, ``03_capture_replay``,
  ``solutions/03``, ``workshop_90min`` or a path into notebook files.
* Parameters: :func:`declared_parameters` reads a notebook's ``parameters`` cell (names,
  defaults, expected types); :func:`parse_param_items` reads ``-p key=value``;
  :func:`assign_parameters` checks names and types against the notebooks before anything runs.
* The kernel's environment: :func:`kernel_environment` (``LABKIT_RUN_DIR``, ``PYTHONPATH``
  with this labkit first, ``PLOTLY_RENDERER``, ``LABKIT_CPU_THREADS``), every value checked.
* Executing one notebook: :func:`execute_notebook` (papermill, with parameters) returns a
  :class:`NotebookResult`; a failing notebook is a result, not an exception.

Bad input raises :class:`SuiteError` (a ``ValueError``) whose message names the input, the
problem and the fix; nothing here prints to the terminal or exits.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import labkit
from labkit import envvars
from labkit.paths import repo_root

#: The numbered suite notebooks (what runs when no notebook is named).
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"
#: The workshop syllabus notebooks beside them.
WORKSHOP_GLOB = "workshop_*.ipynb"
#: Folder (under ``notebooks/``) of the worked solutions.
SOLUTIONS = "solutions"
#: The renderer that draws in JupyterLab and in offline exports (plotly.js embedded once).
DEFAULT_PLOTLY_RENDERER = "plotly_mimetype+notebook"
#: Longest single wait on a kernel socket; longer waits are made of slices this long.
POLL_SLICE_S = 0.1


class SuiteError(ValueError):
    """Bad input to the suite (a notebook name, a parameter, a file); the message names the
    input, the problem and the fix."""


# ----------------------------------------------------------------------------- notebooks


def notebooks_dir() -> Path:
    """The suite's ``notebooks/`` folder: the checkout's, else ``./notebooks``."""
    return repo_root() / "notebooks"


def display_path(path: Path) -> str:
    """``path`` relative to the current directory when it lies below it, else absolute."""
    path = Path(path).resolve()
    try:
        return path.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def known_names(nb_dir: Path) -> list[str]:
    """Every name :func:`find_notebooks` accepts for the notebooks in ``nb_dir`` (stems of the
    numbered and workshop notebooks, ``solutions/<stem>`` for the solutions)."""
    nb_dir = Path(nb_dir)
    if not nb_dir.is_dir():
        return []
    names = [p.stem for p in sorted(nb_dir.glob(NOTEBOOK_GLOB))]
    names += [p.stem for p in sorted(nb_dir.glob(WORKSHOP_GLOB))]
    names += [f"{SOLUTIONS}/{p.stem}" for p in sorted((nb_dir / SOLUTIONS).glob(NOTEBOOK_GLOB))]
    return names


def _lookup(entry: str, nb_dir: Path) -> list[Path]:
    """Notebooks in ``nb_dir`` that the name ``entry`` (no path) selects."""
    folder, name = nb_dir, entry
    if entry.startswith(SOLUTIONS + "/"):
        folder, name = nb_dir / SOLUTIONS, entry[len(SOLUTIONS) + 1:]
    if name.endswith(".ipynb"):
        name = name[: -len(".ipynb")]
    if re.fullmatch(r"\d{1,2}", name):
        return sorted(folder.glob(f"{int(name):02d}_*.ipynb"))
    if not name or "/" in name or name.startswith("."):
        return []
    cand = folder / f"{name}.ipynb"
    return [cand] if cand.is_file() else []


def find_notebooks(names: Sequence[str] | None, nb_dir: Path | None = None) -> list[Path]:
    """The notebook files ``names`` select, in order, each once.

    ``None`` (or empty) selects every ``notebooks/NN_*.ipynb``. An entry is a number (``03``,
    ``3``), a name (``03_capture_replay``, ``workshop_90min``), a solution (``solutions/03``,
    ``solutions/03_capture_replay``) or a path to a ``.ipynb`` file. Raises :class:`SuiteError`
    naming the entry and the closest known names.
    """
    nb_dir = Path(nb_dir) if nb_dir is not None else notebooks_dir()
    if not names:
        found = sorted(nb_dir.glob(NOTEBOOK_GLOB)) if nb_dir.is_dir() else []
        if not found:
            raise SuiteError(f"no notebooks matching {NOTEBOOK_GLOB} in {display_path(nb_dir)}: "
                             "run from the repository root or name notebook files explicitly")
        return [p.resolve() for p in found]
    out: list[Path] = []
    for raw in names:
        entry = str(raw).strip()
        path = Path(entry).expanduser()
        if entry and path.is_file():
            if path.suffix != ".ipynb":
                raise SuiteError(f"notebook {entry!r} is not a notebook (.ipynb): "
                                 "give a .ipynb file, a number like 03 or a name like 03_topic")
            out.append(path.resolve())
            continue
        matches = _lookup(entry, nb_dir) if nb_dir.is_dir() else []
        if len(matches) != 1:
            raise _no_match(entry, matches, nb_dir)
        out.append(matches[0].resolve())
    unique: list[Path] = []
    for p in out:  # the same notebook twice would overwrite its own outputs
        if p not in unique:
            unique.append(p)
    return unique


def _no_match(entry: str, matches: list[Path], nb_dir: Path) -> SuiteError:
    """The error for a name that selects no notebook, or several."""
    have = known_names(nb_dir)
    if matches:
        why = "matches several notebooks (" + ", ".join(p.name for p in matches) + ")"
    else:
        why = "matches no notebook"
    close = difflib.get_close_matches(entry, have, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    listing = ", ".join(n for n in have if not n.startswith(SOLUTIONS + "/")) or "none"
    return SuiteError(f"notebook {entry!r} {why} in {display_path(nb_dir)}: {hint}"
                     f"give a number like 03, a name like 03_topic, solutions/03, or a path to a "
                     f".ipynb file (have: {listing})")


# ----------------------------------------------------------------------------- parameters


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


# ----------------------------------------------------------------------------- environment


def kernel_pythonpath(environ: Mapping[str, str] | None = None) -> str:
    """PYTHONPATH for a kernel: the folder holding this labkit first, so notebooks import the
    same labkit as the command line even when it is not installed."""
    pkg_parent = str(Path(labkit.__file__).resolve().parent.parent)
    rest = [p for p in (os.environ if environ is None else environ).get("PYTHONPATH", "")
            .split(os.pathsep) if p and p != pkg_parent]
    return os.pathsep.join([pkg_parent, *rest])


def kernel_environment(run_dir: Path | None = None, *, plotly_renderer: str | None = None,
                       cpu_threads: int | None = None,
                       environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a kernel started by the suite gets on top of ``environ`` (default: this
    process's): ``PYTHONPATH`` (this labkit first), ``LABKIT_RUN_DIR`` (when ``run_dir``),
    ``PLOTLY_RENDERER`` (given, else the environment's, else the offline-friendly default) and
    ``LABKIT_CPU_THREADS`` (when given). Every LABKIT_* value the kernel would see is checked
    first (:class:`labkit.envvars.EnvVarError`)."""
    base = dict(os.environ if environ is None else environ)
    out = {"PYTHONPATH": kernel_pythonpath(base)}
    if run_dir is not None:
        out[envvars.RUN_DIR] = str(Path(run_dir).resolve())
    out[envvars.PLOTLY_RENDERER] = plotly_renderer or envvars.plotly_renderer(
        base, default=DEFAULT_PLOTLY_RENDERER)
    if cpu_threads is not None:
        out[envvars.CPU_THREADS] = str(cpu_threads)
    envvars.check_environment({**base, **out})
    return out


# ----------------------------------------------------------------------------- execution


@dataclass
class NotebookResult:
    """What executing one notebook gave: ``ok`` or the error (``error``: one line;
    ``error_record``: JSON-ready details), the executed copy (``output``, None when none was
    written), the seconds it took and the result records it wrote into the run folder."""

    notebook: Path
    output: Path | None
    ok: bool
    error: str | None = None
    duration_s: float = 0.0
    records: list[str] = field(default_factory=list)
    error_record: dict | None = None
    interrupted: bool = False

    @property
    def status(self) -> str:
        return "interrupted" if self.interrupted else ("ok" if self.ok else "failed")


def error_record(exc: BaseException) -> dict:
    """What went wrong, JSON-ready: the cell's error for a notebook failure, else the exception."""
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        return {
            "type": "cell",
            "ename": exc.ename,
            "evalue": exc.evalue,
            "cell_index": exc.cell_index,
            "exec_count": exc.exec_count,
            "source": exc.source,
            "summary": f"{exc.ename}: {exc.evalue}" + (
                f" (cell [{exc.exec_count}])" if exc.exec_count is not None else ""),
        }
    text = str(exc).strip().splitlines()
    return {
        "type": "exception",
        "ename": type(exc).__name__,
        "evalue": "\n".join(text),
        "summary": f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": "),
        "traceback": traceback.format_exception(type(exc), exc, exc.__traceback__)[-5:],
    }


def _kernel_manager_class(log_file: Any, env: Mapping[str, str]) -> type:
    """A kernel manager whose kernel gets ``env`` on top of this process's environment (this
    process's own environment is left alone) and writes its own stdout/stderr (start-up
    warnings, C-level messages) to ``log_file`` instead of the terminal; its client polls in
    slices (:func:`_sliced_client_class`). Cell outputs go into the executed notebook."""
    from jupyter_client.manager import AsyncKernelManager

    extra = dict(env)

    class LabkitKernelManager(AsyncKernelManager):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.client_factory = _sliced_client_class()

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            kw["env"] = {**(kw.get("env") or os.environ), **extra}
            kw["stdout"] = log_file
            kw["stderr"] = log_file
            return await super()._async_launch_kernel(kernel_cmd, **kw)

    return LabkitKernelManager


def _sliced_client_class() -> type:
    """A kernel client whose channels wait for messages in short slices.

    With a widget cell whose output is large (a plotly figure embedding plotly.js), the
    execute reply on the shell channel is sometimes not noticed by one long ``poll`` (a lost
    wake-up): nbclient then sits until the cell timeout although the kernel is idle, or
    forever without one. Re-polling every :data:`POLL_SLICE_S` seconds picks the reply up.
    """
    from queue import Empty

    from jupyter_client.asynchronous import AsyncKernelClient
    from jupyter_client.channels import AsyncZMQSocketChannel
    from traitlets import Type

    class SlicedChannel(AsyncZMQSocketChannel):
        async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:
            assert self.socket is not None
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                step = POLL_SLICE_S if deadline is None else \
                    max(0.0, min(POLL_SLICE_S, deadline - time.monotonic()))
                if await self.socket.poll(int(step * 1000)):
                    return await self._recv()
                if deadline is not None and time.monotonic() >= deadline:
                    raise Empty

    class SlicedKernelClient(AsyncKernelClient):
        shell_channel_class = Type(SlicedChannel)
        iopub_channel_class = Type(SlicedChannel)
        stdin_channel_class = Type(SlicedChannel)
        control_channel_class = Type(SlicedChannel)

    return SlicedKernelClient


def _records_state(run_dir: Path | None) -> dict[str, int]:
    folder = Path(run_dir) / "results" if run_dir is not None else None
    if folder is None or not folder.is_dir():
        return {}
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.json")}


def execute_notebook(notebook: Path, output: Path, *, parameters: Mapping[str, Any] | None = None,
                     run_dir: Path | None = None, timeout: int | None = 1800,
                     log_path: Path | None = None, plotly_renderer: str | None = None,
                     cpu_threads: int | None = None) -> NotebookResult:
    """Execute ``notebook`` with papermill into ``output`` (in the notebook's own folder, as
    JupyterLab would), with ``parameters`` injected and the kernel environment of
    :func:`kernel_environment`; the kernel's own stdout/stderr go to ``log_path`` (default:
    ``output`` with ``.kernel.log``). Records it saves go to ``run_dir``. ``timeout``: seconds
    per cell. A failing notebook gives ``ok=False`` with the error; Ctrl-C propagates."""
    import papermill

    notebook, output = Path(notebook), Path(output)
    env = kernel_environment(run_dir, plotly_renderer=plotly_renderer, cpu_threads=cpu_threads)
    output.parent.mkdir(parents=True, exist_ok=True)
    log_path = Path(log_path) if log_path is not None else output.with_suffix(".kernel.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    before = _records_state(run_dir)
    result = NotebookResult(notebook=notebook, output=output, ok=False)
    t0 = time.perf_counter()
    try:
        with open(log_path, "ab") as log_file:
            papermill.execute_notebook(
                str(notebook), str(output), parameters=dict(parameters or {}),
                kernel_name="python3", cwd=str(notebook.parent), progress_bar=False,
                request_save_on_cell_execute=False, execution_timeout=timeout,
                kernel_manager_class=_kernel_manager_class(log_file, env),
            )
        result.ok = True
    except KeyboardInterrupt:
        result.interrupted = True
        raise
    except Exception as exc:  # a failing notebook is a result, not a crash of the caller
        result.error_record = error_record(exc)
        result.error = result.error_record["summary"]
    finally:
        result.duration_s = round(time.perf_counter() - t0, 3)
        after = _records_state(run_dir)
        result.records = sorted(Path(n).stem for n, m in after.items() if before.get(n) != m)
        if not output.is_file():
            result.output = None
    return result
