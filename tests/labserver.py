"""A JupyterLab server in the background for the lab tests (:class:`LabServer`) and code run in
one of its kernels through the REST API and websocket, as the JupyterLab front end does
(:func:`execute_code`). The server is the one ``labkit lab`` runs (:mod:`labkit.suite.lab`)."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from labkit.suite.lab import (LOOPBACK, LabError, free_port, lab_command, server_environment,
                              stop_process_group)


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
