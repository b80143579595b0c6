"""Shared pytest configuration.

* ``@pytest.mark.gpu`` tests are skipped when torch sees no CUDA device.
* ``@pytest.mark.browser`` tests are skipped when no Chromium/Chrome executable is found.
* Results saved without an explicit run folder go to a temporary folder, not into ``runs/``;
  it is removed when the tests end.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
import shutil
import tempfile

import pytest

GPU_SKIP_REASON = "needs a CUDA GPU (torch.cuda.is_available() is False)"
BROWSER_SKIP_REASON = "Chromium not installed (apt-get install chromium)"

_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "gpu: needs a CUDA GPU (skipped without one)",
        "browser: needs headless Chromium",
        "slow: takes more than a few seconds",
    ):
        config.addinivalue_line("markers", line)
    if not os.environ.get("LABKIT_RUN_DIR"):
        os.environ["LABKIT_RUN_DIR"] = _MADE["run_dir"] = tempfile.mkdtemp(prefix="labkit-test-run-")


_MADE: dict[str, str] = {}


def pytest_unconfigure(config: pytest.Config) -> None:
    made = _MADE.pop("run_dir", None)
    if made and os.environ.get("LABKIT_RUN_DIR") == made:
        shutil.rmtree(made, ignore_errors=True)
        del os.environ["LABKIT_RUN_DIR"]


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def browser_path() -> str | None:
    env = os.environ.get("BROWSER_PATH")
    if env and os.path.exists(env):
        return env
    for name in _BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items and not cuda_available():
        skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
        for item in gpu_items:
            item.add_marker(skip)
    browser_items = [item for item in items if item.get_closest_marker("browser")]
    if browser_items and browser_path() is None:
        skip = pytest.mark.skip(reason=BROWSER_SKIP_REASON)
        for item in browser_items:
            item.add_marker(skip)


@pytest.fixture
def cpu_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    """Force the CPU tier for one test (as ``LABKIT_FORCE_TIER=cpu`` does)."""
    monkeypatch.setenv("LABKIT_FORCE_TIER", "cpu")


@pytest.fixture(autouse=True)
def _no_ipython_shell_left_behind() -> Iterator[None]:
    """A test that starts IPython's shell clears it after itself: with a shell present,
    statements display HTML instead of printing, which would change later tests' output."""
    yield
    if "IPython" in sys.modules:
        from IPython.core.interactiveshell import InteractiveShell

        if InteractiveShell.initialized():
            InteractiveShell.clear_instance()
