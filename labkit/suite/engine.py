"""The suite engine that ``labkit run``, ``labkit slides`` and ``labkit lab`` share: finding
notebooks, the kernel's environment and executing one notebook with papermill (a failing
notebook is a result, not an exception). Bad input raises :class:`SuiteError`.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import os
import re
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Collection, Iterator, Mapping, Sequence

import labkit
from labkit.support import envvars
from labkit.support.paths import repo_root

#: The numbered suite notebooks (what runs when no notebook is named).
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"
#: The workshop syllabus notebooks beside them.
WORKSHOP_GLOB = "workshop_*.ipynb"
#: Folder (under ``notebooks/``) of the worked solutions.
SOLUTIONS = "solutions"
#: The renderer of the suite's kernels: the plotly JSON only (every export rebuilds its charts
#: from it), so an executed notebook does not carry its own 5 MB copy of plotly.js.
DEFAULT_PLOTLY_RENDERER = "plotly_mimetype"
#: what ``labkit run`` writes into a run folder and a sweep folder
RUN_FILE = "run.json"
SWEEP_FILE = "sweep.json"
#: Longest single wait on a kernel socket; longer waits are made of slices this long.
POLL_SLICE_S = 0.1


class SuiteError(ValueError):
    """Bad input to the suite; the message names the input, the problem and the fix."""


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
    """Every name :func:`find_notebooks` accepts for the notebooks in ``nb_dir``."""
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
    """The notebook files ``names`` select, in order, each once (None: every
    ``notebooks/NN_*.ipynb``): numbers (``03``), names (``03_capture_replay``,
    ``workshop_90min``), solutions (``solutions/03``) or ``.ipynb`` paths."""
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


def read_run_record(run_dir: Path) -> dict | None:
    """``run_dir/run.json`` as a dict, or None when it is missing or unreadable."""
    try:
        rec = json.loads((Path(run_dir) / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("notebooks"), list) else None


def kernel_pythonpath(environ: Mapping[str, str] | None = None) -> str:
    """PYTHONPATH for a kernel: this labkit's folder first, so notebooks import the same labkit
    as the command line."""
    pkg_parent = str(Path(labkit.__file__).resolve().parent.parent)
    rest = [p for p in (os.environ if environ is None else environ).get("PYTHONPATH", "")
            .split(os.pathsep) if p and p != pkg_parent]
    return os.pathsep.join([pkg_parent, *rest])


def kernel_environment(run_dir: Path | None = None, *, plotly_renderer: str | None = None,
                       environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a suite kernel gets on top of ``environ`` (default: this process's):
    ``PYTHONPATH``, ``LABKIT_RUN_DIR`` and ``PLOTLY_RENDERER``, every LABKIT_* value checked."""
    base = dict(os.environ if environ is None else environ)
    out = {"PYTHONPATH": kernel_pythonpath(base)}
    if run_dir is not None:
        out[envvars.RUN_DIR] = str(Path(run_dir).resolve())
    out[envvars.PLOTLY_RENDERER] = plotly_renderer or envvars.plotly_renderer(
        base, default=DEFAULT_PLOTLY_RENDERER)
    envvars.check_environment({**base, **out})
    return out


@dataclass
class NotebookResult:
    """What executing one notebook gave: ``ok`` or the error (one line, and JSON-ready
    ``error_record``), the executed copy, the seconds and the records it wrote."""

    notebook: Path
    output: Path | None
    ok: bool
    error: str | None = None
    duration_s: float = 0.0
    records: list[str] = field(default_factory=list)
    error_record: dict | None = None

    @property
    def status(self) -> str:
        return "ok" if self.ok else "failed"


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
    """A kernel manager whose kernel gets ``env`` on top of this process's environment and
    writes its own stdout/stderr to ``log_file``; its client polls in slices."""
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

        async def _async_interrupt_kernel(self) -> None:
            # jupyter_client interrupts a kernel before asking it to shut down; after a run
            # the kernel is idle, and a SIGINT landing as it finishes its last reply makes it
            # log "ERROR | KeyboardInterrupt caught in kernel" for a notebook that ran fine.
            # The shutdown request alone stops it (and a kill follows if it does not).
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

    return LabkitKernelManager


def _sliced_client_class() -> type:
    """A kernel client whose channels wait for messages in :data:`POLL_SLICE_S` slices: one long
    ``poll`` sometimes misses the execute reply after a large widget output (a lost wake-up)."""
    from queue import Empty

    from jupyter_client.asynchronous import AsyncKernelClient
    from jupyter_client.channels import AsyncZMQSocketChannel
    from traitlets import Type

    class SlicedChannel(AsyncZMQSocketChannel):
        # jupyter_client's own AsyncZMQSocketChannel overrides the sync get_msg with a coroutine
        async def get_msg(  # type: ignore[override]
                self, timeout: float | None = None) -> dict[str, Any]:
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


class _PapermillNoise(logging.Filter):
    """Drops papermill's warnings about a parameters cell that labkit has already read with its
    own parser: "Unable to parse line ..." (papermill's line parser stops at a second ``=``,
    e.g. the ``>=`` of a rule comment) and "Passed unknown parameter: NAME" for names in
    ``declared``; a name the notebook does not declare still gets papermill's warning."""

    def __init__(self, declared: Collection[str]) -> None:
        super().__init__()
        self.declared = set(declared)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text.startswith("Unable to parse line "):
            return False
        prefix = "Passed unknown parameter: "
        return not (text.startswith(prefix) and text[len(prefix):].strip() in self.declared)


#: The loggers papermill's parameter warnings come from.
PAPERMILL_LOGGERS = ("papermill", "papermill.translators")


@contextlib.contextmanager
def quiet_papermill_parameters(declared: Collection[str]) -> Iterator[None]:
    """While active, papermill's false warnings about the parameters (:class:`_PapermillNoise`)
    are dropped."""
    noise = _PapermillNoise(declared)
    loggers = [logging.getLogger(name) for name in PAPERMILL_LOGGERS]
    for log in loggers:
        log.addFilter(noise)
    try:
        yield
    finally:
        for log in loggers:
            log.removeFilter(noise)


def _records_state(run_dir: Path | None) -> dict[str, int]:
    folder = Path(run_dir) / "results" if run_dir is not None else None
    if folder is None or not folder.is_dir():
        return {}
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.json")}


def execute_notebook(notebook: Path, output: Path, *, parameters: Mapping[str, Any] | None = None,
                     run_dir: Path | None = None, timeout: int | None = 1800,
                     log_path: Path | None = None,
                     plotly_renderer: str | None = None,
                     declared: Collection[str] | None = None) -> NotebookResult:
    """Execute ``notebook`` with papermill into ``output`` (in the notebook's own folder, as
    JupyterLab would); the kernel's output goes to ``log_path``, saved records to ``run_dir``.
    ``declared``: the parameter names the notebook declares (as labkit's parser reads them),
    which papermill is not to call unknown (default: none; papermill warns of any name its own
    parser misses)."""
    import papermill

    notebook, output = Path(notebook), Path(output)
    env = kernel_environment(run_dir, plotly_renderer=plotly_renderer)
    output.parent.mkdir(parents=True, exist_ok=True)
    log_path = Path(log_path) if log_path is not None else output.with_suffix(".kernel.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    before = _records_state(run_dir)
    result = NotebookResult(notebook=notebook, output=output, ok=False)
    t0 = time.perf_counter()
    try:
        with open(log_path, "ab") as log_file, quiet_papermill_parameters(declared or ()):
            papermill.execute_notebook(
                str(notebook), str(output), parameters=dict(parameters or {}),
                kernel_name="python3", cwd=str(notebook.parent), progress_bar=False,
                request_save_on_cell_execute=False, execution_timeout=timeout,
                kernel_manager_class=_kernel_manager_class(log_file, env),
            )
        result.ok = True
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
