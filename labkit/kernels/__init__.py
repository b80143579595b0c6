"""Triton kernels of the Triton decode step (:mod:`labkit.kernels.step`), and their loader.

``matvec``, ``attention`` and ``common`` import ``triton``, so :func:`load` imports them on first
use (labkit runs without Triton: :func:`unavailable_reason`). Triton decorates its functions
for the GPU or, with ``TRITON_INTERPRET=1`` set before anything imports triton (``import
torch._dynamo`` does), for its CPU interpreter, once per process (:func:`interpreted`).
"""

from __future__ import annotations

import importlib
import types

#: the kernel modules :func:`load` imports, in order
KERNEL_MODULES = ("common", "matvec", "attention", "persistent")


def unavailable_reason() -> str | None:
    """Why the Triton kernels cannot run here (``None``: Triton imports)."""
    try:
        importlib.import_module("triton.language")
    except Exception as exc:
        return (f"Triton is not importable ({type(exc).__name__}: {exc}); it ships with the "
                "CUDA builds of torch on Linux, or `pip install triton`")
    return None


def load() -> types.SimpleNamespace:
    """The kernel modules in one namespace (``load().matvec.ln_qkv_kernel``); ``RuntimeError``
    without Triton, or when ``TRITON_INTERPRET`` changed after ``triton`` was imported."""
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
    mods = {name: importlib.import_module(f"{__name__}.{name}") for name in KERNEL_MODULES}
    tl = importlib.import_module("triton.language")
    ours, theirs = _is_interpreted(mods["matvec"].ln_qkv_kernel), _is_interpreted(tl.zeros)
    if ours != theirs:
        raise RuntimeError(
            f"labkit's Triton kernels were decorated for the "
            f"{'interpreter' if ours else 'GPU'} but Triton's library for the "
            f"{'interpreter' if theirs else 'GPU'}: TRITON_INTERPRET changed after triton was "
            "imported. Set it (or unset it) before anything imports triton, in a fresh process")
    return types.SimpleNamespace(**mods)


def interpreted() -> bool:
    """Whether the loaded kernels run in Triton's interpreter (else compiled for the GPU)."""
    return _is_interpreted(load().matvec.ln_qkv_kernel)


def _is_interpreted(fn: object) -> bool:
    return type(fn).__name__ == "InterpretedFunction"
