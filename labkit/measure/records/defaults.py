"""Default measurement parameters of the reference records (:data:`DEFAULTS`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping

_POOL_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
_SERVE = {"preset": "gpt2", "trace": "synthetic_requests_poisson", "dtype": "bfloat16",
          "max_batch": 16, "max_requests": 80, "seed": 0, "clock": "real",
          "warmup_requests": 8, "window_s": 0.5, "keep_timeline": False}
_DECODE = {"batch_sizes": [1, 8, 64], "methods": ["eager", "graph"], "dtype": "bfloat16",
           "repeats": 30}

# notebook 12 measures these live on the GPU tier in about two minutes: the compiles dominate
# (~10 s each for small, ~15 s for gpt2), so each preset compiles at batch 1 only and gpt2 shows
# the full-cache column where small shows Inductor's kernels in labkit's capture
_ROOFLINE = {"batch_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256], "compile_sizes": [1],
             "context": 128, "max_seq": 256, "dtype": "bfloat16", "repeats": 20}
_MULTISTEP = {"batch_sizes": [1, 8, 64], "n_steps": 8, "max_seq": 256, "dtype": "bfloat16",
              "repeats": 20}

#: record name -> (measurement function, parameters as recorded in the file's ``params``);
#: the function is a name in :mod:`labkit.measure.bench` or in the ``labkit.measure`` module
#: of its record (``pitfalls``, ``paged``, ``pool_overwrite``, ``fused_bench``, ``roofline``,
#: ``serve``, ``serve_load``); ``preset`` is passed as the function's ``preset_name``.
DEFAULTS: dict[str, tuple[str, dict]] = {
    "launch_overhead": ("measure_launch_overhead",
                        {"numels": [1, 2**10, 2**14, 2**16, 2**18, 2**20, 2**22, 2**24],
                         "n_kernels": 200, "repeats": 50}),
    "decode_small": ("measure_decode", {"preset": "small", **_DECODE}),
    "decode_gpt2": ("measure_decode", {"preset": "gpt2", **_DECODE}),
    "timeline_small": ("measure_timeline", {"preset": "small", "batch_size": 1, "steps": 3}),
    "pool_memory_small": ("measure_pool_memory",
                          {"preset": "small", "sizes": _POOL_SIZES, "dtype": "bfloat16"}),
    "pool_memory_gpt2": ("measure_pool_memory",
                         {"preset": "gpt2", "sizes": _POOL_SIZES, "dtype": "bfloat16"}),
    "dispatcher_small": ("measure_dispatcher",
                         {"preset": "small", "capture_sizes": [1, 2, 4, 8, 16, 32, 64, 128],
                          "batch_sizes": [1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128,
                                          129, 160],
                          "dtype": "bfloat16"}),
    # the dispatcher's step over a bare replay of its own graph, by part (interleaved)
    "dispatcher_overhead": ("measure_dispatcher_overhead",
                            {"presets": ["small", "gpt2"], "batch_sizes": [1, 8, 64],
                             "dtype": "bfloat16", "repeats": 15, "inner": 50}),
    "compile_small": ("measure_compile",
                      {"preset": "small", "batch_sizes": [1, 8], "dtype": "bfloat16"}),
    "pitfalls": ("run_all_pitfalls", {"include_compile": True}),
    "paged_gpt2": ("measure_paged", {"preset": "gpt2", "batch_sizes": [1, 8, 64],
                                     "max_seqs": [256, 1024], "block_size": 16,
                                     "dtype": "bfloat16", "repeats": 30}),
    "modes_small": ("measure_modes", {"preset": "small", "batch_sizes": [1, 8, 64],
                                      "dtype": "bfloat16", "repeats": 20}),
    "modes_gpt2": ("measure_modes", {"preset": "gpt2", "batch_sizes": [1, 8, 64],
                                     "dtype": "bfloat16", "repeats": 20}),
    "pool_overwrite": ("measure_pool_overwrite", {"numel": 1 << 20}),
    "fused_gpt2": ("measure_fused", {"preset": "gpt2", "batch_sizes": [1, 8, 64],
                                     "dtype": "bfloat16", "repeats": 30}),
    "roofline_small": ("measure_roofline", {"preset": "small", **_ROOFLINE, "variants": [
        "eager", "graph", "fused", "compile_reduce_overhead", "compile_manual_graph"]}),
    "roofline_gpt2": ("measure_roofline", {"preset": "gpt2", **_ROOFLINE, "variants": [
        "eager", "graph", "fused", "compile_reduce_overhead", "compile_full_cache"]}),
    "multistep_small": ("measure_multistep", {"preset": "small", **_MULTISTEP}),
    "multistep_gpt2": ("measure_multistep", {"preset": "gpt2", **_MULTISTEP}),
    # serving (notebook 13, ``labkit serve --record``): the first 80 requests (3.3-4.1 s of
    # arrivals) of the shipped traces in each step mode; the bursty trace with capture sizes
    # below max_batch (graph misses under load) without and with the circuit breaker
    "serve_eager": ("measure_serving", {**_SERVE, "mode": "eager", "repeats": 3}),
    "serve_exact": ("measure_serving", {**_SERVE, "mode": "exact", "repeats": 3}),
    "serve_full": ("measure_serving", {**_SERVE, "mode": "full",
                                       "capture_sizes": [1, 2, 4, 8, 16], "repeats": 3}),
    "serve_piecewise": ("measure_serving", {**_SERVE, "mode": "piecewise",
                                            "capture_sizes": [1, 2, 4, 8, 16], "repeats": 1}),
    "serve_capped": ("measure_serving", {**_SERVE, "trace": "synthetic_requests_bursty",
                                         "mode": "full", "capture_sizes": [1, 2, 4, 8],
                                         "repeats": 1}),
    "serve_breaker": ("measure_serving", {**_SERVE, "trace": "synthetic_requests_bursty",
                                          "mode": "full", "capture_sizes": [1, 2, 4, 8],
                                          "repeats": 1, "breaker": {"window": 32,
                                                                    "threshold": 0.5,
                                                                    "cooldown_s": 1.0}}),
    "serving_load_gpt2": ("measure_load_curve", {"preset": "gpt2", "modes": ["eager", "full"],
                                                 "rates": [20.0, 40.0, 80.0, 160.0, 320.0],
                                                 "n_requests": 40, "dtype": "bfloat16",
                                                 "max_batch": 16,
                                                 "capture_sizes": [1, 2, 4, 8, 16],
                                                 "seed": 0, "trace_seed": 7,
                                                 "warmup_requests": 8}),
}

#: the serving records ``labkit serve --record`` measures, in order
SERVE_RECORDS: tuple[str, ...] = ("serve_eager", "serve_exact", "serve_full",
                                  "serve_piecewise", "serve_capped", "serve_breaker",
                                  "serving_load_gpt2")


def default_params(name: str) -> dict:
    """The parameters record ``name`` is measured with by default (a fresh copy)."""
    if name not in DEFAULTS:
        raise KeyError(f"no default parameters for record {name!r}; known: {sorted(DEFAULTS)}")
    return copy.deepcopy(DEFAULTS[name][1])


def measure_kwargs(params: Mapping) -> dict:
    """Keyword arguments of the measurement function for recorded ``params``
    (``preset`` becomes ``preset_name``)."""
    out = copy.deepcopy(dict(params))
    if "preset" in out:
        out["preset_name"] = out.pop("preset")
    return out
