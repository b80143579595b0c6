"""What one rank collects and how the ranks agree (:class:`_Rank`), and the helpers every part
uses."""

from __future__ import annotations

import contextlib
import os
import pickle
import traceback
from typing import Any
from collections.abc import Callable

import torch
import torch.distributed as dist

from labkit.distributed.launch import rank_device
from labkit.timing import Stats, time_cuda, time_host


def _noop(x: torch.Tensor) -> torch.Tensor:
    """The all-reduce replaced by nothing: the step's compute alone."""
    return x


def _say(rank: int, text: str) -> None:
    if rank == 0:
        print(f"[labkit tp rank 0] {text}", flush=True)


def _time(fn: Callable[[], object], device: torch.device, repeats: int, inner: int) -> Stats:
    """GPU time per call (CUDA events) on CUDA, host time per call on CPU."""
    if device.type == "cuda":
        return time_cuda(fn, warmup=3, repeats=repeats, inner=inner)
    return time_host(fn, warmup=1, repeats=repeats, inner=inner)


def _reason(exc: BaseException) -> str:
    """One line for the record, the last frames for the log."""
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return f"{type(exc).__name__}: {exc}".strip()[:600] + " | " + "".join(tb[-3:])[-900:]


class _Rank:
    """What one rank collects: times, checks, errors; agreement over a gloo control group."""

    def __init__(self, rank: int, world_size: int, spec: dict) -> None:
        self.rank, self.world_size, self.spec = rank, world_size, spec
        self.device = rank_device()
        self.backend = dist.get_backend()
        self.ctrl = dist.new_group(backend="gloo") if self.backend != "gloo" else None
        self.symm_handles: list[Any] = []
        self.out: dict[str, Any] = {"rank": rank, "world_size": world_size,
                                    "backend": self.backend, "times": {}, "checks": {},
                                    "errors": {}, "skipped": {}, "parts_s": {},
                                    "notes": []}
        self.out["device"] = (torch.cuda.get_device_name(self.device)
                              if self.device.type == "cuda" else "cpu")

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (a gloo all-gather: works while NCCL is wedged or busy)."""
        got: list[Any] = [None] * self.world_size
        dist.all_gather_object(got, value, group=self.ctrl)
        return got

    def barrier(self) -> None:
        """Line the ranks up on the host (between attempts only, never inside one)."""
        dist.barrier(group=self.ctrl)

    def attempt(self, key: str, fn: Callable[[], Any]) -> Any:
        """``fn()``; an exception is recorded as ``errors[key]`` (``None`` returned). Every
        rank then learns whether any rank failed: a failure elsewhere is recorded too."""
        value, ok = None, True
        try:
            value = fn()
        except Exception as exc:
            ok = False
            self.out["errors"][key] = _reason(exc)
            _say(self.rank, f"{key} failed: {type(exc).__name__}: {exc}")
            if self.device.type == "cuda":
                with contextlib.suppress(Exception):
                    torch.cuda.synchronize()
        flags = [bool(f) for f in self.gather(ok)]
        if ok and not all(flags):
            bad = [r for r, f in enumerate(flags) if not f]
            self.out["errors"][key] = f"failed on rank(s) {bad}"
            value = None
        return value

    def save_partial(self) -> None:
        path = self.spec.get("partial")
        if self.rank != 0 or not path:
            return
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(self.out, f)
        os.replace(tmp, path)
