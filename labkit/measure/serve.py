"""Serve a request trace on the tiny GPT and return the data of a ``serve_<name>`` record.

:func:`measure_serving` serves one trace (:mod:`labkit.serving.loop`), :func:`measure_interleaved`
several alternating *arms* (``serve_<name>_ab``), :func:`measure_chunked` arms with and without
chunked prefill; all discard warm-up runs first (the first run after capture is cold).
"""

from __future__ import annotations

import os
import statistics
from typing import Any
from collections.abc import Callable, Mapping, Sequence

import torch

from labkit.checks import as_int
from labkit.measure.serving_metrics import gpu_busy, run_metrics, step_windows
from labkit.model import GPTConfig, TinyGPT, build_model, preset
from labkit.serving.loop import (
    STEP_MODES, CircuitBreaker, Clock, RealClock, ServingEngine, SimClock, StepMode,
    breaker_settings, check_budget, check_step_mode, decide_of, eager_step, make_mixed_runner,
    make_step_fn,
)
from labkit.serving.traces import TraceRequest, load_request_trace

CLOCKS: tuple[str, ...] = ("real", "sim")


def check_serving(preset_name: str, mode: str, *, clock: str = "real", dtype: str = "float32",
                  max_batch: int = 16, kv_layout: str = "slot", num_blocks: int | None = None,
                  breaker: dict | None = None) -> GPTConfig:
    """Check the settings of :func:`measure_serving` before anything runs; the model's config."""
    check_step_mode(mode)
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r} is not known; use one of {list(CLOCKS)}")
    if breaker is not None:
        if mode in ("eager", "none"):
            raise ValueError(f"breaker: a circuit breaker falls back from graphs to eager; "
                             f"mode {mode!r} has no graphs, use full, piecewise or exact")
        breaker_settings(**breaker)
    return preset(preset_name, max_batch=max_batch, dtype=dtype, kv_layout=kv_layout,
                  num_blocks=num_blocks)


class GpuBusy:
    """A step function whose calls are timed on the GPU: CUDA events before and after each
    step on the current stream (nothing on a CPU model); ``decide`` is the wrapped one's."""

    def __init__(self, fn: Callable, device: torch.device | str) -> None:
        self.fn, self.cuda = fn, torch.device(device).type == "cuda"
        self.events: list[tuple[Any, Any]] = []

    def decide(self, bs: int) -> tuple[str, int]:
        return decide_of(self.fn, bs)

    @property
    def last_step(self) -> tuple[str, int] | None:
        """The wrapped step function's last step (:func:`labkit.serving.loop.last_step_of`)."""
        return getattr(self.fn, "last_step", None)

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor,
                 slots: torch.Tensor) -> torch.Tensor:
        if not self.cuda:
            return self.fn(tokens, positions, slots)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = self.fn(tokens, positions, slots)
        end.record()
        self.events.append((start, end))
        return out

    def step_ms(self) -> list[float] | None:
        """Each timed step's GPU span in ms (``None`` on a CPU model)."""
        if not self.cuda:
            return None
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in self.events]


def _load(trace: Any, max_requests: int | None) -> list[TraceRequest]:
    """The trace's requests (the first ``max_requests``)."""
    reqs = list(trace) if isinstance(trace, (list, tuple)) else load_request_trace(trace)
    if max_requests is not None:
        reqs = reqs[:as_int(max_requests, "max_requests", minimum=1,
                            fix="serve at least one request")]
    return reqs


def _warm_counts(repeats: int, warmup_runs: int | None,
                 warmup_requests: int) -> tuple[int, int, int]:
    repeats = as_int(repeats, "repeats", minimum=1, fix="serve the trace at least once")
    warm = (1 if repeats > 1 else 0) if warmup_runs is None else as_int(
        warmup_runs, "warmup_runs", minimum=0, fix="give 0 (no warm-up run) or more runs")
    return repeats, warm, as_int(warmup_requests, "warmup_requests", minimum=0,
                                 fix="give 0 (no warm-up) or more requests")


def _engine(model: TinyGPT, step: Any, clock: Clock, seed: int,
            budget: int | None) -> ServingEngine:
    """The engine serving with ``step``: a step function, or with a token ``budget`` (chunked
    prefill) a :class:`MixedRunner`."""
    if budget is None:
        return ServingEngine(model, step, clock=clock, seed=seed)
    return ServingEngine(model, clock=clock, seed=seed, max_num_batched_tokens=budget,
                         runner=step)


def _warm_up(model: TinyGPT, step: Any, reqs: Sequence[TraceRequest], n: int,
             seed: int, budget: int | None = None) -> None:
    """Serve the first ``n`` requests once, all at time 0 on a simulated clock (unrecorded)."""
    if n:
        warm = [TraceRequest(0.0, r.prompt_len, r.output_len) for r in reqs[:n]]
        _engine(model, step, SimClock(0.0), seed, budget).run(warm)


def _serve(model: TinyGPT, step: Any, reqs: Sequence[TraceRequest], *, clock: str,
           decode_ms: float, seed: int, breaker: dict | None, budget: int | None = None,
           timed: bool = True,
           progress: Callable[[int], None] | None = None) -> tuple[dict, dict, list[float]]:
    """One run: (its data, its metrics with the GPU busy time, breaker trip times); with a
    ``budget`` (chunked prefill) or ``timed=False`` the steps are not GPU-timed."""
    clk = SimClock(decode_ms / 1e3) if clock == "sim" else RealClock(model.device)
    fn = step if breaker is None else CircuitBreaker(step, eager_step(model), clk, **breaker)
    busy = None if budget is not None else GpuBusy(fn, model.device if timed else "cpu")
    run = _engine(model, busy or fn, clk, seed, budget).run(reqs, progress=progress)
    data = run.to_data()
    m = run_metrics(data["requests"], data["steps"])
    if busy is not None:
        m.update(gpu_busy(busy.step_ms(), m["duration_s"]))
    return data, m, [t - run.clock_start for t in getattr(fn, "trips", [])]


def _release(steps: Mapping[Any, Callable]) -> None:
    for step in steps.values():
        release = getattr(step, "release", None)
        if callable(release):
            release()


def measure_serving(preset_name: str = "char", trace: str | os.PathLike[str] | Sequence[
                        TraceRequest] = "synthetic_requests_poisson", mode: StepMode = "eager", *,
                    device: str | None = None, dtype: str = "float32", max_batch: int = 16,
                    kv_layout: str = "slot", num_blocks: int | None = None,
                    capture_sizes: Sequence[int] | None = None, seed: int = 0,
                    clock: str = "real", decode_ms: float = 10.0,
                    max_requests: int | None = None, window_s: float = 1.0,
                    breaker: dict | None = None, repeats: int = 1, warmup_requests: int = 0,
                    warmup_runs: int | None = None, keep_timeline: bool = True,
                    max_num_batched_tokens: int | None = None,
                    progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Serve ``trace`` (a name in ``data/traces``, a CSV path or requests) in step ``mode``:
    the data of a ``serve_<name>`` record. ``clock='sim'`` charges ``decode_ms`` per decode
    step; ``breaker`` wraps the step in a :class:`CircuitBreaker`. After ``warmup_requests``
    and ``warmup_runs`` (default: one when ``repeats > 1``), the trace is served ``repeats``
    times: the first run's requests and steps, every run's metrics and their ``spread``;
    ``keep_timeline=False`` keeps only per-request TTFT, TPOT, E2EL (:func:`drop_timeline`);
    ``max_num_batched_tokens``: chunked prefill with that token budget per step (capture sizes
    in tokens, :func:`make_mixed_runner`)."""
    cfg = check_serving(preset_name, mode, clock=clock, dtype=dtype, max_batch=max_batch,
                        kv_layout=kv_layout, num_blocks=num_blocks, breaker=breaker)
    budget = None if max_num_batched_tokens is None else check_budget(max_num_batched_tokens)
    if budget is not None and breaker is not None:
        raise ValueError("a circuit breaker wraps a decode step function; chunked prefill "
                         "(max_num_batched_tokens) runs token-flattened steps: use one of them")
    repeats, warm, warmup_requests = _warm_counts(repeats, warmup_runs, warmup_requests)
    reqs = _load(trace, max_requests)
    model = build_model(cfg, device or ("cuda" if torch.cuda.is_available() else "cpu"),
                        seed=seed)
    step: Any = (make_step_fn(model, mode, capture_sizes) if budget is None else
                 make_mixed_runner(model, mode, budget, capture_sizes, progress=False))
    runs = []
    try:
        _warm_up(model, step, reqs, warmup_requests, seed, budget)
        for k in range(warm + repeats):
            runs.append(_serve(model, step, reqs, clock=clock, decode_ms=decode_ms, seed=seed,
                               breaker=breaker, budget=budget,
                               progress=progress if k == warm else None))
    finally:
        _release({0: step})
    data = runs[warm][0]
    if clock == "real":  # microseconds are plenty; keeps a record file small
        data = round_times(data)
    out = {"mode": mode, **_header(trace, clock, preset_name, model, dtype, max_batch, seed),
           "kv_layout": kv_layout, "breaker": breaker,
           "capture_sizes": None if capture_sizes is None else list(capture_sizes),
           "max_num_batched_tokens": budget, **data,
           **_summary(runs[warm:], window_s), "warmup_runs": warm}
    return out if keep_timeline else drop_timeline(out)


def _header(trace: Any, clock: str, preset_name: str, model: TinyGPT, dtype: str,
            max_batch: int, seed: int) -> dict[str, Any]:
    """The settings every serve record starts with."""
    name = trace if isinstance(trace, str) else getattr(trace, "name", "custom")
    return {"trace": str(name), "clock": clock, "preset": preset_name,
            "device": str(model.device), "dtype": dtype, "max_batch": max_batch, "seed": seed}


def _summary(runs: Sequence[tuple[dict, dict, list[float]]], window_s: float) -> dict[str, Any]:
    """The first run's metrics, windows and breaker trips; every run's metrics and spread."""
    data, first, trips = runs[0]
    every = [m for _, m, _ in runs]
    return {"metrics": first, "windows": step_windows(data["steps"], window_s),
            "breaker_trips_s": trips, "repeats": every, "spread": spread(every)}


def _step_of(model: TinyGPT, arm: Mapping[str, Any]) -> Any:
    """An arm's step function, or with a token budget its :class:`MixedRunner`."""
    budget, sizes = arm.get("max_num_batched_tokens"), arm.get("capture_sizes")
    if budget is None:
        return make_step_fn(model, arm["mode"], sizes)
    return make_mixed_runner(model, arm["mode"], budget, sizes)


def _serve_arms(model: TinyGPT, reqs: Sequence[TraceRequest],
                arms: Mapping[str, Mapping[str, Any]], *, repeats: int, warm: int,
                warmup_requests: int, clock: str, decode_ms: float, seed: int,
                timed: bool = True) -> tuple[dict[str, list], list[list[str]]]:
    """Serve ``reqs`` in every arm (label -> ``{"mode", ...}``), each distinct step built and
    warmed up once; ``warm`` rounds discarded, then ``repeats`` rounds of every arm, the order
    reversed every other round. Each arm's runs (as :func:`_serve`) and every kept order."""

    def key(arm: Mapping) -> tuple:
        sizes = arm.get("capture_sizes")
        return (arm["mode"], None if sizes is None else tuple(sizes),
                arm.get("max_num_batched_tokens"))

    steps: dict[tuple, Any] = {}
    runs: dict[str, list] = {label: [] for label in arms}
    labels, order = list(arms), []
    try:
        for arm in arms.values():
            if key(arm) not in steps:
                steps[key(arm)] = _step_of(model, arm)
                _warm_up(model, steps[key(arm)], reqs, warmup_requests, seed,
                         arm.get("max_num_batched_tokens"))
        for k in range(warm + repeats):
            now = labels if (k - warm) % 2 == 0 else labels[::-1]
            if k >= warm:
                order.append(list(now))
            for label in now:
                arm = arms[label]
                got = _serve(model, steps[key(arm)], reqs, clock=clock, decode_ms=decode_ms,
                             seed=seed, breaker=arm.get("breaker"),
                             budget=arm.get("max_num_batched_tokens"), timed=timed)
                if k >= warm:
                    runs[label].append(got)
    finally:
        _release(steps)
    return runs, order


def measure_interleaved(preset_name: str = "gpt2", trace: str | os.PathLike[str] | Sequence[
                            TraceRequest] = "synthetic_requests_poisson",
                        arms: Mapping[str, Mapping[str, Any]] | None = None, *,
                        device: str | None = None, dtype: str = "float32",
                        max_batch: int = 16, seed: int = 0, clock: str = "real",
                        decode_ms: float = 10.0, max_requests: int | None = None,
                        window_s: float = 1.0, repeats: int = 3, warmup_requests: int = 0,
                        warmup_runs: int = 1) -> dict[str, Any]:
    """Serve ``trace`` in every arm of ``arms`` (label -> ``{"mode", "capture_sizes",
    "breaker"}``; default eager vs ``full``), interleaved (A B, B A, ...: a drift hits every
    arm alike): the data of a ``serve_<name>_ab`` record, the top-level fields the first
    arm's."""
    arms = dict(arms or {"eager": {"mode": "eager"}, "full": {"mode": "full"}})
    if len(arms) < 2:
        raise ValueError(f"arms: give at least two arms to interleave, got {list(arms)}")
    for label, arm in arms.items():
        bad = set(arm) - {"mode", "capture_sizes", "breaker"}
        if bad or "mode" not in arm:
            raise ValueError(f"arm {label!r}: give 'mode' and optionally 'capture_sizes' and "
                             f"'breaker', got {sorted(arm)}")
        cfg = check_serving(preset_name, arm["mode"], clock=clock, dtype=dtype,
                            max_batch=max_batch, breaker=arm.get("breaker"))
    repeats, warm, warmup_requests = _warm_counts(repeats, warmup_runs, warmup_requests)
    reqs = _load(trace, max_requests)
    model = build_model(cfg, device or ("cuda" if torch.cuda.is_available() else "cpu"),
                        seed=seed)
    runs, order = _serve_arms(model, reqs, arms, repeats=repeats, warm=warm,
                              warmup_requests=warmup_requests, clock=clock,
                              decode_ms=decode_ms, seed=seed)
    out_arms = {}
    for label, arm in arms.items():
        sizes = arm.get("capture_sizes")
        out_arms[label] = {"mode": arm["mode"], "breaker": arm.get("breaker"),
                           "capture_sizes": None if sizes is None else list(sizes),
                           **_summary(runs[label], window_s)}
    return {**_header(trace, clock, preset_name, model, dtype, max_batch, seed),
            "kv_layout": "slot", **out_arms[next(iter(arms))], "requests": [], "steps": [],
            "interleaved": True, "warmup_runs": warm, "order": order, "arms": out_arms}


def measure_chunked(model: TinyGPT, trace: str | os.PathLike[str] | Sequence[
                        TraceRequest] = "long_prompts",
                    modes: Sequence[StepMode] = ("eager", "full"),
                    budgets: Sequence[int] = (64,), repeats: int = 3, *,
                    capture_sizes: Sequence[int] | None = None, seed: int = 0,
                    clock: str = "real", decode_ms: float = 10.0,
                    max_requests: int | None = None, warmup_requests: int = 0,
                    warmup_runs: int = 1) -> dict[str, Any]:
    """Chunked prefill's trade on ``model``: ``trace`` served per mode of ``modes`` without
    chunked prefill (arm ``<mode>``) and with each token budget (arm ``<mode>_chunked<b>``),
    interleaved as :func:`measure_interleaved` (no GPU timing: every arm runs the same host
    code). Per arm: settings, per repeat TTFT/TPOT/ITL percentiles in ms and the largest
    step's tokens (``latency``), every run's metrics and their ``spread``."""
    if not isinstance(model, TinyGPT):
        raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}")
    if isinstance(modes, str) or not modes:
        raise ValueError(f"modes must be a list of step modes of {list(STEP_MODES)}, such as "
                         f"['eager', 'full'], got {modes!r}")
    for m in modes:
        check_step_mode(m)
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r} is not known; use one of {list(CLOCKS)}")
    if isinstance(budgets, (str, int)) or not budgets:
        raise ValueError(f"budgets must be a list of token budgets such as [64], got "
                         f"{budgets!r}")
    budgets = [check_budget(b) for b in budgets]
    repeats, warm, warmup_requests = _warm_counts(repeats, warmup_runs, warmup_requests)
    reqs = _load(trace, max_requests)
    sizes = None if capture_sizes is None else list(capture_sizes)
    arms: dict[str, dict[str, Any]] = {}
    for mode in modes:
        arms[mode] = {"mode": mode, "capture_sizes": sizes}
        for b in budgets:
            arms[f"{mode}_chunked{b}"] = {"mode": mode, "max_num_batched_tokens": b}
    runs, order = _serve_arms(model, reqs, arms, repeats=repeats, warm=warm,
                              warmup_requests=warmup_requests, clock=clock,
                              decode_ms=decode_ms, seed=seed, timed=False)
    out: dict[str, Any] = {}
    for label, arm in arms.items():
        every = [m for _, m, _ in runs[label]]
        latency = [{**{f"{k}_ms": {"p50": m[f"{k}_ms"]["median"], "p90": m[f"{k}_ms"]["p90"],
                                   "p99": m[f"{k}_ms"]["p99"]} for k in ("ttft", "tpot", "itl")},
                    "max_step_tokens": max((s["tokens"] for s in d["steps"]), default=0)}
                   for d, m, _ in runs[label]]
        out[label] = {"mode": arm["mode"], "capture_sizes": arm.get("capture_sizes"),
                      "max_num_batched_tokens": arm.get("max_num_batched_tokens"),
                      "latency": latency, "repeats": every, "spread": spread(every)}
    name = trace if isinstance(trace, str) else getattr(trace, "name", "custom")
    return {"trace": str(name), "clock": clock, "device": str(model.device),
            "config": model.cfg.to_dict(), "seed": seed, "modes": list(modes),
            "budgets": budgets, "repeats": repeats, "warmup_runs": warm, "order": order,
            "arms": out}


def drop_timeline(data: dict[str, Any]) -> dict[str, Any]:
    """A new copy of a serve record's data with ``requests`` and ``steps`` emptied and each
    request's TTFT, TPOT and E2EL kept in ``per_request`` (ms): ``keep_timeline=False``."""
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
    """Each request's ``ttft``, ``tpot`` (``None`` for one token) and ``e2el`` in ms, in trace
    order (requests without a token left out)."""
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
                                "output_throughput", "request_throughput", "gpu_busy_share")


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
