"""``labkit slides``: export executed notebooks to reveal.js decks and HTML pages that work
OFFLINE (no CDN address left in the page), charts included.

The notebooks come from a ``labkit run`` folder (:func:`choose_run`); one no run holds is
executed here, so a CPU machine still gets decks of the recorded reference charts.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable, Sequence

from labkit.support import envvars
from labkit.suite import links
from labkit.suite.engine import DEFAULT_PLOTLY_RENDERER, find_notebooks, read_run_record
from labkit.suite.engine import execute_notebook as _execute
from labkit.suite.engine import display_path
from labkit.suite.slides.assets import (ASSETS_DIR, LOCAL_URLS, PLOTLY_FILE, WEB_DIR_ENV,
                                        SlidesError, copy_assets, ensure_web_assets,
                                        page_asset_parts, pinned_packages, plotlyjs_file,
                                        web_dir)
from labkit.suite.slides.deck import deck_notebook
from labkit.suite.slides.exporters import export_notebook, make_exporters
from labkit.suite.slides.offline import (RemoteAssetError, check_offline, count_plotlyjs,
                                         find_remote_urls)
from labkit.suite.slides.prepare import has_math, head_html, prepare_notebook
from labkit.suite.slides.runs import _entry_for, choose_run, held_notebooks, newest_complete_run, \
    why_not_complete

__all__ = [
    "ASSETS_DIR", "check_offline", "choose_run", "copy_assets", "count_plotlyjs", "deck_notebook",
    "ensure_web_assets", "execute_notebook", "export_notebook", "export_slides",
    "find_remote_urls", "has_math", "head_html", "LOCAL_URLS", "make_exporters",
    "newest_complete_run", "NOT_EXPORTED", "page_asset_parts", "pinned_packages", "PLOTLY_FILE",
    "plotlyjs_file", "prepare_notebook", "relink_exports", "RemoteAssetError", "SlidesError",
    "SlidesResult", "web_dir", "WEB_DIR_ENV", "why_not_complete",
]


def _is_executed(path: Path) -> bool:
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    return any(c.cell_type == "code" and (c.get("outputs") or c.get("execution_count"))
               for c in nb.cells)


def execute_notebook(src: Path, dest: Path, *, timeout: int = 1800) -> Path:
    """Execute ``src`` into ``dest`` with the suite engine, its records beside ``dest`` (never in
    ``runs/``); raises :class:`SlidesError` when it fails."""
    dest = Path(dest)
    res = _execute(Path(src), dest, run_dir=dest.parent / "run", timeout=timeout,
                   plotly_renderer=DEFAULT_PLOTLY_RENDERER)
    if not res.ok:
        cell = ((res.error_record or {}).get("source") or "").strip().splitlines()
        where = f" in the cell starting {cell[0][:80]!r}" if cell else ""
        raise SlidesError(f"executing {src} failed ({res.error}){where}; fix it or export a "
                          "run that has it (`labkit run`)")
    return dest


@dataclass
class SlidesResult:
    """What :func:`export_slides` did: the files written, the run folder used (None: none), the
    line saying which and why, and the notebooks executed here."""

    files: list[Path]
    run_dir: Path | None
    run_note: str
    executed_here: list[str] = field(default_factory=list)
    #: relative links and sources of the output folder's pages that reach no file
    broken_links: list[links.BrokenLink] = field(default_factory=list)


#: What a deck or page says beside a notebook link whose notebook was not exported beside it.
NOT_EXPORTED = "not in these slides"


def relink_exports(out_dir: Path) -> int:
    """Point every notebook link of the decks and pages in ``out_dir`` at that notebook's deck
    (from a deck) or page (from a page), else plain text saying it is not exported; returns how
    many links changed."""
    n = 0
    for page in sorted(Path(out_dir).glob("*.html")):
        deck = page.name.endswith(".slides.html")
        n += links.relink_page(page, links.deck_candidates if deck else
                               links.slide_page_candidates, missing=NOT_EXPORTED)
    return n


def export_slides(run_dir: Path | None = None, out_dir: Path = Path("build/slides"),
                  notebooks: Sequence[str] | None = None, html: bool = True, *,
                  runs_root: Path | None = None,
                  echo: Callable[[str], None] | None = None) -> SlidesResult:
    """Export notebooks as offline decks ``<out_dir>/NN_x.slides.html`` (and pages ``NN_x.html``
    when ``html``) from ``run_dir`` or the newest complete run under ``runs_root``."""
    envvars.check_environment()
    out_dir = Path(out_dir)
    sources = find_notebooks(notebooks)
    run_dir, run_note = choose_run(sources, run_dir, runs_root)
    if echo is not None:
        echo(run_note)
    record = read_run_record(run_dir) if run_dir is not None else None
    held = held_notebooks(run_dir, sources, record) if run_dir is not None else {}

    jobs: list[tuple[Path, Path | None]] = []  # (source, its executed copy if there is one)
    for src in sources:
        executed = held.get(src)
        if executed is None and run_dir is not None:
            entry = _entry_for(record or {}, src)
            why = f"status {entry.get('status')!r}" if entry else "not run"
            print(f"labkit slides: {display_path(run_dir)} lacks {src.stem} executed ({why}); "
                  f"executing {src.name} here", file=sys.stderr)
        if executed is None and _is_executed(src):
            executed = src
        jobs.append((src, executed))

    modules = ensure_web_assets()
    copy_assets(out_dir, modules)
    written: list[Path] = []
    failed: list[str] = []
    executed_here: list[str] = []
    with tempfile.TemporaryDirectory(prefix="labkit-slides-") as tmp:
        for src, nb_path in jobs:
            if nb_path is None:
                print(f"labkit slides: executing {src.name}", file=sys.stderr)
                executed_here.append(src.stem)
                try:
                    nb_path = execute_notebook(src, Path(tmp) / src.stem / src.name)
                except SlidesError as exc:  # export the others, then report
                    print(f"labkit slides: {exc}", file=sys.stderr)
                    failed.append(src.name)
                    continue
            written += export_notebook(nb_path, out_dir, html=html, name=src.stem)
    check_offline(written)
    relink_exports(out_dir)
    broken = links.check_links(pages=sorted(out_dir.glob("*.html")))
    if failed:
        done = "".join(f"\n  {p}" for p in written) or " none"
        raise SlidesError(f"{len(failed)} notebook(s) failed to execute: {', '.join(failed)} "
                          f"(errors above). Written:{done}")
    return SlidesResult(written, run_dir, run_note, executed_here, broken)
