"""The workshop syllabi and the suite's guides promise only what the notebooks hold.

* every linked notebook exists under the number its link names, and the link's title is the
  notebook's own (``# NN · Title``), loosely compared (a prefix, case and punctuation aside);
  so are the rows of notebook 00's table and ``docs/workshop.md``'s notebook numbers;
* every section (``§N *Title*``, ``§N–§M``, ``07 §1 *Title*``) and exercise (``**N.M** *Title*``
  or ``**N.M** (in §K)``) a part names is a heading of the notebook it points to, under that
  title or in that section, and "the exercises in §N" names a section that holds one;
* each syllabus links every notebook of the suite, and every notebook links the next one.

Everything is read from the files, so a renamed or renumbered heading fails here until the
syllabus follows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
SYLLABI = sorted(NB_DIR.glob("workshop_*.ipynb"))
NUMBERED = sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb"))
GUIDE = ROOT / "docs" / "workshop.md"
LINK = re.compile(r"\[(\d\d) · ([^\]]*)\]\(((\d\d)_\w+\.ipynb)\)")
TITLE = r"(?:\s+\*([^*]+)\*)?"  # an italic title may wrap onto the next line
SECTION = re.compile(r"(?:\b(\d\d) )?§(\d+)(?:–§(\d+))?" + TITLE)
EXERCISE = re.compile(r"\*\*(\d+)\.(\d+)\*\*(?:\s+\*([^*]+)\*|\s+\(in §(\d+)\))?")
HOLDS = re.compile(r"\bexercises? in ((?:§\d+(?:,? and |, )?)+)")
BARE_ID = re.compile(r"(?<![\w.:*])\d{1,2}\.\d(?![\w.*])")
TABLE_ROW = re.compile(r"^\| (\d\d) \| \[([^\]]*)\]\(((\d\d)_\w+\.ipynb)\)", re.M)
NEXT = re.compile(r"\*\*Next:\*\* \[(\d\d) · [^\]]*\]\((\d\d_\w+\.ipynb)\)")


def markdown(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def norm(title: str) -> str:
    """Lower case, every run of punctuation, markup or space one space."""
    return " ".join(re.sub(r"[^0-9a-z]+", " ", title.lower()).split())


def same_title(cited: str, heading: str) -> bool:
    """``cited`` names ``heading``: equal, or a prefix of it up to a word boundary."""
    c, h = norm(cited), norm(heading)
    return bool(c) and (h == c or h.startswith(c + " "))


def notebook(number: str) -> Path:
    (path,) = NB_DIR.glob(f"{number}_*.ipynb")
    return path


def outline(number: str) -> dict:
    """Notebook ``number``'s title, ``## N. Title`` sections, and ``### Exercise N.M — Title``
    exercises with the section each lies in."""
    title, sections, exercises, current = None, {}, {}, None
    for text in markdown(notebook(number)):
        for line in text.splitlines():
            if m := re.match(r"^# (\d\d) · (.+)$", line):
                title = title or m.group(2)
            elif m := re.match(r"^## (\d+)\. (.+)$", line):
                current = int(m.group(1))
                sections[current] = m.group(2)
            elif m := re.match(r"^### Exercise (\d+\.\d+)\b(?:\s*[—–-]\s*(.*))?$", line):
                exercises[m.group(1)] = (m.group(2) or "", current)
    return {"title": title, "sections": sections, "exercises": exercises}


def references(text: str) -> list[tuple[str, str, str, str | None]]:
    """``(notebook, kind, id, cited title or section)`` for the sections and exercises one part
    of a syllabus names; a bare ``§N`` belongs to the notebook the part's heading links first.
    Kinds: ``section``, ``section-range`` (no title), ``exercise`` (title), ``exercise-in``
    (the section it lies in), ``holds`` (a section that holds an exercise)."""
    heading = LINK.search(text.splitlines()[0])
    here = heading.group(4) if heading else None
    out: list[tuple[str, str, str, str | None]] = []
    holds = [n for group in HOLDS.findall(text) for n in re.findall(r"§(\d+)", group)]
    for nb, first, last, title in SECTION.findall(EXERCISE.sub("", HOLDS.sub("", text))):
        if last:
            out += [(nb or here, "section-range", str(n), None)
                    for n in range(int(first), int(last) + 1)]
        else:
            out.append((nb or here, "section", first, " ".join(title.split()) or None))
    for a, b, title, section in EXERCISE.findall(text):
        nb = f"{int(a):02d}"
        out.append((nb, "exercise-in", f"{a}.{b}", section) if section else
                   (nb, "exercise", f"{a}.{b}", " ".join(title.split()) or None))
    return out + [(here, "holds", n, None) for n in holds]


def problems(nb: str, kind: str, ident: str, cited: str | None) -> str | None:
    """What is wrong with one reference, or None."""
    o = outline(nb)
    if kind.startswith("section") or kind == "holds":
        if int(ident) not in o["sections"]:
            return f"{nb} §{ident} does not exist"
        if kind == "section" and cited is None:
            return f"{nb} §{ident} is cited without its title: write §{ident} *Title*"
        if kind == "section" and not same_title(cited, o["sections"][int(ident)]):
            return f"{nb} §{ident} is '{o['sections'][int(ident)]}', cited as '{cited}'"
        if kind == "holds" and not any(s == int(ident) for _, s in o["exercises"].values()):
            return f"{nb} §{ident} holds no exercise"
        return None
    if ident not in o["exercises"]:
        return f"exercise {ident} does not exist in {nb}"
    title, section = o["exercises"][ident]
    if cited is None:
        return f"exercise {ident} is cited without its title or section"
    if kind == "exercise" and not same_title(cited, title):
        return f"exercise {ident} is '{title}', cited as '{cited}'"
    if kind == "exercise-in" and int(cited) != section:
        return f"exercise {ident} lies in §{section}, cited in §{cited}"
    return None


def test_references_are_parsed():
    text = ("## 0:05 · [01 · Launch](01_x.ipynb)\n- **do:** §1 *Two clocks*, §3–§4; 07 §2\n"
            "- **exercise:** **1.1** *Predict: the two clocks*, **10.2** (in §4); the exercises "
            "in §2 and §5; §6 *Six\n  wrapped*")
    assert references(text) == [
        ("01", "section", "1", "Two clocks"), ("01", "section-range", "3", None),
        ("01", "section-range", "4", None), ("07", "section", "2", None),
        ("01", "section", "6", "Six wrapped"),
        ("01", "exercise", "1.1", "Predict: the two clocks"), ("10", "exercise-in", "10.2", "4"),
        ("01", "holds", "2", None), ("01", "holds", "5", None)]


def test_titles_compare_loosely_but_not_blindly():
    assert same_title("Manual graphs vs torch.compile",
                      'Manual graphs vs `torch.compile(mode="reduce-overhead")`')
    assert same_title("predict: the two clocks", "Predict: the two clocks")
    assert same_title("The verdicts", "The verdicts")
    assert not same_title("The verdicts", "Exercises")
    assert not same_title("Pitfall", "Pitfalls: six ways to break a CUDA graph")
    assert not same_title("", "Anything")


def test_a_wrong_title_or_number_is_reported():
    o = outline("09")
    verdicts = next(n for n, t in o["sections"].items() if t.startswith("The verdicts"))
    assert problems("09", "section", str(verdicts), "The verdicts") is None
    assert problems("09", "section", str(verdicts + 1), "The verdicts") is not None
    assert problems("09", "section", str(verdicts), None) is not None
    assert problems("01", "exercise", "1.1", "Write the crossover search") is not None
    assert problems("01", "exercise", "1.9", "anything") is not None


@pytest.mark.parametrize("path", [*SYLLABI, GUIDE], ids=lambda p: p.stem)
def test_links_point_at_the_notebook_they_name_under_its_title(path):
    texts = markdown(path) if path.suffix == ".ipynb" else [path.read_text(encoding="utf-8")]
    for text in texts:
        for number, title, target, file_number in LINK.findall(text):
            assert (NB_DIR / target).is_file(), f"{path.name} links {target}, which is missing"
            assert number == file_number, f"{path.name}: the link '{number} · …' opens {target}"
            heading = outline(number)["title"]
            assert same_title(title, heading), \
                f"{path.name}: '{number} · {title}' is '{number} · {heading}' in {target}"


def test_notebook_00_lists_every_notebook_under_its_title():
    table = next(t for t in markdown(notebook("00")) if "## 1. What the suite is" in t)
    rows = TABLE_ROW.findall(table)
    assert [r[2] for r in rows] == [p.name for p in NUMBERED]
    for number, title, target, file_number in rows:
        assert number == file_number, target
        assert same_title(title, outline(number)["title"]), \
            f"00's table calls {target} '{title}', its heading '{outline(number)['title']}'"


@pytest.mark.parametrize("path", SYLLABI, ids=lambda p: p.stem)
def test_every_section_and_exercise_named_exists_under_its_title(path):
    missing = []
    for text in markdown(path):
        if not text.startswith("## ") or not LINK.search(text.splitlines()[0]):
            continue  # only the parts of the path: "## <time> · [NN · Title](NN_x.ipynb)"
        for ref in references(text):
            if (found := problems(*ref)) is not None:
                missing.append(found)
        bare = BARE_ID.findall(EXERCISE.sub("", LINK.sub("", text)))
        assert not bare, f"{path.name}: write exercise ids as **N.M** so they are checked: {bare}"
    assert not missing, f"{path.name} names what its notebooks do not hold: {missing}"


@pytest.mark.parametrize("path", SYLLABI, ids=lambda p: p.stem)
def test_each_syllabus_links_every_notebook(path):
    linked = {target for text in markdown(path) for *_, target, _ in LINK.findall(text)}
    missing = [p.name for p in NUMBERED if p.name not in linked]
    assert not missing, f"{path.name} never links {missing}: add them to the path or take-home"


def test_the_guide_names_notebooks_that_exist_and_reaches_the_last():
    text = GUIDE.read_text(encoding="utf-8")
    numbers = {p.name[:2] for p in NUMBERED}
    cited = re.findall(r"`(\d\d)`", text)
    assert cited and set(cited) <= numbers, f"docs/workshop.md cites {sorted(set(cited) - numbers)}"
    assert max(numbers) in cited, f"docs/workshop.md stops before notebook {max(numbers)}"


@pytest.mark.parametrize("path", NUMBERED[:-1], ids=lambda p: p.stem)
def test_every_notebook_links_the_next(path):
    following = NUMBERED[NUMBERED.index(path) + 1]
    links = [(n, t) for text in markdown(path) for n, t in NEXT.findall(text)]
    assert links, f"{path.name} has no '**Next:** [NN · Title](NN_x.ipynb)' link"
    assert links[-1] == (following.name[:2], following.name), \
        f"{path.name}: Next goes to {links[-1][1]}, the next notebook is {following.name}"


@pytest.mark.parametrize("path", [*NUMBERED, *SYLLABI], ids=lambda p: p.stem)
def test_no_wrapped_line_turns_into_a_heading(path):
    """A prose line that starts with ``#`` and a digit (a wrapped ``#177108`` of a list of pull
    requests) renders as a heading on the run pages and slides."""
    bad = []
    for text in markdown(path):
        fenced = False
        for line in text.splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced and re.match(r"^ {0,3}#+\d", line):
                bad.append(line.strip())
    assert not bad, f"{path.name}: rewrap these lines so they do not start with '#': {bad}"
