"""The workshop syllabi promise only what the notebooks hold: every linked notebook exists under
the number its link names, and every section (``§N``, ``§N–§M``, ``07 §1``) and exercise
(``**N.M**``) a part names is a heading of the notebook it points to (read from the files)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NB_DIR = Path(__file__).resolve().parents[1] / "notebooks"
SYLLABI = sorted(NB_DIR.glob("workshop_*.ipynb"))
LINK = re.compile(r"\[(\d\d) · [^\]]*\]\(((\d\d)_\w+\.ipynb)\)")
SECTION = re.compile(r"(?:\b(\d\d) )?§(\d+)(?:–§(\d+))?")
EXERCISE = re.compile(r"\*\*(\d+)\.(\d+)\*\*")
BARE_ID = re.compile(r"(?<![\w.:*])\d{1,2}\.\d(?![\w.*])")


def markdown(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def outline(number: str) -> tuple[set[int], set[str]]:
    """The ``## N.`` sections and ``### Exercise N.M`` ids of notebook ``number``."""
    (path,) = NB_DIR.glob(f"{number}_*.ipynb")
    text = "\n".join(markdown(path))
    return ({int(n) for n in re.findall(r"^## (\d+)\. ", text, re.M)},
            set(re.findall(r"^### Exercise (\d+\.\d+)\b", text, re.M)))


def references(text: str) -> list[tuple[str, str, str]]:
    """``(notebook, kind, id)`` for the sections and exercises one part of a syllabus names;
    a bare ``§N`` belongs to the notebook the part's heading links first."""
    heading = LINK.search(text.splitlines()[0])
    here = heading.group(3) if heading else None
    out = []
    for nb, first, last in SECTION.findall(text):
        for n in range(int(first), int(last or first) + 1):
            out.append((nb or here, "section", str(n)))
    out += [(f"{int(a):02d}", "exercise", f"{a}.{b}") for a, b in EXERCISE.findall(text)]
    return out


def test_references_are_parsed():
    text = ("## 0:05 · [01 · Launch](01_x.ipynb)\n- **do:** §1, §3–§4; 07 §2\n"
            "- **exercise:** **1.1**, **10.2**")
    assert references(text) == [("01", "section", "1"), ("01", "section", "3"),
                                ("01", "section", "4"), ("07", "section", "2"),
                                ("01", "exercise", "1.1"), ("10", "exercise", "10.2")]


@pytest.mark.parametrize("path", SYLLABI, ids=lambda p: p.stem)
def test_links_point_at_the_notebook_they_name(path):
    for text in markdown(path):
        for number, target, file_number in LINK.findall(text):
            assert (NB_DIR / target).is_file(), f"{path.name} links {target}, which is missing"
            assert number == file_number, f"{path.name}: the link '{number} · …' opens {target}"


@pytest.mark.parametrize("path", SYLLABI, ids=lambda p: p.stem)
def test_every_section_and_exercise_named_exists(path):
    missing = []
    for text in markdown(path):
        if not text.startswith("## ") or not LINK.search(text.splitlines()[0]):
            continue  # only the parts of the path: "## <time> · [NN · Title](NN_x.ipynb)"
        for nb, kind, ident in references(text):
            sections, exercises = outline(nb)
            if (kind == "section" and int(ident) not in sections) or \
                    (kind == "exercise" and ident not in exercises):
                missing.append(f"{nb} {kind} {ident}")
        bare = BARE_ID.findall(EXERCISE.sub("", LINK.sub("", text)))
        assert not bare, f"{path.name}: write exercise ids as **N.M** so they are checked: {bare}"
    assert not missing, f"{path.name} names what its notebooks do not hold: {missing}"
