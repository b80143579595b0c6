"""JupyterLab as participants get it (labkit.suite.lab): a server on 127.0.0.1 with a token, the
notebooks served through the contents API, a kernel that executes code over the websocket, and
(with Chromium) the notebook rendered in the JupyterLab UI.

The server runs on a copy of ``notebooks/00_setup.ipynb`` (or a stand-in) in a temporary folder,
so nothing in the repository is touched. Every step is bounded in time.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from labkit.suite import lab as lablib
from labserver import LabServer, execute_code

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "00_setup.ipynb"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab-root")
    src = ROOT / "notebooks" / NOTEBOOK
    if src.is_file():
        shutil.copy(src, root / NOTEBOOK)
    else:  # the notebook is not written yet: a stand-in with the same name
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                     "language": "python"}
        nb.cells = [nbformat.v4.new_markdown_cell("# 00 · Setup"),
                    nbformat.v4.new_code_cell("1 + 1")]
        nbformat.write(nb, str(root / NOTEBOOK))
    with LabServer(root, start_timeout=90) as srv:
        yield srv


def test_lab_command_is_loopback_with_token(tmp_path):
    cmd = lablib.lab_command(tmp_path, 8899, "secret")
    assert "--ServerApp.ip=127.0.0.1" in cmd and "--IdentityProvider.token=secret" in cmd
    assert f"--ServerApp.root_dir={tmp_path}" in cmd and "--no-browser" in cmd
    assert ("--allow-root" in cmd) == (lablib.os.geteuid() == 0)


def test_kernels_get_the_engine_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = lablib.server_environment()
    pkg_parent = str(Path(lablib.__file__).resolve().parents[2])
    assert env["PYTHONPATH"].split(os.pathsep)[0] == pkg_parent
    assert env["PLOTLY_RENDERER"] == "plotly_mimetype"  # JupyterLab draws it; no 5 MB per file
    monkeypatch.setenv("LABKIT_LAB_TOKEN", "bad token")
    with pytest.raises(ValueError, match="LABKIT_LAB_TOKEN='bad token'"):
        lablib.start_lab(root_dir=tmp_path, open_browser=False)
    with pytest.raises(lablib.LabError, match="does not exist"):
        lablib.start_lab(root_dir=tmp_path / "missing", open_browser=False)


def test_status_needs_the_token(server):
    status, body = server.get("/api/status")
    assert status == 200 and isinstance(body, dict) and "started" in body
    assert server.get("/api/status", token=False)[0] == 403


def test_contents_api_serves_the_notebook(server):
    status, model = server.get(f"/api/contents/{NOTEBOOK}?content=1")
    assert status == 200 and model["type"] == "notebook"
    assert model["content"]["cells"], "the notebook has no cells"
    assert model["content"]["metadata"]["kernelspec"]["name"] == "python3"


def test_kernel_executes_over_the_websocket(server):
    out = execute_code(server, "1+1", timeout=90)
    assert out["error"] is None and out["result"] == "2"
    out = execute_code(server, "import labkit; print(labkit.__version__)", timeout=90)
    assert out["error"] is None and out["stdout"].strip() == __import__("labkit").__version__
    assert server.get("/api/sessions")[1] == []  # sessions (and kernels) cleaned up


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _start_labkit_lab(tmp_path: Path) -> tuple[subprocess.Popen, int, LabServer]:
    """``python -m labkit lab`` as a user starts it, on a free port with a known token and a
    private runtime folder; returns it once JupyterLab answers, with the server's pid (from
    the server's runtime file) and a client for the server."""
    port, token = lablib.free_port(), "labkit-test-token"
    runtime = tmp_path / "runtime"
    env = dict(os.environ, PYTHONPATH=str(ROOT), LABKIT_LAB_TOKEN=token,
               JUPYTER_RUNTIME_DIR=str(runtime))
    # files, not pipes: a JupyterLab left running would hold a pipe open
    with open(tmp_path / "lab.out", "wb") as out, open(tmp_path / "lab.err", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "labkit", "lab", "--no-browser",
                                 "--port", str(port)], cwd=ROOT, env=env, stdout=out, stderr=err)
    client = LabServer(tmp_path, port=port, token=token)  # only its requests are used
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, (f"labkit lab exited with {proc.returncode}: "
                                     f"{(tmp_path / 'lab.err').read_text()}")
        files = list(runtime.glob("jpserver-*.json"))
        try:
            if files and client.get("/api/status")[0] == 200:
                return proc, int(files[0].stem.split("-")[1]), client
        except OSError:
            pass
        time.sleep(0.3)
    proc.kill()
    proc.wait()
    raise AssertionError(f"JupyterLab did not answer within 60 s: "
                         f"{(tmp_path / 'lab.err').read_text()}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_stop_signal_stops_jupyterlab_and_frees_the_port(tmp_path, sig):
    proc, server_pid, client = _start_labkit_lab(tmp_path)
    try:
        assert server_pid != proc.pid and os.getpgid(server_pid) == server_pid
        proc.send_signal(sig)
        proc.wait(timeout=40)
        err = (tmp_path / "lab.err").read_text()
        assert proc.returncode == 0, (proc.returncode, err[-1500:])
        assert f"{sig.name}: stopping JupyterLab" in err
        assert not _alive(server_pid), "JupyterLab outlived labkit lab"
        with pytest.raises(ProcessLookupError):  # nothing left in its process group
            os.killpg(server_pid, 0)
        with pytest.raises(ConnectionRefusedError):  # nothing listens on the port any more
            socket.create_connection((lablib.LOOPBACK, client.port), timeout=5).close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if _alive(server_pid):
            os.killpg(server_pid, signal.SIGKILL)


@pytest.mark.browser
def test_notebook_renders_in_jupyterlab(server, tmp_path):
    browser = next((p for p in (os.environ.get("BROWSER_PATH"), "/usr/bin/chromium")
                    if p and os.access(p, os.X_OK)), None)
    if browser is None:
        pytest.skip("Chromium not installed (apt-get install chromium)")
    url = server.url(f"/lab/tree/{NOTEBOOK}")
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--window-size=1280,800",
            "--virtual-time-budget=30000"]
    with tempfile.TemporaryDirectory(prefix="labkit-chromium-") as profile:
        dom = subprocess.run([browser, *args, f"--user-data-dir={profile}", "--dump-dom", url],
                             capture_output=True, text=True, timeout=240).stdout
    assert "jp-NotebookPanel" in dom, "JupyterLab did not open the notebook"
    assert len(re.findall(r'class="[^"]*\bjp-Cell\b', dom)) >= 2, "no notebook cells shown"
    png = tmp_path / "lab.png"
    with tempfile.TemporaryDirectory(prefix="labkit-chromium-") as profile:
        subprocess.run([browser, *args, f"--user-data-dir={profile}", f"--screenshot={png}", url],
                       capture_output=True, text=True, timeout=240)
    from pngutil import read_png

    img = read_png(png)
    assert len(img.colours()) >= 20, "the JupyterLab screenshot looks blank"


def test_a_port_in_time_wait_counts_as_free() -> None:
    """A server stopped a minute ago leaves its port's connections in TIME_WAIT; JupyterLab
    (tornado) binds with SO_REUSEADDR and gets the port, so the probe must agree, or a
    restarted ``make lab`` moves to another port and breaks an ``ssh -L`` tunnel."""
    import socket

    with lablib.probe_socket() as probe:
        if os.name != "nt":
            assert probe.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
    # a listener whose side closes first: its accepted connection's port goes to TIME_WAIT
    server = lablib.probe_socket()
    server.bind((lablib.LOOPBACK, 0))
    port = server.getsockname()[1]
    server.listen(1)
    client = socket.create_connection((lablib.LOOPBACK, port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: (127.0.0.1:port, client) enters TIME_WAIT
    client.recv(1)
    client.close()
    server.close()
    assert lablib.port_free(port)
    if sys.platform.startswith("linux"):  # without the option the port would count as busy
        with socket.socket() as plain, pytest.raises(OSError):
            plain.bind((lablib.LOOPBACK, port))
