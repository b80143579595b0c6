"""Small pure helpers the notebooks use to read and reason about result records.

One submodule per topic (``labkit.teach.lessons.launch``: launch-overhead arithmetic and timeline
statistics; ``labkit.teach.lessons.decode``: decode-step helpers; and so on). This module holds what
they all need: the data and the provenance of a record that may be a
:class:`labkit.measure.results.Result` or a plain ``dict``, and fields of a Stats record.
"""

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
    """The provenance line of a :class:`labkit.measure.results.Result` (GPU, torch, date, commit);
    ``""`` for a plain dict, which carries none."""
    if hasattr(record, "env") and hasattr(record, "data"):

        return provenance_line(record)
    return ""


def stat(stats: Any, key: str = "median") -> float | None:
    """Field ``key`` (``median``, ``p10``, ``p90``, ``mean``) of a Stats dict or a
    :class:`labkit.timing.Stats`; ``None`` when the stats or the field are absent."""
    if stats is None:
        return None
    value = stats.get(key) if isinstance(stats, Mapping) else getattr(stats, key, None)
    return None if value is None else float(value)


def median(stats: Any) -> float | None:
    """The median of a Stats dict or :class:`labkit.timing.Stats` (``None`` if absent)."""
    return stat(stats, "median")
