"""Checking that an exported page is offline: every http(s) address it would still load a
script, style sheet, font or module from (:func:`find_remote_urls`, :func:`check_offline`), and
how many copies of plotly.js it embeds.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from collections.abc import Iterable

from labkit.suite.slides.assets import SlidesError

_PLOTLY_BANNER = re.compile(r"\*\s*plotly\.js v\d+\.\d+\.\d+")


class RemoteAssetError(SlidesError):
    """An exported page still loads something from the network."""


_REMOTE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # <script src=...>, <img src=...>, <iframe src=...>, and JS "xxxSrc = 'https://...'"
    ("src", re.compile(r"""src\s*=\s*["'](https?:)?//[^"'\s>]+""", re.I)),
    # <link href=...> (stylesheets, icons, preloads)
    ("link", re.compile(r"""<link\b[^>]*?\bhref\s*=\s*["'](https?:)?//[^"'\s>]+""", re.I)),
    # CSS @import and url(...) (fonts, images)
    ("css", re.compile(r"""@import\s+(url\()?\s*["']?(https?:)?//[^"')\s;]+""", re.I)),
    ("css", re.compile(r"""url\(\s*["']?https?://[^"')\s]+""", re.I)),
    # ES modules: import x from "https://...", import("https://..."), import "https://..."
    ("module", re.compile(r"""\bimport\b[^;'"()]*?\(?\s*["']https?://[^"'\s]+""")),
    # require.js: paths / dependency lists with an address
    ("require", re.compile(r"""\b(?:require|requirejs|define)\s*\(\s*\[[^\]]*?["']https?://[^"']+""")),
    ("require", re.compile(r"""\bpaths\s*:\s*\{[^}]*?["']https?://[^"']+""")),
)
_URL = re.compile(r"""(?:https?:)?//[^"'\s)>;]+""")
_SCRIPT_BLOCK = re.compile(r"<script\b[^>]*>(.*?)</script>", re.S | re.I)


def _without_plotlyjs(html: str) -> str:
    """``html`` without the inline plotly.js bundle (it names addresses a chart never loads)."""
    def repl(m: re.Match[str]) -> str:
        body = m.group(1)
        return "<script></script>" if len(body) > 100_000 and _PLOTLY_BANNER.search(body[:2000]) \
            else m.group(0)
    return _SCRIPT_BLOCK.sub(repl, html)


def find_remote_urls(html: str, base_dir: Path | None = None) -> list[str]:
    """Every http(s) address ``html`` would load a script, style sheet, font, image or module
    from, sorted (links are not loads); with ``base_dir``, linked local style sheets too."""
    text = _without_plotlyjs(html)
    found: set[str] = set()
    for _, pat in _REMOTE_PATTERNS:
        for m in pat.finditer(text):
            # the address itself is the last URL in the match
            urls = _URL.findall(m.group(0))
            if urls:
                found.add(urls[-1])
    if base_dir is not None:
        for href in re.findall(r"""<link\b[^>]*?\bhref\s*=\s*["']([^"':]+\.css)["']""", html, re.I):
            css = (Path(base_dir) / href).resolve()
            if css.is_file():
                for u in find_remote_urls(css.read_text(encoding="utf-8", errors="replace")):
                    found.add(f"{u} (via {href})")
    return sorted(found)


def check_offline(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Raise :class:`RemoteAssetError` listing every page in ``paths`` that is not offline."""
    problems = []
    for p in paths:
        p = Path(p)
        urls = find_remote_urls(p.read_text(encoding="utf-8"), base_dir=p.parent)
        if urls:
            problems.append(f"{p}:\n" + "\n".join(f"    {u}" for u in urls))
    if problems:
        raise RemoteAssetError("exported pages would load these from the network (not offline):\n"
                               + "\n".join(problems))


def count_plotlyjs(html: str) -> int:
    """How many copies of the plotly.js library ``html`` embeds."""
    return len(_PLOTLY_BANNER.findall(html))

