"""What a deck shows of an executed notebook, chosen per cell at export time
(:func:`deck_notebook`): one idea per slide for a speaker. The rules, in order:

1. Left out: cells tagged :data:`DECK_DROP_TAGS`, the set-up cell (``nb = setup(...)``), the
   old-style exercise checks (code calling ``Exercise(``, which names the expected answers)
   and the hints (``<details>`` blocks of markdown; a cell left empty is left out).
2. A code cell shows its outputs only, unless tagged :data:`SLIDE_CODE_TAG`; one left with
   nothing to show is left out. Printed output is cut after :data:`STREAM_LINES` lines. An
   exercise cell (tagged :data:`EXERCISE_TAG`) shows its code (the open answers) and none of
   its outputs (the check's "not answered yet" lines are no slide's business); the lines an
   exercise check prints (``[PASS]``/``[TODO]`` and its count) leave every other cell too.
3. A cell left out passes its slide start (``slide`` / ``subslide``) on to the next cell shown.
4. One visual (chart, table, image, widget) per slide; a cell with several is split first.
5. A markdown cell longer than :data:`TEXT_LINES` estimated lines is split at paragraph
   boundaries (never inside a code block, an HTML block or a hint); a cell that would take a
   slide past :data:`TEXT_LINES` (:data:`TEXT_LINES_WITH_VISUAL` beside a visual) starts a
   sub-slide.
"""

from __future__ import annotations

import copy
import itertools
import math
import re

#: Tag of a code cell whose source a deck shows (it is hidden otherwise).
SLIDE_CODE_TAG = "slide-code"
#: Tag of a learner's exercise cell: a deck shows its code, never its outputs.
EXERCISE_TAG = "exercise"
#: Tags of cells no deck shows.
DECK_DROP_TAGS = ("parameters", "injected-parameters", "statement")
#: Lines of printed output a deck shows per cell.
STREAM_LINES = 12
#: Estimated lines of text a slide holds (1280x800, the deck's font), alone and beside a visual.
TEXT_LINES = 22
TEXT_LINES_WITH_VISUAL = 9
#: Characters per estimated line of text.
LINE_CHARS = 110
#: Height (px) of a chart on a slide.
CHART_HEIGHT = 460

_SETUP = re.compile(r"^\s*nb\s*=\s*setup\(", re.M)
_EXERCISE = re.compile(r"\bExercise\(")
_CHECK_LINE = re.compile(r"^\[(?:PASS|TODO)\] |^.+: \d+/\d+ checks passed\b")
_DETAILS = re.compile(r"[ \t]*<details\b.*?</details\s*>[ \t]*\n?", re.S | re.I)
_VISUAL_MIME = ("application/vnd.plotly.v1+json", "application/vnd.jupyter.widget-view+json",
                "image/png", "image/jpeg", "image/svg+xml")
_STARTS = {"slide": 2, "subslide": 1}
_TOP_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])\s")


def slide_type(cell) -> str:
    return (cell.metadata.get("slideshow") or {}).get("slide_type") or "-"


def _copy(cell, i: int):
    """A copy of ``cell`` for its ``i``-th part (a cell id of its own)."""
    part = copy.deepcopy(cell)
    if part.get("id"):
        part["id"] = f"{part['id']}-{i}"[:64]
    return part


def _set_type(cell, kind: str) -> None:
    cell.metadata.setdefault("slideshow", {})["slide_type"] = kind


def _tags(cell) -> set[str]:
    return set(cell.metadata.get("tags") or [])


def is_visual(out) -> bool:
    """Whether an output is a visual (chart, widget, image or HTML table)."""
    data = out.get("data") or {}
    if any(m in data for m in _VISUAL_MIME):
        return True
    html = data.get("text/html")
    html = "".join(html) if isinstance(html, list) else (html or "")
    return "<table" in html or "plotly-graph-div" in html or "labkit-widget" in html


def _dropped(cell) -> bool:
    if _tags(cell) & set(DECK_DROP_TAGS):
        return True
    if cell.cell_type != "code" or {SLIDE_CODE_TAG, EXERCISE_TAG} & _tags(cell):
        return False
    return bool(_SETUP.search(cell.source)) or bool(_EXERCISE.search(cell.source))


def drop_details(source: str) -> str:
    """Markdown ``source`` without its ``<details>`` blocks (the hints), blank runs closed."""
    text = _DETAILS.sub("", source)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n") if text != source else source


def _cut_stream(out) -> None:
    if out.get("output_type") != "stream":
        return
    lines = out.get("text", "").splitlines()
    if any(_CHECK_LINE.match(ln) for ln in lines):
        lines = [ln for ln in lines if not _CHECK_LINE.match(ln)]
        out["text"] = "".join(f"{ln}\n" for ln in lines)
    if len(lines) > STREAM_LINES:
        more = len(lines) - STREAM_LINES
        out["text"] = "\n".join([*lines[:STREAM_LINES],
                                 f"… {more} more line(s) in the notebook"]) + "\n"


def text_lines(text: str) -> float:
    """Estimated lines a piece of markdown (or printed text) takes on a slide."""
    n = 0.0
    for line in text.splitlines():
        s = line.strip()
        if not s:
            n += 0.4
        elif s.startswith("#"):
            n += 1.6
        elif s in ("---", "***"):
            n += 0.6
        elif re.match(r"</?(details|summary|div)\b", s):
            n += 1 if "<summary" in s else 0.2
        else:
            n += math.ceil(len(s) / LINE_CHARS)
    return n


def _split_markdown(source: str, limit: float) -> list[str]:
    """``source`` cut at blank lines into parts of at most ``limit`` estimated lines, never
    inside a fenced code block or an HTML block."""
    blocks: list[str] = []
    cur: list[str] = []
    fence, html_depth = False, 0
    for line in source.splitlines():
        s = line.strip()
        if s.startswith("```"):
            fence = not fence
        free = not fence and html_depth <= 0
        if free and cur and _TOP_ITEM.match(line) and _TOP_ITEM.match(cur[0]):
            blocks.append("\n".join(cur))  # a long list may break between its top-level items
            cur = []
        html_depth += len(re.findall(r"<(details|div|table)\b", s, re.I))
        html_depth -= len(re.findall(r"</(details|div|table)>", s, re.I))
        if not s and free and cur:
            blocks.append("\n".join(cur))
            cur = []
            continue
        cur.append(line)
    if cur:
        blocks.append("\n".join(cur))
    parts: list[str] = []
    part: list[str] = []
    if len(blocks) > 1 and all(re.match(r"(#|---|\*\*\*)", ln.strip()) or not ln.strip()
                               for ln in blocks[0].splitlines()):
        parts.append(blocks.pop(0))  # a section's title slide stays a slide of its own
    for block in blocks:
        if part and text_lines(_join([*part, block])) > limit:
            parts.append(_join(part))
            part = []
        part.append(block)
    if part:
        parts.append(_join(part))
    return parts or [source]


def _join(blocks: list[str]) -> str:
    """Blocks joined again; the items of one list stay in one tight list."""
    out = blocks[0]
    for prev, block in itertools.pairwise(blocks):
        tight = _TOP_ITEM.match(block) and _TOP_ITEM.match(prev)
        out += ("\n" if tight else "\n\n") + block
    return out


def _cell_lines(cell) -> float:
    """Estimated text lines of a cell as the deck shows it (visuals not counted)."""
    n = 0.0
    if cell.cell_type == "markdown":
        return text_lines(cell.source)
    if not (cell.metadata.get("transient") or {}).get("remove_source"):
        n += len(cell.source.splitlines()) * 0.9 + 0.6
    for out in cell.get("outputs", []):
        data = out.get("data") or {}
        if out.get("output_type") == "stream":
            n += len(out.get("text", "").splitlines()) * 0.8
        elif "text/markdown" in data:
            md = data["text/markdown"]
            n += text_lines("".join(md) if isinstance(md, list) else md)
        elif "text/html" in data and not is_visual(out):
            n += 1.0
        elif "text/plain" in data and not is_visual(out):
            n += len(str(data["text/plain"]).splitlines()) * 0.8
    return n


def _visuals(cell) -> int:
    return sum(is_visual(o) for o in cell.get("outputs", [])) if cell.cell_type == "code" else 0


def _split_visuals(cell) -> list:
    """A code cell with several visuals as one cell per visual (the source on the first only)."""
    outs = list(cell.get("outputs", []))
    if sum(is_visual(o) for o in outs) < 2:
        return [cell]
    groups: list[list] = []
    cur: list = []
    for out in outs:
        if is_visual(out) and any(is_visual(o) for o in cur):
            groups.append(cur)
            cur = []
        cur.append(out)
    groups.append(cur)
    cells = []
    for i, group in enumerate(groups):
        part = _copy(cell, i) if i else cell
        part.outputs = group
        if i:
            part.metadata.setdefault("transient", {})["remove_source"] = True
            _set_type(part, "-")
        cells.append(part)
    return cells


def deck_notebook(nb):
    """Apply the deck rules (module docstring) to an executed notebook, in place; returns it."""
    cells, pending = [], 0
    for cell in nb.cells:
        kind = slide_type(cell)
        if cell.cell_type == "markdown":
            cell.source = drop_details(cell.source)
        if _dropped(cell) or (cell.cell_type == "markdown" and not cell.source.strip()):
            pending = max(pending, _STARTS.get(kind, 0))
            continue
        if cell.cell_type == "code":
            if EXERCISE_TAG in _tags(cell):
                cell.outputs = []
            elif SLIDE_CODE_TAG not in _tags(cell):
                cell.metadata.setdefault("transient", {})["remove_source"] = True
            for out in cell.get("outputs", []):
                _cut_stream(out)
            cell.outputs = [o for o in cell.get("outputs", [])
                            if o.get("output_type") != "stream" or o.get("text", "").strip()]
            if kind not in ("skip", "notes") and not cell.get("outputs") and \
                    not {SLIDE_CODE_TAG, EXERCISE_TAG} & _tags(cell):
                pending = max(pending, _STARTS.get(kind, 0))
                continue
        if kind in ("skip", "notes"):
            cells.append(cell)
            continue
        if pending and _STARTS.get(kind, 0) < pending:
            _set_type(cell, "slide" if pending == 2 else "subslide")
        pending = 0
        if cell.cell_type == "markdown" and text_lines(cell.source) > TEXT_LINES:
            parts = _split_markdown(cell.source, TEXT_LINES)
            for i, text in enumerate(parts):
                part = _copy(cell, i) if i else cell
                part.source = text
                if i:
                    _set_type(part, "subslide")
                cells.append(part)
            continue
        cells.extend(_split_visuals(cell) if cell.cell_type == "code" else [cell])

    on_slide = (0.0, 0)  # (text lines, visuals) of the slide so far
    for cell in cells:
        kind = slide_type(cell)
        if kind in ("skip", "notes"):
            continue
        lines, visuals = _cell_lines(cell), _visuals(cell)
        if kind in _STARTS:
            on_slide = (0.0, 0)
        elif any(on_slide):
            budget = TEXT_LINES_WITH_VISUAL if (on_slide[1] or visuals) else TEXT_LINES
            if (visuals and on_slide[1]) or on_slide[0] + lines > budget:
                _set_type(cell, "subslide")
                on_slide = (0.0, 0)
        on_slide = (on_slide[0] + lines, on_slide[1] + visuals)
    nb.cells = cells
    return nb
