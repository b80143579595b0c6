"""``labkit lab``: JupyterLab on the suite's notebooks, for workshop participants.

:func:`start_lab` runs it in the foreground on ``notebooks/`` (loopback only, with a token)
until Ctrl-C, SIGTERM or SIGHUP, leaving no server behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
from pathlib import Path
from collections.abc import Iterator, Sequence

from labkit.support import envvars
from labkit.suite.engine import kernel_environment, notebooks_dir

LOOPBACK = "127.0.0.1"


class LabError(RuntimeError):
    """The server did not start, or a request to it failed."""


def server_environment() -> dict[str, str]:
    """The environment of the JupyterLab server, which its kernels inherit."""
    return {**os.environ, **kernel_environment()}


def probe_socket() -> socket.socket:
    """A TCP socket set up as JupyterLab's server sets up its own (tornado): with
    ``SO_REUSEADDR`` on POSIX, so a port whose last connections are still in TIME_WAIT (a server
    stopped a minute ago) counts as free, as it is to the server. Not on Windows, where the
    option would let a socket bind a port another one listens on."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if os.name != "nt":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return s


def port_free(port: int) -> bool:
    """Whether JupyterLab could listen on ``port`` of 127.0.0.1 now (:func:`probe_socket`)."""
    with probe_socket() as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def lab_command(root_dir: Path, port: int, token: str, *, open_browser: bool = False,
                extra_args: Sequence[str] = ()) -> list[str]:
    """The ``jupyter lab`` command line :func:`start_lab` runs (on 127.0.0.1)."""
    cmd = [sys.executable, "-m", "jupyterlab",
           f"--ServerApp.root_dir={root_dir}",
           f"--ServerApp.ip={LOOPBACK}",
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
    """While active, :data:`STOP_SIGNALS` raise :class:`LabStopped` (in the main thread)."""
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
    """Stop ``proc`` and its process group: SIGTERM, up to ``grace`` seconds for JupyterLab to
    shut its kernels down, then SIGKILL; returns its exit status."""
    pgid = proc.pid
    _signal_group(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired, KeyboardInterrupt, LabStopped):
        proc.wait(timeout=grace)
    # whatever is left of the group (the server, or children it left behind)
    _signal_group(pgid, signal.SIGKILL)
    return proc.wait()


def start_lab(port: int = 8888, open_browser: bool = True, *, root_dir: Path | None = None,
              token: str | None = None, extra_args: Sequence[str] = ()) -> int:
    """Run JupyterLab on ``notebooks/`` (127.0.0.1 only, ``$LABKIT_LAB_TOKEN`` or a random token,
    a busy ``port`` replaced by the next free one) until Ctrl-C, SIGTERM or SIGHUP."""
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
