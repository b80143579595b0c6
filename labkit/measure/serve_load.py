"""The latency–load curve: the same kind of trace served at several request rates, per step mode.

:func:`measure_load_curve` captures each mode's graphs once, then serves one SYNTHETIC Poisson
trace per rate (the length distribution of ``synthetic_requests_poisson``) and keeps each run's
metrics: the data of a ``serving_load_<preset>`` record.
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Callable, Sequence

import torch

from labkit.checks import as_int
from labkit.measure.serve import _release, _warm_counts, _warm_up, check_serving
from labkit.measure.serving_metrics import run_metrics
from labkit.model import build_model
from labkit.serving.loop import RealClock, ServingEngine, SimClock, StepMode, make_step_fn
from labkit.serving.traces import TraceRequest, request_trace

#: the length distribution of the load traces (as ``synthetic_requests_poisson``)
LENGTHS: dict[str, float] = {"prompt_median": 64.0, "prompt_sigma": 0.8,
                             "output_median": 64.0, "output_sigma": 0.8}


def load_trace(rate: float, n_requests: int, *, seed: int, max_seq: int) -> list[TraceRequest]:
    """The SYNTHETIC Poisson trace served at ``rate`` requests/s (seeded, :data:`LENGTHS`)."""
    return request_trace(n_requests, rate=rate, arrivals="poisson", seed=seed,
                         max_seq=max_seq, **LENGTHS)


def check_rates(rates: Sequence[float]) -> list[float]:
    """The rates as floats, increasing; a bad list raises naming it."""
    out = list(rates) if isinstance(rates, (list, tuple)) else None
    if not out or any(isinstance(r, bool) or not isinstance(r, (int, float))
                      or not math.isfinite(r) or r <= 0 for r in out):
        raise ValueError(f"rates must be a non-empty list of positive requests/s, got {rates!r}")
    if sorted(out) != out or len(set(out)) != len(out):
        raise ValueError(f"rates {out} must increase (each rate once); sort them")
    return [float(r) for r in out]


def measure_load_curve(preset_name: str = "gpt2", modes: Sequence[StepMode] = ("eager", "full"),
                       rates: Sequence[float] = (10.0, 20.0, 40.0, 80.0, 160.0), *,
                       n_requests: int = 48, device: str | None = None,
                       dtype: str = "bfloat16", max_batch: int = 16,
                       capture_sizes: Sequence[int] | None = None, seed: int = 0,
                       trace_seed: int = 7, clock: str = "real", decode_ms: float = 10.0,
                       warmup_requests: int = 8, warmup_runs: int = 1,
                       progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Serve ``n_requests`` SYNTHETIC Poisson requests at each of ``rates`` (req/s) in each of
    ``modes``: the data of a ``serving_load_<preset>`` record, one ``{"mode", "rate",
    "metrics"}`` point per pair, after discarded warm-ups at the lowest rate."""
    modes = list(modes) if isinstance(modes, (list, tuple)) else []
    if not modes or len(set(modes)) != len(modes):
        raise ValueError("modes must be a non-empty list of distinct step modes, e.g. "
                         "['eager', 'full']")
    cfgs = [check_serving(preset_name, m, clock=clock, dtype=dtype, max_batch=max_batch)
            for m in modes]
    rates = check_rates(rates)
    n_requests = as_int(n_requests, "n_requests", minimum=1, fix="serve at least one request")
    _, warmup_runs, warmup_requests = _warm_counts(1, warmup_runs, warmup_requests)
    cfg = cfgs[0]
    traces = {r: load_trace(r, n_requests, seed=trace_seed, max_seq=cfg.max_seq) for r in rates}
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model(cfg, dev, seed=seed)
    points = []
    for mode in modes:
        step = make_step_fn(model, mode, capture_sizes)
        try:
            _warm_up(model, step, traces[rates[0]], warmup_requests, seed)
            for _ in range(warmup_runs):
                clk = SimClock(decode_ms / 1e3) if clock == "sim" else RealClock(model.device)
                ServingEngine(model, step, clock=clk, seed=seed).run(traces[rates[0]])
            for rate in rates:
                if progress is not None:
                    progress(f"{mode} at {rate:g} req/s")
                clk = SimClock(decode_ms / 1e3) if clock == "sim" else RealClock(model.device)
                data = ServingEngine(model, step, clock=clk, seed=seed).run(
                    traces[rate]).to_data()
                points.append({"mode": mode, "rate": rate,
                               "metrics": run_metrics(data["requests"], data["steps"])})
        finally:
            _release({0: step})
    return {"preset": preset_name, "modes": modes, "rates": rates, "n_requests": n_requests,
            "clock": clock, "device": str(model.device), "dtype": dtype,
            "max_batch": max_batch,
            "capture_sizes": None if capture_sizes is None else list(capture_sizes),
            "trace": {"arrivals": "poisson", "seed": trace_seed, **LENGTHS,
                      "synthetic": True}, "warmup_runs": warmup_runs,
            "points": points}
