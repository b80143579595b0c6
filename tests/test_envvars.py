"""labkit.support.envvars: every LABKIT_* variable the package reads, with good and bad values; a bad
value's error names the variable, the value and what is allowed, wherever it is read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labkit.support import envvars

from labkit.support import paths
from labkit.support.env import hardware_tier
from labkit.support.envvars import EnvVarError
from labkit.measure import results
from labkit.suite import slides

ROOT = Path(__file__).resolve().parents[1]


def test_every_labkit_variable_read_in_the_package_has_a_reader() -> None:
    """A new ``os.environ`` read of a LABKIT_* name must go through labkit.support.envvars."""
    read = set()
    for py in (ROOT / "labkit").rglob("*.py"):
        text = py.read_text(encoding="utf-8")
        read |= set(re.findall(r"""environ(?:\.get)?\(?\[?\s*["'](LABKIT_[A-Z_]+)""", text))
    assert read <= {"LABKIT_RUN_DIR"}, read  # bench_cli sets it for its own child process
    assert set(envvars.READERS) >= {"LABKIT_CPU_THREADS", "LABKIT_FORCE_TIER", "LABKIT_RUN_DIR",
                                    "LABKIT_DATA", "LABKIT_WEB_DIR", "LABKIT_LAB_TOKEN",
                                    "LABKIT_GIT_COMMIT", "PLOTLY_RENDERER"}


def test_good_values(tmp_path: Path) -> None:
    env = {"LABKIT_CPU_THREADS": " 2 ", "LABKIT_FORCE_TIER": "CPU", "LABKIT_RUN_DIR": str(tmp_path),
           "LABKIT_DATA": str(tmp_path / "not-yet"), "LABKIT_LAB_TOKEN": "abc-123_x",
           "LABKIT_GIT_COMMIT": "0123abcd", "PLOTLY_RENDERER": "plotly_mimetype+notebook"}
    assert envvars.cpu_threads(env) == 2
    assert envvars.force_tier(env) == "cpu"
    assert envvars.run_dir(env) == tmp_path
    assert envvars.data_dir(env) == tmp_path / "not-yet"  # made later: allowed
    assert envvars.lab_token(env) == "abc-123_x"
    assert envvars.git_commit(env) == "0123abcd"
    assert envvars.plotly_renderer(env) == "plotly_mimetype+notebook"
    envvars.check_environment(env)
    empty = dict.fromkeys(envvars.READERS, "")  # empty means unset: the defaults
    assert envvars.cpu_threads(empty) is None and envvars.force_tier(empty) == "auto"
    assert envvars.run_dir(empty) is None and envvars.lab_token(empty) is None
    assert envvars.plotly_renderer(empty, default="png") == "png"


@pytest.mark.parametrize("name,value", [
    ("LABKIT_CPU_THREADS", "abc"), ("LABKIT_CPU_THREADS", "-1"), ("LABKIT_CPU_THREADS", "1.5"),
    ("LABKIT_FORCE_TIER", "gpux"), ("LABKIT_FORCE_TIER", "gpu"),
    ("LABKIT_LAB_TOKEN", "has space"), ("LABKIT_LAB_TOKEN", "a&b"),
    ("LABKIT_GIT_COMMIT", "HEAD"), ("LABKIT_GIT_COMMIT", "xyz1234"),
    ("PLOTLY_RENDERER", "no_such_renderer"),
])
def test_bad_values_name_variable_value_and_allowed(name: str, value: str) -> None:
    with pytest.raises(EnvVarError) as err:
        envvars.READERS[name]({name: value})
    msg = str(err.value)
    assert f"{name}={value!r}" in msg and envvars.ALLOWED[name] in msg and "\n" not in msg
    assert isinstance(err.value, ValueError) and err.value.name == name


@pytest.mark.parametrize("name", ["LABKIT_RUN_DIR", "LABKIT_DATA", "LABKIT_WEB_DIR"])
def test_a_file_where_a_folder_belongs(tmp_path: Path, name: str) -> None:
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(EnvVarError, match=f"{name}=.*file, not a folder"):
        envvars.READERS[name]({name: str(f)})


def test_readers_are_used_where_the_variables_are_read(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABKIT_FORCE_TIER", "gpux")
    with pytest.raises(EnvVarError, match="LABKIT_FORCE_TIER='gpux'"):
        hardware_tier()
    f = tmp_path / "file.txt"
    f.write_text("x")
    for name, call in (("LABKIT_DATA", paths.data_dir), ("LABKIT_RUN_DIR", results.default_run_dir),
                       ("LABKIT_WEB_DIR", slides.web_dir)):
        monkeypatch.setenv(name, str(f))
        with pytest.raises(EnvVarError, match=name):
            call()
        monkeypatch.setenv(name, str(tmp_path))
        assert call() == tmp_path


def test_notebook_setup_reads_cpu_threads_through_the_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    from labkit.teach import notebook

    monkeypatch.setenv("LABKIT_CPU_THREADS", "abc")
    monkeypatch.setenv("LABKIT_FORCE_TIER", "cpu")
    with pytest.raises(EnvVarError, match="LABKIT_CPU_THREADS='abc'"):
        notebook.setup("00_setup", quiet=True)
