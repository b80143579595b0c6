"""scripts/setup.sh reuses the torch of a python that lives in a virtualenv.

The case from a GPU cloud image: ``python3`` is itself a virtualenv holding torch. setup must
make the new venv import that very torch (through ``labkit-reuse-torch.pth``) and must not
install a second one. Here a virtualenv holding this test run's (CPU) torch plays that
``python3`` (``LABKIT_PYTHON``), and setup runs offline from an empty wheelhouse, so any
attempt to install torch would fail. A fake ``nvidia-smi`` on ``PATH`` decides whether the
machine looks like it has a GPU.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PTH_NAME = "labkit-reuse-torch.pth"


def purelib(python: Path) -> Path:
    """The site-packages folder of the interpreter ``python``."""
    out = subprocess.run(
        [str(python), "-E", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    )
    return Path(out.stdout.strip())


def torch_install() -> tuple[Path, Path]:
    """This test run's torch package folder and its dist-info folder (skip if there is none)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        pytest.skip("needs torch installed in the Python that runs the tests")
    package = Path(spec.origin).parent
    version = importlib.metadata.version("torch")
    dist_info = package.parent / f"torch-{version}.dist-info"
    if not dist_info.is_dir():
        pytest.skip(f"torch's metadata is not next to it ({dist_info} is missing)")
    return package, dist_info


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A copy of the project, a virtualenv that holds torch, an empty wheelhouse, fake GPUs."""
    base = tmp_path_factory.mktemp("setup")
    package, dist_info = torch_install()

    # the "system python": a virtualenv with torch in its own site-packages (linked, not copied:
    # the same files, about 1 GB) and this test run's other packages behind it through a .pth,
    # as a cloud image's environment holds numpy, jupyter and the rest
    outer = base / "outer"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(outer)], check=True)
    outer_site = purelib(outer / "bin" / "python")
    (outer_site / "torch").symlink_to(package, target_is_directory=True)
    (outer_site / dist_info.name).symlink_to(dist_info, target_is_directory=True)
    runner_dirs = [str(package.parent)] + [d for d in site.getsitepackages() if os.path.isdir(d)]
    (outer_site / "runner-packages.pth").write_text("\n".join(dict.fromkeys(runner_dirs)) + "\n")
    # data files a package of the outer environment installed there (nbconvert's templates),
    # and a kernelspec that must not be linked
    for folder, name in (("nbconvert/templates/reveal", "conf.json"),
                         ("kernels/python3", "kernel.json")):
        (outer / "share" / "jupyter" / folder).mkdir(parents=True)
        (outer / "share" / "jupyter" / folder / name).write_text("{}\n")

    # the project as a user has it (setup.sh installs the folder it sits in)
    repo = base / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("scripts", "labkit"):
        shutil.copytree(ROOT / name, repo / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, repo / name)

    wheelhouse = base / "wheelhouse"
    wheelhouse.mkdir()
    for kind, script in (("no-gpu", "exit 9\n"), ("gpu", "echo 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n")):
        folder = base / kind
        folder.mkdir()
        (folder / "nvidia-smi").write_text("#!/bin/sh\n" + script)
        (folder / "nvidia-smi").chmod(0o755)
    return {"base": base, "outer": outer, "outer_site": outer_site, "repo": repo,
            "wheelhouse": wheelhouse, "package": package}


def run_setup(world: dict[str, Path], venv: Path, *args: str, gpu: bool = False,
              **extra: str) -> subprocess.CompletedProcess[str]:
    """Run the copied setup.sh offline with the virtualenv as LABKIT_PYTHON."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "LABKIT_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        PATH=f"{world['base'] / ('gpu' if gpu else 'no-gpu')}{os.pathsep}{env.get('PATH', '')}",
        PIP_CONFIG_FILE=os.devnull,  # no index or find-links from this machine's pip settings
        PIP_NO_INDEX="1",
        LABKIT_PYTHON=str(world["outer"] / "bin" / "python"),
        LABKIT_VENV=str(venv),
        LABKIT_WHEELHOUSE=str(world["wheelhouse"]),
        LABKIT_EXTRAS="",
        **extra,
    )
    return subprocess.run(["bash", str(world["repo"] / "scripts" / "setup.sh"), *args],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_setup_reuses_the_torch_of_a_virtualenv_python_offline(world):
    venv = world["base"] / "venv"
    done = run_setup(world, venv)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    version = importlib.metadata.version("torch")
    assert "a virtualenv python" in log
    assert f"torch: reuse torch {version}" in log
    assert "checked:" in log and f"seen through {PTH_NAME}" in log

    # the venv imports exactly the torch of the "system python", and labkit from the project
    vpy = venv / "bin" / "python"
    out = subprocess.run(
        [str(vpy), "-E", "-c", "import labkit, torch; print(torch.__file__); print(labkit.__file__)"],
        capture_output=True, text=True, check=True, cwd=world["base"],
    ).stdout.splitlines()
    assert out[0] == str(world["outer_site"] / "torch" / "__init__.py")
    assert Path(out[1]).resolve() == (world["repo"] / "labkit" / "__init__.py").resolve()

    # nothing of torch was installed into the venv; the .pth lists the outer site-packages first
    venv_site = purelib(vpy)
    assert not (venv_site / "torch").exists()
    assert not list(venv_site.glob("torch-*.dist-info"))
    pth = [line for line in (venv_site / PTH_NAME).read_text().splitlines()
           if line and not line.startswith("#")]
    assert pth[0] == os.path.realpath(world["outer_site"])
    assert str(world["package"].parent.resolve()) in pth  # the outer venv's own .pth, followed

    # the outer environment's Jupyter data files are linked into the venv, its kernels are not
    data = venv / "share" / "jupyter"
    assert (data / "nbconvert" / "templates" / "reveal" / "conf.json").is_file(), log
    assert (data / "nbconvert").resolve() == (world["outer"] / "share" / "jupyter" /
                                              "nbconvert").resolve()
    assert not (data / "kernels" / "python3").exists()
    assert "Jupyter data files of" in log

    # pip in the venv counts the reused torch as installed, so labkit's torch>=2.4 is met
    shown = subprocess.run([str(vpy), "-m", "pip", "show", "torch"],
                           capture_output=True, text=True, env={**os.environ, "PIP_NO_INDEX": "1"})
    assert shown.returncode == 0 and f"Version: {version}" in shown.stdout

    # a second run reuses the venv and checks the torch again
    again = run_setup(world, venv)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"reusing the existing {venv}" in again.stdout and "checked:" in again.stdout
    assert not list(venv_site.glob("torch-*.dist-info"))


def torch_is_cuda_build() -> bool:
    import torch

    return bool(torch.version.cuda)


@pytest.mark.parametrize(
    ("gpu", "extra", "expected"),
    [
        (False, {}, ["torch: reuse torch", f"gets {PTH_NAME}", "no torch is installed"]),
        (False, {"LABKIT_REUSE_TORCH": "0"},
         ["not reused (LABKIT_REUSE_TORCH=0)", "no NVIDIA GPU: install a CPU build"]),
        (True, {}, ["a CPU-only build: not reused on this GPU machine", "install torch>=2.4 (CUDA build)"]),
        (True, {"LABKIT_REUSE_TORCH": "1"}, ["torch: reuse torch", "no torch is installed"]),
    ],
    ids=["cpu-machine", "reuse-off", "gpu-machine-cpu-torch", "reuse-forced"],
)
def test_setup_dry_run_says_which_torch(world, gpu, extra, expected):
    if gpu and not extra and torch_is_cuda_build():
        pytest.skip("this test run's torch is a CUDA build, which is reused on a GPU machine")
    venv = world["base"] / "dry-venv"
    done = run_setup(world, venv, "--dry-run", gpu=gpu, **extra)
    assert done.returncode == 0, done.stdout + done.stderr
    for text in expected:
        assert text in done.stdout, done.stdout
    assert "dry run: nothing changed" in done.stdout
    assert not venv.exists()


def test_setup_dry_run_into_the_virtualenv_itself(world):
    done = run_setup(world, world["outer"], "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"that {world['outer']} itself holds: labkit is installed into" in done.stdout


def test_setup_rejects_an_unknown_reuse_value(world):
    venv = world["base"] / "bad-venv"
    done = run_setup(world, venv, "--dry-run", LABKIT_REUSE_TORCH="yes")
    assert done.returncode != 0
    assert "LABKIT_REUSE_TORCH=yes is not understood" in done.stderr and "use 1" in done.stderr
    assert not venv.exists()
