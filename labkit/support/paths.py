"""Where labkit's files are: the checkout, its ``data/`` folder, and the files shipped in it."""

from __future__ import annotations

import os
from pathlib import Path

from labkit.support import envvars


def repo_root() -> Path:
    """The checkout holding this package (editable install), else the current directory."""
    here = Path(__file__).resolve().parents[2]
    if (here / "pyproject.toml").exists() and (here / "labkit").is_dir():
        return here
    return Path.cwd()


def data_dir() -> Path:
    """The repository's ``data/`` folder (``$LABKIT_DATA`` overrides it)."""
    return envvars.data_dir() or repo_root() / "data"


def shipped_file(kind: str, name_or_path: str | os.PathLike[str], suffix: str) -> Path:
    """An existing file, or ``<data>/<kind>/<name><suffix>`` for a bare name (a shipped
    trace or corpus, say); the error lists what is shipped."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    folder = data_dir() / kind
    cand = folder / (p.name if p.suffix == suffix else p.name + suffix)
    if cand.is_file():
        return cand
    known = sorted(f.stem for f in folder.glob(f"*{suffix}")) if folder.is_dir() else []
    raise FileNotFoundError(f"no {kind} file {str(name_or_path)!r}: not a file, and not one of "
                            f"the shipped ones {known} in {folder}")
