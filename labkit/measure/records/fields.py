"""The one record parser, driven by each kind's dataclass fields and type hints (``int``,
``float``, ``str``, ``bool``, ``dict``, ``list[X]``, ``dict[str, X]``, ``dict[int, X]`` keyed by
a batch size, ``X | None``, ``Literal``, :class:`Stats`, nested kinds). A field without a
default is required; one with a default takes it when missing or null; :func:`src` reads a
field from other keys or through its own parser. A kind's ``validate`` checks the rest."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, TypeVar, Union

from labkit.measure.records.derived import speedup, tokens_per_s
from labkit.timing import Stats

K = TypeVar("K")
#: correctness checks: true/false, or a share (a token agreement)
Checks = dict[str, bool | float]
_EXPECT = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
           dict: "an object", list: "a list"}
_MISSING = object()
_HINTS: dict[type, dict[str, Any]] = {}


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class _Fail(Exception):
    """Internal: the field at ``where`` is wrong: ``problem``."""
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(where, problem)
        self.where, self.problem = where, problem


def _fail(where: str, expected: str, value: Any) -> _Fail:
    shown = repr(value)
    return _Fail(where, f"must be {expected}, got {_type_name(value)} "
                        f"{shown if len(shown) <= 60 else shown[:57] + '...'}")


def src(*path: str, parse: Callable[[Any, str], Any] | None = None,
        default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING) -> Any:
    """A field read from ``path`` (a key, or keys into nested objects) and/or by
    ``parse(value, where)`` instead of its name and type hint."""
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={"path": path, "parse": parse})


def _scalar(tp: Any, v: Any, where: str) -> Any:
    ok = {int: isinstance(v, int), float: isinstance(v, (int, float)), str: isinstance(v, str),
          bool: isinstance(v, bool), dict: isinstance(v, Mapping),
          list: isinstance(v, (list, tuple))}[tp]
    if not ok or (isinstance(v, bool) and tp in (int, float)):
        raise _fail(where, _EXPECT[tp], v)
    return {float: float, dict: dict, list: list}.get(tp, lambda x: x)(v)


def _stats(v: Any, where: str) -> Stats:
    """A stored :class:`Stats` (``mean`` defaults to the median, ``unit`` to ``"us"``)."""
    d = _scalar(dict, v, where)
    d["mean"] = d["median"] if d.get("mean") is None and "median" in d else d.get("mean")
    return parse_kind(Stats, d, where)


def parse_value(tp: Any, v: Any, where: str) -> Any:
    """``v`` checked against type ``tp`` and converted (ints to floats, objects to kinds)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return v
    if origin in (Union, types.UnionType):
        if v is None and type(None) in args:
            return None
        alts = [a for a in args if a is not type(None)]
        for a in alts:
            try:
                return parse_value(a, v, where)
            except _Fail:
                if len(alts) == 1:
                    raise
        raise _fail(where, " or ".join(_EXPECT.get(a, str(a)) for a in alts), v)
    if origin is Literal:
        if v not in args:
            raise _Fail(where, f"must be {' or '.join(map(repr, args))}, got {v!r}")
        return v
    if origin is list:
        return [parse_value(args[0], x, f"{where}[{i}]")
                for i, x in enumerate(_scalar(list, v, where))]
    if origin is dict:
        out = {}
        for k, x in _scalar(dict, v, where).items():
            try:
                key = int(k) if args[0] is int else k
            except (TypeError, ValueError):
                raise _Fail(f"{where}.{k}", "must be keyed by a batch size (an integer)") \
                    from None
            out[key] = parse_value(args[1], x, f"{where}.{k}")
        return out
    if tp is Stats:
        return _stats(v, where)
    if dataclasses.is_dataclass(tp):
        return parse_kind(tp, v, where)  # type: ignore[arg-type]
    return _scalar(tp, v, where)


def parse_kind(cls: type[K], v: Any, where: str, **given: Any) -> K:
    """Kind ``cls`` (a dataclass) from the object ``v``: every field not ``given`` read by its
    type hint, then ``validate(data, where)``; :class:`_Fail` names the field at fault."""
    d = _scalar(dict, v, where)
    hints = _HINTS.get(cls) or _HINTS.setdefault(cls, typing.get_type_hints(cls))
    values = dict(given)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in values:
            continue
        path, raw, at = f.metadata.get("path") or (f.name,), d, where
        for i, part in enumerate(path):
            if not isinstance(raw, Mapping):
                raise _fail(at, "an object", raw)
            at, raw = f"{at}.{part}", raw.get(part, _MISSING)
            if raw is _MISSING or (raw is None and i < len(path) - 1):  # a null parent: missing
                raw = _MISSING
                break
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if raw is _MISSING or (raw is None and not required):
            if required:
                raise _Fail(at, "is missing")
            continue
        parse = f.metadata.get("parse")
        values[f.name] = parse(raw, at) if parse else parse_value(hints[f.name], raw, at)
    out = cls(**values)
    if isinstance(out, Kind):
        out.validate(d, where)
    return out


class Kind:
    """Base of the record kinds: ``from_data`` parses; ``validate`` checks across fields."""
    RECORD: ClassVar[str] = ""

    @classmethod
    def from_data(cls: type[K], data: Any, where: str = "data") -> K:
        return parse_kind(cls, data, where)

    def validate(self, data: Mapping, where: str) -> None:
        """Checks types cannot say; raises :class:`_Fail` naming the field."""


def _same_length(items: Any, sizes: Any, where: str, sizes_field: str) -> None:
    if len(items) != len(sizes):
        raise _Fail(where, f"must hold one entry per batch size ({len(sizes)} in "
                           f"{sizes_field}), got {len(items)}")


def _require(keys: Any, names: Any, where: str) -> None:
    for name in names:
        if name not in keys:
            raise _Fail(f"{where}.{name}", "is missing")


class _Timed(Kind):
    """Kinds with sizes (field ``SIZES``) and ``times[method]`` (a :class:`Stats` or null per
    size). Checked: ``PER_SIZE`` fields (a list, or a dict of lists) hold one entry per size,
    ``times`` has ``METHODS``, ``BY_METHOD`` fields (dicts) name only timed methods, and the
    stored derived columns (``STORED``) agree with ``times``."""
    SIZES: ClassVar[str] = "batch_sizes"
    SIZES_AT: ClassVar[str] = ""  #: where the sizes are, when not in the kind's own object
    PER_SIZE: ClassVar[tuple[str, ...]] = ("times",)
    METHODS: ClassVar[tuple[str, ...]] = ()
    BY_METHOD: ClassVar[tuple[str, ...]] = ()
    STORED: ClassVar[tuple[str, ...]] = ()
    times: dict[str, list[Stats | None]]

    @property
    def sizes_(self) -> list[int]:
        return list(getattr(self, self.SIZES))

    def validate(self, data: Mapping, where: str) -> None:
        for key in self.PER_SIZE:
            value = getattr(self, key)
            cols = value.items() if isinstance(value, dict) else [(None, value)]
            for name, col in cols:
                at = f"{where}.{key}" if name is None else f"{where}.{key}.{name}"
                _same_length(col, self.sizes_, at, self.SIZES_AT or f"{where}.{self.SIZES}")
        _require(self.times, self.METHODS, f"{where}.times")
        for key in self.BY_METHOD:
            extra = sorted(set(getattr(self, key)) - set(self.times))
            if extra:
                raise _Fail(f"{where}.{key}", f"names {extra}, which {where}.times lacks")
        for key in self.STORED:
            if data.get(key) is not None and (key != "speedup_vs_eager" or "eager" in self.times):
                self._check_stored(data[key], f"{where}.{key}", where, getattr(self, key))

    def _check_stored(self, stored: Any, at: str, where: str, derive: Any) -> None:
        """A stored derived column must agree with the one derived here from ``times``."""
        for m, col in parse_value(dict[str, list[float | None]], stored, at).items():
            if m not in self.times:
                raise _Fail(f"{at}.{m}", f"has no timings in {where}.times to be derived from")
            want = derive(m)
            _same_length(col, want, f"{at}.{m}", f"{where}.{self.SIZES}")
            for i, (got, exp) in enumerate(zip(col, want)):
                if (got is None) != (exp is None) or (
                        got is not None and not math.isclose(got, exp, rel_tol=1e-6)):
                    raise _Fail(f"{at}.{m}[{i}]", f"is {got!r} but {where}.times gives {exp!r}")

    @property
    def methods(self) -> list[str]:
        """The methods timed, in record order."""
        return list(self.times)

    def median_us(self, method: str) -> list[float | None]:
        """Median µs of ``method`` per size (``None``: not timed)."""
        if method not in self.times:
            raise KeyError(f"the record has no method {method!r}; it has {self.methods}")
        return [None if s is None else s.median for s in self.times[method]]

    def at(self, method: str, size: int) -> float | None:
        """Median µs of ``method`` at ``size`` (``None``: not measured)."""
        if size not in self.sizes_ or method not in self.times:
            return None
        return self.median_us(method)[self.sizes_.index(size)]

    def tokens_per_s(self, method: str) -> list[float | None]:
        """Tokens per second of ``method`` per batch size (:func:`tokens_per_s`)."""
        return [tokens_per_s(b, t) for b, t in zip(self.sizes_, self.median_us(method))]

    def speedup_vs_eager(self, method: str) -> list[float | None]:
        """Speed-up of ``method`` over eager per batch size (:func:`speedup`)."""
        return [speedup(e, t) for e, t in zip(self.median_us("eager"), self.median_us(method))]
