"""``labkit run``: execute the notebook suite (or some notebooks, or a parameter sweep) with
papermill, into a fresh run folder ``runs/<UTC yyyymmdd-HHMMSS>-<tier>[-<n>]/`` holding
``run.json``, ``notebooks/``, ``html/``, ``results/`` and ``index.html``.

A sweep (``--sweep grid.yaml``) makes one run folder per combination plus ``runs/sweep-<stamp>/``.
Everything is checked before a folder is made (:func:`plan_run`, :func:`plan_sweep`).
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

from labkit.support import envvars
from labkit.support.env import contention_warning, environment_record, hardware_tier
from labkit.measure.results import new_folder, to_jsonable, write_text_atomic
from labkit.suite.engine import (RUN_FILE, SWEEP_FILE, NotebookResult, SuiteError, display_path,
                                 execute_notebook, find_notebooks)
from labkit.suite.params import (
    Parameter, assign_parameters, declared_parameters, load_param_file, load_yaml_mapping,
)
from labkit.suite import links
from labkit.suite.report import export_notebook_html, format_duration, relink_run_pages, \
    write_run_index, write_sweep_index

#: Version of the ``run.json`` / ``sweep.json`` layout.
RUN_SCHEMA = 1
#: Key of a sweep grid file that selects notebooks instead of naming a parameter.
SWEEP_NOTEBOOKS_KEY = "notebooks"

_STAMP = "%Y%m%d-%H%M%S"

def _utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _iso(t: _dt.datetime) -> str:
    return t.replace(microsecond=0).isoformat()


def _write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (a reader never sees half a file)."""
    write_text_atomic(path, json.dumps(to_jsonable(obj, path.name), indent=2) + "\n")


@dataclass
class RunPlan:
    """What a checked run will do: the notebooks, the merged parameters, each notebook's share."""

    notebooks: list[Path]
    params: dict
    per_notebook: dict[Path, dict]
    declared: dict[Path, dict[str, Parameter]]
    param_file: Path | None = None
    #: names from the parameter file that other suite notebooks declare, none of the selected
    unused: list[str] = field(default_factory=list)


def _file_names_for_other_notebooks(file_params: dict, params: dict | None,
                                    declared: dict[Path, dict], nb_dir: Path | None) -> list[str]:
    """Names of a parameter file (not also given with -p) that only unselected suite notebooks
    declare: a file like params/quick.yaml serves the whole suite."""
    selected = set().union(*(set(d) for d in declared.values())) if declared else set()
    left = [k for k in file_params if k not in selected and k not in (params or {})]
    if not left:
        return []
    try:
        suite = find_notebooks(None, nb_dir)
    except SuiteError:
        return []
    everywhere = set().union(*(set(declared.get(p) or declared_parameters(p)) for p in suite))
    return [k for k in left if k in everywhere]


def plan_run(notebooks: Sequence[str] | None, params: dict | None = None,
             param_file: Path | None = None, *, nb_dir: Path | None = None) -> RunPlan:
    """Check a run before anything is made (notebooks, parameter names and types, LABKIT_*
    variables); file names only other notebooks declare are listed in ``unused``, not passed."""
    envvars.check_environment()
    nb_paths = find_notebooks(notebooks, nb_dir)
    file_params = load_param_file(param_file)
    merged = {**file_params, **(params or {})}
    declared = {p: declared_parameters(p) for p in nb_paths}
    unused = _file_names_for_other_notebooks(file_params, params, declared, nb_dir)
    per_nb = assign_parameters(merged, declared, may_skip=unused)
    return RunPlan(nb_paths, merged, per_nb, declared, Path(param_file) if param_file else None,
                   unused)


def load_grid(grid_file: Path) -> tuple[dict[str, list], list[str] | None]:
    """A sweep grid ``{param: [values...]}`` (a scalar is a one-value list) and its optional
    ``notebooks: [...]`` (None without)."""
    grid_file = Path(grid_file)
    example = "batch_size: [1, 8, 64]"
    raw = load_yaml_mapping(grid_file, "sweep file", example)
    where = f"sweep file {display_path(grid_file)}"
    if not raw:
        raise SuiteError(f"{where} is empty: write a mapping of parameter: [values...] "
                         f"(e.g. '{example}'), optionally with 'notebooks: [...]'")
    nbs = raw.pop(SWEEP_NOTEBOOKS_KEY, None)
    if nbs is not None:
        if isinstance(nbs, (str, int)) and not isinstance(nbs, bool):
            nbs = [nbs]
        if not isinstance(nbs, list) or not all(
                isinstance(n, (str, int)) and not isinstance(n, bool) for n in nbs):
            raise SuiteError(f"{where}: 'notebooks' must be a list of numbers or names "
                             "(e.g. notebooks: ['05'])")
        nbs = [f"{n:02d}" if isinstance(n, int) else str(n) for n in nbs]
    grid: dict[str, list] = {}
    for key, values in raw.items():
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise SuiteError(f"{where}: parameter {key!r} has an empty list of values: give at "
                             f"least one (e.g. {key}: [1])")
        grid[key] = values
    if not grid:
        raise SuiteError(f"{where} names no parameter to sweep: add one (e.g. '{example}')")
    return grid, nbs


def combinations(grid: dict[str, list]) -> list[dict]:
    """The cartesian product of a grid, in file order (last parameter varies fastest)."""
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


@dataclass
class SweepPlan:
    """A checked sweep; ``overridden``: names given with -p/-f and swept (the grid wins)."""

    grid_file: Path
    grid: dict[str, list]
    combos: list[dict]
    notebooks: list[Path]
    base: dict
    declared: dict[Path, dict[str, Parameter]]
    overridden: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)


def plan_sweep(notebooks: Sequence[str] | None, grid_file: Path, params: dict | None = None,
               param_file: Path | None = None, *, nb_dir: Path | None = None) -> SweepPlan:
    """Check a sweep before anything is made, as :func:`plan_run` does for every combination
    (notebooks given here win over the grid file's ``notebooks``)."""
    envvars.check_environment()
    grid, grid_nbs = load_grid(grid_file)
    nb_paths = find_notebooks(list(notebooks or []) or grid_nbs, nb_dir)
    file_params = load_param_file(param_file)
    base = {**file_params, **(params or {})}
    declared = {p: declared_parameters(p) for p in nb_paths}
    unused = [k for k in _file_names_for_other_notebooks(file_params, params, declared, nb_dir)
              if k not in grid]
    combos = combinations(grid)
    for combo in combos:
        assign_parameters({**base, **combo}, declared, may_skip=unused)
    return SweepPlan(Path(grid_file), grid, combos, nb_paths, base, declared,
                     sorted(set(base) & set(grid)), unused)


@dataclass
class RunResult:
    """A finished (or interrupted) run: its folder, status and per-notebook results."""

    run_dir: Path
    status: str
    notebooks: list[NotebookResult]
    record: dict
    #: problems that did not stop the run (e.g. the index page could not be written)
    notes: list[str] = field(default_factory=list)
    #: relative links and sources of the run's pages that reach no file (after relinking)
    broken_links: list[links.BrokenLink] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def failed(self) -> list[str]:
        return [e["name"] for e in self.record["notebooks"]
                if e["status"] in ("failed", "interrupted")]

    @property
    def pages_missing(self) -> list[str]:
        """Notebooks that were executed but whose HTML page could not be written."""
        return [e["name"] for e in self.record["notebooks"] if e.get("html_error")]

    @property
    def index_missing(self) -> bool:
        return not (self.run_dir / "index.html").is_file()

    @property
    def complete(self) -> bool:
        """ok, every page written and the index page too."""
        return self.ok and not self.pages_missing and not self.index_missing


@dataclass
class SweepResult:
    """A finished sweep: its folder, status and the runs it made (in grid order)."""

    sweep_dir: Path
    status: str
    runs: list[RunResult]
    record: dict
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def run_dirs(self) -> list[Path]:
        return [r.run_dir for r in self.runs]

    @property
    def complete(self) -> bool:
        """ok, and every run wrote every page; the sweep's index page too."""
        return self.ok and all(r.complete for r in self.runs) and \
            (self.sweep_dir / "index.html").is_file()


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run (or sweep); ``result`` is what was recorded up to then."""

    def __init__(self, result: RunResult | SweepResult) -> None:
        where = result.run_dir if isinstance(result, RunResult) else result.sweep_dir
        super().__init__(f"interrupted: {where}")
        #: a RunResult when run_suite was stopped, a SweepResult when run_sweep was
        self.result: Any = result


def summary_line(result: RunResult) -> str:
    """One line saying how a run went and where it is."""
    entries = result.record["notebooks"]
    n_ok = sum(e["status"] == "ok" for e in entries)
    n_skip = sum(e["status"] == "skipped" for e in entries)
    failed, pages = result.failed, result.pages_missing
    return (f"{n_ok}/{len(entries)} notebooks ok"
            + (f", {len(failed)} failed ({', '.join(failed)})" if failed else "")
            + (f", {n_skip} skipped" if n_skip else "")
            + (f", {len(pages)} HTML page(s) NOT written ({', '.join(pages)})" if pages else "")
            + (", index.html NOT written" if result.index_missing else "")
            + f", {len(result.record['results'])} result record(s), "
            f"{format_duration(result.record['duration_s'])} -> {display_path(result.run_dir)}"
            f" (report: {display_path(result.run_dir / 'index.html')})")


def sweep_summary_line(result: SweepResult) -> str:
    """One line saying how a sweep went and where it is."""
    n_ok = sum(r.ok for r in result.runs)
    pages = sum(len(r.pages_missing) for r in result.runs)
    return (f"sweep {n_ok}/{result.record['combinations']} runs ok, "
            + (f"{pages} HTML page(s) NOT written, " if pages else "")
            + f"{format_duration(result.record.get('duration_s'))}"
            f" -> {display_path(result.sweep_dir)} "
            f"(report: {display_path(result.sweep_dir / 'index.html')})")


def _progress(total: int, desc: str, stream=None):
    """A progress bar on ``stream`` (stderr) when it is a terminal; else only the lines written
    to it, so no carriage return lands in a log."""
    stream = sys.stderr if stream is None else stream
    if not getattr(stream, "isatty", lambda: False)():
        return _Lines()
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="nb", desc=desc, file=stream, dynamic_ncols=True,
                leave=True)


class _NoBar:
    def update(self, n: int) -> None: ...
    def set_description(self, text: str) -> None: ...
    def write(self, text: str) -> None: ...
    def close(self) -> None: ...


class _Lines(_NoBar):
    """No bar: each line written goes to stdout as it is."""

    def write(self, text: str) -> None:
        print(text, flush=True)


def _export_html(entry: dict, run_dir: Path, notes: list[str]) -> None:
    if not entry["output"]:
        entry["html"] = None
        return
    try:
        export_notebook_html(run_dir / entry["output"], run_dir / entry["html"], notes=notes)
    except Exception as exc:  # report it; the executed notebook is still there
        entry["html"] = None
        entry["html_error"] = f"{type(exc).__name__}: {' '.join(str(exc).splitlines())}"


def _entry(p: Path, plan: RunPlan) -> dict:
    stem = p.stem
    return {
        "name": stem,
        "input": display_path(p),
        "output": f"notebooks/{stem}.ipynb",
        "html": f"html/{stem}.html",
        "kernel_log": f"logs/{stem}.kernel.log",
        "parameters": plan.per_notebook[p],
        "declared_parameters": sorted(plan.declared[p]),
        "status": "pending",
        "duration_s": None,
        "error": None,
        "results": [],
    }


def _fill(entry: dict, res: NotebookResult, started: str) -> None:
    entry.update(started=started, finished=_iso(_utc_now()), status=res.status,
                 duration_s=res.duration_s, results=res.records, error=res.error_record)
    if res.output is None:
        entry["output"] = None


def _check_pages(run_dir: Path, notes: list[str]) -> list[links.BrokenLink]:
    """Relink the run's pages to each other (:func:`relink_run_pages`) and check every link of
    the folder; a broken one is a note (a WARNING), never a failed run."""
    try:
        relink_run_pages(run_dir)
        broken = links.check_links(run_dir)
    except Exception as exc:  # the pages are still there; say why they were not checked
        notes.append(f"could not check the links of the run's pages: {type(exc).__name__}: {exc}")
        return []
    if broken:
        notes.append(f"WARNING: the run's pages have {links.summary(broken)}")
    return broken


def run_suite(notebooks: Sequence[str] | None, params: dict | None = None,
              param_file: Path | None = None, out_root: Path = Path("runs"),
              timeout: int = 1800, keep_going: bool = False, *, sweep: dict | None = None,
              plan: RunPlan | None = None, progress: bool = False,
              command: str | None = None) -> RunResult:
    """Execute notebooks with papermill into a new run folder under ``out_root``, checked first
    (:func:`plan_run`, or ``plan``); ``timeout``: seconds per cell; after a failing notebook the
    rest are skipped unless ``keep_going``; ``progress``: a bar on stderr."""
    if plan is None:
        plan = plan_run(notebooks, params, param_file)
    tier = hardware_tier()
    started = _utc_now()
    out_root = Path(out_root).expanduser().resolve()
    run_dir = new_folder(out_root, f"{started.strftime(_STAMP)}-{tier}")

    entries = [_entry(p, plan) for p in plan.notebooks]
    record: dict[str, Any] = {
        "schema": RUN_SCHEMA,
        "kind": "labkit-run",
        "run": run_dir.name,
        "tier": tier,
        "status": "running",
        "started": _iso(started),
        "finished": None,
        "duration_s": None,
        "params": plan.params,
        "param_file": str(plan.param_file) if plan.param_file else None,
        "unknown_params": list(plan.unused),
        "sweep": sweep,
        "timeout_s": timeout,
        "keep_going": keep_going,
        "command": command,
        "env": environment_record(),
        "notebooks": entries,
        "results": [],
    }
    run_json = run_dir / RUN_FILE
    _write_json(run_json, record)
    busy = contention_warning(record["env"]) if tier == "gpu" else None
    if busy:  # the GPU tier's timings are what a busy host distorts
        print(f"labkit run: note: {busy}", file=sys.stderr)

    results: list[NotebookResult] = []
    notes: list[str] = []
    t0 = time.perf_counter()
    bar = _progress(len(entries), "labkit run") if progress else _NoBar()
    stopped = False
    try:
        for nb_path, entry in zip(plan.notebooks, entries):
            if stopped:
                entry["status"] = "skipped"
                bar.update(1)
                continue
            bar.set_description(f"labkit run: {entry['name']}")
            entry["status"] = "running"
            when = _iso(_utc_now())
            res = execute_notebook(nb_path, run_dir / entry["output"],
                                   parameters=entry["parameters"], run_dir=run_dir, timeout=timeout,
                                   log_path=run_dir / entry["kernel_log"],
                                   declared=entry["declared_parameters"])
            results.append(res)
            _fill(entry, res, when)
            _export_html(entry, run_dir, notes)
            _write_json(run_json, record)
            took = format_duration(res.duration_s)
            if res.ok:
                bar.write(f"  ok      {entry['name']}  ({took})")
            else:
                bar.write(f"  FAILED  {entry['name']}  ({took}): {res.error}")
                stopped = not keep_going
            if entry.get("html_error"):
                bar.write(f"  WARNING {entry['name']}: no HTML page written: {entry['html_error']}")
            bar.update(1)
    except KeyboardInterrupt:
        record["status"] = "interrupted"
        for entry in entries:
            if entry["status"] in ("pending", "running"):
                entry["status"] = "skipped" if entry["status"] == "pending" else "interrupted"
    finally:
        bar.close()
        failed = [e for e in entries if e["status"] in ("failed", "interrupted")]
        if record["status"] == "running":
            record["status"] = "failed" if failed else "ok"
        record["finished"] = _iso(_utc_now())
        record["duration_s"] = round(time.perf_counter() - t0, 3)
        folder = run_dir / "results"
        record["results"] = sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
        _write_json(run_json, record)
        try:
            write_run_index(run_dir, record)
        except Exception as exc:  # the run itself is recorded; say why the page is missing
            notes.append(f"could not write index.html: {type(exc).__name__}: {exc}")
        broken = _check_pages(run_dir, notes)
    result = RunResult(run_dir, record["status"], results, record, notes, broken)
    if result.status == "interrupted":
        raise RunInterrupted(result)
    return result


def run_sweep(notebooks: Sequence[str] | None, grid_file: Path, params: dict | None = None,
              param_file: Path | None = None, out_root: Path = Path("runs"),
              timeout: int = 1800, *, keep_going: bool = True, plan: SweepPlan | None = None,
              progress: bool = False, echo: Callable[[str], None] | None = None,
              command: str | None = None) -> SweepResult:
    """One :func:`run_suite` per combination of the grid in ``grid_file`` (swept values win over
    ``params``), checked first (:func:`plan_sweep`), into ``<out_root>/sweep-<stamp>/``."""
    if plan is None:
        plan = plan_sweep(notebooks, grid_file, params, param_file)
    say = echo or (lambda text: None)
    started = _utc_now()
    out_root = Path(out_root).expanduser().resolve()
    sweep_dir = new_folder(out_root, f"sweep-{started.strftime(_STAMP)}")
    items: list[dict] = []
    record: dict[str, Any] = {
        "schema": RUN_SCHEMA,
        "kind": "labkit-sweep",
        "sweep": sweep_dir.name,
        "grid_file": str(plan.grid_file),
        "grid": plan.grid,
        "base_params": plan.base,
        "notebooks": [p.stem for p in plan.notebooks],
        "combinations": len(plan.combos),
        "started": _iso(started),
        "finished": None,
        "status": "running",
        "runs": items,
    }
    _write_json(sweep_dir / SWEEP_FILE, record)
    say(f"sweep of {len(plan.combos)} combination(s) over {', '.join(plan.grid)} -> "
        f"{display_path(sweep_dir)}")

    runs: list[RunResult] = []
    notes: list[str] = []
    interrupted = False
    t0 = time.perf_counter()
    declared = plan.declared
    try:
        for i, combo in enumerate(plan.combos, 1):
            say(f"sweep {i}/{len(plan.combos)}: "
                + ", ".join(f"{k}={v!r}" for k, v in combo.items()))
            run_params = {**plan.base, **combo}
            run_plan = RunPlan(plan.notebooks, run_params,
                               assign_parameters(run_params, declared, may_skip=plan.unused),
                               declared, None, list(plan.unused))
            info = {"index": i, "of": len(plan.combos), "sweep_dir": sweep_dir.name,
                    "combination": combo}
            item: dict[str, Any] = {"index": i, "combination": combo, "run": None,
                                    "status": "running"}
            items.append(item)
            try:
                res = run_suite(None, timeout=timeout, keep_going=keep_going, out_root=out_root,
                                sweep=info, plan=run_plan, progress=progress, command=command)
            except RunInterrupted as stop:
                runs.append(stop.result)
                item.update(run=stop.result.run_dir.name, status="interrupted",
                            **_run_summary(stop.result))
                raise
            runs.append(res)
            notes += res.notes
            item.update(run=res.run_dir.name, status="ok" if res.ok else "failed",
                        **_run_summary(res))
            _write_json(sweep_dir / SWEEP_FILE, record)
    except KeyboardInterrupt:
        interrupted = True
        for item in items:
            if item["status"] == "running":
                item["status"] = "interrupted"
    finally:
        record["finished"] = _iso(_utc_now())
        record["duration_s"] = round(time.perf_counter() - t0, 3)
        if any(r["status"] == "interrupted" for r in items) or len(runs) < len(plan.combos):
            record["status"] = "interrupted"
        else:
            record["status"] = "ok" if all(r.ok for r in runs) else "failed"
        _write_json(sweep_dir / SWEEP_FILE, record)
        try:
            write_sweep_index(sweep_dir, record)
        except Exception as exc:
            notes.append(f"could not write the sweep's index.html: {type(exc).__name__}: {exc}")
    result = SweepResult(sweep_dir, record["status"], runs, record, notes)
    if interrupted:
        raise RunInterrupted(result)
    return result


def _run_summary(res: RunResult) -> dict:
    """Status counts and duration of a run (from its result, never from the disk)."""
    nbs = res.record["notebooks"]
    return {
        "duration_s": res.record.get("duration_s"),
        "notebooks_ok": sum(e.get("status") == "ok" for e in nbs),
        "notebooks_total": len(nbs),
        "failed": [e["name"] for e in nbs if e.get("status") == "failed"],
        "results": list(res.record.get("results", [])),
    }
