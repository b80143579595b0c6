"""The output-overwritten pitfall under ``torch.compile(mode="reduce-overhead")`` (CUDA
Graph Trees)."""

from __future__ import annotations

import torch
from labkit.measure.pitfalls.common import RULES, _cleanup, _err_text, _require_cuda


def compiled_output_overwritten(device: str | torch.device = "cuda") -> dict:
    """The output-overwritten pitfall under CUDA Graph Trees: an output read after a later
    call, straight after compiling (the liveness check raises) and after warm-up calls."""
    dev = _require_cuda(device)
    import torch._dynamo

    def f(t: torch.Tensor) -> torch.Tensor:
        return t * 2 + 1

    x = torch.arange(4.0, device=dev)
    expected = (x * 2 + 1).tolist()

    def attempt(warm_calls: int) -> tuple[str | None, list | None]:
        torch._dynamo.reset()
        cf = torch.compile(f, mode="reduce-overhead")
        for _ in range(warm_calls):
            cf(x)
        first = cf(x)
        cf(x + 10)                          # a later run reuses the pool's output memory
        try:
            return None, first.tolist()     # reading the first output now
        except Exception as exc:
            return _err_text(exc), None

    err_early, val_early = attempt(0)
    err_warm, val_warm = attempt(3)
    # fix 1: clone outside the compiled function
    torch._dynamo.reset()
    cf = torch.compile(f, mode="reduce-overhead")
    for _ in range(3):
        cf(x)
    kept = cf(x).clone()
    cf(x + 10)
    clone_ok = kept.tolist() == expected
    # fix 2 (PyTorch's message): mark each step; consume outputs inside their step
    mark = getattr(torch.compiler, "cudagraph_mark_step_begin", None)
    mark_ok = None
    if mark is not None:
        mark()
        a_vals = cf(x).tolist()
        mark()
        cf(x + 10)
        mark_ok = a_vals == expected
    del cf
    torch._dynamo.reset()
    _cleanup()
    if err_early is not None:
        error = err_early
    else:
        error = f"no error; the old output read {val_early} (expected {expected})"
    return {"name": "compiled_output_overwritten",
            "rule": RULES["output_overwritten"],
            "what": "torch.compile(mode='reduce-overhead') replays CUDA graphs from one memory "
                    "pool per device; an output of one call read after the next call",
            "error": error,
            "fix": "clone the output outside the compiled function (out = f(x).clone()) or "
                   "consume it before the next call; torch.compiler.cudagraph_mark_step_begin() "
                   "marks where a new step (and the overwriting) begins",
            "fixed_ok": bool(clone_ok),
            "details": {"expected": expected,
                        "raised_right_after_compile": err_early is not None,
                        "raised_after_warmup": err_warm is not None,
                        "error_after_warmup": err_warm,
                        "old_output_after_warmup_read": val_warm,
                        "clone_kept_value": clone_ok, "mark_step_begin_ok": mark_ok}}
