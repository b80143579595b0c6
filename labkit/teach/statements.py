"""Statement checks: every sentence a notebook states about a measurement, as code beside it.
On recorded references a false statement raises :class:`StatementError` (so a re-recorded
reference cannot contradict the text unnoticed); measured live, it prints what this GPU shows.
:func:`say` shows markdown with a record's numbers filled in."""

from __future__ import annotations

import html
import math
import string
from typing import Any
from collections.abc import Iterable, Mapping


class StatementError(AssertionError):
    """A statement of a notebook is contradicted by the recorded reference it describes."""


def fmt(value: Any, spec: str = "") -> str:
    """``value`` for prose: by ``spec`` when given, else floats to three significant digits
    (``626.3375997`` -> ``626``), ints with thousands separators, the rest with ``str``."""
    if spec:
        return format(value, spec)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    return f"{value:,.{max(0, 2 - math.floor(math.log10(abs(value))))}f}"


class _Formatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        return fmt(value, format_spec)


def render(template: str, /, **values: Any) -> str:
    """``template`` with its ``{name}`` / ``{name:spec}`` fields filled by :func:`fmt`."""
    return _Formatter().vformat(template, (), values)


def show(rich: str, plain: str, kind: str = "HTML") -> None:
    """Display ``rich`` (``"HTML"`` or ``"Markdown"``) in a notebook, else print ``plain``."""
    try:
        from IPython import display, get_ipython
    except ImportError:
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(plain)
    else:
        display.display(getattr(display, kind)(rich))


def say(template: str, /, **values: Any) -> None:
    """Show ``template`` as markdown with ``values`` filled in (:func:`render`)."""
    text = render(template, **values)
    show(text, text, "Markdown")


def is_reference(records: Any) -> bool | None:
    """True when any of ``records`` is a recorded reference, False if all live, else None."""
    items: Iterable[Any] = (records.values() if isinstance(records, Mapping) else records
                            if isinstance(records, (list, tuple, set)) else (records,))
    flags = [r.reference for r in items if hasattr(r, "reference")]
    return any(flags) if flags else None


def _label(key: Any) -> str:
    """A record key for prose: ``graph_tokens_equal_eager.breaks_1`` ->
    ``graph tokens equal eager (breaks 1)``; a tuple's parts joined by spaces."""
    if isinstance(key, tuple):
        return " ".join(_label(k) for k in key)
    head, _, tail = str(key).partition(".")
    text = head.replace("_", " ")
    return f"{text} ({tail.replace('.', ', ').replace('_', ' ')})" if tail else text


def _leaves(value: Mapping[Any, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, item in value.items():
        name = f"{prefix} {_label(key)}".strip()
        out += _leaves(item, name) if isinstance(item, Mapping) and item else [(name, item)]
    return out


_NAMED = 7  # flags that all hold: up to this many are named one by one, more by family


def spell(value: Any) -> str:
    """A record's checks, counts or rows for prose, not as Python: flags that all hold ->
    ``all 3 hold: a; b; c`` (more than seven: by family, ``a (8 cases); b``), else
    ``name: yes/no`` and ``name: number`` (:func:`fmt`) pairs;
    nested mappings name their path; a list spells each item (``, `` between numbers, `` | ``
    between mappings)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        if not value:
            return "none"
        leaves = _leaves(value)
        if all(v is True for _, v in leaves):
            names = [n for n, _ in leaves]
            if len(names) == 1:
                return f"{names[0]}: yes"
            if len(names) <= _NAMED:
                return f"all {len(names)} hold: " + "; ".join(names)
            families: dict[str, int] = {}
            for n in names:  # "graph tokens equal eager (plain@8)" -> "graph tokens equal eager"
                family = n.split(" (")[0].split("@")[0]
                families[family] = families.get(family, 0) + 1
            return f"all {len(names)} hold: " + "; ".join(
                f"{f} ({c} cases)" if c > 1 else f for f, c in families.items())
        return "; ".join(f"{n}: {spell(v)}" for n, v in leaves)
    if isinstance(value, (list, tuple)):
        if value and all(v is True for v in value):
            return "yes" if len(value) == 1 else f"all {len(value)} hold"
        nested = any(isinstance(v, (Mapping, list, tuple)) for v in value)
        return (" | " if nested else ", ").join(spell(v) for v in value) if value else "none"
    return fmt(value)


def check(statement: str, holds: Any, shows: Any = "", *, recorded: bool) -> bool:
    """Whether ``holds``; if not, raise :class:`StatementError` when ``recorded``, else print
    ``shows`` (what this machine's record shows, with its numbers; anything but a string is
    written out by :func:`spell`)."""
    if not isinstance(shows, str):
        shows = spell(shows)
    if holds:
        print(f"checked: {statement}" + (f" ({shows})" if shows else ""))
        return True
    if recorded:
        raise StatementError(
            f"the notebook states {statement!r}, but the recorded reference shows "
            f"{shows or 'otherwise'}: change the text (and this check) to what the record "
            "shows, or re-record the reference")
    show('<div style="border-left:6px solid #a35a00;padding:6px 12px;background:#fff4e5">'
         f"<b>On this machine the statement does not hold:</b> {html.escape(statement)}"
         f"<br>this run shows: {html.escape(shows or 'otherwise')}</div>",
         f"on this machine the statement does not hold: {statement}; this run shows: "
         f"{shows or 'otherwise'}")
    return False
