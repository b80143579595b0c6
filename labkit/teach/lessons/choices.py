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


def defensible_choices(value: float, options: Mapping[str, float],
                       slack: float = 1.25) -> list[str]:
    """The keys of ``options`` a careful estimate could defend: the closest one on a log scale
    and any other whose distance is within a factor ``slack`` of the closest one's (a measured
    ratio near the middle of two options accepts both)."""
    best = closest_choice(value, options)
    if isinstance(slack, bool) or not isinstance(slack, (int, float)) or not slack >= 1:
        raise ValueError(f"slack must be a factor >= 1, got {slack!r}")
    d0 = abs(math.log(value / options[best]))
    return [k for k, v in options.items() if abs(math.log(value / v)) <= d0 + math.log(slack)]
