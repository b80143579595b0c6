"""GPU operations per decode step as ``labkit.measure.bench.count_step_ops`` counts them."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from labkit.teach.lessons import record_data


def gpu_ops_per_step(record: Any, method: str = "eager") -> int:
    """GPU operations per step of ``method`` (``eager`` or ``compile``) in a record."""
    if method not in ("eager", "compile"):
        raise ValueError(f"method must be one of ['compile', 'eager'], got {method!r}")
    d = record_data(record)
    value = d.get("kernels_per_step", d.get("gpu_ops_per_step"))
    if isinstance(value, Mapping) or method != "eager":
        value = value.get(method) if isinstance(value, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{getattr(record, 'name', 'the record')} holds no GPU operation count "
                         f"for method {method!r} (fields kernels_per_step / gpu_ops_per_step); "
                         "pass a decode_, compile_ or modes_ record")
    return value
