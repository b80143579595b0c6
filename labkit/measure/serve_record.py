"""Measure one serving reference record with its default parameters.

Notebook 13 and ``labkit serve --record`` both call :func:`measure_record`; :data:`INTERLEAVED`
holds the parameters of the interleaved records (eager vs full; circuit breaker off vs on).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from labkit.measure import records
from labkit.measure.serve import measure_interleaved, measure_serving
from labkit.measure.serve_load import measure_load_curve

#: the measurement functions of the serving records, by their name in ``DEFAULTS``
MEASURES: dict[str, Callable[..., dict]] = {"measure_serving": measure_serving,
                                            "measure_load_curve": measure_load_curve,
                                            "measure_interleaved": measure_interleaved}

_AB = {"preset": "gpt2", "dtype": "bfloat16", "max_batch": 16, "max_requests": 80, "seed": 0,
       "clock": "real", "warmup_requests": 8, "warmup_runs": 1, "window_s": 0.5,
       "repeats": 3}
_CAPPED = {"mode": "full", "capture_sizes": [1, 2, 4, 8]}
#: record name -> (measurement function, parameters) of the interleaved serving records
INTERLEAVED: dict[str, tuple[str, dict]] = {
    "serve_graphs_ab": ("measure_interleaved", {
        **_AB, "trace": "synthetic_requests_poisson",
        "arms": {"eager": {"mode": "eager"},
                 "full": {"mode": "full", "capture_sizes": [1, 2, 4, 8, 16]}}}),
    "serve_breaker_ab": ("measure_interleaved", {
        **_AB, "trace": "synthetic_requests_bursty",
        "arms": {"breaker off": _CAPPED,
                 "breaker on": {**_CAPPED, "breaker": {"window": 32, "threshold": 0.5,
                                                       "cooldown_s": 1.0}}}}),
}


def record_params(name: str) -> dict:
    """The default parameters of serving record ``name`` (a fresh copy)."""
    if name in records.SERVE_RECORDS:
        return records.default_params(name)
    if name in INTERLEAVED:
        return copy.deepcopy(INTERLEAVED[name][1])
    raise ValueError(f"{name!r} is not a serving record; choose from "
                     f"{', '.join([*records.SERVE_RECORDS, *INTERLEAVED])}")


def measure_record(name: str) -> dict:
    """Measure serving record ``name`` with its default parameters; its data."""
    params = record_params(name)
    func = (records.DEFAULTS[name] if name in records.SERVE_RECORDS else INTERLEAVED[name])[0]
    return MEASURES[func](**records.measure_kwargs(params))
