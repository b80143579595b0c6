"""Links between exported pages: a notebook's links to other notebooks (``04_x.ipynb``, which
work in JupyterLab) turned into links to the pages beside it (:func:`relink_page`), and a
checker that every relative link and ``src`` of a folder's pages reaches a file, and every
``#anchor`` an element (:func:`check_links`).

A link whose target is not beside the page (a notebook left out of the run, a file of the
repository) becomes plain text with a note saying where it is, never a broken link; it keeps
its target (``data-href``), so a later export that writes the page it names links it again.
"""

from __future__ import annotations

import html as htmllib
import posixpath
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

#: Class of a link made plain text (its target is not beside the page) and of its note.
NOLINK_CLASS = "labkit-nolink"
NOTE_CLASS = "labkit-nolink-note"
#: Folder of an export's scripts and styles (its files are not pages to check).
ASSETS_DIR = "assets"

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_ANCHOR = re.compile(r"""<a\b(?P<pre>[^>]*?)\bhref\s*=\s*(?P<q>["'])(?P<href>.*?)(?P=q)"""
                     r"""(?P<post>[^>]*)>(?P<text>.*?)</a\s*>""", re.S | re.I)
_NOLINK = re.compile(rf"""<span class="{NOLINK_CLASS}" data-href="(?P<href>[^"]*)">(?P<text>.*?)"""
                     rf"""<span class="{NOTE_CLASS}">[^<]*</span></span>""", re.S)


def is_relative(url: str) -> bool:
    """Whether ``url`` names a file relative to its page (no scheme, not ``//host``, not ``/``,
    not only a ``#fragment``)."""
    url = url.strip()
    return bool(url) and not url.startswith(("#", "/", "?")) and not _SCHEME.match(url)


def _split(href: str) -> tuple[str, str]:
    """``(path, fragment)`` of a relative address, the path %-decoded."""
    parts = urlsplit(href.strip())
    return unquote(parts.path), parts.fragment


def repository_path(path: str, base: str = "notebooks") -> str:
    """Where a notebook's relative link ``path`` points in the repository (the notebooks live
    in ``base``): ``../README.md`` -> ``README.md``."""
    return posixpath.normpath(posixpath.join(base, path))


def notebook_stem(path: str) -> str | None:
    """The notebook a link names by file name alone (``04_x.ipynb`` -> ``04_x``), else None."""
    return path[:-len(".ipynb")] if path.endswith(".ipynb") and "/" not in path else None


def _nolink(href: str, text: str, note: str) -> str:
    return (f'<span class="{NOLINK_CLASS}" data-href="{htmllib.escape(href, quote=True)}">'
            f'{text}<span class="{NOTE_CLASS}"> ({htmllib.escape(note)})</span></span>')


def relink_html(text: str, page_dir: Path, candidates: Callable[[str], Sequence[str]], *,
                missing: str) -> tuple[str, int]:
    """``text`` (a page in ``page_dir``) with every relative link whose file is not there
    rewritten: a notebook's link to the first of ``candidates(stem)`` that exists (relative to
    ``page_dir``; a deck's address loses its ``#fragment``), else plain text noting
    ``missing`` (for a notebook) or the file's place in the repository; returns the text and how
    many links changed."""
    page_dir = Path(page_dir)
    changed = 0

    def target_of(href: str) -> tuple[str | None, str]:
        """The new address (None: none) and the note for plain text."""
        path, frag = _split(href)
        stem = notebook_stem(path)
        if stem is not None:
            for cand in candidates(stem):
                if (page_dir / unquote(cand)).is_file():
                    keep = frag and cand.endswith(".html") and not cand.endswith(".slides.html")
                    return cand + (f"#{frag}" if keep else ""), missing
            return None, missing
        return None, f"{repository_path(path)} in the repository"

    def anchor(m: re.Match[str]) -> str:
        nonlocal changed
        href = htmllib.unescape(m.group("href"))
        path, _ = _split(href)
        if not is_relative(href) or not path or (page_dir / path).exists():
            return m.group(0)
        new, note = target_of(href)
        changed += 1
        if new is None:
            return _nolink(href, m.group("text"), note)
        q = m.group("q")
        return (f"<a{m.group('pre')}href={q}{htmllib.escape(new, quote=True)}{q}"
                f"{m.group('post')}>{m.group('text')}</a>")

    def plain(m: re.Match[str]) -> str:
        nonlocal changed
        href = htmllib.unescape(m.group("href"))
        new, _ = target_of(href)
        if new is None:
            return m.group(0)
        changed += 1
        return f'<a href="{htmllib.escape(new, quote=True)}">{m.group("text")}</a>'

    text = _ANCHOR.sub(anchor, text)
    text = _NOLINK.sub(plain, text)
    return text, changed


def relink_page(page: Path, candidates: Callable[[str], Sequence[str]], *, missing: str) -> int:
    """:func:`relink_html` on the file ``page``, rewritten in place when a link changed;
    returns how many changed."""
    page = Path(page)
    text = page.read_text(encoding="utf-8")
    new, changed = relink_html(text, page.parent, candidates, missing=missing)
    if changed:
        page.write_text(new, encoding="utf-8")
    return changed


def run_page_candidates(stem: str) -> list[str]:
    """Where a run page (``html/NN_x.html``) links notebook ``stem``: its run page, else its
    executed notebook."""
    return [f"{stem}.html", f"../notebooks/{stem}.ipynb"]


def deck_candidates(stem: str) -> list[str]:
    """Where a deck (``NN_x.slides.html``) links notebook ``stem``: its deck, else its page."""
    return [f"{stem}.slides.html", f"{stem}.html"]


def slide_page_candidates(stem: str) -> list[str]:
    """Where an exported page beside the decks links notebook ``stem``: its page, else its
    deck."""
    return [f"{stem}.html", f"{stem}.slides.html"]


# ----------------------------------------------------------------------------- checking


@dataclass(frozen=True)
class BrokenLink:
    """A relative address of a page that reaches nothing: ``why`` says what is missing."""

    page: Path
    attribute: str
    target: str
    why: str

    def __str__(self) -> str:
        return f"{self.page}: {self.attribute}={self.target!r}: {self.why}"


class _Collector(HTMLParser):
    """The addresses (``href`` of a, link, area; every ``src``) and element ids of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[tuple[str, str]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id",) or (name == "name" and tag == "a"):
                self.ids.add(value)
            elif name == "src" or (name == "href" and tag in ("a", "link", "area")):
                self.urls.append((name, value))

    handle_startendtag = handle_starttag


def _parse(page: Path) -> _Collector:
    col = _Collector()
    col.feed(Path(page).read_text(encoding="utf-8", errors="replace"))
    col.close()
    return col


def pages_of(folder: Path) -> list[Path]:
    """The HTML pages under ``folder`` (its ``assets/`` left out)."""
    folder = Path(folder)
    return sorted(p for p in folder.rglob("*.html")
                  if ASSETS_DIR not in p.relative_to(folder).parts[:-1])


def check_links(folder: Path | None = None, pages: Iterable[Path] | None = None
                ) -> list[BrokenLink]:
    """Every relative ``href``/``src`` of the pages (``pages``, else every page under
    ``folder``) whose file does not exist, and every ``#anchor`` (in the page or in a linked
    page) that names no element; reveal.js slide addresses (``#/3``) are not anchors."""
    if pages is None:
        if folder is None:
            raise ValueError("check_links needs a folder or a list of pages")
        pages = pages_of(folder)
    parsed: dict[Path, _Collector] = {}

    def collected(page: Path) -> _Collector:
        key = page.resolve()
        if key not in parsed:
            parsed[key] = _parse(key)
        return parsed[key]

    broken: list[BrokenLink] = []
    for page in pages:
        page = Path(page)
        col = collected(page)
        for attr, url in col.urls:
            url = url.strip()
            if url.startswith("#"):
                frag = unquote(url[1:])
                if frag and not frag.startswith("/") and frag not in col.ids:
                    broken.append(BrokenLink(page, attr, url, "no element with this id"))
                continue
            if not is_relative(url):
                continue
            path, frag = _split(url)
            target = page.parent / path
            if not path:
                continue
            if not target.exists():
                broken.append(BrokenLink(page, attr, url, "no such file"))
                continue
            if (frag and not frag.startswith("/") and target.is_file()
                    and target.suffix == ".html" and unquote(frag) not in collected(target).ids):
                broken.append(BrokenLink(page, attr, url, "no element with this id there"))
    return broken


def summary(broken: Sequence[BrokenLink], limit: int = 3) -> str:
    """One line: how many broken links, and the first few."""
    shown = "; ".join(f"{b.page.name}: {b.target} ({b.why})" for b in broken[:limit])
    more = f"; and {len(broken) - limit} more" if len(broken) > limit else ""
    return f"{len(broken)} broken link(s): {shown}{more}"
