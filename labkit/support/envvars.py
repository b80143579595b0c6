"""The ``LABKIT_*`` environment variables labkit reads: one reader per variable, whose error
names the variable, the bad value and what is allowed, the same in the command line
(:func:`check_environment`, before anything runs) and in a notebook. Unset or empty: the default.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from collections.abc import Callable, Mapping

CPU_THREADS = "LABKIT_CPU_THREADS"
FORCE_TIER = "LABKIT_FORCE_TIER"
RUN_DIR = "LABKIT_RUN_DIR"
DATA_DIR = "LABKIT_DATA"
WEB_DIR = "LABKIT_WEB_DIR"
LAB_TOKEN = "LABKIT_LAB_TOKEN"
GIT_COMMIT = "LABKIT_GIT_COMMIT"
PLOTLY_RENDERER = "PLOTLY_RENDERER"
GPT2_WEIGHTS = "LABKIT_GPT2_WEIGHTS"

#: What each variable allows (the text of the error for a bad value).
ALLOWED: dict[str, str] = {
    CPU_THREADS: "a whole number of threads >= 1 (e.g. 1), or unset for torch's default",
    FORCE_TIER: "'cpu' to force the CPU tier, or 'auto' (or unset) to detect the GPU",
    RUN_DIR: "a folder for this run's result records (created when missing), or unset for "
             "runs/interactive",
    DATA_DIR: "a folder holding labkit's data (reference/, traces/, ...), or unset for the "
              "checkout's data/",
    WEB_DIR: "a folder that holds (or will hold) node_modules with the web assets, or unset "
             "for build/web",
    LAB_TOKEN: "a token of letters, digits and - _ . ~ (it goes into the lab's address), or "
               "unset for a random one",
    GIT_COMMIT: "a git commit hash (7 to 40 hex digits), or unset to ask git",
    PLOTLY_RENDERER: "a plotly renderer name (e.g. plotly_mimetype+notebook, notebook, png), "
                     "or unset for plotly_mimetype+notebook",
    GPT2_WEIGHTS: "an existing Hugging Face GPT-2 model.safetensors file (or the folder that "
                  "holds it), or unset to decode with random weights only",
}

_TIERS = ("cpu", "auto")
_TOKEN = re.compile(r"[A-Za-z0-9_.~-]+")
_COMMIT = re.compile(r"[0-9a-fA-F]{7,40}")


class EnvVarError(ValueError):
    """An environment variable holds a value labkit cannot use."""

    def __init__(self, name: str, value: str, problem: str | None = None) -> None:
        self.name, self.value = name, value
        why = f" ({problem})" if problem else ""
        super().__init__(f"environment variable {name}={value!r} is not valid{why}: "
                         f"allowed is {ALLOWED[name]}; fix or unset it "
                         f"(e.g. `unset {name}`)")


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    """The variable's value stripped; None when unset or empty."""
    value = (os.environ if environ is None else environ).get(name)
    if value is None or not value.strip():
        return None
    return value


def cpu_threads(environ: Mapping[str, str] | None = None) -> int | None:
    """``LABKIT_CPU_THREADS`` as a thread count >= 1, or None when unset."""
    raw = _raw(CPU_THREADS, environ)
    if raw is None:
        return None
    try:
        n = int(raw.strip())
    except ValueError:
        raise EnvVarError(CPU_THREADS, raw, "not a whole number") from None
    if n < 1:
        raise EnvVarError(CPU_THREADS, raw, "less than 1")
    return n


def force_tier(environ: Mapping[str, str] | None = None) -> str:
    """``LABKIT_FORCE_TIER``: ``"cpu"`` or ``"auto"`` (unset)."""
    raw = _raw(FORCE_TIER, environ)
    if raw is None:
        return "auto"
    value = raw.strip().lower()
    if value not in _TIERS:
        raise EnvVarError(FORCE_TIER, raw)
    return value


def _folder_reader(name: str) -> Callable[..., Path | None]:
    """The reader of a folder variable: its path, or None when unset."""

    def read(environ: Mapping[str, str] | None = None) -> Path | None:
        raw = _raw(name, environ)
        if raw is None:
            return None
        path = Path(raw.strip()).expanduser()
        if path.exists() and not path.is_dir():
            raise EnvVarError(name, raw, "it is a file, not a folder")
        return path

    read.__doc__ = f"``{name}`` as a folder, or None when unset."
    return read


run_dir = _folder_reader(RUN_DIR)    # the current run's folder
data_dir = _folder_reader(DATA_DIR)  # overrides the checkout's data/
web_dir = _folder_reader(WEB_DIR)    # holds node_modules for offline slides


def lab_token(environ: Mapping[str, str] | None = None) -> str | None:
    """``LABKIT_LAB_TOKEN`` (JupyterLab's token), or None when unset."""
    raw = _raw(LAB_TOKEN, environ)
    if raw is None:
        return None
    if not _TOKEN.fullmatch(raw):
        raise EnvVarError(LAB_TOKEN, raw, "it holds characters that break the address")
    return raw


def git_commit(environ: Mapping[str, str] | None = None) -> str | None:
    """``LABKIT_GIT_COMMIT`` (the commit of a copy without git metadata), or None when unset."""
    raw = _raw(GIT_COMMIT, environ)
    if raw is None:
        return None
    if not _COMMIT.fullmatch(raw.strip()):
        raise EnvVarError(GIT_COMMIT, raw)
    return raw.strip()


def plotly_renderer(environ: Mapping[str, str] | None = None,
                    default: str = "plotly_mimetype+notebook") -> str:
    """``PLOTLY_RENDERER`` checked against plotly's renderers (``a+b`` combinations too)."""
    raw = _raw(PLOTLY_RENDERER, environ)
    if raw is None:
        return default
    try:
        import plotly.io as pio

        known = set(pio.renderers)
    except ValueError:  # plotly itself rejects a bad PLOTLY_RENDERER of this process on import
        bad_here = os.environ.get(PLOTLY_RENDERER, raw)
        raise EnvVarError(PLOTLY_RENDERER, bad_here, "not a plotly renderer") from None
    bad = [part for part in raw.strip().split("+") if part not in known]
    if bad:
        raise EnvVarError(PLOTLY_RENDERER, raw, f"unknown renderer {', '.join(bad)}")
    return raw.strip()


def gpt2_weights(environ: Mapping[str, str] | None = None) -> Path | None:
    """``LABKIT_GPT2_WEIGHTS``: a GPT-2 ``model.safetensors`` (a folder means the
    ``model.safetensors`` inside it), or None when unset (:mod:`labkit.weights`)."""
    raw = _raw(GPT2_WEIGHTS, environ)
    if raw is None:
        return None
    path = Path(raw.strip()).expanduser()
    if path.is_dir():
        path = path / "model.safetensors"
    if not path.is_file():
        raise EnvVarError(GPT2_WEIGHTS, raw, f"no file {path.name} there")
    return path


#: The reader of each variable (:func:`check_environment` calls them all).
READERS: dict[str, Callable[..., object]] = {
    CPU_THREADS: cpu_threads, FORCE_TIER: force_tier, RUN_DIR: run_dir, DATA_DIR: data_dir,
    WEB_DIR: web_dir, LAB_TOKEN: lab_token, GIT_COMMIT: git_commit,
    PLOTLY_RENDERER: plotly_renderer, GPT2_WEIGHTS: gpt2_weights,
}


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Read every variable of :data:`READERS`; raise the first :class:`EnvVarError`."""
    for reader in READERS.values():
        reader(environ)
