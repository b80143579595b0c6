"""The classic CUDA-graph pitfalls, each demonstrated live on a CUDA device with its fix.

Every ``pitfall_*`` function breaks one rule on purpose, records what happened, applies the
fix and checks it; :func:`run_all_pitfalls` runs them all plus :func:`address_demo` (the
record ``"pitfalls"``).
"""

from __future__ import annotations

from labkit.measure.pitfalls.addresses import address_demo
from labkit.measure.pitfalls.common import PITFALL_NAMES, RULES, _err_text, _strip_paths
from labkit.measure.pitfalls.compiled import compiled_output_overwritten
from labkit.measure.pitfalls.demos import (pitfall_autocast, pitfall_dynamic_shape,
                                           pitfall_host_sync, pitfall_input_rebound,
                                           pitfall_output_overwritten, pitfall_rng)
from labkit.measure.pitfalls.runner import PITFALLS, run_all_pitfalls

__all__ = [
    "PITFALLS", "PITFALL_NAMES", "RULES", "address_demo", "compiled_output_overwritten",
    "pitfall_autocast", "pitfall_dynamic_shape", "pitfall_host_sync", "pitfall_input_rebound",
    "pitfall_output_overwritten", "pitfall_rng", "run_all_pitfalls", "_err_text", "_strip_paths",
]
