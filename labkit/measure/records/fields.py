"""Field checks of the record kinds: the private ``_req`` / ``_opt`` helpers and the type
checkers (``_num``, ``_int``, ``_dict``, ...), stored :class:`Stats` and timing columns, and
``_Timed``, the shared base of records with ``batch_sizes`` and ``times[method]``.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable, Mapping, Sequence

from labkit.measure.records.derived import speedup, tokens_per_s
from labkit.timing import Stats


# ----------------------------------------------------------------------------- field checks


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class _Fail(Exception):
    """Internal: a field check failed at ``where`` with ``problem``."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(where, problem)
        self.where, self.problem = where, problem


def _fail(where: str, expected: str, value: Any) -> _Fail:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return _Fail(where, f"must be {expected}, got {_type_name(value)} {shown}")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _num(v: Any, where: str) -> float:
    if not _is_num(v):
        raise _fail(where, "a number", v)
    return float(v)


def _opt_num(v: Any, where: str) -> float | None:
    return None if v is None else _num(v, where)


def _int(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(where, "an integer", v)
    return v


def _opt_int(v: Any, where: str) -> int | None:
    return None if v is None else _int(v, where)


def _str(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise _fail(where, "a string", v)
    return v


def _bool(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise _fail(where, "true or false", v)
    return v


def _dict(v: Any, where: str) -> dict:
    if not isinstance(v, Mapping):
        raise _fail(where, "an object", v)
    return dict(v)


def _list(v: Any, where: str) -> list:
    if not isinstance(v, (list, tuple)):
        raise _fail(where, "a list", v)
    return list(v)


def _ints(v: Any, where: str) -> list[int]:
    return [_int(x, f"{where}[{i}]") for i, x in enumerate(_list(v, where))]


def _strs(v: Any, where: str) -> list[str]:
    return [_str(x, f"{where}[{i}]") for i, x in enumerate(_list(v, where))]


def _req(data: Mapping, key: str, where: str, check: Callable[[Any, str], Any]) -> Any:
    """``check(data[key])``; a missing key fails with the field's path."""
    path = f"{where}.{key}"
    if key not in data:
        raise _Fail(path, "is missing")
    return check(data[key], path)


def _opt(data: Mapping, key: str, where: str, check: Callable[[Any, str], Any],
         default: Any = None) -> Any:
    """``check(data[key])`` when present and not null, else ``default``."""
    value = data.get(key)
    if value is None:
        return copy.copy(default)
    return check(value, f"{where}.{key}")


def _int_keyed(check: Callable[[Any, str], Any]) -> Callable[[Any, str], dict[int, Any]]:
    """A checker for an object keyed by batch size (JSON keys are strings: ``"64"``)."""

    def run(v: Any, where: str) -> dict[int, Any]:
        out = {}
        for k, x in _dict(v, where).items():
            try:
                size = int(k)
            except (TypeError, ValueError):
                raise _Fail(f"{where}.{k}", "must be keyed by a batch size (an integer)") \
                    from None
            out[size] = check(x, f"{where}.{k}")
        return out

    return run


def _same_length(items: Sequence, sizes: Sequence, where: str, sizes_field: str) -> None:
    if len(items) != len(sizes):
        raise _Fail(where, f"must hold one entry per batch size ({len(sizes)} in "
                           f"{sizes_field}), got {len(items)}")


# ----------------------------------------------------------------------------- Stats


def _stats(v: Any, where: str) -> Stats:
    """A stored :class:`labkit.timing.Stats`: ``median``, ``p10``, ``p90``, ``mean`` in
    ``unit`` (``"us"``: microseconds), over ``n`` samples."""
    d = _dict(v, where)
    return Stats(median=_req(d, "median", where, _num), p10=_req(d, "p10", where, _num),
                 p90=_req(d, "p90", where, _num),
                 mean=_opt(d, "mean", where, _num, d.get("median")),
                 n=_req(d, "n", where, _int), unit=_opt(d, "unit", where, _str, "us"))


def _opt_stats(v: Any, where: str) -> Stats | None:
    return None if v is None else _stats(v, where)


def _median(s: Stats | None) -> float | None:
    return None if s is None else s.median


def _times(v: Any, where: str, sizes: Sequence[int], sizes_field: str
           ) -> dict[str, list[Stats | None]]:
    """``{method: [Stats or null per batch size]}``."""
    out = {}
    for m, col in _dict(v, where).items():
        items = _list(col, f"{where}.{m}")
        _same_length(items, sizes, f"{where}.{m}", sizes_field)
        out[m] = [_opt_stats(s, f"{where}.{m}[{i}]") for i, s in enumerate(items)]
    return out


def _checks(v: Any, where: str) -> dict[str, bool | float]:
    """Correctness checks: ``true``/``false``, or a share (e.g. token agreement)."""
    out = {}
    for k, x in _dict(v, where).items():
        if not (isinstance(x, bool) or _is_num(x)):
            raise _fail(f"{where}.{k}", "true, false or a number", x)
        out[k] = x
    return out


class _Timed:
    """Shared helpers of records with ``batch_sizes`` and ``times[method]``."""

    batch_sizes: list[int]
    times: dict[str, list[Stats | None]]

    @property
    def methods(self) -> list[str]:
        """The methods timed, in record order."""
        return list(self.times)

    def _column(self, method: str) -> list[Stats | None]:
        if method not in self.times:
            raise KeyError(f"the record has no method {method!r}; it has {self.methods}")
        return self.times[method]

    def median_us(self, method: str) -> list[float | None]:
        """Median step time (µs) of ``method`` per batch size (``None``: not timed)."""
        return [_median(s) for s in self._column(method)]

    def at(self, method: str, batch: int) -> float | None:
        """Median step time (µs) of ``method`` at ``batch`` (``None``: not measured)."""
        if batch not in self.batch_sizes or method not in self.times:
            return None
        return _median(self.times[method][self.batch_sizes.index(batch)])

    def tokens_per_s(self, method: str) -> list[float | None]:
        """Tokens per second of ``method`` per batch size (:func:`tokens_per_s`)."""
        return [tokens_per_s(b, t) for b, t in zip(self.batch_sizes, self.median_us(method))]

    def speedup_vs_eager(self, method: str) -> list[float | None]:
        """Speed-up of ``method`` over eager per batch size (:func:`speedup`)."""
        eager = self.median_us("eager")
        return [speedup(e, t) for e, t in zip(eager, self.median_us(method))]


# ----------------------------------------------------------------------------- shared checks


def _check_stored(d: Mapping, where: str, key: str, derive: Callable[[str], list],
                  methods: Sequence[str]) -> None:
    """A stored derived column (``tokens_per_s``, ``speedup_vs_eager``) must agree with the
    value derived here from ``times``: a record whose copies disagree cannot be trusted."""
    stored = d.get(key)
    if stored is None:
        return
    stored = _dict(stored, f"{where}.{key}")
    for m, col in stored.items():
        path = f"{where}.{key}.{m}"
        if m not in methods:
            raise _Fail(path, f"has no timings in {where}.times to be derived from")
        values = _list(col, path)
        want = derive(m)
        _same_length(values, want, path, f"{where}.batch_sizes")
        for i, (got, exp) in enumerate(zip(values, want)):
            if got is None and exp is None:
                continue
            if not _is_num(got) or exp is None or not math.isclose(got, exp, rel_tol=1e-6):
                raise _Fail(f"{path}[{i}]", f"is {got!r} but {where}.times gives {exp!r}")


def _opt_int_map(v: Any, where: str) -> dict[str, int | None]:
    return {k: _opt_int(x, f"{where}.{k}") for k, x in _dict(v, where).items()}


def _num_map(v: Any, where: str) -> dict[str, float]:
    return {k: _num(x, f"{where}.{k}") for k, x in _dict(v, where).items()}


def _nums(v: Any, where: str) -> list[float]:
    return [_num(x, f"{where}[{i}]") for i, x in enumerate(_list(v, where))]
