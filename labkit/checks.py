"""Argument checks shared by the core modules: no silent truncation or coercion (``2.5``,
``2.0``, ``"3"`` and ``True`` are not ints). Every error names the argument, what was wrong and
how to fix it. Standard library only (``labkit.sizes`` must not import torch).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["as_bool", "as_int", "as_int_list", "as_number", "as_size_list"]


def _kind(value: Any) -> str:
    return type(value).__name__


def as_int(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None,
           fix: str = "") -> int:
    """``value`` as an ``int`` (``TypeError`` for a non-integer, ``bool`` included;
    ``ValueError`` outside ``[minimum, maximum]``); ``fix`` ends the message."""
    tail = f"; {fix}" if fix else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} ({_kind(value)}); pass a whole "
                        f"number (no bool, float or string){tail}")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}{tail}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {v}{tail}")
    return v


def as_number(value: Any, name: str, *, minimum: float | None = None,
              allow_inf: bool = False, fix: str = "") -> float:
    """``value`` (an int or float, not a bool or string) as a ``float``; NaN is refused, and
    infinity unless ``allow_inf``."""
    tail = f"; {fix}" if fix else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r} ({_kind(value)}){tail}")
    v = float(value)
    if math.isnan(v) or (math.isinf(v) and not allow_inf):
        raise ValueError(f"{name} must be a finite number, got {v}{tail}")
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, got {v:g}{tail}")
    return v


def as_bool(value: Any, name: str) -> bool:
    """``value`` if it is a ``bool``; ``TypeError`` otherwise (``0``, ``"yes"`` are refused)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r} ({_kind(value)})")
    return value


def as_int_list(values: Any, name: str, *, minimum: int | None = None,
                maximum: int | None = None, fix: str = "") -> list[int]:
    """An iterable of ints (each checked by :func:`as_int`) as a list, in the given order."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a list of ints, got {values!r} ({_kind(values)})"
                        + (f"; {fix}" if fix else ""))
    return [as_int(v, f"{name}[{i}]", minimum=minimum, maximum=maximum, fix=fix)
            for i, v in enumerate(values)]


def as_size_list(values: Any, name: str, *, minimum: int = 1, maximum: int | None = None,
                 distinct: bool = False, fix: str = "") -> list[int]:
    """A non-empty list of sizes (ints ``>= minimum``), in the given order; ``distinct``
    refuses a size that appears twice."""
    tail = f"; {fix}" if fix else ""
    given = as_int_list(values, name, minimum=minimum, maximum=maximum, fix=fix)
    if not given:
        raise ValueError(f"{name} must not be empty, got {values!r}; give at least one size"
                         f"{tail}")
    if distinct:
        dup = sorted({v for v in given if given.count(v) > 1})
        if dup:
            raise ValueError(f"{name}: {dup} appear more than once in {given}; list each size "
                             "once (sorted(set(sizes)))")
    return given
