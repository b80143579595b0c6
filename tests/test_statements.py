"""Statement checks (labkit.teach.statements) and the evidence rule of verdicts
(labkit.teach.verdicts.Difference)."""

from __future__ import annotations

import pytest

from labkit.measure.results import load_reference
from labkit.teach import statements as st
from labkit.teach.notebook import NotebookContext
from labkit.teach.verdicts import compare_runs, compare_stats


def ctx(tier: str) -> NotebookContext:
    return NotebookContext("t", tier, "h200", gpus_here=1 if tier == "gpu" else 0)


def test_a_true_statement_prints_what_it_checked(capsys):
    assert ctx("cpu").state("two is more than one", 2 > 1, "2 vs 1") is True
    assert "two is more than one (2 vs 1)" in capsys.readouterr().out


def test_a_false_statement_on_a_recorded_reference_raises_naming_it():
    with pytest.raises(st.StatementError) as info:
        ctx("cpu").state("the pool ends larger smallest first", 26 > 1.1 * 26, "26 vs 26 MiB")
    assert "the pool ends larger smallest first" in str(info.value)
    assert "26 vs 26 MiB" in str(info.value)


def test_a_false_statement_measured_live_prints_instead_of_raising(capsys):
    assert ctx("gpu").state("the pool ends larger smallest first", False, "26 vs 26") is False
    out = capsys.readouterr().out
    assert "does not hold" in out and "26 vs 26" in out


def test_a_reference_shown_on_the_live_tier_is_still_strict():
    ref = load_reference("pool_memory_gpt2")
    assert ref.reference is True
    with pytest.raises(st.StatementError):
        ctx("gpu").state("a false statement about a recorded file", False, about=ref)
    assert st.is_reference({"a": ref, "b": None}) is True
    assert st.is_reference(None) is None


@pytest.mark.parametrize("value, spec, text", [
    (626.3375997543335, "", "626"), (1.0837, "", "1.08"), (0.00123, "", "0.00123"),
    (12345, "", "12,345"), (26.0, ".0f", "26"), (True, "", "True"), ("x", "", "x"),
    (0.0, "", "0"), (-3.14159, "", "-3.14")])
def test_fmt_keeps_float_noise_out(value, spec, text):
    assert st.fmt(value, spec) == text


def test_render_fills_fields_with_fmt():
    assert st.render("{a} MiB, {b:.1f}x, {c}", a=626.3375997543335, b=1.0837, c=3) == \
        "626 MiB, 1.1x, 3"


def test_difference_needs_runs_interleaving_and_a_gap_larger_than_the_spread():
    assert compare_runs([1.0], [5.0], interleaved=True).word == "untested (1 run)"
    assert compare_runs([1.0, 2.0], [5.0, 6.0], interleaved=False).word == \
        "untested (not interleaved)"
    assert compare_runs([1.0, 6.0], [5.0, 7.0], interleaved=True).word == \
        "no difference measured"
    d = compare_runs([1.0, 2.0, 3.0], [5.0, 6.0, 7.0], interleaved=True)
    assert d.word == "a lower" and d.tested and d.ratio == pytest.approx(2 / 6)
    s = compare_stats({"median": 10, "p10": 9, "p90": 11, "n": 30},
                      {"median": 20, "p10": 19, "p90": 21, "n": 30}, interleaved=True)
    assert s.word == "a lower" and s.runs == 30


# ---------------------------------------------------------------------------- the notebooks

import json  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
#: a number with a unit of measurement: what a sentence about a measurement carries
MEASURED = re.compile(r"(?<![\w#/.])\d[\d,]*(?:\.\d+)?\s?(?:µs|us|ms|s|ns|MiB|GiB|KiB|MB|GB|KB|"
                      r"TB/s|GB/s|×|%|tok/s|req/s|tokens/s)(?![\w/])")


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags") or []


def measured_numbers(markdown: str) -> list[str]:
    """Numbers with units in prose: inline code, links and quoted lines left out."""
    text = re.sub(r"`[^`]*`", "", markdown)
    text = re.sub(r"\(https?://[^)]*\)|https?://\S+", "", text)
    text = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith(">"))
    return MEASURED.findall(text)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_every_notebook_has_three_statement_checks(path):
    checks = [c for c in cells(path) if "statement" in tags(c)]
    assert len(checks) >= 3, f"{path.name}: {len(checks)} statement cells, need at least 3"
    for c in checks:
        src = "".join(c["source"])
        assert c["cell_type"] == "code" and "nb.state(" in src, \
            f"{path.name}: a cell tagged 'statement' must call nb.state(...): {src[:80]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_numbers_in_prose_are_checked_or_not_measurements(path):
    """A markdown cell that states a measured number is followed, within three cells, by a
    `statement` cell; a cell whose numbers are no measurement of this repository (cited from a
    source, an exercise's made-up setup, a setting) is tagged `not-measured`."""
    cs = cells(path)
    bad = []
    for i, c in enumerate(cs):
        if c["cell_type"] != "markdown" or "not-measured" in tags(c):
            continue
        found = measured_numbers("".join(c["source"]))
        if found and not any("statement" in tags(n) for n in cs[i + 1:i + 4]):
            bad.append(f"cell {i}: {found[:4]}")
    assert not bad, (f"{path.name}: numbers in prose with no statement check after them "
                     f"(add a `statement` cell, fill them in with nb.say, or tag the cell "
                     f"`not-measured` if they are cited from a source or made up for an "
                     f"exercise): {bad}")


def test_measured_number_pattern():
    assert measured_numbers("replay at 565 µs and 26 MiB, 4.6× faster, 3–10% more") == \
        ["565 µs", "26 MiB", "4.6×", "10%"]
    assert measured_numbers("batch 8, 12 layers, PR #23679, `x = 10 ms`, §2, 0.5 s") == \
        ["0.5 s"]
    assert measured_numbers("> quoted 210 ms\nsee https://x.org/a_10ms") == []


@pytest.mark.parametrize("value, text", [
    ({"graph_tokens_equal_eager": True}, "graph tokens equal eager: yes"),
    ({"graph_tokens_equal_eager.full": True, "graph_tokens_equal_eager.breaks_0": True},
     "all 2 hold: graph tokens equal eager (full); graph tokens equal eager (breaks 0)"),
    ({"bfloat16": {1: True, 8: True}, "float32": {1: True}},
     "all 3 hold: bfloat16 1; bfloat16 8; float32 1"),
    ({"compile_token_agreement": 0.98125, "graph_tokens_equal_eager": False},
     "compile token agreement: 0.981; graph tokens equal eager: no"),
    ({"eager": 0, "piecewise": 13}, "eager: 0; piecewise: 13"),
    ([{"ok": 20}, {"wrong": 2}], "ok: 20 | wrong: 2"),
    ([True, True, True], "all 3 hold"),
    ([True, False], "yes, no"),
    ([0, 2097152], "0, 2,097,152"),
    ({("small", 1): 11.26, ("gpt2", 64): 4.5}, "small 1: 11.3; gpt2 64: 4.50"),
    ({}, "none"),
    ({**{f"graph_tokens_equal_eager.plain@{b}": True for b in (1, 8, 64)},
      **{f"graph_tokens_equal_eager.lora@{b}": True for b in (1, 8, 64)},
      **{f"keys_as_dispatched@{b}": True for b in (1, 8, 64)}, "lora_changes_tokens": True},
     "all 10 hold: graph tokens equal eager (6 cases); keys as dispatched (3 cases); "
     "lora changes tokens"),
])
def test_spell_writes_a_records_flags_and_counts_as_prose(value, text):
    assert st.spell(value) == text


def test_a_statement_shown_as_a_mapping_is_spelled_not_printed_as_python(capsys):
    assert ctx("cpu").state("the tokens agree", True, {"graph_tokens_equal_eager": True})
    out = capsys.readouterr().out
    assert "(graph tokens equal eager: yes)" in out and "{" not in out
    with pytest.raises(st.StatementError, match="graph tokens equal eager: no"):
        ctx("cpu").state("the tokens agree", False, {"graph_tokens_equal_eager": False})
