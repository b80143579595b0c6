"""labkit.suite.runner / labkit.suite.report: `labkit run` on tiny temporary notebooks (CPU, no GPU)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
import yaml

from labkit.suite import engine, params, report, runner
from labkit.measure.results import new_folder
from labkit.suite.engine import SuiteError
from labkit.suite.runner import run_suite, run_sweep

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
# an explicit env keeps the kernel from importing torch: the tests stay fast
SAVE = ("from labkit.measure.results import save_result\n"
        "save_result({name!r}, {{'repeats': repeats, 'step': {{'median': 1.5, 'p10': 1.0, "
        "'p90': 2.0, 'mean': 1.5, 'n': 3, 'unit': 'us'}}}}, {{'repeats': repeats}}, "
        "env={{'tier': 'cpu', 'cpu': 'test'}})")


def make_notebook(folder: Path, stem: str, *, fail: bool = False, result: str | None = None) -> Path:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("repeats = 3\nlabel = 'default'")
    params.metadata["tags"] = ["parameters"]
    body = "print(f'repeats is {repeats}, label is {label}')"
    if fail:
        body += "\nraise ValueError('deliberate failure')"
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {stem}"), params,
                nbformat.v4.new_code_cell(SAVE.format(name=result or stem.split("_", 1)[1])),
                nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = KERNELSPEC
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.ipynb"
    nbformat.write(nb, path)
    return path


def outputs_text(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


@pytest.fixture
def suite(tmp_path: Path) -> tuple[list[Path], Path]:
    nbs = [make_notebook(tmp_path / "nbs", "01_alpha"), make_notebook(tmp_path / "nbs", "02_beta")]
    return nbs, tmp_path / "runs"


# ----------------------------------------------------------------------------- whole runs


def test_run_suite_executes_saves_and_reports(suite, tmp_path: Path, capsys) -> None:
    nbs, out = suite
    pfile = tmp_path / "p.yaml"
    pfile.write_text("repeats: 4\nlabel: fromfile\n")
    res = run_suite([str(p) for p in nbs], params={"repeats": 7}, param_file=pfile,
                    out_root=out, timeout=120, keep_going=False)
    run_dir = res.run_dir
    assert res.ok and [r.status for r in res.notebooks] == ["ok", "ok"]
    assert [r.records for r in res.notebooks] == [["alpha"], ["beta"]]
    assert all(r.output == run_dir / "notebooks" / f"{r.notebook.stem}.ipynb" for r in res.notebooks)

    assert run_dir.is_dir() and run_dir.parent == out.resolve()
    assert re.fullmatch(r"\d{8}-\d{6}-(cpu|gpu)", run_dir.name)
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "ok"
    assert rec["params"] == {"repeats": 7, "label": "fromfile"}  # -p wins over -f
    assert [e["name"] for e in rec["notebooks"]] == ["01_alpha", "02_beta"]
    assert all(e["status"] == "ok" and e["duration_s"] > 0 for e in rec["notebooks"])
    assert rec["env"]["python"] and rec["started"] and rec["finished"]
    assert rec["results"] == ["alpha", "beta"]
    assert [e["results"] for e in rec["notebooks"]] == [["alpha"], ["beta"]]

    for stem in ("01_alpha", "02_beta"):
        executed = run_dir / "notebooks" / f"{stem}.ipynb"
        assert "repeats is 7, label is fromfile" in outputs_text(executed)
        assert (run_dir / "html" / f"{stem}.html").stat().st_size > 1000
    saved = json.loads((run_dir / "results" / "alpha.json").read_text())
    assert saved["data"]["repeats"] == 7 and saved["params"] == {"repeats": 7}

    index = (run_dir / "index.html").read_text()
    for text in ("01_alpha", "02_beta", "html/01_alpha.html", "results/beta.json",
                 "measured on CPU (test)", "step.median [us]"):
        assert text in index
    assert "http://" not in index and "https://" not in index and "<script" not in index
    assert run_dir.name in runner.summary_line(res) and "2/2 notebooks ok" in runner.summary_line(res)
    assert capsys.readouterr().out == ""  # the library prints nothing; the CLI reports

    # a second run never reuses the folder; defaults apply without parameters
    second = run_suite([str(nbs[0])], params={}, param_file=None, out_root=out, timeout=120,
                       keep_going=False).run_dir
    assert second != run_dir and (second / "run.json").is_file()
    rec2 = json.loads((second / "run.json").read_text())
    assert rec2["notebooks"][0]["parameters"] == {}
    assert "repeats is 3, label is default" in outputs_text(second / "notebooks" / "01_alpha.ipynb")


def test_unknown_parameter_is_an_error_and_makes_no_folder(suite) -> None:
    nbs, out = suite
    with pytest.raises(SuiteError, match=r"unknown parameter 'repeat' \(did you mean repeats\?\)"):
        run_suite([str(p) for p in nbs], params={"repeat": 1}, out_root=out)
    assert not out.exists()


def test_a_name_declared_by_one_notebook_reaches_only_that_one(tmp_path: Path) -> None:
    a = make_notebook(tmp_path, "01_alpha")
    b = tmp_path / "02_other.ipynb"
    nb = nbformat.read(a, as_version=4)
    nb.cells[1].source = "width = 2.5"
    nbformat.write(nb, b)
    plan = runner.plan_run([str(a), str(b)], {"repeats": 4, "width": 3})  # int where float is
    assert plan.per_notebook == {a.resolve(): {"repeats": 4}, b.resolve(): {"width": 3}}


def test_wrong_type_names_parameter_notebook_and_type(suite) -> None:
    nbs, out = suite
    with pytest.raises(SuiteError) as err:
        runner.plan_run([str(p) for p in nbs], {"repeats": "abc"})
    msg = str(err.value)
    assert "'repeats'" in msg and "01_alpha" in msg and "expects int" in msg and "'abc'" in msg
    for bad in (True, 2.5, [1], None):
        with pytest.raises(SuiteError, match="expects int"):
            runner.plan_run([str(nbs[0])], {"repeats": bad})
    with pytest.raises(SuiteError, match="expects str"):
        runner.plan_run([str(nbs[0])], {"label": 5})
    assert not out.exists()


def test_failing_notebook_exits_nonzero_and_is_recorded(tmp_path: Path, capsys) -> None:
    bad = make_notebook(tmp_path / "nbs", "01_bad", fail=True)
    good = make_notebook(tmp_path / "nbs", "02_good")
    res = run_suite([str(bad), str(good)], params={}, param_file=None, out_root=tmp_path / "runs",
                    timeout=120, keep_going=False, progress=True)
    assert not res.ok and res.status == "failed" and res.failed == ["01_bad"]
    (failed,) = res.notebooks  # the second was skipped
    assert not failed.ok and failed.error.startswith("ValueError: deliberate failure")
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir == res.run_dir
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "failed"
    first, second = rec["notebooks"]
    assert first["status"] == "failed"
    assert first["error"]["ename"] == "ValueError"
    assert "deliberate failure" in first["error"]["evalue"]
    assert second["status"] == "skipped"  # stopped: no keep_going
    assert (run_dir / "notebooks" / "01_bad.ipynb").is_file()  # executed up to the error
    index = (run_dir / "index.html").read_text()
    assert "deliberate failure" in index and "skipped" in index
    assert "FAILED  01_bad" in capsys.readouterr().out  # the progress lines


def test_sweep_makes_one_run_per_combination(tmp_path: Path) -> None:
    nb = make_notebook(tmp_path / "nbs", "01_alpha")
    make_notebook(tmp_path / "nbs", "02_unused")
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"repeats": [1, 2], "label": "swept", "notebooks": [str(nb)]}))
    out = tmp_path / "runs"
    plan = runner.plan_sweep(None, grid, params={"label": "cli"})
    assert plan.overridden == ["label"]  # the grid wins over -p
    res = run_sweep(None, grid_file=grid, params={"label": "cli"}, param_file=None,
                    out_root=out, timeout=120)
    assert res.ok and all(r.ok for r in res.runs)
    run_dirs = res.run_dirs

    assert len(run_dirs) == 2 and len(set(run_dirs)) == 2
    seen = []
    for d in run_dirs:
        rec = json.loads((d / "run.json").read_text())
        assert [e["name"] for e in rec["notebooks"]] == ["01_alpha"]
        combo = rec["sweep"]["combination"]
        assert rec["params"]["repeats"] == combo["repeats"] and rec["params"]["label"] == "swept"
        seen.append(combo["repeats"])
        text = outputs_text(d / "notebooks" / "01_alpha.ipynb")
        assert f"repeats is {combo['repeats']}, label is swept" in text
    assert sorted(seen) == [1, 2]

    (sweep_dir,) = [p for p in out.iterdir() if p.name.startswith("sweep-")]
    assert sweep_dir == res.sweep_dir
    summary = json.loads((sweep_dir / "sweep.json").read_text())
    assert summary["status"] == "ok" and len(summary["runs"]) == 2
    assert {r["run"] for r in summary["runs"]} == {d.name for d in run_dirs}
    index = (sweep_dir / "index.html").read_text()
    assert all(f"../{d.name}/index.html" in index for d in run_dirs)
    # the numbers that differ between the runs, side by side (the printed line here)
    assert "What differs between the runs" in index
    row = re.search(r"<tr><td>01_alpha</td>.*?</tr>", index, re.S).group(0)
    assert "repeats is 1, label is swept" in row and "repeats is 2, label is swept" in row


def test_sweep_differences_lists_the_record_numbers_that_differ(tmp_path: Path) -> None:
    from labkit.measure.results import save_result

    runs = []
    for i, median in enumerate((10.0, 12.5), 1):
        run = tmp_path / f"2026010{i}-000000-cpu"
        stats = {"median": median, "p10": 9.0, "p90": 13.0, "mean": median, "n": 5, "unit": "us"}
        save_result("my_probe", {"step": stats, "same": 3.0}, {}, run_dir=run,
                    env={"tier": "cpu", "cpu": "t"})
        (run / "notebooks").mkdir()
        runs.append({"index": i, "run": run.name, "combination": {"repeats": i}})
    sweep = tmp_path / "sweep-20260101-000000"
    sweep.mkdir()
    rec_rows, out_rows = report.sweep_differences(sweep, {"runs": runs})
    assert out_rows == []
    assert [r[1] for r in rec_rows] == ["<code>step.median [us]</code>"]
    assert rec_rows[0][2:] == ["10", "12.5"]
    page = report.render_sweep_index(sweep, {"runs": runs, "grid": {"repeats": [1, 2]}})
    assert "step.median [us]" in page and "<code>same</code>" not in page


# ----------------------------------------------------------------------------- pieces


def test_resolve_notebooks(tmp_path: Path) -> None:
    a = make_notebook(tmp_path, "00_setup")
    b = make_notebook(tmp_path, "03_capture")
    (tmp_path / "notes.ipynb").write_text("{}")  # not NN_*: never selected by default
    w = make_notebook(tmp_path, "workshop_90min")
    s = make_notebook(tmp_path / "solutions", "03_capture")
    find = engine.find_notebooks
    assert find(None, tmp_path) == [a.resolve(), b.resolve()]
    assert find(["03", "0", "03_capture"], tmp_path) == [b.resolve(), a.resolve()]
    assert find([str(a)], tmp_path) == [a.resolve()]
    assert find(["workshop_90min", "solutions/3", "solutions/03_capture.ipynb"], tmp_path) == [
        w.resolve(), s.resolve()]
    with pytest.raises(SuiteError, match="'07' matches no notebook"):
        find(["07"], tmp_path)
    with pytest.raises(SuiteError, match="did you mean 03_capture"):
        find(["03_captrue"], tmp_path)
    with pytest.raises(SuiteError, match="no notebooks"):
        find(None, tmp_path / "empty")


def test_parameters_merge_and_split(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("a: 1\nb: [1, 2]\n")
    assert params.load_param_file(f) == {"a": 1, "b": [1, 2]}
    assert params.load_param_file(None) == {}
    f.write_text("- not a mapping\n")
    with pytest.raises(SuiteError, match="mapping"):
        params.load_param_file(f)
    anything = {n: params.Parameter(n, "", None) for n in "ab"}
    declared = {Path("x"): {"a": anything["a"]}, Path("y"): anything}
    per_nb = params.assign_parameters({"a": 1, "b": 2}, declared)
    assert per_nb == {Path("x"): {"a": 1}, Path("y"): {"a": 1, "b": 2}}
    with pytest.raises(SuiteError, match="unknown parameter 'z'"):
        params.assign_parameters({"a": 1, "z": 3}, declared)


def test_grid_and_combinations(tmp_path: Path) -> None:
    g = tmp_path / "g.yaml"
    g.write_text("notebooks: [3, '05']\nbatch: [1, 8]\npreset: [small, gpt2]\nrepeats: 5\n")
    grid, nbs = runner.load_grid(g)
    assert nbs == ["03", "05"]
    assert grid == {"batch": [1, 8], "preset": ["small", "gpt2"], "repeats": [5]}
    combos = runner.combinations(grid)
    assert len(combos) == 4 and combos[0] == {"batch": 1, "preset": "small", "repeats": 5}
    g.write_text("batch: []\n")
    with pytest.raises(SuiteError, match="empty"):
        runner.load_grid(g)


def test_new_folder_never_reuses(tmp_path: Path) -> None:
    first = new_folder(tmp_path, "20260101-000000-cpu")
    second = new_folder(tmp_path, "20260101-000000-cpu")
    assert first.name == "20260101-000000-cpu" and second.name == "20260101-000000-cpu-2"


def test_headline_numbers_and_comparison() -> None:
    stats = {"median": 6.8, "p10": 6.5, "p90": 7.1, "mean": 6.9, "n": 50, "unit": "us"}
    data = {"host_per_launch": stats, "launch_sync": None, "n_kernels": 200,
            "speedup": [7.0, 8.0], "sweep": [{"numel": i} for i in range(8)], "ok": True}
    heads = report.headline_numbers(data)
    assert heads == {"host_per_launch.median [us]": 6.8, "speedup[0]": 7.0, "speedup[1]": 8.0}
    ref = {"host_per_launch": dict(stats, median=3.4), "speedup": [2.0]}
    assert report.compare_with_reference(data, ref) == [
        ("host_per_launch.median [us]", 6.8, 3.4), ("speedup[0]", 7.0, 2.0)]


def test_format_duration() -> None:
    assert runner.format_duration(None) == "-"
    assert runner.format_duration(4.24) == "4.2 s"
    assert runner.format_duration(185) == "3 min 05 s"
    assert runner.format_duration(3720) == "1 h 02 min"


def test_declared_parameters_survive_papermill_parse_gaps(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(
        "A = 1  # d=256 (papermill skips this line)\nB: float = 2\nC = [1, 2**10]\n"
        "D = -0.5\nE = None\nF = 'x'\nG = 2**20\nH = True")
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell("Z = 4")]
    path = tmp_path / "01_x.ipynb"
    nbformat.write(nb, path)
    got = params.declared_parameters(path)
    assert {k: p.kind for k, p in got.items()} == {
        "A": "int", "B": "float", "C": "list", "D": "float", "E": None, "F": "str", "G": "int",
        "H": "bool"}
    assert got["C"].default == "[1, 2**10]"


def test_widget_cell_with_large_output_does_not_stall(tmp_path: Path) -> None:
    """An Output widget holding a large display (as a plotly figure embedding plotly.js does)
    used to leave the execute reply unnoticed until the cell timeout (forever without one)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import ipywidgets as w\nfrom IPython.display import HTML, display\nout = w.Output()\n"
        "with out:\n    display(HTML('<b>' + 'x' * 5_000_000 + '</b>'))\nw.VBox([w.IntSlider(), out])"),
        nbformat.v4.new_code_cell("print('after the widget')")]
    nb.metadata["kernelspec"] = KERNELSPEC
    path = tmp_path / "01_widget.ipynb"
    nbformat.write(nb, path)
    run_dir = run_suite([str(path)], params={}, param_file=None, out_root=tmp_path / "runs",
                        timeout=30, keep_going=False).run_dir
    executed = nbformat.read(run_dir / "notebooks" / "01_widget.ipynb", as_version=4)
    assert executed.cells[0].metadata.papermill.duration < 10  # the timeout is 30 s


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not list((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")),
                    reason="no notebooks yet")
def test_example_parameter_files_name_declared_parameters() -> None:
    nb_dir = ROOT / "notebooks"
    quick = params.load_param_file(ROOT / "params" / "quick.yaml")
    plan = runner.plan_run(None, quick, nb_dir=nb_dir)  # names and types checked
    assert quick and plan.params == quick
    splan = runner.plan_sweep(None, ROOT / "params" / "sweep-example.yaml", nb_dir=nb_dir)
    assert len(splan.combos) == 4


def test_param_file_serves_the_whole_suite_but_typos_fail(tmp_path: Path) -> None:
    a = make_notebook(tmp_path, "01_alpha")
    other = tmp_path / "02_other.ipynb"
    nb = nbformat.read(a, as_version=4)
    nb.cells[1].source = "width = 2.5"
    nbformat.write(nb, other)
    f = tmp_path / "p.yaml"
    f.write_text("repeats: 4\nwidth: 3.5\n")
    plan = runner.plan_run(["01"], param_file=f, nb_dir=tmp_path)
    assert plan.per_notebook == {a.resolve(): {"repeats": 4}} and plan.unused == ["width"]
    with pytest.raises(SuiteError, match="unknown parameter 'width'"):  # given with -p: strict
        runner.plan_run(["01"], {"width": 1.0}, nb_dir=tmp_path)
    f.write_text("repeats: 4\nwidht: 3.5\n")
    with pytest.raises(SuiteError, match=r"unknown parameter 'widht' \(did you mean width\?\)"):
        runner.plan_run(None, param_file=f, nb_dir=tmp_path)
    f.write_text("repeats: 4\nwidth: wide\n")
    with pytest.raises(SuiteError, match="'width' of notebook 02_other expects float"):
        runner.plan_run(None, param_file=f, nb_dir=tmp_path)


def test_a_page_that_cannot_be_written_is_a_warning_and_an_exit_status(suite, monkeypatch,
                                                                       capsys) -> None:
    """The notebooks ran, one page could not be written: the console says so (not only
    index.html), the summary counts it and `labkit run` exits 3; logs get no carriage return."""
    from labkit.suite import cli

    nbs, out = suite
    real = runner.export_notebook_html

    def export(nb, html, **kw):
        if Path(nb).stem == "01_alpha":
            raise RuntimeError("no room\nsecond line")
        return real(nb, html, **kw)

    monkeypatch.setattr(runner, "export_notebook_html", export)
    code = cli.main(["run", *map(str, nbs), "--out", str(out)])
    got = capsys.readouterr()
    assert code == cli.EXIT_INCOMPLETE == 3
    assert "WARNING 01_alpha: no HTML page written: RuntimeError: no room second line" in got.out
    assert "labkit run: WARNING: no HTML page for 01_alpha" in got.err
    assert "2/2 notebooks ok" in got.out and "1 HTML page(s) NOT written (01_alpha)" in got.out
    assert "\r" not in got.out + got.err  # no progress bar outside a terminal
    (run_dir,) = out.iterdir()
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "ok" and rec["notebooks"][0]["html"] is None
    assert (run_dir / "html" / "02_beta.html").is_file()
    monkeypatch.setattr(runner, "export_notebook_html", real)
    assert cli.main(["run", *map(str, nbs), "--out", str(out)]) == 0


def test_progress_bar_only_on_a_terminal() -> None:
    import io

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(runner._progress(3, "x", io.StringIO()), runner._Lines)
    bar = runner._progress(3, "x", Tty())
    assert not isinstance(bar, runner._Lines)
    bar.close()


# ----------------------------------------------------------------------------- papermill's noise


def test_correct_parameters_bring_no_papermill_warning(tmp_path: Path, caplog) -> None:
    """A rule comment's ``>=`` stops papermill's own line parser ("Unable to parse line",
    then "Passed unknown parameter" for a name the cell declares): labkit has checked the
    names itself, so neither is printed, and the value reaches the notebook."""
    path = make_notebook(tmp_path / "nbs", "01_alpha")
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].source = ("repeats = 3          # timed samples; >= 1\n"
                          "label = 'default'    # a name; choices: 'default', 'x'")
    nbformat.write(nb, path)
    with caplog.at_level("WARNING"):
        res = run_suite([str(path)], params={"repeats": 5}, out_root=tmp_path / "runs",
                        timeout=120)
    assert res.ok and "repeats is 5" in outputs_text(res.run_dir / "notebooks" / path.name)
    noise = [r.getMessage() for r in caplog.records if r.name.startswith("papermill")]
    assert noise == []
    log = (res.run_dir / "logs" / "01_alpha.kernel.log").read_text()
    assert "ERROR" not in log  # a notebook that ran fine logs no error


def test_papermill_still_warns_of_a_name_the_notebook_does_not_declare(caplog) -> None:
    import logging

    with caplog.at_level("WARNING"), engine.quiet_papermill_parameters(["repeats"]):
        logging.getLogger("papermill.translators").warning("Unable to parse line 1 'a = 1 # >= 1'.")
        logging.getLogger("papermill").warning("Passed unknown parameter: repeats")
        logging.getLogger("papermill").warning("Passed unknown parameter: bogus")
    assert [r.getMessage() for r in caplog.records] == ["Passed unknown parameter: bogus"]
    caplog.clear()
    logging.getLogger("papermill").warning("Passed unknown parameter: repeats")  # filter gone
    assert len(caplog.records) == 1


def test_the_kernel_is_not_interrupted_on_its_way_out(tmp_path: Path, monkeypatch) -> None:
    """jupyter_client interrupts a kernel before it asks it to shut down; a SIGINT landing as
    the kernel finishes its last reply logs "ERROR | KeyboardInterrupt caught in kernel" in a
    run that went fine. The suite's kernel manager skips that interrupt (only that one)."""
    import asyncio

    from jupyter_client.manager import AsyncKernelManager

    calls = []

    async def interrupt(self) -> None:
        calls.append(self.shutting_down)

    monkeypatch.setattr(AsyncKernelManager, "_async_interrupt_kernel", interrupt)
    with open(tmp_path / "k.log", "ab") as log:
        km = engine._kernel_manager_class(log, {})(kernel_name="python3")
        asyncio.run(km._async_interrupt_kernel())  # e.g. a cell's timeout: interrupted
        km.shutting_down = True
        asyncio.run(km._async_interrupt_kernel())  # on its way out: not
    assert calls == [False]
