"""Measure and save any reference record by its name, from the one registry
(:data:`labkit.measure.records.recipes.RECIPES`): the one way to re-record.

    python -m labkit.measure.recorder RUN_DIR NAME [NAME ...]

measures each record in a Python process of its own (torch.compile's caches and a failed
capture stay in it) and writes ``RUN_DIR/results/<name>.json``; ``labkit reference`` files
them. In Python: :func:`measure` (data and parameters), :func:`record` (saved, this process),
:func:`record_each` (saved, a process each). Notebooks, ``labkit bench`` and ``labkit serve
--record`` call these.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from labkit.measure.records.recipes import default_params, measure_function, measure_kwargs
from labkit.measure.results import save_result


def measure(name: str, **overrides: Any) -> tuple[dict, dict]:
    """Measure record ``name`` with its parameters (:func:`default_params`, then
    ``overrides``) in this process: ``(data, params)``."""
    params = default_params(name, **overrides)
    return measure_function(name)(**measure_kwargs(params)), params


def record(name: str, run_dir: str | os.PathLike[str] | None = None, *,
           save_as: str | None = None, **overrides: Any) -> Path:
    """Measure record ``name`` in this process and save it under ``run_dir/results`` (default:
    the current run folder) as ``save_as`` (default ``name``); the file."""
    data, params = measure(name, **overrides)
    return save_result(save_as or name, data, params, run_dir)


class Job(NamedTuple):
    """One measurement of :func:`record_each`: recipe ``name`` with ``overrides``, saved as
    ``save_as`` (default ``name``; ``labkit bench`` saves its compile column apart)."""

    name: str
    overrides: dict[str, Any] = {}  # noqa: RUF012 (a NamedTuple field: never mutated)
    save_as: str | None = None

    @property
    def saved(self) -> str:
        return self.save_as or self.name


def record_each(jobs: Sequence[str | Job], run_dir: str | os.PathLike[str], *,
                echo: Callable[[str], None] = print) -> dict[str, str]:
    """:func:`record` each of ``jobs`` (record names or :class:`Job`) in a Python process of its
    own, one after another; one that fails is reported and the rest still run. Every name and
    override is checked before the first starts. Returns saved name -> ``"ok"`` or the
    failure."""
    todo = [Job(j) if isinstance(j, str) else j for j in jobs]
    for job in todo:
        default_params(job.name, **job.overrides)
    status = {}
    for job in todo:
        echo(f"[record] {job.saved} ...")
        t0 = time.perf_counter()
        code = subprocess.run([sys.executable, "-m", "labkit.measure.recorder", "--worker",
                               str(run_dir), job.name, json.dumps(job.overrides), job.saved]
                              ).returncode
        status[job.saved] = "ok" if code == 0 else f"failed (exit {code})"
        echo(f"[record] {job.saved}: {status[job.saved]} in {time.perf_counter() - t0:.0f} s")
    return status


def main(argv: Sequence[str]) -> int:
    """``RUN_DIR NAME ...`` (each in its own process), or
    ``--worker RUN_DIR NAME OVERRIDES_JSON SAVE_AS``."""
    if argv[:1] == ["--worker"] and len(argv) == 5:
        path = record(argv[2], argv[1], save_as=argv[4], **json.loads(argv[3]))
        print(f"[record] saved {path}", flush=True)
        return 0
    if len(argv) < 2 or argv[0].startswith("-"):
        print("usage: python -m labkit.measure.recorder RUN_DIR NAME [NAME ...]", file=sys.stderr)
        return 2
    status = record_each(argv[1:], argv[0])
    return 0 if all(s == "ok" for s in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
