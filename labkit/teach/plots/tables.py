"""Tables of dict rows shown as HTML (:class:`Table`): a cell grows with its text, so nothing is
clipped and no height is guessed; JupyterLab, the exported pages and the slides all show the
``text/html`` output, and a terminal the aligned ``text/plain`` one.

Values are formatted for reading (:func:`cell_text`): numbers to four significant digits
(thousands separated), a missing value as an em dash.
"""

from __future__ import annotations

import html
import math
import numbers
from typing import Any
from collections.abc import Mapping, Sequence

#: Shown for a missing value (None, NaN, or the text "None"/"null"/"nan").
MISSING = "—"
#: Significant digits of a non-integer below 1000 (at or above 1000: whole numbers).
DIGITS = 4
_MISSING_TEXT = {"None", "null", "nan", "NaN"}

_CELL = ("padding:3px 8px;border:none;border-bottom:1px solid rgba(128,128,128,0.3);"
         "vertical-align:top;white-space:normal;overflow-wrap:break-word;line-height:1.45;"
         "max-width:none;overflow:visible;")
_HEAD = _CELL + ("font-weight:600;border-bottom:2px solid rgba(128,128,128,0.55);"
                 "background:rgba(31,119,180,0.10);")
# on a slide the deck's text is larger than a page's, and a table wider than the slide is not
# scrolled but makes the deck scale the slide down to fit
_STYLE = ("<style>.reveal .labkit-table table{font-size:17px;}"
          ".reveal .labkit-table,.reveal .jp-OutputArea-output:has(> .labkit-table),"
          ".reveal .jp-OutputArea-child:has(.labkit-table),"
          ".reveal .jp-OutputArea:has(.labkit-table)"
          "{overflow:visible !important;}"
          ".labkit-table tbody tr:hover td{background:rgba(31,119,180,0.07);}</style>")


def is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def cell_text(value: Any, group: bool = False) -> str:
    """A cell's value as read: integers whole (thousands separated from 10,000, or from 1,000
    with ``group``: a column that holds one of 10,000 or more), other numbers to :data:`DIGITS`
    significant digits (whole, thousands separated, from 1,000), missing values as
    :data:`MISSING`."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        v = int(value)
        return f"{v:,}" if abs(v) >= 10_000 or group else str(v)
    if isinstance(value, numbers.Real):
        x = float(value)
        if math.isnan(x):
            return MISSING
        if math.isinf(x):
            return "∞" if x > 0 else "−∞"
        if abs(x) < 1e15 and (abs(x) >= 1000 or x == int(x)):
            return f"{x:,.0f}"
        return f"{x:.{DIGITS}g}"
    text = str(value)
    return MISSING if text.strip() in _MISSING_TEXT else text


class Table:
    """Dict rows as an HTML table (``title`` its caption); ``show()`` displays it."""

    def __init__(self, rows: Sequence[Mapping], columns: Sequence[str] | None = None, *,
                 title: str = ""):
        if not rows:
            raise ValueError("no rows to show")
        self.rows = [dict(r) for r in rows]
        self.columns = list(columns or self.rows[0].keys())
        self.title = title

    def cells(self) -> list[list[str]]:
        """The rows' cell texts, column by column of :attr:`columns`."""
        group = {c: any(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                        and abs(int(v)) >= 10_000 for r in self.rows for v in [r.get(c)])
                 for c in self.columns}
        return [[cell_text(r[c], group[c]) if c in r else "" for c in self.columns]
                for r in self.rows]

    def _numeric(self) -> list[bool]:
        """Columns whose values are all numbers (or missing): aligned right."""
        return [all(is_number(r.get(c)) or r.get(c) is None for r in self.rows)
                and any(is_number(r.get(c)) for r in self.rows) for c in self.columns]

    def to_html(self) -> str:
        right = self._numeric()

        def align(i: int) -> str:
            return "text-align:right;font-variant-numeric:tabular-nums;" if right[i] else \
                "text-align:left;"

        head = "".join(f'<th style="{_HEAD}{align(i)}">{html.escape(str(c))}</th>'
                       for i, c in enumerate(self.columns))
        body = []
        for n, row in enumerate(self.cells()):
            shade = "background:rgba(128,128,128,0.06);" if n % 2 else ""
            body.append("<tr>" + "".join(f'<td style="{_CELL}{shade}{align(i)}">'
                                         f"{html.escape(v)}</td>" for i, v in enumerate(row))
                        + "</tr>")
        caption = (f'<caption style="caption-side:top;text-align:left;font-weight:600;'
                   f'padding:0 0 6px 2px;color:inherit;">{html.escape(self.title)}</caption>'
                   if self.title else "")
        return (f'{_STYLE}<div class="labkit-table" style="overflow-x:auto;max-width:100%;'
                f'margin:4px 0 10px 0;"><table style="border-collapse:collapse;border:none;'
                f'margin:0;table-layout:auto;width:auto;color:inherit;">{caption}'
                f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")

    def _repr_html_(self) -> str:
        return self.to_html()

    def __repr__(self) -> str:
        cells = [[str(c) for c in self.columns], *self.cells()]
        widths = [max(len(r[i]) for r in cells) for i in range(len(self.columns))]
        right = self._numeric()
        lines = ["  ".join(v.rjust(w) if right[i] and k else v.ljust(w)
                           for i, (v, w) in enumerate(zip(r, widths))).rstrip()
                 for k, r in enumerate(cells)]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(([self.title] if self.title else []) + lines)

    def show(self) -> None:
        """Display the table in the notebook (printed as text outside one)."""
        from IPython.display import display

        display(self)


def table(rows: Sequence[Mapping], columns: Sequence[str] | None = None, *,
          title: str = "") -> Table:
    """A :class:`Table` of dict rows (``columns``: their keys in order; default the first row's),
    shown as HTML in JupyterLab, the run pages and the slides."""
    return Table(rows, columns, title=title)
