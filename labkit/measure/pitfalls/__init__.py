"""The classic CUDA-graph pitfalls, each demonstrated live on a CUDA device with its fix.

Every ``pitfall_*`` function breaks one rule on purpose, records what really happened (the
error text PyTorch or :mod:`labkit.graphs` raised, or the wrong value that came back), then
applies the fix and checks it. Each returns a JSON-ready dict::

    {"name": str, "what": str, "error": str, "fix": str, "fixed_ok": bool,
     "rule": str, "details": {...}}

``error`` is the real error text or a sentence stating the observed wrong value (with the
numbers in ``details``); ``fixed_ok`` is True when the fixed version gave the right result.

:func:`run_all_pitfalls` runs them all plus :func:`address_demo` (the data pointers a graph
writes to) and is recorded as the result ``"pitfalls"``.

Without CUDA nothing here can run live. Reading a record (tables, plain-text reports) and the
notebook's quiz are in :mod:`labkit.teach.lessons.pitfalls`; a CPU stand-in for a captured graph
is :class:`labkit.teach.simulated.SimulatedGraph`.

One module per job, every name imported from ``labkit.measure.pitfalls``:
:mod:`~labkit.measure.pitfalls.common` (:data:`RULES`, :data:`PITFALL_NAMES`, the error text
and clean-up helpers, :func:`raw_capture_error`), :mod:`~labkit.measure.pitfalls.demos` (the
six ``pitfall_*`` functions), :mod:`~labkit.measure.pitfalls.compiled` (the torch.compile
case), :mod:`~labkit.measure.pitfalls.addresses` (:func:`address_demo`,
:func:`kernel_pointer_args`) and :mod:`~labkit.measure.pitfalls.runner` (:data:`PITFALLS`,
:func:`run_all_pitfalls`).
"""

from __future__ import annotations

from labkit.measure.pitfalls.addresses import address_demo, kernel_pointer_args
from labkit.measure.pitfalls.common import (PITFALL_NAMES, RULES, _err_text, _strip_paths,
                                            raw_capture_error)
from labkit.measure.pitfalls.compiled import compiled_output_overwritten
from labkit.measure.pitfalls.demos import (pitfall_autocast, pitfall_dynamic_shape,
                                           pitfall_host_sync, pitfall_input_rebound,
                                           pitfall_output_overwritten, pitfall_rng)
from labkit.measure.pitfalls.runner import PITFALLS, run_all_pitfalls

__all__ = [
    "PITFALLS", "PITFALL_NAMES", "RULES", "address_demo", "compiled_output_overwritten",
    "kernel_pointer_args", "pitfall_autocast", "pitfall_dynamic_shape", "pitfall_host_sync",
    "pitfall_input_rebound", "pitfall_output_overwritten", "pitfall_rng", "raw_capture_error",
    "run_all_pitfalls",
    # error-text helpers, used by tests
    "_err_text", "_strip_paths",
]
