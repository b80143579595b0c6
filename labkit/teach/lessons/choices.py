"""The option of a multiple choice closest to a measured ratio (self-checking predictions)."""

from __future__ import annotations

import math
from collections.abc import Mapping


def closest_choice(value: float, options: Mapping[str, float]) -> str:
    """The key of ``options`` whose value lies closest to ``value`` on a log scale."""
    if not options:
        raise ValueError("options must name at least one choice, got none")
    for key, v in [("value", value), *options.items()]:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{key} must be a ratio > 0, got {v!r}")
    return min(options, key=lambda k: abs(math.log(value / options[k])))
