"""Batch-size distributions and the shipped decode batch-size traces (``step,batch_size``)."""

from __future__ import annotations

import csv
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping

from labkit.checks import as_int, as_number
from labkit.support.paths import shipped_file

DistLike = Mapping[int, float] | Iterable[int]
"""A batch-size distribution: ``{size: count or probability}`` or observed sizes."""


_BATCH_SIZE_FIX = "a batch size is a whole number >= 1 (a step serves at least one request)"


def _as_batch_size(x: object, what: str) -> int:
    """``x`` as an int >= 1 (``2.5``, ``2.0``, ``"3"``, ``True`` refused, never coerced)."""
    return as_int(x, what, minimum=1, fix=_BATCH_SIZE_FIX)


def _parse_batch_size(text: str, what: str) -> int:
    """A batch size read from a CSV cell: decimal digits only (``"3"``; not ``"3.5"``)."""
    t = text.strip()
    if not t.isdigit():
        raise ValueError(f"{what} must be a whole number >= 1, got {text!r}; fix the CSV")
    return _as_batch_size(int(t), what)


def to_distribution(obs: DistLike) -> dict[int, float]:
    """``{size: probability}`` by size, from ``{size: weight}`` or observed batch sizes."""
    if isinstance(obs, (str, bytes)):
        raise ValueError("a distribution is a mapping {size: weight} or a sequence of sizes, "
                         f"not a string ({obs!r}); use load_trace(name) to read a trace")
    if isinstance(obs, Mapping):
        weights: dict[int, float] = {}
        for key, w in obs.items():
            size = _as_batch_size(key, "batch size")
            w = as_number(w, f"weight of batch size {size}", allow_inf=True)
            if not math.isfinite(w) or w < 0:
                raise ValueError(f"weight of batch size {size} must be finite and >= 0, got {w}")
            if w > 0:
                weights[size] = weights.get(size, 0.0) + w
    elif isinstance(obs, Iterable):
        weights = {s: float(c) for s, c in
                   Counter(_as_batch_size(x, "observed batch size") for x in obs).items()}
    else:
        raise TypeError(f"a distribution is a mapping {{size: weight}} or a sequence of sizes, "
                        f"got {type(obs).__name__}; pass e.g. load_trace(name)")
    total = sum(weights.values())
    if not weights or total <= 0:
        raise ValueError("the batch-size distribution is empty: pass observed sizes or a "
                         "mapping {size: weight} with at least one positive weight")
    return {s: weights[s] / total for s in sorted(weights)}


def load_trace(name_or_path: str | os.PathLike[str]) -> list[int]:
    """Decode-step batch sizes of a trace CSV (a shipped trace's name or a path), in step order."""
    path = shipped_file("traces", name_or_path, ".csv")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or "batch_size" not in reader.fieldnames:
            raise ValueError(f"{path} has no 'batch_size' column (columns: {reader.fieldnames})")
        return [_parse_batch_size(row["batch_size"] or "", f"batch_size in {path.name}")
                for row in reader]
