"""``labkit run``: execute the notebook suite (or some notebooks, or a parameter sweep) with
papermill, into a fresh run folder.

A run folder ``runs/<UTC yyyymmdd-HHMMSS>-<tier>[-<n>]/`` holds::

    run.json              environment record, parameters, per-notebook status and duration
    notebooks/NN_x.ipynb  the executed notebooks (outputs included)
    html/NN_x.html        their HTML exports (images embedded)
    results/<name>.json   result records the notebooks saved (labkit.measure.results.save_result)
    index.html            a self-contained report page (labkit.suite.report)

A sweep (``labkit run --sweep grid.yaml``) makes one run folder per parameter combination
plus ``runs/sweep-<UTC timestamp>/`` with ``sweep.json`` and ``index.html``.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import re
import sys
import time
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator
import labkit
from labkit.env import environment_record, hardware_tier
from labkit.measure.results import new_folder, to_jsonable, write_text_atomic
from labkit.suite.report import export_notebook_html, format_duration, write_run_index, write_sweep_index
from labkit.paths import repo_root

#: Version of the ``run.json`` / ``sweep.json`` layout.
RUN_SCHEMA = 1
RUN_FILE = "run.json"
SWEEP_FILE = "sweep.json"
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"
#: Key of a sweep grid file that selects notebooks instead of naming a parameter.
SWEEP_NOTEBOOKS_KEY = "notebooks"

_STAMP = "%Y%m%d-%H%M%S"


class UnknownParameterWarning(UserWarning):
    """A parameter was given that none of the selected notebooks declares."""


# ----------------------------------------------------------------------------- helpers


def _utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _iso(t: _dt.datetime) -> str:
    return t.replace(microsecond=0).isoformat()


def notebooks_dir() -> Path:
    """The suite's ``notebooks/`` folder: the checkout's, else ``./notebooks``."""
    return repo_root() / "notebooks"


def _display_path(path: Path) -> str:
    """``path`` relative to the current directory when it lies below it, else absolute."""
    path = Path(path).resolve()
    try:
        return path.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def _write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (a reader never sees half a file)."""

    write_text_atomic(path, json.dumps(to_jsonable(obj, path.name), indent=2) + "\n")


def _warn(message: str, category: type[Warning]) -> None:
    """A warning shown as ``labkit run: <message>`` (no source line of the caller)."""
    warnings.warn_explicit(message, category, filename="labkit run", lineno=0,
                           module="labkit.suite.runner")


def resolve_notebooks(notebooks: list[str] | None, nb_dir: Path | None = None) -> list[Path]:
    """Turn the command line's notebook list into paths.

    ``None`` (or empty) selects every ``notebooks/NN_*.ipynb`` in order. An entry may be a path
    to a notebook, a number (``"03"`` or ``"3"``) or a name (``"03_capture_replay"``).
    """
    nb_dir = Path(nb_dir) if nb_dir is not None else notebooks_dir()
    available = sorted(nb_dir.glob(NOTEBOOK_GLOB)) if nb_dir.is_dir() else []
    if not notebooks:
        if not available:
            raise SystemExit(
                f"labkit run: no notebooks matching {NOTEBOOK_GLOB} in {_display_path(nb_dir)}; "
                "run from the repository root or name notebook files explicitly"
            )
        return available

    have = ", ".join(p.stem for p in available) or "none"
    out: list[Path] = []
    for entry in notebooks:
        entry = str(entry).strip()
        path = Path(entry).expanduser()
        if path.is_file():
            if path.suffix != ".ipynb":
                raise SystemExit(f"labkit run: {entry} is not a notebook (.ipynb)")
            out.append(path.resolve())
            continue
        if re.fullmatch(r"\d{1,2}", entry):
            matches = sorted(nb_dir.glob(f"{int(entry):02d}_*.ipynb"))
        else:
            stem = entry[: -len(".ipynb")] if entry.endswith(".ipynb") else entry
            matches = [p for p in (nb_dir / f"{stem}.ipynb",) if p.is_file()]
        if len(matches) != 1:
            why = "matches no notebook" if not matches else (
                "matches several notebooks (" + ", ".join(p.name for p in matches) + ")")
            raise SystemExit(
                f"labkit run: {entry!r} {why} in {_display_path(nb_dir)} (have: {have}); "
                "give a number like 03, a name like 03_topic, or a path to a .ipynb file"
            )
        out.append(matches[0].resolve())
    # the same notebook twice would overwrite its own outputs
    seen: set[Path] = set()
    unique = []
    for p in out:
        if p not in seen:
            seen.add(p)
            unique.append(p)
    return unique


# ----------------------------------------------------------------------------- parameters


def load_param_file(path: Path | None) -> dict:
    """A YAML mapping ``{parameter: value}`` (``{}`` for None)."""
    if path is None:
        return {}
    import yaml

    path = Path(path)
    if not path.is_file():
        raise SystemExit(f"labkit run: parameter file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SystemExit(f"labkit run: parameter file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise SystemExit(
            f"labkit run: parameter file {path} must be a YAML mapping of name: value "
            "(e.g. 'repeats: 5')"
        )
    return data


def merge_params(params: dict | None, param_file: Path | None) -> dict:
    """Parameters from ``param_file`` overridden by ``params`` (``-p`` wins over ``-f``)."""
    merged = dict(load_param_file(param_file))
    merged.update(params or {})
    return merged


def declared_parameters(notebook: Path) -> dict[str, dict]:
    """The parameters a notebook declares in its ``parameters`` cell.

    papermill's view (``papermill.inspect_notebook``), plus every top-level ``name = ...`` of
    that cell that papermill's line parser skips (it gives up on a line whose comment holds
    an ``=``, e.g. ``X = 1  # d=256``); papermill injects such names all the same.
    """
    import logging

    import papermill

    log = logging.getLogger("papermill")
    level = log.level
    log.setLevel(logging.ERROR)  # its "Unable to parse line" notes are covered below
    try:
        found = dict(papermill.inspect_notebook(str(notebook)))
    except ValueError:  # e.g. no kernelspec in the file: execution names python3 anyway
        found = {}
    finally:
        log.setLevel(level)
    for name in _assigned_names(notebook):
        found.setdefault(name, {"name": name, "inferred_type_name": "None", "default": None,
                                "help": ""})
    return found


def _assigned_names(notebook: Path) -> list[str]:
    """Names assigned at the top level of the notebook's cell tagged ``parameters``."""
    import ast

    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    names: list[str] = []
    for cell in nb.cells:
        if cell.cell_type != "code" or "parameters" not in cell.metadata.get("tags", []):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            return names
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign) else [])
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and n.id not in names:
                        names.append(n.id)
        break
    return names


def split_parameters(params: dict, declared: dict[Path, dict]) -> tuple[dict[Path, dict], list[str]]:
    """Per notebook, the parameters it declares; and the names no notebook declares."""
    per_nb = {nb: {k: v for k, v in params.items() if k in names} for nb, names in declared.items()}
    known = set().union(*(set(names) for names in declared.values())) if declared else set()
    unknown = [k for k in params if k not in known]
    return per_nb, unknown


# ----------------------------------------------------------------------------- execution


@contextmanager
def _env_var(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _error_record(exc: BaseException) -> dict:
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


def _kernel_manager_class(log_file: Any) -> type:
    """A kernel manager whose kernel writes its own stdout/stderr (start-up warnings, C-level
    messages) to ``log_file`` instead of the terminal, where they would break the progress
    bar, and whose client polls in slices (:func:`_sliced_client_class`). Cell outputs are
    unaffected: they go into the executed notebook."""
    from jupyter_client.manager import AsyncKernelManager

    class LoggedKernelManager(AsyncKernelManager):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.client_factory = _sliced_client_class()

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            kw["stdout"] = log_file
            kw["stderr"] = log_file
            return await super()._async_launch_kernel(kernel_cmd, **kw)

    return LoggedKernelManager


#: Longest single wait on a kernel socket; longer waits are made of slices this long.
POLL_SLICE_S = 0.1


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


def _kernel_pythonpath() -> str:
    """PYTHONPATH for the kernel: the folder holding this labkit first, so the notebooks import
    the same labkit as the runner even when it is not installed."""

    pkg_parent = str(Path(labkit.__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH", "")
    return pkg_parent + (os.pathsep + rest if rest else "")


def _results_state(run_dir: Path) -> dict[str, float]:
    folder = run_dir / "results"
    if not folder.is_dir():
        return {}
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.json")}


def _execute_one(entry: dict, nb_path: Path, run_dir: Path, parameters: dict, timeout: int) -> None:
    """Execute one notebook with papermill and export it to HTML; fills ``entry`` in place."""
    import papermill


    out_nb = run_dir / entry["output"]
    out_nb.parent.mkdir(parents=True, exist_ok=True)
    before = _results_state(run_dir)
    t0 = time.perf_counter()
    entry["started"] = _iso(_utc_now())
    entry["status"] = "running"
    log_path = run_dir / entry["kernel_log"]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(log_path, "ab") as log_file, _env_var("LABKIT_RUN_DIR", str(run_dir)), \
                _env_var("PYTHONPATH", _kernel_pythonpath()):
            papermill.execute_notebook(
                str(nb_path), str(out_nb), parameters=parameters, kernel_name="python3",
                cwd=str(nb_path.parent), progress_bar=False, request_save_on_cell_execute=False,
                execution_timeout=timeout, kernel_manager_class=_kernel_manager_class(log_file),
            )
        entry["status"] = "ok"
    except KeyboardInterrupt:
        entry["status"] = "interrupted"
        raise
    except Exception as exc:  # a failing notebook must not stop the bookkeeping
        entry["status"] = "failed"
        entry["error"] = _error_record(exc)
    finally:
        entry["duration_s"] = round(time.perf_counter() - t0, 3)
        entry["finished"] = _iso(_utc_now())
        after = _results_state(run_dir)
        entry["results"] = sorted(
            Path(n).stem for n, mtime in after.items() if before.get(n) != mtime)

    if out_nb.is_file():
        html_path = run_dir / entry["html"]
        try:
            export_notebook_html(out_nb, html_path)
        except Exception as exc:  # report it; the executed notebook is still there
            entry["html"] = None
            entry["html_error"] = f"{type(exc).__name__}: {exc}"
    else:
        entry["output"] = None
        entry["html"] = None


def _progress(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="nb", desc=desc, file=sys.stderr, dynamic_ncols=True,
                leave=True)


def run_suite(notebooks: list[str] | None, params: dict | None = None,
              param_file: Path | None = None, out_root: Path = Path("runs"),
              timeout: int = 1800, keep_going: bool = False, *,
              sweep: dict | None = None) -> Path:
    """Execute notebooks with papermill into a new run folder and return the folder.

    ``notebooks``: paths, numbers (``"03"``) or names; None runs every ``notebooks/NN_*.ipynb``.
    ``params`` (``-p``) override ``param_file`` (``-f``, YAML); each notebook only receives the
    parameters its ``parameters`` cell declares, and names no notebook declares are warned
    about (:class:`UnknownParameterWarning`). ``timeout`` is seconds per cell. After a failing
    notebook the rest are skipped unless ``keep_going``. Writes ``run.json`` and ``index.html``;
    raises ``SystemExit(1)`` after writing them if any notebook failed. ``sweep`` (set by
    :func:`run_sweep`) is recorded in ``run.json``.
    """

    nb_paths = resolve_notebooks(notebooks)
    merged = merge_params(params, param_file)
    declared = {p: declared_parameters(p) for p in nb_paths}
    per_nb, unknown = split_parameters(merged, declared)
    if unknown:
        names = ", ".join(sorted(unknown))
        _warn(f"parameter(s) {names} not declared by any selected notebook "
              f"({', '.join(p.stem for p in nb_paths)}): ignored. A notebook's parameters "
              "are the names assigned in its cell tagged 'parameters'.", UnknownParameterWarning)

    tier = hardware_tier()
    started = _utc_now()
    out_root = Path(out_root).expanduser().resolve()
    run_dir = new_folder(out_root, f"{started.strftime(_STAMP)}-{tier}")

    entries = []
    for p in nb_paths:
        stem = p.stem
        entries.append({
            "name": stem,
            "input": _display_path(p),
            "output": f"notebooks/{stem}.ipynb",
            "html": f"html/{stem}.html",
            "kernel_log": f"logs/{stem}.kernel.log",
            "parameters": per_nb[p],
            "declared_parameters": sorted(declared[p]),
            "status": "pending",
            "duration_s": None,
            "error": None,
            "results": [],
        })
    record: dict[str, Any] = {
        "schema": RUN_SCHEMA,
        "kind": "labkit-run",
        "run": run_dir.name,
        "tier": tier,
        "status": "running",
        "started": _iso(started),
        "finished": None,
        "duration_s": None,
        "params": merged,
        "param_file": str(param_file) if param_file else None,
        "unknown_params": sorted(unknown),
        "sweep": sweep,
        "timeout_s": timeout,
        "keep_going": keep_going,
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]) if sys.argv else None,
        "env": environment_record(),
        "notebooks": entries,
        "results": [],
    }
    run_json = run_dir / RUN_FILE
    _write_json(run_json, record)

    t0 = time.perf_counter()
    bar = _progress(len(entries), "labkit run")
    stopped = False
    try:
        for nb_path, entry in zip(nb_paths, entries):
            if stopped:
                entry["status"] = "skipped"
                bar.update(1)
                continue
            bar.set_description(f"labkit run: {entry['name']}")
            _execute_one(entry, nb_path, run_dir, entry["parameters"], timeout)
            _write_json(run_json, record)
            if entry["status"] == "ok":
                bar.write(f"  ok      {entry['name']}  ({format_duration(entry['duration_s'])})")
            else:
                bar.write(f"  FAILED  {entry['name']}  ({format_duration(entry['duration_s'])}): "
                          f"{entry['error']['summary']}")
                if not keep_going:
                    stopped = True
            bar.update(1)
    except KeyboardInterrupt:
        record["status"] = "interrupted"
        for entry in entries:
            if entry["status"] == "pending":
                entry["status"] = "skipped"
        raise
    finally:
        bar.close()
        finished = _utc_now()
        failed = [e for e in entries if e["status"] in ("failed", "interrupted")]
        if record["status"] == "running":
            record["status"] = "failed" if failed else "ok"
        record["finished"] = _iso(finished)
        record["duration_s"] = round(time.perf_counter() - t0, 3)
        record["results"] = sorted(p.stem for p in (run_dir / "results").glob("*.json")) \
            if (run_dir / "results").is_dir() else []
        _write_json(run_json, record)
        try:
            write_run_index(run_dir, record)
        except Exception as exc:  # the run itself is recorded; say why the page is missing
            print(f"labkit run: could not write index.html: {type(exc).__name__}: {exc}",
                  file=sys.stderr)

    n_ok = sum(e["status"] == "ok" for e in entries)
    n_skip = sum(e["status"] == "skipped" for e in entries)
    summary = (f"labkit run: {n_ok}/{len(entries)} notebooks ok"
               + (f", {len(failed)} failed ({', '.join(e['name'] for e in failed)})" if failed else "")
               + (f", {n_skip} skipped" if n_skip else "")
               + f", {len(record['results'])} result record(s), "
               f"{format_duration(record['duration_s'])} -> {_display_path(run_dir)}"
               f" (report: {_display_path(run_dir / 'index.html')})")
    print(summary, flush=True)
    if failed:
        raise SystemExit(1)
    return run_dir


# ----------------------------------------------------------------------------- sweep


def load_grid(grid_file: Path) -> tuple[dict[str, list], list[str] | None]:
    """Read a sweep grid: ``{param: [values...]}`` plus an optional ``notebooks: [...]``.

    A scalar value counts as a one-value list. Returns (grid, notebooks or None).
    """
    import yaml

    grid_file = Path(grid_file)
    if not grid_file.is_file():
        raise SystemExit(f"labkit run: sweep file {grid_file} does not exist")
    try:
        raw = yaml.safe_load(grid_file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SystemExit(f"labkit run: sweep file {grid_file} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict) or not raw:
        raise SystemExit(
            f"labkit run: sweep file {grid_file} must be a YAML mapping of parameter: "
            "[values...] (e.g. 'batch_size: [1, 8, 64]'), optionally with 'notebooks: [...]'")
    raw = dict(raw)
    nbs = raw.pop(SWEEP_NOTEBOOKS_KEY, None)
    if nbs is not None:
        if isinstance(nbs, (str, int)):
            nbs = [nbs]
        if not isinstance(nbs, list):
            raise SystemExit(f"labkit run: 'notebooks' in {grid_file} must be a list")
        nbs = [f"{n:02d}" if isinstance(n, int) else str(n) for n in nbs]
    grid: dict[str, list] = {}
    for key, values in raw.items():
        if not isinstance(key, str):
            raise SystemExit(f"labkit run: sweep file {grid_file}: parameter name {key!r} "
                             "is not a string")
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise SystemExit(f"labkit run: sweep file {grid_file}: parameter {key!r} has an "
                             "empty list of values")
        grid[key] = values
    if not grid:
        raise SystemExit(f"labkit run: sweep file {grid_file} names no parameter to sweep")
    return grid, nbs


def combinations(grid: dict[str, list]) -> list[dict]:
    """The cartesian product of a grid, in file order (last parameter varies fastest)."""
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def run_sweep(notebooks: list[str] | None, grid_file: Path, params: dict | None = None,
              param_file: Path | None = None, out_root: Path = Path("runs"),
              timeout: int = 1800, *, keep_going: bool = True) -> list[Path]:
    """One :func:`run_suite` per combination of the grid in ``grid_file``; returns the run
    folders. Swept values override ``params``/``param_file`` of the same name. Writes
    ``<out_root>/sweep-<timestamp>/`` with ``sweep.json`` and ``index.html``; raises
    ``SystemExit(1)`` after that if any run failed. Notebooks given on the command line win
    over the grid file's ``notebooks`` list."""

    grid, grid_nbs = load_grid(grid_file)
    nb_paths = resolve_notebooks(notebooks or grid_nbs)
    base = merge_params(params, param_file)
    clash = sorted(set(base) & set(grid))
    if clash:
        _warn(f"{', '.join(clash)} set both by -p/-f and by the sweep grid: "
              "the grid's values are used", UserWarning)
    combos = combinations(grid)

    started = _utc_now()
    out_root = Path(out_root).expanduser().resolve()
    sweep_dir = new_folder(out_root, f"sweep-{started.strftime(_STAMP)}")
    runs: list[dict] = []
    record: dict[str, Any] = {
        "schema": RUN_SCHEMA,
        "kind": "labkit-sweep",
        "sweep": sweep_dir.name,
        "grid_file": str(grid_file),
        "grid": grid,
        "base_params": base,
        "notebooks": [p.stem for p in nb_paths],
        "started": _iso(started),
        "finished": None,
        "status": "running",
        "runs": runs,
    }
    _write_json(sweep_dir / SWEEP_FILE, record)
    print(f"labkit run: sweep of {len(combos)} combination(s) over "
          f"{', '.join(grid)} -> {_display_path(sweep_dir)}", flush=True)

    run_dirs: list[Path] = []
    t0 = time.perf_counter()
    try:
        for i, combo in enumerate(combos, 1):
            label = ", ".join(f"{k}={v!r}" for k, v in combo.items())
            print(f"labkit run: sweep {i}/{len(combos)}: {label}", flush=True)
            run_params = {**base, **combo}
            info = {"index": i, "of": len(combos), "sweep_dir": sweep_dir.name,
                    "combination": combo}
            before = set(out_root.iterdir())
            item: dict[str, Any] = {"index": i, "combination": combo, "run": None,
                                    "status": "running"}
            runs.append(item)
            try:
                run_dir = run_suite([str(p) for p in nb_paths], params=run_params, param_file=None,
                                    out_root=out_root, timeout=timeout, keep_going=keep_going,
                                    sweep=info)
                item["status"] = "ok"
            except SystemExit as exc:
                run_dir = _find_new_run(out_root, before)
                item["status"] = "failed"
                if exc.code not in (0, 1, None):
                    item["error"] = str(exc.code)
            except KeyboardInterrupt:
                item["status"] = "interrupted"
                run_dir = _find_new_run(out_root, before)
                if run_dir is not None:
                    item["run"] = run_dir.name
                raise
            if run_dir is not None:
                run_dirs.append(run_dir)
                item["run"] = run_dir.name
                item.update(_run_summary(run_dir))
            _write_json(sweep_dir / SWEEP_FILE, record)
    finally:
        record["finished"] = _iso(_utc_now())
        record["duration_s"] = round(time.perf_counter() - t0, 3)
        failed = [r for r in runs if r["status"] != "ok"]
        if any(r["status"] == "interrupted" for r in runs) or len(runs) < len(combos):
            record["status"] = "interrupted"
        else:
            record["status"] = "failed" if failed else "ok"
        _write_json(sweep_dir / SWEEP_FILE, record)
        try:
            write_sweep_index(sweep_dir, record)
        except Exception as exc:
            print(f"labkit run: could not write the sweep's index.html: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)

    n_ok = sum(r["status"] == "ok" for r in runs)
    print(f"labkit run: sweep {n_ok}/{len(combos)} runs ok, "
          f"{format_duration(record['duration_s'])} -> {_display_path(sweep_dir)} "
          f"(report: {_display_path(sweep_dir / 'index.html')})", flush=True)
    if failed:
        raise SystemExit(1)
    return run_dirs


def _find_new_run(out_root: Path, before: set[Path]) -> Path | None:
    """The run folder a failed run_suite call created (it carries a run.json)."""
    new = [p for p in set(out_root.iterdir()) - before if (p / RUN_FILE).is_file()]
    return sorted(new)[-1] if new else None


def _run_summary(run_dir: Path) -> dict:
    """Status counts and duration of a run, read back from its run.json."""
    try:
        rec = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    nbs = rec.get("notebooks", [])
    return {
        "duration_s": rec.get("duration_s"),
        "notebooks_ok": sum(e.get("status") == "ok" for e in nbs),
        "notebooks_total": len(nbs),
        "failed": [e["name"] for e in nbs if e.get("status") == "failed"],
        "results": rec.get("results", []),
    }
