"""Helpers every topic module shares: a record's data, its provenance line, one field of Stats."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping
from labkit.measure.results import provenance_line


def record_data(record: Any) -> dict:
    """The measurement dict of ``record``: ``record.data`` for a result, else the dict itself."""
    data = getattr(record, "data", record)
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a labkit Result or a dict of measurements, got "
                        f"{type(record).__name__}")
    return dict(data)


def record_provenance(record: Any) -> str:
    """The provenance line of a :class:`labkit.measure.results.Result`; ``""`` for a dict."""
    return provenance_line(record) if hasattr(record, "env") and hasattr(record, "data") else ""


def stat(stats: Any, key: str = "median") -> float | None:
    """Field ``key`` (``median``, ``p10``, ``p90``, ``mean``) of Stats or a dict, else None."""
    if stats is None:
        return None
    value = stats.get(key) if isinstance(stats, Mapping) else getattr(stats, key, None)
    return None if value is None else float(value)
