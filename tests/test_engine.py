"""labkit.suite.engine: the kernel's environment, parameter checks and executing one notebook
(a tiny temporary notebook, CPU only)."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

import labkit
from labkit.support.envvars import EnvVarError
from labkit.suite import engine, params
from labkit.suite.engine import SuiteError

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
PKG_PARENT = str(Path(labkit.__file__).resolve().parent.parent)


def test_kernel_environment(tmp_path: Path) -> None:
    env = engine.kernel_environment(tmp_path / "run", environ={"PYTHONPATH": f"/x{os.pathsep}{PKG_PARENT}"})
    assert env["PYTHONPATH"].split(os.pathsep) == [PKG_PARENT, "/x"]  # this labkit first, once
    assert env["LABKIT_RUN_DIR"] == str((tmp_path / "run").resolve())
    assert env["PLOTLY_RENDERER"] == engine.DEFAULT_PLOTLY_RENDERER
    assert "LABKIT_CPU_THREADS" not in env
    env = engine.kernel_environment(None, environ={"PLOTLY_RENDERER": "png"})
    assert env["PLOTLY_RENDERER"] == "png"
    assert "LABKIT_RUN_DIR" not in env
    assert engine.kernel_environment(None, plotly_renderer="notebook",
                                     environ={"PLOTLY_RENDERER": "png"})["PLOTLY_RENDERER"] == "notebook"
    with pytest.raises(EnvVarError, match="LABKIT_CPU_THREADS='x'"):
        engine.kernel_environment(None, environ={"LABKIT_CPU_THREADS": "x"})


def test_parse_param_items() -> None:
    assert params.parse_param_items(["a=1", "b=[1, 2]", "c=x=y", "d=", "a=2"]) == {
        "a": 2, "b": [1, 2], "c": "x=y", "d": None}
    for bad, needle in (("noequals", "not key=value"), ("1a=3", "not a Python name"),
                        ("=3", "not a Python name"), ("x={a", "parameter 'x'")):
        with pytest.raises(SuiteError, match=needle):
            params.parse_param_items([bad])


def _notebook(path: Path, body: str) -> Path:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("n = 2")
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = KERNELSPEC
    nbformat.write(nb, path)
    return path


def test_execute_notebook_result(tmp_path: Path) -> None:
    src = _notebook(tmp_path / "01_ok.ipynb", (
        "import os, sys, labkit\n"
        "from labkit.measure.results import save_result\n"
        "save_result('probe', {'n': n}, {'n': n}, env={'tier': 'cpu'})\n"
        "print(n, os.environ['LABKIT_RUN_DIR'], os.environ['PLOTLY_RENDERER'], labkit.__file__)"))
    run = tmp_path / "run"
    res = engine.execute_notebook(src, tmp_path / "out" / "01_ok.ipynb", parameters={"n": 5},
                                  run_dir=run, timeout=120)
    assert res.ok and res.status == "ok" and res.error is None and res.duration_s > 0
    assert res.records == ["probe"] and res.output == tmp_path / "out" / "01_ok.ipynb"
    text = "".join(o.get("text", "") for c in nbformat.read(res.output, as_version=4).cells
                   if c.cell_type == "code" for o in c.outputs)
    assert text.startswith(f"5 {run.resolve()} {engine.DEFAULT_PLOTLY_RENDERER} {PKG_PARENT}")
    assert "LABKIT_RUN_DIR" not in os.environ or os.environ["LABKIT_RUN_DIR"] != str(run.resolve())

    bad = _notebook(tmp_path / "02_bad.ipynb", "raise RuntimeError(f'broken {n}')")
    res = engine.execute_notebook(bad, tmp_path / "out" / "02_bad.ipynb", run_dir=run, timeout=120)
    assert not res.ok and res.status == "failed" and res.records == []
    assert res.error.startswith("RuntimeError: broken 2")
    assert res.error_record["type"] == "cell" and res.output.is_file()
