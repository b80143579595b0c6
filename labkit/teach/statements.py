"""Statement checks: every sentence a notebook states about a measurement, as code beside it.

A notebook that says "captured smallest first, the pool ends no larger than largest first"
follows the sentence with a cell tagged ``statement``::

    nb.state("smallest first ends no larger than largest first", sf <= 1.1 * lf,
             f"{sf:.0f} vs {lf:.0f} MiB")

* On **recorded references** (the CPU tier, CI) a statement that does not hold raises
  :class:`StatementError`: nbval fails, so a re-recorded reference that contradicts the text
  cannot land unnoticed.
* **Measured live** on a GPU, a statement that does not hold prints what this GPU shows
  instead ("on this GPU: 26 vs 31 MiB") and the notebook goes on: a different GPU may
  legitimately differ, and the learner should see it.

:func:`say` is the one formatting helper for prose that carries numbers from a record: a
markdown template whose ``{name}`` fields are filled with :func:`fmt`, so no float noise
reaches the page.
"""

from __future__ import annotations

import html
import math
import string
from typing import Any
from collections.abc import Iterable, Mapping


class StatementError(AssertionError):
    """A statement of a notebook is contradicted by the recorded reference it describes."""


def fmt(value: Any, spec: str = "") -> str:
    """``value`` formatted for prose: ``spec`` when given (``".1f"``, ``",d"``), else floats
    to three significant digits (``626.3375997`` -> ``626``, ``1.0837`` -> ``1.08``), ints
    with thousands separators, everything else with ``str``."""
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
    digits = max(0, 2 - int(math.floor(math.log10(abs(value)))))
    text = f"{value:,.{digits}f}"
    return text


class _Formatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        return fmt(value, format_spec)


def render(template: str, /, **values: Any) -> str:
    """``template`` with its ``{name}`` / ``{name:spec}`` fields filled by :func:`fmt`."""
    return _Formatter().vformat(template, (), values)


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def say(template: str, /, **values: Any) -> None:
    """Show ``template`` as markdown with ``values`` filled in (:func:`render`); outside a
    notebook print it."""
    text = render(template, **values)
    if _in_kernel():
        from IPython.display import Markdown, display

        display(Markdown(text))
    else:
        print(text)


def _show(html_text: str, plain: str) -> None:
    if _in_kernel():
        from IPython.display import HTML, display

        display(HTML(html_text))
    else:
        print(plain)


def is_reference(records: Any) -> bool | None:
    """True when any of ``records`` (a Result, or an iterable or mapping of them) was loaded
    from ``data/reference/``; False when all are live results; None when none says."""
    if records is None:
        return None
    if isinstance(records, Mapping):
        items: Iterable[Any] = records.values()
    elif isinstance(records, (list, tuple, set)):
        items = records
    else:
        items = (records,)
    flags = [getattr(r, "reference", None) for r in items if r is not None]
    flags = [f for f in flags if f is not None]
    if not flags:
        return None
    return any(flags)


def check(statement: str, holds: Any, shows: str = "", *, recorded: bool) -> bool:
    """Check one statement. ``holds``: the statement as code (truthy when it holds);
    ``shows``: what the record shows, in a few words with its numbers; ``recorded``: True
    when the numbers come from a recorded reference (then a false statement raises
    :class:`StatementError`), False when they were measured here (then it prints what this
    machine shows). Returns whether it holds."""
    ok = bool(holds)
    evidence = f" ({shows})" if shows else ""
    if ok:
        print(f"checked: {statement}{evidence}")
        return True
    if recorded:
        raise StatementError(
            f"the notebook states {statement!r}, but the recorded reference shows "
            f"{shows or 'otherwise'}: change the text (and this check) to what the record "
            "shows, or re-record the reference")
    _show('<div style="border-left:6px solid #a35a00;padding:6px 12px;background:#fff4e5">'
          f"<b>On this machine the statement does not hold:</b> {html.escape(statement)}"
          f"<br>this run shows: {html.escape(shows or 'otherwise')}</div>",
          f"on this machine the statement does not hold: {statement}; this run shows: "
          f"{shows or 'otherwise'}")
    return False
