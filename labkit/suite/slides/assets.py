"""The local copies of the web assets the exports load: plotly.js from the plotly wheel, and for
decks reveal.js (MathJax 3 for TeX) fetched once with npm into ``node_modules``
(:func:`ensure_web_assets`); :func:`copy_assets` copies what a page needs into ``assets/``.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
from pathlib import Path
from collections.abc import Iterable, Iterator

from labkit.support import envvars
from labkit.support.paths import repo_root

#: Folder (under the output folder) that receives the JavaScript/CSS copies.
ASSETS_DIR = "assets"
#: Environment variable naming the folder that holds ``node_modules`` (default ``build/web``).
WEB_DIR_ENV = envvars.WEB_DIR
#: The plotly.js copy under ``assets/`` (from the plotly wheel's package data).
PLOTLY_FILE = "plotly.min.js"

# files copied from node_modules: (source under node_modules, destination under assets/)
_COPY_FILES: tuple[tuple[str, str], ...] = (
    ("reveal.js/dist/reveal.js", "reveal.js/dist/reveal.js"),
    ("reveal.js/dist/reveal.css", "reveal.js/dist/reveal.css"),
    ("reveal.js/dist/reset.css", "reveal.js/dist/reset.css"),
    ("reveal.js/plugin/notes/notes.js", "reveal.js/plugin/notes/notes.js"),
    ("mathjax/es5/tex-svg-full.js", "mathjax/tex-svg-full.js"),
)
# the reveal.js themes, copied whole (their style sheets and fonts)
_THEME_DIR = "reveal.js/dist/theme"
_THEME_SUFFIXES = (".css", ".woff", ".woff2", ".ttf", ".eot", ".svg", ".otf")
#: The parts of ``assets/`` that come from npm (the rest come from Python wheels).
NPM_PARTS = ("reveal.js", "mathjax")

#: URLs (relative to the exported page) of the local copies.
LOCAL_URLS = {
    "reveal_url_prefix": f"{ASSETS_DIR}/reveal.js",
    "mathjax_url": f"{ASSETS_DIR}/mathjax/tex-svg-full.js",
    "plotly_url": f"{ASSETS_DIR}/{PLOTLY_FILE}",
}



class SlidesError(RuntimeError):
    """An export could not be made (missing assets, a notebook that fails, ...)."""


def web_dir() -> Path:
    """Folder holding ``node_modules`` (``build/web``, or ``$LABKIT_WEB_DIR``)."""
    return envvars.web_dir() or repo_root() / "build" / "web"


def fetch_script() -> Path:
    return repo_root() / "scripts" / "fetch_web_assets.sh"


def pinned_packages() -> dict[str, str]:
    """``{package: version}`` pinned in ``scripts/fetch_web_assets.sh`` (empty without it)."""
    try:
        text = fetch_script().read_text(encoding="utf-8")
    except OSError:
        return {}
    block = re.search(r"^PACKAGES=\((.*?)^\)", text, re.S | re.M)
    specs = re.findall(r'"((?:@[\w.-]+/)?[\w.-]+)@([\w.-]+)"', block.group(1)) if block else []
    return dict(specs)


def _installed_version(node_modules: Path, name: str) -> str | None:
    import json

    try:
        return json.loads((node_modules / name / "package.json").read_text("utf-8")).get("version")
    except (OSError, ValueError):
        return None


def _part(dst: str) -> str:
    return dst.split("/", 1)[0]


def _wanted(parts: Iterable[str] | None) -> set[str]:
    return set(NPM_PARTS) if parts is None else set(parts) & set(NPM_PARTS)


def missing_assets(node_modules: Path, parts: Iterable[str] | None = None) -> list[str]:
    """What ``node_modules`` lacks for the npm ``parts`` (default all): missing files, and
    packages at another version than ``scripts/fetch_web_assets.sh`` pins."""
    wanted = _wanted(parts)
    need = [src for src, dst in _COPY_FILES if _part(dst) in wanted]
    need += [_THEME_DIR] if _part(_THEME_DIR) in wanted else []
    out = [p for p in need if not (node_modules / p).exists()]
    for name, version in pinned_packages().items():
        if name not in wanted:
            continue
        have = _installed_version(node_modules, name)
        if have is not None and have != version:
            out.append(f"{name}@{version} (found {have})")
    return out


@contextlib.contextmanager
def _fetch_lock(base: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``base/.fetch.lock`` (no lock where ``fcntl`` is missing)."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock
        yield
        return
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".fetch.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_web_assets(*, fetch: bool = True, quiet: bool = False,
                      parts: Iterable[str] | None = None) -> Path:
    """``node_modules`` with the npm assets of ``parts`` (default all), fetched with
    ``scripts/fetch_web_assets.sh`` when ``fetch``; else :class:`SlidesError` saying what to do."""
    base = web_dir()
    modules = base / "node_modules"
    missing = missing_assets(modules, parts)
    if not missing:
        return modules
    if not fetch:
        raise SlidesError(f"web assets missing in {modules}: {', '.join(missing)}; "
                          "run `bash scripts/fetch_web_assets.sh`")
    script = fetch_script()
    if not script.is_file():
        raise SlidesError(f"web assets missing in {modules} and {script} not found: run labkit "
                          "from a checkout of its repository")
    if shutil.which("npm") is None:
        raise SlidesError(
            "slide decks need a local copy of reveal.js (and MathJax for TeX), fetched once with "
            "npm, which is not installed (run pages need neither). Install Node.js (it includes "
            "npm): `apt-get install nodejs npm` on Debian/Ubuntu, `brew install node` on macOS, "
            "`conda install -c conda-forge nodejs` in a conda environment, or an installer from "
            "nodejs.org; then re-run (or run `bash scripts/fetch_web_assets.sh`).")
    with _fetch_lock(base):  # one fetch at a time (parallel test workers, two terminals)
        missing = missing_assets(modules, parts)
        if not missing:
            return modules
        if not quiet:
            print(f"labkit slides: fetching web assets into {base} (npm, once)",
                  file=sys.stderr)
        proc = subprocess.run(["bash", str(script), str(base)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SlidesError(f"{script.name} failed (exit {proc.returncode}):\n"
                          f"{(proc.stdout + proc.stderr).strip()[-3000:]}")
    missing = missing_assets(modules, parts)
    if missing:
        raise SlidesError(f"{script.name} ran but {modules} still lacks: {', '.join(missing)}")
    return modules


def plotlyjs_file() -> Path:
    """The plotly.js bundle the installed plotly wheel ships (``plotly/package_data``)."""
    import plotly

    path = Path(plotly.__file__).resolve().parent / "package_data" / PLOTLY_FILE
    if not path.is_file():
        raise SlidesError(f"the plotly package at {path.parent.parent} ships no {PLOTLY_FILE}: "
                          "reinstall plotly (`pip install --force-reinstall plotly`)")
    return path


def _copy_if_changed(src: Path, dst: Path) -> None:
    if dst.exists():
        s, d = src.stat(), dst.stat()
        if s.st_size == d.st_size and int(s.st_mtime) == int(d.st_mtime):
            return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def page_asset_parts(info: dict) -> list[str]:
    """The parts of ``assets/`` a page (not a deck) needs: plotly.js for charts, MathJax for TeX."""
    parts = []
    if info.get("charts"):
        parts.append(PLOTLY_FILE)
    if info.get("math"):
        parts.append("mathjax")
    return parts


def copy_assets(out_dir: Path, node_modules: Path | None = None,
                parts: Iterable[str] | None = None) -> Path:
    """Copy the assets an export needs (or only ``parts``: ``plotly.min.js``, ``reveal.js``,
    ``mathjax``) into ``<out_dir>/assets``, unchanged files skipped."""
    wanted = None if parts is None else set(parts)
    dest = Path(out_dir) / ASSETS_DIR
    if wanted is None or PLOTLY_FILE in wanted:
        _copy_if_changed(plotlyjs_file(), dest / PLOTLY_FILE)
    npm = _wanted(wanted)
    if not npm:
        return dest
    modules = node_modules if node_modules is not None else ensure_web_assets(parts=npm)
    for src, dst in _COPY_FILES:
        if _part(dst) in npm:
            _copy_if_changed(modules / src, dest / dst)
    if _part(_THEME_DIR) in npm:
        root = modules / _THEME_DIR
        for f in sorted(root.rglob("*")):
            if f.is_file() and f.suffix.lower() in _THEME_SUFFIXES:
                _copy_if_changed(f, dest / _THEME_DIR / f.relative_to(root))
    return dest
