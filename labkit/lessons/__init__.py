"""Small pure helpers the notebooks use to read and reason about result records.

``labkit.lessons.launch`` holds the launch-overhead arithmetic (expected eager step time,
where a work sweep stops being launch-bound, timeline statistics); ``labkit.lessons.decode``
the decode-step helpers (KV cache size, live CPU timing, cached-vs-full check, replay step).
This module holds what both need: getting the data and the provenance out of a record that
may be a :class:`labkit.results.Result` or a plain ``dict``.
"""

from __future__ import annotations

from typing import Any, Mapping


def record_data(record: Any) -> dict:
    """The measurement dict of ``record``: ``record.data`` for a result, else the dict itself."""
    data = getattr(record, "data", record)
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a labkit Result or a dict of measurements, got "
                        f"{type(record).__name__}")
    return dict(data)


def record_provenance(record: Any) -> str:
    """The provenance line of a :class:`labkit.results.Result` (GPU, torch, date, commit);
    ``""`` for a plain dict, which carries none."""
    if hasattr(record, "env") and hasattr(record, "data"):
        from labkit.results import provenance_line

        return provenance_line(record)
    return ""


def median(stats: Mapping | None) -> float | None:
    """``stats["median"]`` of a Stats dict or :class:`labkit.timing.Stats`; ``None`` if absent."""
    if stats is None:
        return None
    if hasattr(stats, "median") and not isinstance(stats, Mapping):
        return float(stats.median)
    value = stats.get("median")
    return None if value is None else float(value)
