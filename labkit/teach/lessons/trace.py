"""Short kernel names for charts of profiler traces (notebooks 03 and 08)."""

from __future__ import annotations


def short_name(name: str, limit: int = 60) -> str:
    """A profiler event name without ``void``, anonymous namespaces, templates and parameters."""
    text = name.strip().removeprefix("void ").replace("(anonymous namespace)::", "")
    for stop in ("<", "("):
        if stop in text[1:]:
            text = text[: text.index(stop, 1)]
    return text if len(text) <= limit else text[: limit - 1] + "…"
