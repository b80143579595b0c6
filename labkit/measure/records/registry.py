"""Which kind a record name has, and parsing a record's ``data`` into its kind:
:data:`KINDS`, :func:`kind_of`, :func:`parse`, :func:`view` and :class:`SchemaError`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import labkit.measure.records.kinds as k
from labkit.measure.records.fields import _Fail, _type_name
from labkit.measure.records.serving import Serve, ServeLoad

K = TypeVar("K")


class SchemaError(ValueError):
    """A result record (file or dict) is not what its kind requires: a field is missing or
    has the wrong type, or the file is not a labkit result of this schema version."""


def _pattern(name: str) -> str:
    """A record name with ``<preset>`` / ``<name>`` as a regular expression."""
    return re.sub(r"<\w+>", "[A-Za-z0-9][A-Za-z0-9_.-]*", name)


#: (record-name pattern, kind), first match wins, from each kind's ``RECORD`` (and ``ALSO``):
#: ``dispatcher_overhead`` before ``dispatcher_<preset>``, ``compile_times_`` before ``compile_``
KINDS: list[tuple[str, type]] = [(_pattern(name), kind) for kind in (
    k.LaunchOverhead, k.Decode, k.Timeline, k.PoolMemory, k.DispatcherOverhead, k.Dispatcher,
    k.Compile, k.Pitfalls, k.Bench, k.Modes, k.Paged, Serve, k.PoolOverwrite, k.Fused,
    k.Roofline, k.Multistep, ServeLoad, k.TPAllReduce, k.TPDecode, k.Triton, k.Mixed,
    k.SpecVerify, k.Spec, k.Chunked, k.MemoryBudget, k.Numerics, k.Lazy, k.PastLaunch,
    k.WhileDecode, k.Breakable, k.LoRAGraphs, k.GraphMemory, k.PersistentStages)
    for name in (kind.RECORD, *getattr(kind, "ALSO", ()))]


def kind_of(name: str) -> type | None:
    """The record kind of record name ``name`` (``None``: not a kind this module knows)."""
    return next((kind for pattern, kind in KINDS if re.fullmatch(pattern, name)), None)


#: what to do about a record this labkit cannot read
RERECORD = ("re-record it with this labkit (`labkit run` or `labkit bench --record`), or read "
            "it with the labkit version that wrote it")


def parse(name: str, data: Mapping, *, source: str | None = None, fix: str = RERECORD) -> Any:
    """``data`` of record ``name`` as its kind (``data`` itself, as a dict, for a name no kind
    matches). Raises :class:`SchemaError` naming ``source`` (a file, or the record name), the
    field at fault and ``fix`` (what to do about it)."""
    where_from = source or f"record {name!r}"
    if not isinstance(data, Mapping):
        raise SchemaError(f"{where_from}: field 'data' must be an object, got "
                          f"{_type_name(data)}")
    kind = kind_of(name)
    return dict(data) if kind is None else _parse_as(kind, data, where_from, name, fix)


def _parse_as(kind: Any, data: Mapping, where_from: str, name: str, fix: str = RERECORD) -> Any:
    try:
        return kind.from_data(data, "data")
    except _Fail as exc:
        what = f"labkit.measure.records.{kind.__name__}"
        if name != kind.RECORD:
            what = f"a {name} record is a {what}"
        raise SchemaError(f"{where_from}: field '{exc.where}' {exc.problem} ({what}); "
                          f"{fix}") from None


def view(record: Any, kind: type[K]) -> K:
    """``record`` as ``kind``: a typed record is returned as it is; a
    :class:`labkit.measure.results.Result` or a ``data`` dict is parsed (a Result's name must
    be of that kind). :class:`SchemaError` when the fields do not fit, ``TypeError`` for
    anything else."""
    if isinstance(record, kind):
        return record
    data = getattr(record, "data", record)
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a {kind.__name__} record (a labkit Result, its data dict, "
                        f"or a labkit.measure.records.{kind.__name__}), got "
                        f"{type(record).__name__}")
    name = getattr(record, "name", None)
    record_name = getattr(kind, "RECORD", "")
    where_from = f"record {name!r}" if name else f"{record_name} record (a dict)"
    return _parse_as(kind, data, where_from, name or record_name,
                     "pass a record of that kind (e.g. load_reference of that name)")
