"""Packaging agrees with itself: pyproject.toml, requirements*.txt and environment.yml list the
same packages with the same lower bounds; the README's first two commands are the ones CI and
the Makefile use; the setup script's CPU-torch choice works."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

try:
    import tomllib
except ImportError:  # Python 3.10
    try:
        import tomli as tomllib
    except ImportError:
        from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# conda-forge package name -> PyPI name
CONDA_TO_PYPI = {"pytorch": "torch", "python-kaleido": "kaleido"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def as_map(specs: list[str], where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for text in specs:
        req = Requirement(text)
        name = norm(req.name)
        assert name not in out, f"{where}: {name} listed twice"
        out[name] = ",".join(sorted(str(s) for s in req.specifier))
    return out


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirements_file(name: str) -> list[str]:
    specs = []
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):  # -r, -e, options
            continue
        specs.append(line)
    return specs


def runtime() -> dict[str, str]:
    return as_map(pyproject()["project"]["dependencies"], "pyproject dependencies")


def extras() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, specs in pyproject()["project"]["optional-dependencies"].items():
        out.update(as_map(specs, f"pyproject extra {name}"))
    return out


def environment_yml() -> tuple[dict[str, str], list[str], dict]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda, pip = [], []
    for item in env["dependencies"]:
        if isinstance(item, dict):
            pip.extend(item.get("pip", []))
        else:
            conda.append(item)
    specs = []
    for item in conda:
        name = re.match(r"[A-Za-z0-9_.-]+", item).group(0)
        specs.append(CONDA_TO_PYPI.get(name, name) + item[len(name):])
    return as_map(specs, "environment.yml"), pip, env


REQUIRED = {
    "torch", "numpy", "safetensors", "pyyaml", "tqdm", "jupyterlab", "ipywidgets", "plotly",
    "papermill", "nbval", "nbconvert", "ipykernel",
}


def test_runtime_dependencies_complete():
    deps = runtime()
    assert set(deps) == REQUIRED
    assert deps["torch"] == ">=2.4"
    assert "kaleido" in extras() and "pytest" in extras()


def test_lower_bounds_only():
    everything = {**runtime(), **extras()}
    for name, spec in everything.items():
        assert re.fullmatch(r">=[0-9][0-9.]*", spec), f"{name}: {spec!r} is not a single lower bound"


def test_requirements_txt_mirrors_pyproject():
    assert as_map(requirements_file("requirements.txt"), "requirements.txt") == runtime()


def test_requirements_dev_adds_the_extras():
    text = (ROOT / "requirements-dev.txt").read_text()
    assert re.search(r"^-r requirements\.txt$", text, re.M)
    assert as_map(requirements_file("requirements-dev.txt"), "requirements-dev.txt") == extras()


def test_environment_yml_mirrors_pyproject():
    conda, pip, env = environment_yml()
    python = conda.pop("python")
    assert python == pyproject()["project"]["requires-python"] == ">=3.10"
    assert conda.pop("pip") == ""
    assert conda == {**runtime(), **extras()}
    assert pip == ["-e ."]
    assert env["channels"] == ["conda-forge"]


def test_console_script_and_package():
    proj = pyproject()
    assert proj["project"]["scripts"] == {"labkit": "labkit.suite.cli:main"}
    assert proj["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "labkit.__version__"}
    assert proj["build-system"]["build-backend"] == "setuptools.build_meta"
    cli = ROOT / "labkit" / "suite" / "cli.py"
    assert cli.is_file(), "the console script points at labkit/suite/cli.py:main, which is missing"
    assert re.search(r"^def main\(", cli.read_text(), re.M), "labkit/suite/cli.py has no main()"


def test_pytest_markers():
    ini = pyproject()["tool"]["pytest"]["ini_options"]
    assert ini["testpaths"] == ["tests"]
    names = {m.split(":")[0] for m in ini["markers"]}
    assert names >= {"gpu", "browser", "slow"}


# ----------------------------------------------------------------------------- README / CI

def readme_commands() -> list[str]:
    """The first command line of each fenced code block in README.md, in order."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", (ROOT / "README.md").read_text(), re.M | re.S)
    out = []
    for block in blocks:
        lines = [ln.strip() for ln in block.splitlines()
                 if ln.strip() and not ln.strip().startswith("#")]
        out.append(lines)
    return out


def test_readme_first_two_commands():
    blocks = readme_commands()
    assert len(blocks) >= 2
    assert blocks[0] == ["make run"], "first README command: set up and run the main job"
    assert blocks[1] == ["make test"], "second README command: set up and run the tests"


def makefile_targets() -> dict[str, str]:
    text = (ROOT / "Makefile").read_text()
    return {m.group(1): m.group(2) for m in re.finditer(r"^([A-Za-z][\w.-]*):(?!=)([^\n]*)", text, re.M)}


def test_makefile_targets():
    targets = makefile_targets()
    for name in ("setup", "test", "run", "lab", "slides", "bench", "clean-notebooks", "check"):
        assert name in targets, f"Makefile lacks target {name}"
    # run and test set up first (through the setup stamp)
    for name in ("run", "lint", "test-package", "test-notebooks"):
        assert "$(STAMP)" in targets[name]
    assert set(targets["test"].split()) == {"lint", "test-package", "test-notebooks"}


def test_ci_runs_readme_test_command():
    ci = ROOT / ".ci" / "run"
    test_cmd = readme_commands()[1][0]
    lines = [ln.strip() for ln in ci.read_text().splitlines()]
    assert test_cmd in lines, f".ci/run must run the README's test command {test_cmd!r}"
    assert lines[0].startswith("#!") and "bash" in lines[0]
    assert os.stat(ci).st_mode & stat.S_IXUSR, ".ci/run is not executable"


@pytest.mark.parametrize("script", ["scripts/setup.sh", ".ci/run"])
def test_shell_scripts_parse(script):
    path = ROOT / script
    assert "set -euo pipefail" in path.read_text()
    subprocess.run(["bash", "-n", str(path)], check=True)


# ----------------------------------------------------------------------------- setup.sh

def pick(listing: str) -> str:
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "--pick-cpu-torch"],
        input=listing, capture_output=True, text=True, check=True,
    )
    return out.stdout.strip()


def test_setup_picks_highest_cpu_torch():
    listing = (
        "torch (2.15.0)\n"
        "Available versions: 2.15.0, 2.14.1, 2.13.0+cpu, 2.13.0, 2.10.0+cpu, 2.4.0+cpu, "
        "2.3.1+cpu, 2.12.0rc1+cpu\n"
    )
    assert pick(listing) == "2.13.0+cpu"
    assert pick("Available versions: 2.9.1+cpu, 2.10.0+cpu, 2.4.0+cpu\n") == "2.10.0+cpu"


@pytest.mark.parametrize(
    "listing", ["", "torch (2.15.0)\nAvailable versions: 2.15.0, 2.14.1\n",
                "Available versions: 2.3.1+cpu, 2.1.0+cpu\n"]
)
def test_setup_no_cpu_torch(listing):
    assert pick(listing) == ""


def test_setup_dry_run_changes_nothing(tmp_path):
    env = dict(os.environ, LABKIT_VENV=str(tmp_path / "venv"), LABKIT_TORCH_SPEC="torch==2.13.0")
    env.pop("LABKIT_WHEELHOUSE", None)
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "--dry-run"],
        capture_output=True, text=True, check=True, env=env,
    ).stdout
    assert "install LABKIT_TORCH_SPEC=torch==2.13.0" in out and "dry run" in out
    assert not (tmp_path / "venv").exists()


def test_no_machine_paths_in_shipped_files():
    shipped = ["pyproject.toml", "requirements.txt", "requirements-dev.txt", "environment.yml",
               "README.md", "Makefile", ".ci/run", "scripts/setup.sh", ".gitignore"]
    for name in shipped:
        text = (ROOT / name).read_text()
        assert not re.search(r"(?<![\w.])/(work|opt|home|root|tmp)/", text), name
        assert "://" not in text, f"{name} holds an address"
