"""The rules the pitfalls break and the helpers every demonstration shares."""

from __future__ import annotations

import gc
import re
from typing import Any
from collections.abc import Callable

import torch

from labkit.graphs import CaptureError, capture_callable

# the rules the pitfalls break, by key; the quiz in labkit.teach.pitfalls uses the keys
RULES: dict[str, str] = {
    "host_sync": "no host synchronisation inside the captured code",
    "dynamic_shape": "every shape is fixed at capture; no data-dependent shapes",
    "output_overwritten": "a graph's output is a static buffer: the next replay overwrites it",
    "input_rebound": "new inputs are copied INTO the captured input tensors, never rebound",
    "rng": "only device-side randomness is redrawn at replay; host randomness is baked in",
    "autocast": "a cast made before capture is not redone at replay: autocast's weight cache "
                "bakes the warm-up's copy into the graph",
}

PITFALL_NAMES = ("host_sync", "dynamic_shape", "output_overwritten", "input_rebound", "rng",
                 "autocast")


def _require_cuda(device: str | torch.device, what: str = "this pitfall",
                  record: str = "pitfalls", helper: str = "measure_or_reference") -> torch.device:
    """``device`` as a CUDA device; no CUDA GPU raises naming the recorded reference."""
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(
            f"{what} needs a CUDA GPU (device {str(device)!r}, torch.cuda.is_available() is "
            f"{torch.cuda.is_available()}): graph pools exist only on CUDA; on a CPU load the "
            f"recorded {record!r} reference instead (labkit.teach.notebook.{helper})")
    return dev


def _err_text(exc: BaseException, limit: int = 1200) -> str:
    """``Type: message`` of an exception and those it was raised during (C++ traces cut)."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        chain.append(e)
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    text = "\n  then: ".join(f"{type(e).__name__}: {e}" for e in reversed(chain))
    boilerplate = ("frame #", "Exception raised from", "Search for `cuda", "CUDA kernel errors "
                   "might", "For debugging consider", "Compile with `TORCH_USE_CUDA_DSA`")
    lines = [ln for ln in text.splitlines() if ln.strip()
             and not ln.lstrip().startswith(boilerplate)]
    text = _strip_paths("\n".join(lines).strip())
    return text if len(text) <= limit else text[:limit] + " ..."


_PATH_RE = re.compile(r"(?:[A-Za-z]:)?(?:[/\\][\w.\-]+)+[/\\]([\w.\-]+\.pyi?)")


def _strip_paths(text: str) -> str:
    """Absolute file paths in an error text replaced by the file's name."""
    return _PATH_RE.sub(r"\1", text)


def _cleanup() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _device_ok(device: torch.device) -> bool:
    """True when the device still runs work after a failed capture."""
    try:
        t = torch.ones(4, device=device)
        return float((t + 1).sum().item()) == 8.0
    except Exception:
        return False


def labkit_capture_error(fn: Callable[..., Any], *inputs: torch.Tensor) -> tuple[str, str | None]:
    """``(message, class name)`` of the :class:`~labkit.graphs.CaptureError` a labkit
    capture of ``fn(*inputs)`` raises (class ``None`` if none)."""
    try:
        capture_callable(fn, *inputs)
        error, err_class = "no error (unexpected: the capture went through)", None
    except CaptureError as exc:
        error, err_class = str(exc), type(exc).__name__
    _cleanup()
    return error, err_class


def raw_capture_error(fn: Callable[..., Any], *inputs: torch.Tensor) -> str | None:
    """The error text of a plain ``torch.cuda.graph`` capture of ``fn(*inputs)`` (``None``:
    it went through)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # eager warm-up outside capture, as the docs say
        fn(*inputs)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    err = None
    try:
        with torch.cuda.graph(graph, stream=stream):
            fn(*inputs)
    except Exception as exc:
        err = _err_text(exc)
    del graph
    try:
        torch.cuda.synchronize()
    except Exception as exc:
        err = (err or "") + f"\n(after the failed capture: {_err_text(exc)})"
    _cleanup()
    return err


def _result(name: str, what: str, error: str, fix: str, fixed_ok: bool, **details: Any) -> dict:
    return {"name": name, "rule": RULES[name], "what": what, "error": error, "fix": fix,
            "fixed_ok": bool(fixed_ok), "details": details}
