"""All the pitfalls in one run, the result ``"pitfalls"``: a failing one never hides the rest."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import torch
from labkit.measure.pitfalls.addresses import address_demo
from labkit.measure.pitfalls.common import (PITFALL_NAMES, RULES, _cleanup, _err_text,
                                            _require_cuda, _strip_paths)
from labkit.measure.pitfalls.compiled import compiled_output_overwritten
from labkit.measure.pitfalls.demos import (pitfall_autocast, pitfall_dynamic_shape,
                                           pitfall_host_sync, pitfall_input_rebound,
                                           pitfall_output_overwritten, pitfall_rng)


PITFALLS: dict[str, Callable[..., dict]] = {
    "host_sync": pitfall_host_sync,
    "dynamic_shape": pitfall_dynamic_shape,
    "output_overwritten": pitfall_output_overwritten,
    "input_rebound": pitfall_input_rebound,
    "rng": pitfall_rng,
    "autocast": pitfall_autocast,
}


def _guarded(name: str, fn: Callable[..., dict], device: str | torch.device) -> dict:
    try:
        return fn(device)
    except Exception as exc:
        _cleanup()
        return {"name": name, "rule": RULES.get(name, ""), "what": "the demonstration itself "
                "failed", "error": _err_text(exc), "fix": "", "fixed_ok": False,
                "details": {"traceback": _strip_paths(traceback.format_exc(limit=4))[-2000:]}}


def run_all_pitfalls(device: str | torch.device = "cuda", *, include_compile: bool = True) -> dict:
    """All pitfalls, the address demonstration and (optionally) the torch.compile pitfall:
    ``{"device", "torch", "pitfalls", "address_demo", "compiled"}``."""
    dev = _require_cuda(device)
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "pitfalls": [_guarded(n, PITFALLS[n], dev) for n in PITFALL_NAMES]}
    try:
        out["address_demo"] = address_demo(dev)
    except Exception as exc:
        out["address_demo"] = {"error": _err_text(exc)}
    out["compiled"] = (_guarded("output_overwritten", compiled_output_overwritten, dev)
                       if include_compile else None)
    return out
