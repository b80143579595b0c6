"""Serve a request trace on the tiny GPT in one step mode and return a ``serve_<name>`` record.

:func:`measure_serving` builds the model and the step function (:mod:`labkit.serving`), runs
the trace through the continuous-batching engine on a real or simulated clock, and returns the
record's data: every request's token times, every decode step, the metrics of
:func:`labkit.measure.serving_metrics.run_metrics` and the step series in windows.
"""

from __future__ import annotations

import os
import statistics
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
                    breaker: dict | None = None, repeats: int = 1, warmup_requests: int = 0,
                    keep_timeline: bool = True, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run ``trace`` (a name in ``data/traces``, a CSV path or a list of
    :class:`TraceRequest`) in step ``mode`` (:data:`labkit.serving.STEP_MODES`) and return the
    data of a ``serve_<name>`` record. ``clock='sim'`` charges ``decode_ms`` per decode step
    (prefill free): a reproducible schedule; ``'real'`` measures. ``breaker`` (``window``,
    ``threshold``, ``cooldown_s``) wraps the step function in a :class:`CircuitBreaker`.

    The model is built and the graphs captured once; ``warmup_requests`` first requests are
    served once unrecorded (lazy CUDA and cuBLAS set-up), then the trace is served
    ``repeats`` times. The record keeps the first recorded run's requests and steps, every
    run's metrics in ``repeats`` and their spread (min, median, max) in ``spread``.
    ``keep_timeline=False`` leaves the per-token and per-step lists out (``requests`` and
    ``steps`` empty; a small reference file) and keeps each request's TTFT, TPOT and E2EL in
    ``per_request`` (ms) besides the metrics and the windows."""
    cfg = check_serving(preset_name, mode, clock=clock, dtype=dtype, max_batch=max_batch,
                        kv_layout=kv_layout, num_blocks=num_blocks, breaker=breaker)
    repeats = as_int(repeats, "repeats", minimum=1, fix="serve the trace at least once")
    warmup_requests = as_int(warmup_requests, "warmup_requests", minimum=0,
                             fix="give 0 (no warm-up) or more requests")
    reqs = list(trace) if isinstance(trace, (list, tuple)) else load_request_trace(trace)
    if max_requests is not None:
        reqs = reqs[:as_int(max_requests, "max_requests", minimum=1,
                            fix="serve at least one request")]
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model(cfg, dev, seed=seed)
    graph_step = make_step_fn(model, mode, capture_sizes)
    runs, trips = [], []
    try:
        if warmup_requests:
            warm = [TraceRequest(0.0, r.prompt_len, r.output_len)
                    for r in reqs[:warmup_requests]]
            ServingEngine(model, graph_step, clock=SimClock(0.0), seed=seed).run(warm)
        for k in range(repeats):
            clk = SimClock(decode_ms / 1e3) if clock == "sim" else RealClock(model.device)
            step = graph_step
            if breaker is not None:
                step = CircuitBreaker(graph_step, eager_step(model), clk, **breaker)
            run = ServingEngine(model, step, clock=clk, seed=seed).run(
                reqs, progress=progress if k == 0 else None)
            runs.append(run)
            trips.append([t - run.clock_start for t in getattr(step, "trips", [])])
    finally:
        release = getattr(graph_step, "release", None)
        if callable(release):
            release()
    data = runs[0].to_data()
    if clock == "real":  # microseconds are plenty; keeps a record file small
        data = round_times(data)
    every = [run_metrics(d["requests"], d["steps"]) for d in (r.to_data() for r in runs)]
    trace_name = trace if isinstance(trace, str) else getattr(trace, "name", "custom")
    out = {"mode": mode, "trace": str(trace_name), "clock": clock, "preset": preset_name,
           "device": str(model.device), "dtype": dtype, "max_batch": max_batch,
           "kv_layout": kv_layout, "seed": seed, "breaker": breaker,
           "capture_sizes": None if capture_sizes is None else list(capture_sizes), **data,
           "metrics": run_metrics(data["requests"], data["steps"]),
           "windows": step_windows(data["steps"], window_s),
           "breaker_trips_s": trips[0], "repeats": every, "spread": spread(every)}
    return out if keep_timeline else drop_timeline(out)


def drop_timeline(data: dict[str, Any]) -> dict[str, Any]:
    """A serve record's data without its per-token and per-step lists (``requests`` and
    ``steps`` emptied; each request's TTFT, TPOT and E2EL kept in ``per_request``, ms): what
    ``keep_timeline=False`` stores. The metrics, windows and repeats were computed from the
    full lists and stay as they are. Returns a new dict; ``data`` is not changed."""
    if not isinstance(data, dict) or not isinstance(data.get("requests"), list):
        raise ValueError("drop_timeline needs the data of a serve record (a dict with a "
                         "'requests' list); load the file with labkit.measure.results.load_result")
    if not data["requests"] and "per_request" in data:
        return dict(data)  # already without its timeline
    out = dict(data)
    out["per_request"] = per_request_ms(data["requests"])
    out["requests"], out["steps"] = [], []
    return out


def per_request_ms(requests: Sequence[dict], digits: int = 3) -> dict[str, list[float | None]]:
    """Each request's ``ttft``, ``tpot`` (``None`` for a one-token request) and ``e2el`` in
    milliseconds, in trace order (requests without a token are left out)."""
    out: dict[str, list[float | None]] = {"ttft": [], "tpot": [], "e2el": []}
    for r in requests:
        times, a = r["token_times_s"], r["arrival_s"]
        if not times:
            continue
        out["ttft"].append(round((times[0] - a) * 1e3, digits))
        out["e2el"].append(round((times[-1] - a) * 1e3, digits))
        out["tpot"].append(None if len(times) < 2 else
                           round((times[-1] - times[0]) / (len(times) - 1) * 1e3, digits))
    return out


#: the headline metrics whose spread over repeated runs a record keeps
SPREAD_KEYS: tuple[str, ...] = ("ttft_ms.median", "ttft_ms.p99", "tpot_ms.median",
                                "tpot_ms.p99", "itl_ms.p99", "e2el_ms.p99",
                                "output_throughput", "request_throughput")


def metric(m: dict, key: str) -> float | None:
    """A metric by dotted key, e.g. ``metric(m, 'tpot_ms.p99')`` (``None`` if absent)."""
    v: Any = m
    for part in key.split("."):
        if not isinstance(v, dict) or part not in v:
            return None
        v = v[part]
    return v


def spread(runs: Sequence[dict]) -> dict[str, dict[str, float] | None]:
    """``min``, ``median``, ``max`` of each :data:`SPREAD_KEYS` metric over runs' metrics."""
    out: dict[str, dict[str, float] | None] = {}
    for key in SPREAD_KEYS:
        vals = sorted(float(v) for v in (metric(m, key) for m in runs) if v is not None)
        out[key] = None if not vals else {"min": vals[0], "median": statistics.median(vals),
                                          "max": vals[-1], "n": len(vals)}
    return out


def round_times(data: dict, digits: int = 6) -> dict:
    """A run's data with every time rounded to ``digits`` decimals of a second."""
    reqs = [{**r, "admitted_s": None if r.get("admitted_s") is None
             else round(r["admitted_s"], digits),
             "token_times_s": [round(t, digits) for t in r["token_times_s"]]}
            for r in data["requests"]]
    steps = [{**s, "start_s": round(s["start_s"], digits), "end_s": round(s["end_s"], digits)}
             for s in data["steps"]]
    return {**data, "requests": reqs, "steps": steps}
