"""Run one function on ``N`` ranks (processes) with ``torch.distributed``, results to the parent.

:func:`run_ranks` spawns the ranks (``spawn``: a forked CUDA context is unusable), initialises
a process group (``gloo`` on CPU, ``nccl`` with one GPU per rank), calls
``fn(rank, world_size, *args)`` on each and returns the results in rank order.

Every rank shuts down the same way (:func:`shutdown`): release every CUDA graph still alive,
``synchronize``, ``barrier``, ``synchronize``, ``destroy_process_group``. Graphs first: a graph
that captured an NCCL collective holds a persistent reference on the communicator, which
``ncclCommDestroy`` waits for, so destroying the group first hangs (pytorch/pytorch issue
115388; vLLM pull request 39846 found ``commDestroySync`` spinning on ``localPersistentRefs``).

The parent's wait is bounded (``start_timeout_s`` to join the group, then ``timeout_s``): a
rank still running is terminated and :class:`RankTimeout` names it and its phase. With
``shutdown_timeout_s`` a rank hung in shutdown after its result is reported in ``info``.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
import pickle
import queue as queue_mod
import socket
import time
import threading
import traceback
from typing import Any
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from labkit.checks import as_int

BACKENDS = ("gloo", "nccl")
#: the order of a rank's shutdown (:func:`shutdown`); why this order: the module docstring
SHUTDOWN_ORDER = ("release graphs", "synchronize", "barrier", "destroy_process_group")
#: what a rank is doing, in order; the parent reports the last phase a hung rank reached
PHASES = ("starting", "init_process_group", "running the function",
          "shutdown (release graphs, synchronize, barrier, destroy_process_group)", "closed")


class RankError(RuntimeError):
    """A rank raised (or died); the message names the rank and carries its traceback."""


class RankTimeout(TimeoutError):
    """A rank did not finish within the time limit; the message names it and its phase."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host`` (for ``MASTER_PORT``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def default_backend() -> str:
    """``nccl`` when CUDA is available, else ``gloo``."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def check_devices(world_size: int, backend: str) -> None:
    """NCCL needs one CUDA device per rank: a clear error when fewer are visible."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not supported; use one of {list(BACKENDS)} "
                         "('gloo' on CPU, 'nccl' on GPUs)")
    if backend == "nccl":
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < world_size:
            raise RuntimeError(
                f"{world_size} ranks with backend='nccl' need {world_size} CUDA devices (one "
                f"per rank) but {have} are visible; run on a machine with {world_size} GPUs "
                "(check CUDA_VISIBLE_DEVICES), use fewer ranks, or use backend='gloo' on CPU")


def rank_device() -> torch.device:
    """The device of this rank: ``cuda:<local rank>`` under NCCL, else ``cpu``."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def release_graphs() -> int:
    """``gc.collect()``, then ``reset()`` every CUDA graph still alive; how many."""
    gc.collect()
    if not torch.cuda.is_available():
        return 0
    n = 0
    graph_type = torch.cuda.CUDAGraph
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance reads __class__, which some objects (deprecated
        # aliases such as torch.distributed.reduce_op) answer with a warning
        if issubclass(type(obj), graph_type):
            try:
                obj.reset()
                n += 1
            except Exception:
                pass
    return n


def shutdown(backend: str) -> dict[str, float]:
    """The shutdown of the module docstring; returns each step's seconds and graphs reset."""
    times: dict[str, float] = {}
    t_start = t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        times[name] = now - t
        t = now

    times["graphs_reset"] = float(release_graphs())
    lap("release_graphs_s")
    if not dist.is_initialized():
        times["total_s"] = time.perf_counter() - t_start
        return times
    if backend == "nccl":
        torch.cuda.synchronize()  # lets CUDA run the released graphs' NCCL callbacks
        lap("synchronize_s")
        dist.barrier(device_ids=[torch.cuda.current_device()])
        torch.cuda.synchronize()
    else:
        dist.barrier()
    lap("barrier_s")
    dist.destroy_process_group()
    lap("destroy_s")
    times["total_s"] = time.perf_counter() - t_start
    return times


def _worker(rank: int, world_size: int, backend: str, addr: str, port: int, fn: Callable,
            args: tuple, q: Any, cpu_threads: int | None, timeout_s: float) -> None:
    """One rank: init, run ``fn``, send its pickled result, shut down; errors go to ``q``."""
    def phase(i: int) -> None:
        q.put(("phase", rank, i))

    failed = False
    try:
        os.environ.update(MASTER_ADDR=addr, MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
        if cpu_threads:
            torch.set_num_threads(cpu_threads)
        phase(1)
        # longer than the parent's limit: the parent, which sees every rank, names the hung one
        timeout = datetime.timedelta(seconds=timeout_s)
        if backend == "nccl":
            torch.cuda.set_device(rank)
            dist.init_process_group("nccl", rank=rank, world_size=world_size, timeout=timeout,
                                    device_id=torch.device("cuda", rank))
        else:
            dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timeout)
        phase(2)
        payload = pickle.dumps(fn(rank, world_size, *args))  # plain pickle: tensors by value
        q.put(("result", rank, payload))
        phase(3)
        del payload
        q.put(("shutdown", rank, shutdown(backend)))
        phase(4)
    except BaseException:
        q.put(("error", rank, traceback.format_exc()))
        failed = True
    if failed:  # outside the except block: its traceback (and the graphs it holds) is gone
        _let_go()


def _let_go() -> None:
    """After an error: release graphs, destroy the group without a barrier (10 s at most)."""
    with contextlib.suppress(Exception):
        release_graphs()
    if not dist.is_initialized():
        return

    def destroy() -> None:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()

    th = threading.Thread(target=destroy, name="labkit-destroy", daemon=True)
    th.start()
    th.join(10.0)


def run_ranks(fn: Callable[..., Any], world_size: int, *, args: Sequence[Any] = (),
              backend: str | None = None, timeout_s: float = 120.0, grace_s: float = 5.0,
              cpu_threads: int | None = 1, start_timeout_s: float = 300.0,
              shutdown_timeout_s: float | None = None, info: dict | None = None) -> list[Any]:
    """``[fn(0, N, *args), ..., fn(N-1, N, *args)]``, each run in its own process on one rank.

    ``fn``: a module-level function with a picklable result, tensors on the host. ``backend``
    defaults to ``'nccl'`` where CUDA is; ``cpu_threads``: ``torch.set_num_threads`` per rank.
    A rank that raises gives :class:`RankError` (the others get ``grace_s`` seconds), one past
    its time :class:`RankTimeout`; every process is joined before this returns. ``info`` gets
    ``shutdown`` (rank -> seconds per step), ``shutdown_hung`` and ``exit_codes``."""
    if not callable(fn):
        raise TypeError(f"fn must be a function fn(rank, world_size, *args), got "
                        f"{type(fn).__name__}")
    world_size = as_int(world_size, "world_size", minimum=1, fix="give 1 or more ranks")
    for name, value in (("timeout_s", timeout_s), ("start_timeout_s", start_timeout_s),
                        ("grace_s", grace_s),
                        ("shutdown_timeout_s", 1.0 if shutdown_timeout_s is None
                         else shutdown_timeout_s)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    backend = default_backend() if backend is None else backend
    check_devices(world_size, backend)
    try:
        pickle.dumps((fn, tuple(args)))
    except Exception as exc:
        raise TypeError(f"fn and args must be picklable to reach the spawned ranks ({exc}); "
                        "define fn at module level (no lambda or local function)") from exc
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    addr, port = "127.0.0.1", free_port()
    procs = [ctx.Process(target=_worker, name=f"labkit-rank{r}", daemon=True,
                         args=(r, world_size, backend, addr, port, fn, tuple(args), q,
                               cpu_threads, float(timeout_s + start_timeout_s)))
             for r in range(world_size)]
    phase = dict.fromkeys(range(world_size), 0)
    results: dict[int, bytes] = {}
    errors: dict[int, str] = {}
    closing: dict[int, dict] = {}
    if info is not None and not isinstance(info, dict):
        raise TypeError(f"info must be a dict to fill (or None), got {type(info).__name__}")
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + start_timeout_s
        limit = f"start_timeout_s={start_timeout_s} (spawn, imports, init_process_group)"
        joined = False
        first_error: float | None = None
        all_results: float | None = None

        def handle(msg: tuple) -> None:
            nonlocal first_error
            kind, rank, value = msg
            if kind == "phase":
                phase[rank] = value
            elif kind == "result":
                results[rank] = value
            elif kind == "shutdown":
                closing[rank] = value
            else:
                errors.setdefault(rank, value)
                first_error = first_error or time.monotonic()

        while True:
            now = time.monotonic()
            if not joined and all(v >= 2 for v in phase.values()):
                joined, deadline = True, now + timeout_s
                limit = f"timeout_s={timeout_s} (after every rank joined the group)"
            if all(v == len(PHASES) - 1 for v in phase.values()) or now >= deadline:
                break
            if len(results) == world_size and all_results is None:
                all_results = now
            if (shutdown_timeout_s is not None and all_results is not None
                    and now - all_results >= shutdown_timeout_s):
                deadline = now  # no further wait below: the ranks left are hung in shutdown
                break
            if first_error is not None and now - first_error >= grace_s:
                break
            try:
                handle(q.get(timeout=0.05))
                continue
            except queue_mod.Empty:
                pass
            for r, p in enumerate(procs):  # died without a word (killed, segfault)
                if not p.is_alive() and phase[r] != len(PHASES) - 1 and r not in errors:
                    _drain(q, handle)
                    if shutdown_timeout_s is not None and r in results:
                        continue  # died in shutdown after its result: see info's exit codes
                    if phase[r] != len(PHASES) - 1 and r not in errors:
                        errors[r] = (f"rank {r} exited with code {p.exitcode} while "
                                     f"{PHASES[phase[r]]}, without reporting an error")
                        first_error = first_error or time.monotonic()
            if all(not p.is_alive() for p in procs):
                _drain(q, handle)
                break
        for p in procs:
            p.join(timeout=max(0.0, min(5.0, deadline - time.monotonic())) or 0.5)
        _drain(q, handle)
    finally:
        # a rank that closed its group but is still exiting (CUDA teardown) is not hung
        hung = [r for r in _stop(procs) if phase[r] != len(PHASES) - 1]
        q.close()
        q.join_thread()
    if info is not None:
        info["shutdown"] = dict(sorted(closing.items()))
        info["shutdown_hung"] = [r for r in hung if phase[r] == 3 and r in results]
        info["exit_codes"] = {r: p.exitcode for r, p in enumerate(procs)}
    if (hung and shutdown_timeout_s is not None and not errors and len(results) == world_size
            and all(phase[r] == 3 for r in hung)):
        hung = []  # every result is in; the ranks hung in shutdown are listed in info
    if errors:
        r = min(errors)
        others = f"; rank(s) {hung} were still running and were terminated" if hung else ""
        raise RankError(f"rank {r} of {world_size} failed{others}:\n{errors[r]}")
    if hung:
        where = ", ".join(f"rank {r} in {PHASES[phase[r]]}" for r in hung)
        raise RankTimeout(f"{len(hung)} of {world_size} rank(s) did not finish within "
                          f"{limit}: {where}; they were terminated. A rank stuck "
                          "in a collective waits for a peer: check that every rank runs the "
                          "same steps in the same order (lockstep)")
    missing = [r for r in range(world_size) if r not in results]
    if missing:
        raise RankError(f"rank(s) {missing} returned no result")
    return [pickle.loads(results[r]) for r in range(world_size)]


def _drain(q: Any, handle: Callable[[tuple], None]) -> None:
    while True:
        try:
            handle(q.get_nowait())
        except queue_mod.Empty:
            return


def _stop(procs: list) -> list[int]:
    """Terminate (then kill) ranks still alive, join every one; the ranks that had to go."""
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for r in hung:
        procs[r].terminate()
    for r in hung:
        procs[r].join(timeout=3.0)
        if procs[r].is_alive():
            procs[r].kill()
            procs[r].join(timeout=3.0)
    for p in procs:
        if p.pid is not None:
            p.join(timeout=1.0)
    return hung
