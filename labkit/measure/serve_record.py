"""Measure one serving reference record with its default parameters.

The serving records (:data:`labkit.measure.records.SERVE_RECORDS`) are measured by
:func:`labkit.measure.serve.measure_serving` or
:func:`labkit.measure.serve_load.measure_load_curve` with the parameters in
:data:`labkit.measure.records.DEFAULTS`; notebook 13 (GPU tier) and ``labkit serve --record``
both go through :func:`measure_record`, so a record's ``params`` are always its defaults.
"""

from __future__ import annotations

from typing import Callable

from labkit.measure import records
from labkit.measure.serve import measure_serving
from labkit.measure.serve_load import measure_load_curve

#: the measurement functions of the serving records, by their name in ``DEFAULTS``
MEASURES: dict[str, Callable[..., dict]] = {"measure_serving": measure_serving,
                                            "measure_load_curve": measure_load_curve}


def record_params(name: str) -> dict:
    """The default parameters of serving record ``name`` (a fresh copy); an unknown name
    raises listing the serving records."""
    if name not in records.SERVE_RECORDS:
        raise ValueError(f"{name!r} is not a serving record; choose from "
                         f"{', '.join(records.SERVE_RECORDS)}")
    return records.default_params(name)


def measure_record(name: str) -> dict:
    """Measure serving record ``name`` with its default parameters and return its data
    (needs a GPU for the real clock to mean anything)."""
    params = record_params(name)
    func = records.DEFAULTS[name][0]
    return MEASURES[func](**records.measure_kwargs(params))
