"""Which kind a record name has, and parsing a record's ``data`` into its kind:
:data:`KINDS`, :func:`kind_of`, :func:`parse`, :func:`view` and :class:`SchemaError`.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, TypeVar

from labkit.measure.records.compare import Bench, Modes, Paged
from labkit.measure.records.decode import Compile, Decode, Dispatcher, LaunchOverhead, Timeline
from labkit.measure.records.fields import _Fail, _type_name
from labkit.measure.records.memory import PoolMemory, PoolOverwrite
from labkit.measure.records.pitfalls import Pitfalls
from labkit.measure.records.roofline import Fused, Multistep, Roofline
from labkit.measure.records.serving import Serve, ServeLoad
from labkit.measure.records.tp import TPAllReduce, TPDecode


class SchemaError(ValueError):
    """A result record (file or dict) is not what its kind requires: a field is missing or
    has the wrong type, or the file is not a labkit result of this schema version."""


# ----------------------------------------------------------------------------- the registry

#: (record-name pattern, kind), first match wins; later issues append their kinds here
KINDS: list[tuple[str, type]] = [
    (r"launch_overhead", LaunchOverhead),
    (r"decode_[A-Za-z0-9][A-Za-z0-9_.-]*", Decode),
    (r"compile_times_[A-Za-z0-9][A-Za-z0-9_.-]*", Decode),
    (r"timeline_[A-Za-z0-9][A-Za-z0-9_.-]*", Timeline),
    (r"pool_memory_[A-Za-z0-9][A-Za-z0-9_.-]*", PoolMemory),
    (r"dispatcher_[A-Za-z0-9][A-Za-z0-9_.-]*", Dispatcher),
    (r"compile_[A-Za-z0-9][A-Za-z0-9_.-]*", Compile),
    (r"pitfalls", Pitfalls),
    (r"bench", Bench),
    (r"modes_[A-Za-z0-9][A-Za-z0-9_.-]*", Modes),
    (r"paged_[A-Za-z0-9][A-Za-z0-9_.-]*", Paged),
    (r"serve_[A-Za-z0-9][A-Za-z0-9_.-]*", Serve),
    (r"pool_overwrite", PoolOverwrite),
    (r"fused_[A-Za-z0-9][A-Za-z0-9_.-]*", Fused),
    (r"roofline_[A-Za-z0-9][A-Za-z0-9_.-]*", Roofline),
    (r"multistep_[A-Za-z0-9][A-Za-z0-9_.-]*", Multistep),
    (r"serving_load_[A-Za-z0-9][A-Za-z0-9_.-]*", ServeLoad),
    (r"tp_allreduce", TPAllReduce),
    (r"tp_decode_[A-Za-z0-9][A-Za-z0-9_.-]*", TPDecode),
]


def kind_of(name: str) -> type | None:
    """The record kind of record name ``name`` (``None``: not a kind this module knows)."""
    for pattern, kind in KINDS:
        if re.fullmatch(pattern, name):
            return kind
    return None


_RERECORD = ("re-record it with this labkit (`labkit run` or `labkit bench --record`), or read "
             "it with the labkit version that wrote it (its env.labkit field)")


def parse(name: str, data: Mapping, *, source: str | None = None, fix: str = _RERECORD) -> Any:
    """``data`` of record ``name`` as its kind (``data`` itself, as a dict, for a name no kind
    matches). Raises :class:`SchemaError` naming ``source`` (a file, or the record name), the
    field at fault and ``fix`` (what to do about it)."""
    where_from = source or f"record {name!r}"
    if not isinstance(data, Mapping):
        raise SchemaError(f"{where_from}: field 'data' must be an object, got "
                          f"{_type_name(data)}")
    kind = kind_of(name)
    if kind is None:
        return dict(data)
    return _parse_as(kind, data, where_from, name, fix)


def _parse_as(kind: type, data: Mapping, where_from: str, name: str,
              fix: str = _RERECORD) -> Any:
    try:
        return kind.from_data(data, "data")
    except _Fail as exc:
        what = f"labkit.measure.records.{kind.__name__}"
        if name != kind.RECORD:
            what = f"a {name} record is a {what}"
        raise SchemaError(f"{where_from}: field '{exc.where}' {exc.problem} ({what}); "
                          f"{fix}") from None


K = TypeVar("K")


def view(record: Any, kind: type[K]) -> K:
    """``record`` as ``kind``: a typed record is returned as it is; a
    :class:`labkit.measure.results.Result` or a ``data`` dict is parsed (a Result's name must
    be of that kind). Raises :class:`SchemaError` when the fields do not fit, ``TypeError``
    for anything else."""
    if isinstance(record, kind):
        return record
    data = getattr(record, "data", record)
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a {kind.__name__} record (a labkit Result, its data dict, "
                        f"or a labkit.measure.records.{kind.__name__}), got "
                        f"{type(record).__name__}")
    name = getattr(record, "name", None)
    where_from = f"record {name!r}" if name else f"{kind.RECORD} record (a dict)"
    return _parse_as(kind, data, where_from, name or kind.RECORD,
                     "pass a record of that kind (e.g. load_reference of that name)")
