"""Which ``labkit run`` folder the executed notebooks of an export come from: the one given
(:func:`check_run_dir`) or the newest complete run (:func:`newest_complete_run`), and a line
saying which and why (:func:`choose_run`).
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence

from labkit.support.paths import repo_root
from labkit.suite.engine import (RUN_FILE, SOLUTIONS, SWEEP_FILE, SuiteError, display_path,
                                 read_run_record)

#: The ``kind`` a ``labkit run`` folder's ``run.json`` has (a sweep's ``sweep.json`` has another).
RUN_KIND = "labkit-run"


def _entry_for(record: dict, source: Path) -> dict | None:
    """The run's entry for ``source`` (same name; a solution matches only a solution)."""
    for e in record.get("notebooks", []):
        if not isinstance(e, dict) or e.get("name") != source.stem:
            continue
        given = e.get("input")
        if not given or ((Path(str(given)).parent.name == SOLUTIONS)
                         == (source.parent.name == SOLUTIONS)):
            return e
    return None


def held_notebooks(run_dir: Path, sources: Sequence[Path], record: dict | None = None
                   ) -> dict[Path, Path]:
    """``{source: executed notebook}`` for every source ``run_dir`` holds with status ok."""
    record = record if record is not None else read_run_record(run_dir) or {}
    out = {}
    for src in sources:
        entry = _entry_for(record, src)
        cand = Path(run_dir) / "notebooks" / src.name
        if entry is not None and entry.get("status") == "ok" and cand.is_file():
            out[src] = cand
    return out


def why_not_complete(run_dir: Path, sources: Sequence[Path]) -> str | None:
    """Why ``run_dir`` is not a complete run for ``sources`` (None when it is: status ok, no
    member of a sweep, every source executed)."""
    record = read_run_record(run_dir)
    if record is None or record.get("kind", RUN_KIND) != RUN_KIND:
        return f"no {RUN_FILE} of a `labkit run`"
    if record.get("status") != "ok":
        return f"status {record.get('status')!r}"
    sweep = record.get("sweep")
    if sweep:
        where = sweep.get("sweep_dir") if isinstance(sweep, dict) else None
        return f"one run of the sweep {where}" if where else "one run of a sweep"
    lacks = [s.stem for s in sources if s not in held_notebooks(run_dir, sources, record)]
    if lacks:
        return f"lacks {_names(lacks)}"
    return None


def _started(run_dir: Path) -> tuple[str, str]:
    rec = read_run_record(run_dir) or {}
    return (str(rec.get("started") or ""), run_dir.name)


def newest_complete_run(sources: Sequence[Path], root: Path | None = None
                        ) -> tuple[Path | None, list[str]]:
    """The newest complete run under ``root`` (default ``runs/``) for ``sources``, or None; and
    a line ``"<folder>: <why>"`` for each newer run passed over."""
    root = Path(root) if root is not None else repo_root() / "runs"
    runs = [d for d in root.iterdir() if (d / RUN_FILE).is_file()] if root.is_dir() else []
    passed: list[str] = []
    for d in sorted(runs, key=_started, reverse=True):
        why = why_not_complete(d, sources)
        if why is None:
            return d, passed
        passed.append(f"{d.name}: {why}")
    return None, passed


def check_run_dir(run_dir: Path) -> Path:
    """``run_dir`` if it is a ``labkit run`` folder, else a :class:`SuiteError` saying why."""
    run_dir = Path(run_dir).expanduser()
    shown = display_path(run_dir)
    if not run_dir.is_dir():
        raise SuiteError(f"run folder {shown} does not exist: pass a folder made by `labkit run` "
                         "(runs/<stamp>/), or leave --run out to use the newest complete run")
    if (run_dir / SWEEP_FILE).is_file():
        members = _sweep_runs(run_dir)
        which = f" (its runs: {', '.join(members)})" if members else ""
        raise SuiteError(f"{shown} is a sweep folder, not a run folder: pass one of its runs"
                         f"{which}")
    record = read_run_record(run_dir)
    if (record is None or record.get("kind", RUN_KIND) != RUN_KIND
            or not (run_dir / "notebooks").is_dir()):
        raise SuiteError(f"{shown} is not a run folder (it has no readable {RUN_FILE} and "
                         "notebooks/): pass a folder made by `labkit run` (runs/<stamp>/)")
    return run_dir


def _sweep_runs(sweep_dir: Path) -> list[str]:
    """Folder names of the runs a sweep folder's ``sweep.json`` lists."""
    import json

    try:
        items = json.loads((sweep_dir / SWEEP_FILE).read_text(encoding="utf-8")).get("runs", [])
        return [str(i["run"]) for i in items if isinstance(i, dict) and i.get("run")]
    except (OSError, ValueError, AttributeError):
        return []


def _names(stems: Sequence[str]) -> str:
    if len(stems) <= 4:
        return ", ".join(stems)
    return f"{', '.join(stems[:3])} and {len(stems) - 3} more"


def choose_run(sources: Sequence[Path], run_dir: Path | None = None, root: Path | None = None
               ) -> tuple[Path | None, str]:
    """The run folder to take the executed ``sources`` from, and a line saying which and why:
    ``run_dir`` when given (checked), else the newest complete run under ``root``, or None."""
    if run_dir is not None:
        run_dir = check_run_dir(run_dir)
        return run_dir, f"using run {display_path(run_dir)} (as given)"
    found, passed = newest_complete_run(sources, root)
    skipped = ""
    if passed:
        skipped = "; passed over newer: " + "; ".join(passed[:3]) + (
            f"; and {len(passed) - 3} more" if len(passed) > 3 else "")
    what = _names([s.stem for s in sources])
    if found is None:
        return None, (f"no complete run holds {what}: executing here (`labkit run` makes a run; "
                      f"--run PATH picks one){skipped}")
    return found, (f"using run {display_path(found)} (the newest complete run holding {what})"
                   f"{skipped}")


