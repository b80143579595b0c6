"""Small pure helpers behind self-checking exercises and honest live timings.

``closest_choice`` turns a measured ratio into the letter of the closest option of a multiple
choice, so a "predict, then check against the record" exercise checks itself. ``spread`` and
``noise_note`` say how far apart a timing's p10 and p90 lie, so a noisy live timing is labelled
as noisy instead of being read as a precise figure.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from labkit.teach.lessons import stat

#: p90/p10 above which a timing is called noisy
NOISY_RATIO = 1.25


def closest_choice(value: float, options: Mapping[str, float]) -> str:
    """The key of ``options`` whose value lies closest to ``value`` on a log scale
    (ratios: 2× off counts the same above and below)."""
    if not options:
        raise ValueError("options must name at least one choice, got none")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"value must be a ratio > 0, got {value!r}")
    for key, v in options.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"option {key!r} must be a ratio > 0, got {v!r}")
    return min(options, key=lambda k: abs(math.log(value / options[k])))


def spread(stats: Any) -> float | None:
    """p90 / p10 of a Stats dict or :class:`labkit.timing.Stats` (``None`` if absent)."""
    p10, p90 = stat(stats, "p10"), stat(stats, "p90")
    if p10 is None or p90 is None or p10 <= 0:
        return None
    return p90 / p10


def noise_note(stats: Any, threshold: float = NOISY_RATIO) -> str:
    """``"p10 … – p90 … µs"`` plus a warning when p90/p10 exceeds ``threshold``."""
    p10, p90, s = stat(stats, "p10"), stat(stats, "p90"), spread(stats)
    if s is None:
        return "spread unknown"
    text = f"p10 {p10:,.0f} – p90 {p90:,.0f} µs"
    if s > threshold:
        text += (f": NOISY (p90/p10 = {s:.2f}×); read the median as a rough figure, or time "
                 "again with more repeats on an idle machine")
    return text
