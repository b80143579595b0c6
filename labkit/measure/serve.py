"""Serve a request trace on the tiny GPT in one step mode and return a ``serve_<name>`` record.

:func:`measure_serving` builds the model and the step function (:mod:`labkit.serving`), runs
the trace through the continuous-batching engine on a real or simulated clock, and returns the
record's data: every request's token times, every decode step, the metrics of
:func:`labkit.measure.serving_metrics.run_metrics` and the step series in windows.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import torch

from labkit.checks import as_int
from labkit.measure.serving_metrics import run_metrics, step_windows
from labkit.model import GPTConfig, build_model, preset
from labkit.serving import (
    STEP_MODES, CircuitBreaker, RealClock, ServingEngine, SimClock, breaker_settings,
    eager_step, make_step_fn,
)
from labkit.traces import TraceRequest, load_request_trace

CLOCKS: tuple[str, ...] = ("real", "sim")


def check_serving(preset_name: str, mode: str, *, clock: str = "real", dtype: str = "float32",
                  max_batch: int = 16, kv_layout: str = "slot", num_blocks: int | None = None,
                  breaker: dict | None = None) -> GPTConfig:
    """Check the settings of :func:`measure_serving` before anything runs (a bad one raises
    naming it); returns the model's configuration."""
    if mode not in STEP_MODES:
        raise ValueError(f"mode {mode!r} is not a step mode; use one of {list(STEP_MODES)}")
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r} is not known; use one of {list(CLOCKS)}")
    if breaker is not None:
        if mode in ("eager", "none"):
            raise ValueError(f"breaker: a circuit breaker falls back from graphs to eager; "
                             f"mode {mode!r} has no graphs, use full, piecewise or exact")
        breaker_settings(**breaker)
    return preset(preset_name, max_batch=max_batch, dtype=dtype, kv_layout=kv_layout,
                  num_blocks=num_blocks)


def measure_serving(preset_name: str = "char", trace: str | os.PathLike[str] | Sequence[
                        TraceRequest] = "synthetic_requests_poisson", mode: str = "eager", *,
                    device: str | None = None, dtype: str = "float32", max_batch: int = 16,
                    kv_layout: str = "slot", num_blocks: int | None = None,
                    capture_sizes: Sequence[int] | None = None, seed: int = 0,
                    clock: str = "real", decode_ms: float = 10.0,
                    max_requests: int | None = None, window_s: float = 1.0,
                    breaker: dict | None = None,
                    progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run ``trace`` (a name in ``data/traces``, a CSV path or a list of
    :class:`TraceRequest`) in step ``mode`` (:data:`labkit.serving.STEP_MODES`) and return the
    data of a ``serve_<name>`` record. ``clock='sim'`` charges ``decode_ms`` per decode step
    (prefill free): a reproducible schedule; ``'real'`` measures. ``breaker`` (``window``,
    ``threshold``, ``cooldown_s``) wraps the step function in a :class:`CircuitBreaker`."""
    cfg = check_serving(preset_name, mode, clock=clock, dtype=dtype, max_batch=max_batch,
                        kv_layout=kv_layout, num_blocks=num_blocks, breaker=breaker)
    reqs = list(trace) if isinstance(trace, (list, tuple)) else load_request_trace(trace)
    if max_requests is not None:
        reqs = reqs[:as_int(max_requests, "max_requests", minimum=1,
                            fix="serve at least one request")]
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model(cfg, dev, seed=seed)
    clk = SimClock(decode_ms / 1e3) if clock == "sim" else RealClock(model.device)
    step = make_step_fn(model, mode, capture_sizes)
    if breaker is not None:
        step = CircuitBreaker(step, eager_step(model), clk, **breaker)
    try:
        run = ServingEngine(model, step, clock=clk, seed=seed).run(reqs, progress=progress)
    finally:
        release = getattr(getattr(step, "graph_fn", step), "release", None)
        if callable(release):
            release()
    data = run.to_data()
    trace_name = trace if isinstance(trace, str) else getattr(trace, "name", "custom")
    return {"mode": mode, "trace": str(trace_name), "clock": clock, "preset": preset_name,
            "device": str(model.device), "dtype": dtype, "max_batch": max_batch,
            "kv_layout": kv_layout, "seed": seed, **data,
            "metrics": run_metrics(data["requests"], data["steps"]),
            "windows": step_windows(data["steps"], window_s),
            "breaker_trips_s": [t - run.clock_start for t in getattr(step, "trips", [])]}
