"""The command line's boundary (labkit.suite.cli): bad input gives one line on stderr naming
the input and the fix, exit status 2, no traceback, and no run folder. Nothing here executes a
notebook: every error is found before execution (``labkit run --check`` for the good cases)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import labkit
from labkit.suite import cli

ROOT = Path(__file__).resolve().parents[1]


def make_notebook(path: Path, params: str) -> Path:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(params)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell("print(repeats)")]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


@pytest.fixture
def nbs(tmp_path: Path) -> tuple[Path, Path]:
    a = make_notebook(tmp_path / "nbs" / "01_alpha.ipynb", "repeats = 20\nscale = 1.5\nlabel = 'x'")
    b = make_notebook(tmp_path / "nbs" / "02_beta.ipynb", "repeats = 5\nsizes = [1, 8]\nfast = True")
    return a, b


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == cli.EXIT_USAGE, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_malformed_yaml_value_is_one_line_naming_the_parameter(nbs, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    code, _, err = run_cli("run", str(nbs[0]), "-p", "x=[1,2", "--out", str(out))
    assert_one_line_error(code, err, "labkit run:", "parameter 'x'", "[1,2", "-p x=[1,2]")
    assert not out.exists()


def test_wrong_type_names_parameter_notebook_and_expected_type(nbs, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    code, _, err = run_cli("run", *map(str, nbs), "-p", "repeats=abc", "--out", str(out))
    assert_one_line_error(code, err, "'repeats'", "01_alpha", "expects int", "'abc'")
    assert not out.exists()
    # int accepted where float is expected; a list where a list is; bool where bool is
    code, stdout, err = run_cli("run", *map(str, nbs), "-p", "scale=2", "-p", "sizes=[4]",
                                "-p", "fast=false", "--check")
    assert code == 0, err
    assert "01_alpha: scale=2" in stdout and "02_beta: sizes=[4], fast=False" in stdout
    code, _, err = run_cli("run", str(nbs[1]), "-p", "fast=1", "--check")
    assert_one_line_error(code, err, "'fast'", "02_beta", "expects bool")


def test_misspelled_parameter_is_an_error_with_suggestions(nbs, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    code, _, err = run_cli("run", *map(str, nbs), "-p", "repeat=3", "--out", str(out))
    assert_one_line_error(code, err, "unknown parameter 'repeat'", "did you mean repeats")
    assert not out.exists()
    # a name that only one of the selected notebooks declares is fine
    code, stdout, err = run_cli("run", *map(str, nbs), "-p", "sizes=[2]", "--check")
    assert code == 0, err
    assert "01_alpha: defaults" in stdout and "02_beta: sizes=[2]" in stdout


def test_bad_environment_variables_name_the_variable(nbs, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "runs"
    for name, value, allowed in (("LABKIT_CPU_THREADS", "abc", "whole number"),
                                 ("LABKIT_CPU_THREADS", "0", "whole number"),
                                 ("LABKIT_FORCE_TIER", "gpux", "'cpu'"),
                                 ("LABKIT_GIT_COMMIT", "not a hash", "hex digits"),
                                 ("LABKIT_LAB_TOKEN", "a b&c", "letters, digits"),
                                 ("PLOTLY_RENDERER", "nosuchrenderer", "renderer name")):
        with monkeypatch.context() as m:
            m.setenv(name, value)
            code, _, err = run_cli("run", str(nbs[0]), "--out", str(out))
        assert_one_line_error(code, err, name, repr(value), allowed)
    with monkeypatch.context() as m:
        m.setenv("LABKIT_DATA", str(nbs[0]))  # a file, not a folder
        code, _, err = run_cli("run", str(nbs[0]), "--out", str(out))
    assert_one_line_error(code, err, "LABKIT_DATA", "not a folder")
    assert not out.exists()
    with monkeypatch.context() as m:
        m.setenv("LABKIT_FORCE_TIER", "gpux")
        code, _, err = run_cli("env")
    assert_one_line_error(code, err, "labkit env:", "LABKIT_FORCE_TIER='gpux'")


def test_bad_notebook_name_suggests_close_names(tmp_path: Path) -> None:
    code, _, err = run_cli("run", "03_capture_replai", "--out", str(tmp_path / "runs"))
    assert_one_line_error(code, err, "'03_capture_replai'", "did you mean 03_capture_replay")
    assert not (tmp_path / "runs").exists()


def test_bad_sweep_file_is_one_line(nbs, tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    for text, needle in (("repeats: [1, 2\n", "not valid YAML"), ("- 1\n", "mapping"),
                         ("repeats: []\n", "empty list"), ("", "empty"),
                         ("repeat: [1, 2]\n", "did you mean repeats"),
                         ("repeats: [1, x]\n", "expects int")):
        grid.write_text(text)
        code, _, err = run_cli("run", str(nbs[0]), "--sweep", str(grid), "--out",
                               str(tmp_path / "runs"))
        assert_one_line_error(code, err, needle)
    code, _, err = run_cli("run", "--sweep", str(tmp_path / "missing.yaml"))
    assert_one_line_error(code, err, "missing.yaml", "does not exist")
    assert not (tmp_path / "runs").exists()


RULED = """# parameters
n_steps = 300                    # decode steps; >= 1
record_preset = "gpt2"           # which record; choices: "gpt2", "small"
capture_sizes = [1, 2, 4]        # graphs of the demo; >= 1
max_size = None                  # largest size (None: the trace's largest); int >= 1 or None
budget = 32                      # MiB; float > 0
pool = "shared"                  # memory of a set: "shared" or "private"
repeats = 20
"""


@pytest.fixture
def ruled(tmp_path: Path) -> Path:
    return make_notebook(tmp_path / "nbs" / "05_ruled.ipynb", RULED)


@pytest.mark.parametrize("item, needles", [
    ("capture_sizes=[1,2,x]", ["'capture_sizes'", "05_ruled", "list of int", "'x'"]),
    ("capture_sizes=[0,2]", ["'capture_sizes'", "each >= 1", "0 is not >= 1"]),
    ("capture_sizes=[]", ["'capture_sizes'", "empty list"]),
    ("max_size=None", ["'max_size'", "int >= 1 or null", "the text 'None'", "-p max_size=null"]),
    ("max_size=0", ["'max_size'", "int >= 1 or null", "0 is not >= 1"]),
    ("record_preset=xyz", ["'record_preset'", "05_ruled", "one of 'gpt2', 'small'", "'xyz'",
                           "-p record_preset=gpt2"]),
    ("n_steps=0", ["'n_steps'", "05_ruled", "int >= 1", "0 is not >= 1", "-p n_steps=300"]),
    ("n_steps=2.5", ["'n_steps'", "int >= 1", "float 2.5"]),
    ("budget=0", ["'budget'", "float > 0", "0 is not > 0"]),
    ("budget=null", ["'budget'", "float > 0", "got null"]),
])
def test_values_outside_the_declared_rule_are_one_line_errors(ruled, tmp_path: Path, item: str,
                                                              needles: list[str]) -> None:
    out = tmp_path / "runs"
    code, _, err = run_cli("run", str(ruled), "-p", item, "--out", str(out))
    assert_one_line_error(code, err, *needles)
    code, _, err = run_cli("run", str(ruled), "-p", item, "--check")
    assert_one_line_error(code, err, *needles)
    assert not out.exists()


def test_values_inside_the_rule_pass_the_check(ruled) -> None:
    code, stdout, err = run_cli("run", str(ruled), "--check", "-p", "max_size=null",
                                "-p", "record_preset=small", "-p", "capture_sizes=[8]",
                                "-p", "budget=0.5", "-p", "n_steps=1", "-p", "pool=anything")
    assert code == 0, err
    assert "max_size=None" in stdout and "record_preset='small'" in stdout
    code, _, err = run_cli("run", str(ruled), "--check", "-p", "max_size=8")
    assert code == 0, err


def test_a_sweep_value_outside_the_rule_fails_before_anything_runs(ruled, tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text("n_steps: [10, 0]\n")
    code, _, err = run_cli("run", str(ruled), "--sweep", str(grid), "--out", str(tmp_path / "r"))
    assert_one_line_error(code, err, "'n_steps'", "0 is not >= 1")
    assert not (tmp_path / "r").exists()


def test_rules_are_read_from_the_parameters_cell(ruled) -> None:
    from labkit.suite.params import declared_parameters

    got = declared_parameters(ruled)
    assert got["n_steps"].kind == "int" and got["n_steps"].rule.bounds == ((">=", 1.0),)
    assert got["record_preset"].rule.choices == ("gpt2", "small")
    assert got["capture_sizes"].kind == "list" and got["capture_sizes"].rule.item_kind == "int"
    assert got["max_size"].kind == "int" and got["max_size"].rule.nullable
    assert got["budget"].kind == "float"
    assert got["pool"].rule.choices == () and got["repeats"].rule.bounds == ()  # prose, no rule


def test_a_rule_that_cannot_be_read_names_the_notebook(tmp_path: Path) -> None:
    nb = make_notebook(tmp_path / "nbs" / "07_bad.ipynb", "mode = 'a'  # how; choices: a, b\n")
    code, _, err = run_cli("run", str(nb), "--check")
    assert_one_line_error(code, err, "07_bad", "mode", "not Python literals")


def test_check_accepts_the_shipped_parameter_files() -> None:
    code, stdout, err = run_cli("run", "-f", str(ROOT / "params" / "quick.yaml"), "--check")
    assert code == 0, err
    assert "05_padding_dispatcher: n_steps=100" in stdout
    code, stdout, err = run_cli("run", "--sweep", str(ROOT / "params" / "sweep-example.yaml"),
                                "--check")
    assert code == 0 and "4 combination(s)" in stdout, err


def test_version_in_process() -> None:
    code, stdout, _ = run_cli("--version")
    assert code == 0 and stdout.strip() == f"labkit {labkit.__version__}"


def test_argparse_errors_return_a_status() -> None:
    code, _, err = run_cli("run", "--timeout", "0")
    assert code == 2 and "--timeout" in err and "Traceback" not in err


def _python_m_labkit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "labkit", *args], capture_output=True,
                          text=True, env=full_env, timeout=120, cwd=ROOT)


def test_python_m_labkit_version_and_a_bad_parameter(tmp_path: Path) -> None:
    proc = _python_m_labkit("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"labkit {labkit.__version__}"
    out = tmp_path / "runs"
    proc = _python_m_labkit("run", "05", "-p", "n_step=3", "--out", str(out))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "unknown parameter 'n_step' (did you mean n_steps?)" in proc.stderr
    proc = _python_m_labkit("run", "05", "--out", str(out), env={"LABKIT_CPU_THREADS": "abc"})
    assert proc.returncode == 2 and "LABKIT_CPU_THREADS='abc'" in proc.stderr
    assert not out.exists()


# ----------------------------------------------------------------------------- labkit slides


def _run_folder(root: Path, name: str, stem: str, *, status: str = "ok",
                started: str = "2026-01-01T00:00:00+00:00") -> Path:
    """A ``labkit run`` folder holding ``stem`` executed (when ``status`` is ok)."""
    import json

    run = root / name
    (run / "notebooks").mkdir(parents=True)
    if status == "ok":
        nbformat.write(nbformat.v4.new_notebook(), run / "notebooks" / f"{stem}.ipynb")
    (run / "run.json").write_text(json.dumps({
        "kind": "labkit-run", "status": status, "started": started, "sweep": None,
        "notebooks": [{"name": stem, "status": status}]}))
    return run


@pytest.fixture
def no_export(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``labkit slides`` with the web assets and the export stubbed out; the list receives
    the notebooks it would execute."""
    from labkit.suite import slides

    executed: list[str] = []
    monkeypatch.setattr(slides, "ensure_web_assets", lambda **k: Path("node_modules"))
    monkeypatch.setattr(slides, "copy_assets", lambda out, modules=None: Path(out) / "assets")
    monkeypatch.setattr(slides, "export_notebook",
                        lambda nb, out, html=True, name=None: [Path(out) / f"{name}.slides.html"])
    monkeypatch.setattr(slides, "check_offline", lambda paths: None)
    monkeypatch.setattr(slides, "execute_notebook",
                        lambda src, dest, **k: executed.append(Path(src).stem) or dest)
    return executed


def test_slides_prints_the_run_it_used(nbs, tmp_path: Path, no_export: list[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from labkit.suite import slides

    monkeypatch.setattr(slides.runs, "repo_root", lambda: tmp_path)  # runs/ is tmp_path/runs
    _run_folder(tmp_path / "runs", "20260101-000000-cpu", "01_alpha")
    _run_folder(tmp_path / "runs", "20260102-000000-cpu", "01_alpha", status="failed",
                started="2026-01-02T00:00:00+00:00")
    out = tmp_path / "slides"
    code, stdout, err = run_cli("slides", str(nbs[0]), "--out", str(out))
    assert code == 0, err
    lines = stdout.splitlines()
    assert lines[0].startswith("labkit slides: using run ") and "20260101-000000-cpu" in lines[0]
    assert "newest complete run" in lines[0] and "20260102-000000-cpu: status 'failed'" in lines[0]
    assert lines[1:] == [str(out / "01_alpha.slides.html")] and no_export == []
    # --run picks the failed run: what it lacks is executed, and it says so
    run = tmp_path / "runs" / "20260102-000000-cpu"
    code, stdout, err = run_cli("slides", str(nbs[0]), "--out", str(out), "--run", str(run))
    assert code == 0, err
    assert stdout.splitlines()[0] == f"labkit slides: using run {run} (as given)"
    assert no_export == ["01_alpha"] and "lacks 01_alpha executed (status 'failed')" in err


def test_slides_run_that_is_not_a_run_folder_is_one_line(nbs, tmp_path: Path,
                                                         no_export: list[str]) -> None:
    out = tmp_path / "slides"
    for path, needle in ((tmp_path / "missing", "does not exist"),
                         (nbs[0].parent, "is not a run folder")):
        code, _, err = run_cli("slides", str(nbs[0]), "--out", str(out), "--run", str(path))
        assert_one_line_error(code, err, "labkit slides:", str(path), needle, "labkit run")
    assert not out.exists() and no_export == []


# ----------------------------------------------------------------------------- every command


def _options(parser) -> list[tuple[str, object]]:
    """``(sub-command, action)`` of every option and positional of every sub-command."""
    import argparse

    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [(name, a) for a in sub._actions if not isinstance(a, argparse._HelpAction)]
        elif not isinstance(action, argparse._HelpAction):
            out.append(("labkit", action))
    return out


def test_every_option_has_a_help_text_without_rst_markup() -> None:
    parser = cli.build_parser()
    missing = [f"{cmd} {a.dest}" for cmd, a in _options(parser) if not a.help]
    assert not missing, f"options without a help text: {missing}"
    texts = [parser.format_help()] + [sub.format_help() for sub in next(
        a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices.values()]
    assert not [t for t in texts if "``" in t], "help shows reStructuredText backticks"


def test_reference_errors_are_one_line(tmp_path: Path) -> None:
    from labkit.measure.results import save_result

    code, _, err = run_cli("reference", str(tmp_path / "nowhere"))
    assert_one_line_error(code, err, "labkit reference:", "does not exist")
    cpu_run = tmp_path / "runs" / "20260101-000000-cpu"
    cpu_run.mkdir(parents=True)
    (cpu_run / "run.json").write_text('{"kind": "labkit-run", "tier": "cpu", "notebooks": []}')
    code, _, err = run_cli("reference", str(cpu_run))
    assert_one_line_error(code, err, "is a CPU run", "saves no result records")
    save_result("cpu_note", {"x": 1}, {}, run_dir=cpu_run, env={"tier": "cpu", "cpu": "t"})
    code, _, err = run_cli("reference", str(cpu_run), "--gpu", "h200")
    assert_one_line_error(code, err, "refusing", "measured elsewhere", "only results measured")
    assert "force=True" not in err


def test_serve_record_on_a_cpu_refuses_at_once(monkeypatch, tmp_path: Path) -> None:
    from labkit.suite import serve_cli

    monkeypatch.setattr(cli, "_cuda_available", lambda: False)
    monkeypatch.setattr(serve_cli, "record_serving",
                        lambda *a, **k: pytest.fail("measured on the CPU"))
    code, _, err = run_cli("serve", "--record", "--out", str(tmp_path / "runs"))
    assert_one_line_error(code, err, "labkit serve --record:", "no CUDA GPU", "serve_*.json")
    assert not (tmp_path / "runs").exists()


def test_serve_on_a_cpu_labels_the_hit_rate(tmp_path: Path) -> None:
    from labkit.suite.serve_cli import summary_line

    m = {"completed": 3, "total_output": 9, "duration_s": 1.0, "graph_hit_rate": 1.0,
         "padded_waste": 0.1, "ttft_ms": {"median": 1.0, "p99": 2.0}, "tpot_ms": {"median": 1.0}}
    cpu = summary_line(m, device="cpu", mode="full")
    assert "bucket hit rate (CPU: eager bucketing, no CUDA graph) 100%" in cpu
    assert "on the CPU" in cpu and "graph hit rate" not in cpu
    assert "graph hit rate 100%" in summary_line(m, device="cuda:0", mode="full")
    code, out, err = run_cli("serve", "--mode", "full", "--device", "cpu",
                             "--clock", "sim", "--requests", "3", "--no-timeline",
                             "--out", str(tmp_path / "runs"))
    assert code == 0, err
    assert "bucket hit rate (CPU" in out and "graph hit rate" not in out
    assert "\r" not in out + err  # no progress bar outside a terminal


def test_serve_with_chunked_prefill_keeps_every_step_within_the_budget(tmp_path: Path) -> None:
    from labkit.measure.results import load_result

    code, out, err = run_cli("serve", "--mode", "full", "--device", "cpu", "--clock", "sim",
                             "--requests", "6", "--max-num-batched-tokens", "16",
                             "--out", str(tmp_path / "runs"))
    assert code == 0, err
    rec = load_result(out.strip().splitlines()[-1])
    assert rec.data["max_num_batched_tokens"] == 16 and rec.params["max_num_batched_tokens"] == 16
    assert rec.data["metrics"]["completed"] == 6
    assert max(s["tokens"] for s in rec.data["steps"]) <= 16
    assert any(s["prefill_tokens"] and s["tokens"] > s["prefill_tokens"]
               for s in rec.data["steps"])  # a chunk beside decodes
    code, _, err = run_cli("serve", "--mode", "full", "--device", "cpu", "--clock", "sim",
                           "--requests", "3", "--max-num-batched-tokens", "16", "--breaker")
    assert code == 2 and "circuit breaker" in err and "\n" not in err.strip()


def test_train_device_and_steps_errors_are_one_line(monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, _, err = run_cli("train", "--device", "cuda", "--out", "/nonexistent/x.safetensors")
    assert_one_line_error(code, err, "labkit train:", "--device cuda", "no CUDA GPU")
    code, _, err = run_cli("train", "--device", "tpu")
    assert_one_line_error(code, err, "--device tpu", "cpu or cuda")
    code, _, err = run_cli("train", "--steps", "0")
    assert code == 2 and "--steps" in err and len(err.strip().splitlines()) == 1


def test_lab_passes_jupyter_options_on_and_keeps_its_own(monkeypatch) -> None:
    from labkit.suite import lab

    got = {}
    monkeypatch.setattr(lab, "start_lab", lambda **kw: got.update(kw) or 0)
    code, _, err = run_cli("lab", "--no-browser", "--port", "9001",
                           "--ServerApp.shutdown_no_activity_timeout=60")
    assert code == 0, err
    assert got == {"port": 9001, "open_browser": False,
                   "extra_args": ["--ServerApp.shutdown_no_activity_timeout=60"]}
    for bad in ("--ip=0.0.0.0", "--ServerApp.token=", "--IdentityProvider.token=x"):
        code, _, err = run_cli("lab", bad)
        assert_one_line_error(code, err, "labkit lab:", bad, "sets the address")
    code, _, err = run_cli("lab", "--", "notebook.ipynb")
    assert code == 2 and "Traceback" not in err
    code, _, err = run_cli("run", "--no-such-option")
    assert code == 2 and "unrecognized arguments: --no-such-option" in err


def test_a_library_value_error_is_one_line(monkeypatch) -> None:
    from labkit.suite import serve_cli, train

    def boom(*a, **k):
        raise ValueError("first line\nsecond line naming the fix")

    monkeypatch.setattr(train, "train_char_model", boom)
    code, _, err = run_cli("train", "--device", "cpu")
    assert_one_line_error(code, err, "labkit train: first line second line naming the fix")
    monkeypatch.setattr(serve_cli, "check_record_names", boom)
    code, _, err = run_cli("serve", "--record")
    assert_one_line_error(code, err, "labkit serve: first line second line")


def test_slides_warns_of_broken_links_with_a_count(nbs, tmp_path: Path, no_export: list[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The stubbed export writes a deck whose image is not there (a link to a missing file
    becomes plain text, an image cannot): the command still succeeds and counts it."""
    from labkit.suite import slides

    monkeypatch.setattr(slides.runs, "repo_root", lambda: tmp_path)

    def export(nb, out, html=True, name=None):
        deck = Path(out) / f"{name}.slides.html"
        deck.parent.mkdir(parents=True, exist_ok=True)
        deck.write_text('<a href="gone.html">x</a><img src="assets/none.png">')
        return [deck]

    monkeypatch.setattr(slides, "export_notebook", export)
    code, _, err = run_cli("slides", str(nbs[0]), "--out", str(tmp_path / "slides"))
    assert code == 0, err
    assert "WARNING" in err and "1 broken link(s)" in err and "assets/none.png" in err
    assert "(notebooks/gone.html in the repository)" in (tmp_path / "slides" / "01_alpha.slides.html"
                                               ).read_text()
