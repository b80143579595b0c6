"""Triton kernels of the Triton decode step (:mod:`labkit.kernels.step`), and their loader.

* :mod:`labkit.kernels.matvec` -- the matrix kernels (LayerNorm folded into the projection
  that follows it; bias, GELU, residual add or cache write in the epilogue);
* :mod:`labkit.kernels.attention` -- split (FlashDecoding-style) attention over the cache in
  place, and the split combine folded into the output projection;
* :mod:`labkit.kernels.common` -- the device helpers they share;
* :mod:`labkit.roofline.kernel_plan` -- the kernel table: what each kernel fuses, launches per step,
  bytes it must move (plain arithmetic, no Triton needed);
* :mod:`labkit.kernels.aot` -- every launch of a step compiled for sm_90 without a GPU, with
  each kernel's registers and spills as ptxas reports them.

This package imports without Triton; the three kernel modules import ``triton`` at their
top, so :func:`load` imports them on first use (labkit, and every notebook, still runs
where Triton is missing: :func:`unavailable_reason` says why).

GPU or interpreter: Triton decides when ``@triton.jit`` runs, from ``TRITON_INTERPRET``,
and its own library (``tl.zeros``, ``tl.sum``, ...) is decorated when ``triton`` is first
imported. So the mode belongs to the process: set ``TRITON_INTERPRET=1`` before anything
imports ``triton`` (``import torch._dynamo`` does) to run the kernels on CPU tensors in the
interpreter; leave it unset to compile them for the GPU. :func:`interpreted` says which mode
the loaded kernels are in.
"""

from __future__ import annotations

import importlib
import types

#: the kernel modules :func:`load` imports, in order
KERNEL_MODULES = ("common", "matvec", "attention")


def unavailable_reason() -> str | None:
    """Why the Triton kernels cannot run here (``None``: Triton imports)."""
    try:
        importlib.import_module("triton.language")
    except Exception as exc:
        return (f"Triton is not importable ({type(exc).__name__}: {exc}); it ships with the "
                "CUDA builds of torch on Linux, or `pip install triton`")
    return None


def load() -> types.SimpleNamespace:
    """The kernel modules, as attributes of one namespace (``load().matvec.ln_qkv_kernel``).
    Raises ``RuntimeError`` when Triton is not importable, or when the kernels and Triton's
    own library were decorated in different modes (``TRITON_INTERPRET`` changed after
    ``triton`` was imported)."""
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
    """Whether the loaded kernels run in Triton's interpreter (``TRITON_INTERPRET=1`` when
    they were imported) rather than compiled for the GPU."""
    return _is_interpreted(load().matvec.ln_qkv_kernel)


def _is_interpreted(fn: object) -> bool:
    return type(fn).__name__ == "InterpretedFunction"
