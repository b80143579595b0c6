"""Property tests of the command line's boundary (hypothesis): whatever malformed ``-p`` value,
unknown parameter name, bad notebook name or bad sweep file ``labkit run`` gets, it exits
non-zero with ONE line on stderr naming the input, prints no traceback and creates nothing
on disk. Every input here is rejected before a notebook runs, so the tests stay fast."""

from __future__ import annotations

import contextlib
import io
import keyword
import tempfile
from pathlib import Path

import nbformat
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit.suite import cli, engine

SETTINGS = settings(max_examples=40, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
DECLARED = {"repeats": "20", "scale": "1.5", "label": "'x'", "sizes": "[1, 8]", "fast": "True"}


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory(prefix="labkit-cli-props-") as tmp:
        root = Path(tmp)
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell("\n".join(f"{k} = {v}" for k, v in DECLARED.items()))
        cell.metadata["tags"] = ["parameters"]
        nb.cells = [cell]
        path = root / "nbs" / "01_alpha.ipynb"
        path.parent.mkdir()
        nbformat.write(nb, path)
        yield root, path


def snapshot(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def run_cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, err.getvalue()


def assert_rejected(root: Path, before: set[Path], code: int, err: str, *needles: str) -> None:
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("labkit") and "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert snapshot(root) == before  # nothing created or changed
    assert not (root / "runs").exists()


def _yaml_fails(text: str) -> bool:
    try:
        yaml.safe_load(text)
    except yaml.YAMLError:
        return True
    return False


names = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s))
body = st.text(alphabet="abcxyz0123456789 ,:", max_size=12)
malformed = st.one_of(
    st.builds(lambda b: "[" + b, body),         # a list left open
    st.builds(lambda b: "{" + b, body),         # a mapping left open
    st.builds(lambda b: '"' + b, body),         # a quote left open
    st.builds(lambda b: "[" + b + "]]", body),  # one bracket too many
).filter(_yaml_fails)


@SETTINGS
@given(name=st.sampled_from(sorted(DECLARED)) | names, value=malformed)
def test_malformed_values_are_rejected(workdir, name: str, value: str) -> None:
    root, nb = workdir
    before = snapshot(root)
    code, err = run_cli("run", str(nb), "-p", f"{name}={value}", "--out", str(root / "runs"))
    assert_rejected(root, before, code, err, f"parameter {name!r}", repr(value))


@SETTINGS
@given(name=names.filter(lambda s: s not in DECLARED), value=st.integers() | st.text(max_size=5))
def test_unknown_names_are_rejected(workdir, name: str, value) -> None:
    root, nb = workdir
    before = snapshot(root)
    code, err = run_cli("run", str(nb), "-p", "repeats=3", "-p", f"{name}={value}",
                        "--out", str(root / "runs"))
    if "not valid YAML" in err:  # a text value may itself be malformed YAML: also rejected
        assert_rejected(root, before, code, err, repr(name))
    else:
        assert_rejected(root, before, code, err, f"unknown parameter {name!r}")


wrong_typed = st.one_of(
    st.tuples(st.just("repeats"), st.sampled_from(["abc", "1.5", "true", "[1]", "null", "{a: 1}"])),
    st.tuples(st.just("scale"), st.sampled_from(["abc", "false", "[1.5]"])),
    st.tuples(st.just("fast"), st.sampled_from(["1", "0", "yes_please", "[true]"])),
    st.tuples(st.just("sizes"), st.sampled_from(["1", "abc", "{a: 1}"])),
    st.tuples(st.just("label"), st.sampled_from(["1", "2.5", "true", "[a]"])),
)


@SETTINGS
@given(item=wrong_typed)
def test_wrong_types_are_rejected(workdir, item: tuple[str, str]) -> None:
    root, nb = workdir
    name, value = item
    before = snapshot(root)
    code, err = run_cli("run", str(nb), "-p", f"{name}={value}", "--out", str(root / "runs"))
    assert_rejected(root, before, code, err, f"parameter {name!r}", "01_alpha", "expects ")


@SETTINGS
@given(entry=st.from_regex(r"[A-Za-z0-9_-]{1,20}", fullmatch=True) | st.integers(10, 99).map(str))
def test_bad_notebook_names_are_rejected(workdir, entry: str) -> None:
    root, _ = workdir
    nb_dir = engine.notebooks_dir()
    if entry in engine.known_names(nb_dir) or (len(entry) <= 2 and entry.isdigit()
                                                and list(nb_dir.glob(f"{int(entry):02d}_*.ipynb"))):
        return  # a real notebook name: not bad input
    before = snapshot(root)
    code, err = run_cli("run", entry, "--out", str(root / "runs"))
    # an entry that looks like an option is argparse's to reject
    needle = entry if entry.startswith("-") else f"notebook {entry!r}"
    assert_rejected(root, before, code, err, needle)


sweep_texts = st.one_of(
    malformed,                                                         # not YAML
    st.lists(st.integers(), max_size=3).map(yaml.safe_dump),          # not a mapping
    st.integers().map(str),                                            # a scalar
    st.sampled_from(sorted(DECLARED)).map(lambda k: f"{k}: []\n"),     # no values
    names.filter(lambda s: s not in DECLARED and s != "notebooks").map(
        lambda k: f"{k}: [1, 2]\n"),                                   # unknown name
    st.sampled_from(["repeats: [1, abc]\n", "fast: [true, 3]\n", "notebooks: [{a: 1}]\n",
                     "notebooks: ['01']\n", ""]),
)


@SETTINGS
@given(text=sweep_texts)
def test_bad_sweep_files_are_rejected(workdir, text: str) -> None:
    root, nb = workdir
    grid = root / "grid.yaml"
    grid.write_text(text)
    before = snapshot(root)
    code, err = run_cli("run", str(nb), "--sweep", str(grid), "--out", str(root / "runs"))
    # the message names the file, or the parameter inside it that is wrong
    named = "grid.yaml" in err or "parameter '" in err
    assert named, err
    assert_rejected(root, before, code, err)
