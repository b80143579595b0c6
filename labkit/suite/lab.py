"""``labkit lab``: JupyterLab on the suite's notebooks, for workshop participants.

:func:`start_lab` runs JupyterLab in the foreground on ``notebooks/`` (loopback only, with a
token, ``--allow-root`` when run as root, no update or news checks) and prints the address to
open; Ctrl-C, SIGTERM and SIGHUP stop it (:func:`stop_process_group`), leaving no server
behind. :class:`LabServer` starts the same server in the background for scripts and tests, and
:func:`execute_code` runs code in a kernel through the server's REST API and websocket, the way
the JupyterLab front end does. Both give the kernels the suite engine's environment
(:func:`labkit.suite.engine.kernel_environment`: this labkit first on ``PYTHONPATH``, the
offline-friendly plotly renderer), so notebooks import the same labkit as ``labkit run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from collections.abc import Iterator, Sequence

from labkit.support import envvars
from labkit.suite.engine import kernel_environment, notebooks_dir

LOOPBACK = "127.0.0.1"
TOKEN_ENV = envvars.LAB_TOKEN


class LabError(RuntimeError):
    """The server did not start, or a request to it failed."""


def server_environment() -> dict[str, str]:
    """The environment of the JupyterLab server, which its kernels inherit."""
    return {**os.environ, **kernel_environment()}


def port_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def lab_command(root_dir: Path, port: int, token: str, *, open_browser: bool = False,
                ip: str = LOOPBACK, extra_args: Sequence[str] = ()) -> list[str]:
    """The ``jupyter lab`` command line :func:`start_lab` and :class:`LabServer` run."""
    cmd = [sys.executable, "-m", "jupyterlab",
           f"--ServerApp.root_dir={root_dir}",
           f"--ServerApp.ip={ip}",
           f"--ServerApp.port={port}",
           "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.news_url=None"]
    if not open_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd + list(extra_args)


#: Signals that stop ``labkit lab`` (and its JupyterLab) cleanly, besides Ctrl-C (SIGINT).
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class LabStopped(Exception):
    """``labkit lab`` received a stop signal (:data:`STOP_SIGNALS`)."""

    def __init__(self, signum: int) -> None:
        self.name = signal.Signals(signum).name
        super().__init__(self.name)


def _raise_stopped(signum: int, frame: object) -> None:
    raise LabStopped(signum)


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """While active, :data:`STOP_SIGNALS` raise :class:`LabStopped` in the main thread (the
    previous handlers come back afterwards; in another thread nothing changes)."""
    old: dict[int, object] = {}
    for sig in STOP_SIGNALS:
        try:
            old[sig] = signal.signal(sig, _raise_stopped)
        except ValueError:  # not the main thread
            break
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]


def _say(text: str) -> None:
    """Print to stderr; a closed terminal (SIGHUP) must not stop the shutdown."""
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr, flush=True)


def _signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to the process group ``pgid`` (nothing when the group is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_process_group(proc: subprocess.Popen, grace: float = 20.0) -> int:
    """Stop ``proc`` (started with ``start_new_session=True``) and everything in its process
    group: SIGTERM, up to ``grace`` seconds for JupyterLab to shut its kernels down, then
    SIGKILL (at once on a second Ctrl-C or stop signal). Returns its exit status."""
    pgid = proc.pid
    _signal_group(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired, KeyboardInterrupt, LabStopped):
        proc.wait(timeout=grace)
    # whatever is left of the group (the server, or children it left behind)
    _signal_group(pgid, signal.SIGKILL)
    return proc.wait()


def start_lab(port: int = 8888, open_browser: bool = True, *, root_dir: Path | None = None,
              token: str | None = None, extra_args: Sequence[str] = ()) -> int:
    """Run JupyterLab on ``notebooks/`` until Ctrl-C, SIGTERM or SIGHUP (each stops JupyterLab's
    whole process group, then returns 0); returns its exit status when it ends by itself.

    Listens on 127.0.0.1 only (on a remote machine, forward the port:
    ``ssh -L 8888:127.0.0.1:8888 host``). The token is ``$LABKIT_LAB_TOKEN`` or a fresh random
    one; the address printed includes it. A busy ``port`` is replaced by the next free one.
    """
    root = Path(root_dir) if root_dir is not None else notebooks_dir()
    if not root.is_dir():
        raise LabError(f"notebook folder {root} does not exist: run from the repository root "
                       "(or give root_dir)")
    token = token or envvars.lab_token() or secrets.token_urlsafe(18)
    env = server_environment()
    chosen = port
    if not port_free(chosen):
        chosen = next((p for p in range(port + 1, port + 50) if port_free(p)), 0) or free_port()
        print(f"labkit lab: port {port} is busy, using {chosen}", file=sys.stderr)
    cmd = lab_command(root, chosen, token, open_browser=open_browser, extra_args=extra_args)
    url = f"http://{LOOPBACK}:{chosen}/lab?token={token}"
    print(f"labkit lab: JupyterLab on {root}\n  open  {url}\n  stop  Ctrl-C", flush=True)
    # its own session, so that Ctrl-C reaches only us and we shut it down without its prompt;
    # SIGTERM and SIGHUP (a closed terminal, a service manager) stop it the same way
    with stop_signals_raise():
        proc = None
        try:
            proc = subprocess.Popen(cmd, start_new_session=True, env=env)
            return proc.wait()
        except (KeyboardInterrupt, LabStopped) as why:
            what = "Ctrl-C" if isinstance(why, KeyboardInterrupt) else why.name
            _say(f"\nlabkit lab: {what}: stopping JupyterLab (kernels are shut down)")
            if proc is not None:
                stop_process_group(proc)
            return 0


class LabServer:
    """JupyterLab in the background on 127.0.0.1, a free port and a random token::

        with LabServer(root_dir) as lab:
            lab.get("/api/status")          # (200, {...})
            execute_code(lab, "1+1")        # '2'

    Runtime files, workspaces and user settings go to a temporary folder.
    """

    def __init__(self, root_dir: Path, *, port: int | None = None, token: str | None = None,
                 start_timeout: float = 90.0):
        self.root_dir = Path(root_dir)
        self.port = port or free_port()
        self.token = token or secrets.token_urlsafe(18)
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="labkit-lab-")
        self.log_path = Path(self._tmp.name) / "server.log"

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def url(self, path: str = "/lab", *, with_token: bool = True) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}{path}" + (f"{sep}token={self.token}" if with_token else "")

    def start(self) -> LabServer:
        tmp = Path(self._tmp.name)
        extra = [f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
                 f"--LabApp.user_settings_dir={tmp / 'settings'}"]
        env = dict(server_environment(), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"))
        with open(self.log_path, "wb") as log:  # the child keeps its own copy
            self.proc = subprocess.Popen(lab_command(self.root_dir, self.port, self.token,
                                                     extra_args=extra),
                                         stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LabError(f"JupyterLab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self.get("/api/status")[0] == 200:
                    return self
            except (OSError, LabError):
                pass
            time.sleep(0.3)
        self.stop()
        raise LabError(f"JupyterLab not ready after {self.start_timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def request(self, method: str, path: str, body: dict | None = None, *,
                token: bool = True, timeout: float = 30.0) -> tuple[int, object]:
        """``(status, parsed JSON or text)`` of one REST call."""
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"token {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        text = raw.decode("utf-8", errors="replace")
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text

    def get(self, path: str, *, token: bool = True) -> tuple[int, object]:
        return self.request("GET", path, token=token)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_process_group(self.proc)
        self.proc = None

    def __enter__(self) -> LabServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        self._tmp.cleanup()


def _message(code: str, session: str) -> dict:
    return {
        "header": {"msg_id": uuid.uuid4().hex, "msg_type": "execute_request", "session": session,
                   "username": "labkit", "version": "5.3",
                   "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        "parent_header": {}, "metadata": {}, "channel": "shell",
        "content": {"code": code, "silent": False, "store_history": False,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
    }


async def _ws_execute(url: str, code: str, timeout: float) -> dict:
    from tornado.websocket import websocket_connect

    conn = await asyncio.wait_for(websocket_connect(url), timeout)
    try:
        msg = _message(code, uuid.uuid4().hex)
        await conn.write_message(json.dumps(msg))
        out: dict = {"result": None, "stdout": "", "error": None}
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LabError(f"no reply to {code!r} within {timeout:.0f} s")
            raw = await asyncio.wait_for(conn.read_message(), left)
            if raw is None:
                raise LabError("the kernel websocket closed")
            reply = json.loads(raw)
            if reply.get("parent_header", {}).get("msg_id") != msg["header"]["msg_id"]:
                continue
            kind, content = reply["header"]["msg_type"], reply.get("content", {})
            if kind == "execute_result":
                out["result"] = content["data"].get("text/plain")
            elif kind == "stream":
                out["stdout"] += content.get("text", "")
            elif kind == "error":
                out["error"] = f"{content.get('ename')}: {content.get('evalue')}"
            elif kind == "status" and content.get("execution_state") == "idle":
                return out
    finally:
        conn.close()


def execute_code(lab: LabServer, code: str, *, timeout: float = 60.0) -> dict:
    """Run ``code`` in a fresh python3 kernel of ``lab`` (REST session + kernel websocket);
    returns ``{"result": text/plain or None, "stdout": str, "error": str or None}``. The
    session and its kernel are deleted afterwards."""
    status, sess = lab.request("POST", "/api/sessions", {
        "path": "labkit-check.ipynb", "name": "labkit-check.ipynb", "type": "notebook",
        "kernel": {"name": "python3"}})
    if status not in (200, 201) or not isinstance(sess, dict):
        raise LabError(f"creating a session failed ({status}): {sess}")
    try:
        kernel = sess["kernel"]["id"]
        ws = (f"ws://{LOOPBACK}:{lab.port}/api/kernels/{kernel}/channels"
              f"?session_id={uuid.uuid4().hex}&token={lab.token}")
        return asyncio.run(_ws_execute(ws, code, timeout))
    finally:
        lab.request("DELETE", f"/api/sessions/{sess['id']}")
