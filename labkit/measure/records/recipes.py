"""The one registry of reference records: how each is measured (:data:`RECIPES`), or which
command makes it (:data:`MADE_BY_COMMAND`).

A :class:`Recipe` names the measuring function and holds only the parameters that differ from
the function's own defaults: the function's signature is the one place a default is stated.
:func:`default_params` resolves the whole set (the signature's defaults, then the recipe's);
that set is what a record file stores as ``params``. :mod:`labkit.measure.recorder` measures
and saves any record from here: ``python -m labkit.measure.recorder RUN_DIR NAME ...``.
"""

from __future__ import annotations

import copy
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from labkit.model import PRESETS


@dataclass(frozen=True)
class Recipe:
    """Record ``function`` (``"module:name"`` under :mod:`labkit.measure`) measured with
    ``params``: only what differs from the function's defaults; ``preset`` is its
    ``preset_name``."""

    function: str
    params: Mapping[str, Any] = field(default_factory=dict)


_SERVE = {"preset": "gpt2", "dtype": "bfloat16", "max_requests": 80, "warmup_requests": 8,
          "window_s": 0.5, "keep_timeline": False}
_SERVE_AB = {"dtype": "bfloat16", "max_requests": 80, "warmup_requests": 8, "window_s": 0.5}
_CAPPED = {"mode": "full", "capture_sizes": [1, 2, 4, 8]}
_BREAKER = {"window": 32, "threshold": 0.5, "cooldown_s": 1.0}
# notebook 12 measures these live on the GPU tier in about two minutes: the compiles dominate
# (~10 s each for small, ~15 s for gpt2), so each preset compiles at batch 1 only and gpt2 shows
# the full-cache column where small shows Inductor's kernels in labkit's capture
_ROOFLINE = {"compile_sizes": [1]}

#: record name -> how it is measured
RECIPES: dict[str, Recipe] = {
    "launch_overhead": Recipe("bench:measure_launch_overhead"),
    "decode_small": Recipe("bench:measure_decode", {"preset": "small"}),
    "decode_gpt2": Recipe("bench:measure_decode", {"preset": "gpt2"}),
    "timeline_small": Recipe("bench:measure_timeline", {"preset": "small"}),
    "pool_memory_small": Recipe("bench:measure_pool_memory", {"preset": "small"}),
    "pool_memory_gpt2": Recipe("bench:measure_pool_memory", {"preset": "gpt2"}),
    "dispatcher_small": Recipe("bench:measure_dispatcher", {"preset": "small"}),
    # the dispatcher's step over a bare replay of its own graph, by part (interleaved)
    "dispatcher_overhead": Recipe("bench:measure_dispatcher_overhead"),
    "compile_small": Recipe("bench:measure_compile", {"preset": "small"}),
    "pitfalls": Recipe("pitfalls:run_all_pitfalls"),
    "paged_gpt2": Recipe("paged:measure_paged"),
    "modes_small": Recipe("modes:measure_modes", {"preset": "small"}),
    "modes_gpt2": Recipe("modes:measure_modes", {"preset": "gpt2"}),
    "pool_overwrite": Recipe("pool_overwrite:measure_pool_overwrite"),
    "fused_gpt2": Recipe("fused_bench:measure_fused"),
    "roofline_small": Recipe("roofline:measure_roofline", {
        "preset": "small", **_ROOFLINE, "variants": [
            "eager", "graph", "fused", "compile_reduce_overhead", "compile_manual_graph"]}),
    "roofline_gpt2": Recipe("roofline:measure_roofline", {
        "preset": "gpt2", **_ROOFLINE, "variants": [
            "eager", "graph", "fused", "compile_reduce_overhead", "compile_full_cache"]}),
    "multistep_small": Recipe("roofline:measure_multistep", {"preset": "small"}),
    "multistep_gpt2": Recipe("roofline:measure_multistep", {"preset": "gpt2"}),
    "triton_small": Recipe("triton_bench:measure_triton", {"preset": "small"}),
    "triton_gpt2": Recipe("triton_bench:measure_triton"),
    "triton_gpt2_paged": Recipe("triton_bench:measure_triton", {"kv_layout": "paged"}),
    "past_launch_small": Recipe("past_launch:measure_past_launch", {"preset": "small"}),
    "past_launch_gpt2": Recipe("past_launch:measure_past_launch"),
    "persistent_stages_small": Recipe("past_launch:measure_persistent_stages",
                                      {"preset": "small"}),
    "persistent_stages_gpt2": Recipe("past_launch:measure_persistent_stages"),
    # notebook 18: what the engines shipped in 2026
    "lora_graphs_small": Recipe("lora_graphs:measure_lora_graphs"),
    "lora_graphs_gpt2": Recipe("lora_graphs:measure_lora_graphs", {"preset": "gpt2"}),
    "graph_memory_small": Recipe("graph_memory:measure_graph_memory", {"preset": "small"}),
    "graph_memory_gpt2": Recipe("graph_memory:measure_graph_memory", {"preset": "gpt2"}),
    "breakable_small": Recipe("breakable:measure_breakable", {"preset": "small"}),
    "breakable_gpt2": Recipe("breakable:measure_breakable"),
    "while_decode_small": Recipe("while_decode:measure_while_decode"),
    "while_decode_gpt2": Recipe("while_decode:measure_while_decode", {"preset": "gpt2"}),
    "mixed_small": Recipe("mixed_bench:measure_mixed", {"preset": "small"}),
    "mixed_gpt2": Recipe("mixed_bench:measure_mixed", {"preset": "gpt2"}),
    "spec_verify_gpt2": Recipe("mixed_bench:measure_verify"),
    "spec_char": Recipe("mixed_bench:measure_spec"),
    "chunked_small": Recipe("mixed_bench:measure_chunked_small"),
    "memory_budget_small": Recipe("memory_budget:measure_memory_budget", {"preset": "small"}),
    "memory_budget_gpt2": Recipe("memory_budget:measure_memory_budget", {"preset": "gpt2"}),
    "lazy_small": Recipe("memory_budget:measure_lazy"),
    "numerics_gpt2": Recipe("numerics:measure_numerics_record"),
    # serving (notebook 13, ``labkit serve --record``): the first 80 requests (3.3-4.1 s of
    # arrivals) of the shipped traces in each step mode; the bursty trace with capture sizes
    # below max_batch (graph misses under load) without and with the circuit breaker
    "serve_eager": Recipe("serve:measure_serving", {**_SERVE, "repeats": 3}),
    "serve_exact": Recipe("serve:measure_serving", {**_SERVE, "mode": "exact", "repeats": 3}),
    "serve_full": Recipe("serve:measure_serving", {
        **_SERVE, "mode": "full", "capture_sizes": [1, 2, 4, 8, 16], "repeats": 3}),
    "serve_piecewise": Recipe("serve:measure_serving", {
        **_SERVE, "mode": "piecewise", "capture_sizes": [1, 2, 4, 8, 16]}),
    "serve_capped": Recipe("serve:measure_serving", {
        **_SERVE, "trace": "synthetic_requests_bursty", **_CAPPED}),
    "serve_breaker": Recipe("serve:measure_serving", {
        **_SERVE, "trace": "synthetic_requests_bursty", **_CAPPED, "breaker": _BREAKER}),
    "serving_load_gpt2": Recipe("serve_load:measure_load_curve", {
        "rates": [20.0, 40.0, 80.0, 160.0, 320.0], "n_requests": 40,
        "capture_sizes": [1, 2, 4, 8, 16]}),
    # the interleaved serving records: arms served alternately in one process
    "serve_graphs_ab": Recipe("serve:measure_interleaved", {
        **_SERVE_AB, "arms": {"eager": {"mode": "eager"},
                              "full": {"mode": "full", "capture_sizes": [1, 2, 4, 8, 16]}}}),
    "serve_breaker_ab": Recipe("serve:measure_interleaved", {
        **_SERVE_AB, "trace": "synthetic_requests_bursty",
        "arms": {"breaker off": _CAPPED, "breaker on": {**_CAPPED, "breaker": _BREAKER}}}),
}

#: records made by a command, not by one measuring function: record name pattern -> command
MADE_BY_COMMAND: dict[str, str] = {
    "bench": "labkit bench (the summary of the decode, compile and pool records it measures)",
    "tp_allreduce": "labkit tp (two GPUs; writes tp_allreduce and tp_decode_<preset>)",
    "tp_decode_<preset>": "labkit tp (two GPUs; writes tp_allreduce and tp_decode_<preset>)",
    "serve_<name>": "labkit serve --trace TRACE --mode MODE --name NAME (a trace served once)",
}

#: the serving records ``labkit serve --record`` and notebook 13 measure, in order
SERVE_RECORDS: tuple[str, ...] = (
    "serve_eager", "serve_exact", "serve_full", "serve_piecewise", "serve_capped",
    "serve_breaker", "serving_load_gpt2", "serve_graphs_ab", "serve_breaker_ab")

#: parameters that say where or how a run is shown, not what it measures: never stored
_NOT_PARAMS = frozenset({"device", "timer", "progress", "log", "scratch"})


def recipe(name: str) -> Recipe:
    """The recipe of record ``name``. A ``<kind>_<preset>`` name without a recipe of its own
    takes its kind's recipe with that preset (``compile_gpt2`` from ``compile_small``); an
    unknown name raises, naming the known ones or the command that makes it."""
    if name in RECIPES:
        return RECIPES[name]
    stem, _, preset = name.rpartition("_")
    for other, r in RECIPES.items():
        if preset not in PRESETS:
            break
        if other.rpartition("_")[0] == stem and default_params(other).get("preset") == \
                other.rpartition("_")[2]:
            return Recipe(r.function, {**r.params, "preset": preset})
    raise KeyError(f"no recipe for record {name!r}" + (
        f": {MADE_BY_COMMAND[name]} makes it" if name in MADE_BY_COMMAND else
        f"; known: {', '.join(sorted(RECIPES))}"))


def measure_function(name: str) -> Callable[..., dict]:
    """The function that measures record ``name`` (imported on first use)."""
    module, func = recipe(name).function.split(":")
    return getattr(importlib.import_module(f"labkit.measure.{module}"), func)  # type: ignore[no-any-return]


def _jsonable(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else copy.deepcopy(v)


def default_params(name: str, **overrides: Any) -> dict[str, Any]:
    """The whole parameter set of record ``name`` (a fresh copy): the measuring function's
    defaults, then the recipe's, then ``overrides`` (``preset`` for ``preset_name``); an
    override the function does not take raises, naming those it takes."""
    r = recipe(name)
    sig = inspect.signature(measure_function(name)).parameters
    params: dict[str, Any] = {}
    for p in sig.values():
        if p.name in _NOT_PARAMS or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        key = "preset" if p.name == "preset_name" else p.name
        if p.default is not p.empty:
            params[key] = _jsonable(p.default)
    takes = sorted({*params, *("preset" if n == "preset_name" else n for n in sig
                              if n not in _NOT_PARAMS)})
    for given in (r.params, overrides):
        unknown = [k for k in given if k not in takes]
        if unknown:
            raise TypeError(f"record {name!r} ({r.function}) takes no parameter "
                            f"{', '.join(unknown)}; it takes {', '.join(takes)}")
        params.update({k: _jsonable(v) for k, v in given.items()})
    missing = [k for k in takes if k not in params]
    if missing:
        raise TypeError(f"record {name!r} needs {', '.join(missing)}: give it to the recipe")
    return params


def measure_kwargs(params: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of the measuring function for recorded ``params`` (``preset``
    becomes ``preset_name``)."""
    out = copy.deepcopy(dict(params))
    if "preset" in out:
        out["preset_name"] = out.pop("preset")
    return out
