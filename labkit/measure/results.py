"""Result records: versioned JSON files with provenance.

A result is ``<run_dir>/results/<name>.json``: ``{"schema", "name", "created", "params", "env",
"data"}``. :func:`save_result` writes one, :func:`load_reference` reads those recorded on a GPU
(``data/reference/<gpu>/<name>.json``), :func:`provenance_line` says where they came from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.support import envvars
from labkit import __version__
from labkit.support.env import environment_record, gpu_slug
from labkit.measure import records
from labkit.measure.records import RERECORD as _FIX, SchemaError
from labkit.support.paths import data_dir, repo_root

#: Version of the JSON layout written by :func:`save_result`.
SCHEMA_VERSION = 1

DEFAULT_GPU = "h200"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


__all__ = ["SchemaError", "Result", "SCHEMA_VERSION", "save_result", "load_result",
           "load_reference", "list_references", "reference_dir", "provenance_line",
           "to_jsonable", "write_text_atomic", "new_folder", "new_run_dir", "default_run_dir",
           "copy_to_reference", "DEFAULT_GPU", "reference_index"]


@dataclass
class Result:
    """One result record: ``data`` the measurements, ``params`` their knobs, ``env`` the
    machine."""

    name: str
    data: dict
    params: dict
    env: dict
    schema: int
    created: str
    #: True when loaded from ``data/reference/`` (:func:`load_reference`), not measured here
    reference: bool = dataclasses.field(default=False, compare=False)

    @property
    def record(self) -> Any:
        """``data`` as its typed kind (:func:`labkit.measure.records.parse`), else the dict."""
        return records.parse(self.name, self.data)

    def to_dict(self) -> dict[str, Any]:
        """The record as its JSON file holds it (without ``reference``)."""
        return {k: getattr(self, k) for k in ("schema", "name", "created", "params", "env",
                                              "data")}


# ----------------------------------------------------------------------------- paths


def reference_dir(gpu: str = DEFAULT_GPU) -> Path:
    """``data/reference/<gpu>/``; ``gpu`` may be a slug (``'h200'``) or a device name."""
    return data_dir() / "reference" / gpu_slug(gpu)


def default_run_dir() -> Path:
    """``$LABKIT_RUN_DIR`` when set (``labkit run`` sets it), else ``runs/interactive``."""
    return envvars.run_dir() or repo_root() / "runs" / "interactive"


def new_folder(root: str | os.PathLike[str], stem: str) -> Path:
    """Create ``root/stem``, or ``root/stem-2``, ``-3``, ... when it exists (never reused)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        path = root / (stem if n == 1 else f"{stem}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            n += 1


def new_run_dir(label: str | None = None, root: str | os.PathLike[str] | None = None) -> Path:
    """Create and return a fresh ``runs/<UTC timestamp>[-label]/`` folder."""
    if label is not None and not _NAME_RE.match(label):
        raise ValueError(f"run label {label!r}: use letters, digits, '_', '-' or '.'")
    base = Path(root) if root is not None else repo_root() / "runs"
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return new_folder(base, f"{stamp}-{label}" if label else stamp)


# ----------------------------------------------------------------------------- JSON


def to_jsonable(obj: Any, _where: str = "data") -> Any:
    """``obj`` in plain JSON types (nan and inf as ``None``); anything else raises
    ``TypeError`` naming where it was found."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        out = {}
        origin: dict[str, Any] = {}
        for key, value in obj.items():
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                converted = to_jsonable(key, f"{_where} key")
                if isinstance(converted, (list, dict)):
                    raise TypeError(f"{_where} key: {key!r} cannot be a JSON object key")
                key = converted
            text = str(key)
            if text in origin:
                raise ValueError(
                    f"{_where}: keys {origin[text]!r} and {key!r} both become the JSON key "
                    f"{text!r}, and one would silently replace the other; use one key type "
                    "(e.g. all str or all int) in this dict")
            origin[text] = key
            out[text] = to_jsonable(value, f"{_where}[{key!r}]")
        return out
    if isinstance(obj, (set, frozenset)):
        obj = sorted(obj, key=repr)
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v, f"{_where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj), _where)
    # numpy / torch values, recognised without importing either module here
    module = type(obj).__module__.split(".")[0]
    if module == "numpy":
        import numpy as np

        if isinstance(obj, np.dtype):
            return str(obj)
        if isinstance(obj, (np.ndarray, np.generic)):
            return to_jsonable(obj.tolist(), _where)
    if module == "torch":
        import torch

        if isinstance(obj, torch.Tensor):
            return to_jsonable(obj.detach().cpu().tolist(), _where)
        if isinstance(obj, (torch.dtype, torch.device)):
            return str(obj)
    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        return to_jsonable(obj.to_dict(), _where)
    raise TypeError(f"{_where}: {type(obj).__module__}.{type(obj).__qualname__} is not "
                    "JSON-serialisable; store numbers, strings, lists, dicts, dataclasses, "
                    "numpy/torch values")


# ----------------------------------------------------------------------------- save / load


def _umask() -> int:
    """The process's umask (read without changing it where the OS allows)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # no /proc: read it by setting it, and put it straight back
    os.umask(mask)
    return mask


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader never sees half a file, with the mode a
    plain ``open(path, "w")`` would give it (not a temporary file's ``0o600``)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_result(name: str, data: dict, params: dict | None = None,
                run_dir: str | os.PathLike[str] | None = None, *, env: dict | None = None
                ) -> Path:
    """Write (or replace) ``<run_dir>/results/<name>.json``; its path. ``data`` of a known
    record kind must have its fields, else :class:`SchemaError` and nothing is written."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"result name {name!r}: use letters, digits, '_', '-' or '.'")
    if not isinstance(data, dict):
        raise TypeError(f"data must be a dict, not {type(data).__name__}")
    record = Result(name, to_jsonable(data, "data"), to_jsonable(params or {}, "params"),
                    to_jsonable(env if env is not None else environment_record(), "env"),
                    SCHEMA_VERSION,
                    _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat())
    # a record of a known kind is checked before anything is written
    records.parse(name, record.data, source=f"result {name!r} (not saved)",
                  fix="give it the fields of its kind, or save it under a name of no known kind")
    folder = (Path(run_dir) if run_dir is not None else default_run_dir()) / "results"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    write_text_atomic(path, json.dumps(record.to_dict(), indent=2, allow_nan=False) + "\n")
    return path


def load_result(path: str | os.PathLike[str]) -> Result:
    """Read a result file: a labkit result of :data:`SCHEMA_VERSION` whose ``data`` has the
    fields of its kind, else :class:`SchemaError` naming the file and the field at fault."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{path}: not a labkit result: not UTF-8 text ({exc.reason} at byte "
                          f"{exc.start}); {_FIX}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}: not valid JSON ({exc}); {_FIX}") from None
    except RecursionError:
        raise SchemaError(f"{path}: JSON nested too deeply to be a labkit result") from None
    if not isinstance(raw, dict) or "schema" not in raw:
        raise SchemaError(f"{path}: not a labkit result (no 'schema' field); {_FIX}")
    schema = raw["schema"]
    if isinstance(schema, bool) or not isinstance(schema, int):
        raise SchemaError(f"{path}: field 'schema' must be an integer version number, got "
                          f"{type(schema).__name__} {schema!r}; {_FIX}")
    if schema != SCHEMA_VERSION:
        raise SchemaError(f"{path}: written with result schema version {schema!r}, but this "
                          f"labkit (labkit {__version__}) reads schema version {SCHEMA_VERSION}. "
                          "Re-create it with this version (`labkit run`), or use the labkit "
                          "version that wrote it.")
    missing = [k for k in ("name", "data", "params", "env", "created") if k not in raw]
    if missing:
        raise SchemaError(f"{path}: result is missing field(s) {', '.join(missing)}; {_FIX}")
    for key, tp, what in (("name", str, "a string"), ("created", str, "a string"),
                          ("data", dict, "an object"), ("params", dict, "an object"),
                          ("env", dict, "an object")):
        if not isinstance(raw[key], tp):
            shown = f" {raw[key]!r}" if tp is str else ""
            raise SchemaError(f"{path}: field {key!r} must be {what}, got "
                              f"{type(raw[key]).__name__}{shown}; {_FIX}")
    wrote = raw["env"].get("labkit")
    writer = f"labkit {wrote}" if wrote else "unknown: the record has no env.labkit"
    records.parse(raw["name"], raw["data"], source=str(path),
                  fix=f"re-record it with this labkit (labkit {__version__}: `labkit run`, or "
                      f"`labkit bench --record`), or read it with the labkit version that "
                      f"wrote it ({writer})")
    return Result(raw["name"], raw["data"], raw["params"], raw["env"], schema, raw["created"])


# ----------------------------------------------------------------------------- references


def list_references(gpu: str | None = None) -> list[Path]:
    """Reference result files, sorted: of one GPU, or of every GPU when ``gpu`` is None."""
    root = data_dir() / "reference"
    folder, pattern = (root, "*/*.json") if gpu is None else (reference_dir(gpu), "*.json")
    return sorted(folder.glob(pattern)) if folder.is_dir() else []


def load_reference(name: str, gpu: str = DEFAULT_GPU) -> Result:
    """The reference result ``name`` recorded on ``gpu`` (``data/reference/<gpu>/<name>``)."""
    if not isinstance(name, str) or not _NAME_RE.match(name) or ".." in name:
        raise ValueError(f"reference name {name!r}: a record name is letters, digits, '_', '-' "
                         "or '.', starting with a letter or digit, with no folder parts "
                         "(e.g. 'decode_small')")
    path = reference_dir(gpu) / f"{name}.json"
    if not path.is_file():
        have = ", ".join(p.stem for p in list_references(gpu)) or "none"
        raise FileNotFoundError(
            f"no reference result {name!r} for GPU {gpu_slug(gpu)!r}: expected the file "
            f"{path} (reference results present for {gpu_slug(gpu)}: {have}). "
            "To create it, run `labkit run` on a machine with that GPU, then "
            f"`labkit reference` to copy that run's results into data/reference/{gpu_slug(gpu)}/.")
    return dataclasses.replace(load_result(path), reference=True)


def reference_index(paths: list[Path] | None = None, *, width: int = 84) -> list[str]:
    """The reference records ``paths`` (default: every one) grouped by folder and machine, a
    few lines per group: ``folder/  machine``, then ``n records, dates, commits:`` and the
    record names wrapped to ``width`` (one line per record does not fit on a page or a
    slide)."""
    groups: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for path in sorted(list_references() if paths is None else paths):
        result = load_result(path)
        machine = ", ".join(_machine(result)).removeprefix("measured on ")
        commit = str((result.env or {}).get("git_commit") or "")[:7]
        groups.setdefault((path.parent.name, machine), []).append(
            (path.stem, _day(result), commit))
    lines = []
    for (folder, machine), rows in groups.items():
        dates = sorted({d for _, d, _ in rows if d})
        commits = sorted({c for _, _, c in rows if c})
        when = (dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}") if dates else ""
        facts = [f"{len(rows)} record{'s' if len(rows) != 1 else ''}"] + ([when] if when else [])
        if commits:
            facts.append(f"commit {commits[0]}" if len(commits) == 1
                         else f"{len(commits)} commits")
        lines.append(f"{folder}/  {machine}")
        row = f"    {', '.join(facts)}:"
        for name, _, _ in rows:
            if len(row) + len(name) + 1 > width and row.strip():
                lines.append(row.rstrip())
                row = "   "
            row += f" {name}"
        lines.append(row.rstrip())
    return lines


def gpus_used(data: dict) -> int:
    """GPUs a record was measured on: its ``world_size`` when it ran over NCCL, else 1."""
    n = data.get("world_size") if isinstance(data, dict) else None
    nccl = isinstance(data, dict) and data.get("backend") == "nccl"
    return n if nccl and isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1


def _measured_on(env: dict, data: dict | None = None) -> str:
    """GPU slug a result was measured on (``h200``, ``h200x2`` on two GPUs), or 'cpu'."""
    name = env.get("gpu_name")
    if env.get("tier") == "gpu" and name:
        n = gpus_used(data or {})
        return gpu_slug(name) + (f"x{n}" if n > 1 else "")
    return "cpu"


def copy_to_reference(run_dir: str | os.PathLike[str], gpu: str | None = None, *,
                      force: bool = False) -> list[Path]:
    """Copy ``<run_dir>/results/*.json`` into ``data/reference/<gpu>/`` (default: where they
    were measured), each validated first; results from elsewhere need ``force=True``."""
    src = Path(run_dir) / "results"
    files = sorted(src.glob("*.json")) if src.is_dir() else []
    if not files:
        raise FileNotFoundError(f"no result files in {src}: run `labkit run` first")
    origin = {p: _measured_on(r.env, r.data) for p, r in ((p, load_result(p)) for p in files)}
    if gpu is None:
        if len(set(origin.values())) != 1:
            raise ValueError(f"results in {src} come from several machines "
                             f"({', '.join(sorted(set(origin.values())))}); name the GPU "
                             "explicitly")
        gpu = next(iter(origin.values()))
    target_slug = gpu_slug(gpu)
    wrong = [f"{p.name} ({o})" for p, o in origin.items() if o != target_slug]
    if wrong and not force:
        raise ValueError(f"refusing to file results under data/reference/{target_slug}/: "
                         f"measured elsewhere: {', '.join(wrong)} (pass force=True to override)")
    dest = reference_dir(target_slug)
    dest.mkdir(parents=True, exist_ok=True)
    for path in origin:
        shutil.copyfile(path, dest / path.name)
    return [dest / path.name for path in origin]


def _machine(result: Result) -> list[str]:
    """What :func:`provenance_line` says of the machine: where, driver, torch, CUDA."""
    env = result.env or {}
    if env.get("tier") == "gpu" and env.get("gpu_name"):
        n = gpus_used(result.data or {})
        parts = [f"measured on {f'{n} x ' if n > 1 else ''}{env['gpu_name']}"]
        if env.get("driver"):
            parts.append(f"driver {env['driver']}")
    else:
        cpu = env.get("cpu")
        parts = [f"measured on CPU ({cpu})" if cpu else "measured on CPU"]
    if env.get("torch"):
        parts.append(f"torch {env['torch']}")
    if env.get("tier") == "gpu" and env.get("cuda"):
        parts.append(f"CUDA {env['cuda']}")
    return parts


def _day(result: Result) -> str:
    """The date a record was made (``YYYY-MM-DD``), or ''."""
    return (result.created or (result.env or {}).get("date") or "")[:10]


def provenance_line(result: Result) -> str:
    """e.g. ``measured on NVIDIA H200, driver 580.95, torch 2.11.0, CUDA 13.0, 2026-11-29,
    commit abc1234``. Facts missing from the record are left out, never guessed."""
    env = result.env or {}
    parts = _machine(result)
    day = _day(result)
    if day:
        parts.append(day)
    commit = env.get("git_commit")
    if commit:
        parts.append(f"commit {commit[:7]}" + (" (dirty)" if env.get("git_dirty") else ""))
    return ", ".join(parts)
