"""The result records labkit writes, as typed data: one place for their fields, derived values
and default measurement parameters.

A record file (:mod:`labkit.measure.results`) holds ``{"schema", "name", "created", "params",
"env", "data"}``; this package describes ``data`` by record kind. Each kind is a frozen
dataclass (``kinds``; serving's in ``serving``) whose ``RECORD`` names its records
(``decode_<preset>`` ...) and whose fields, with their types, are the schema: ``fields`` reads
any kind from them (:func:`parse_kind`) and a kind's ``validate`` checks what types cannot
say. ``registry``: :data:`KINDS`, :func:`kind_of`, :func:`parse` (extra fields stay in
``data``), :func:`view`, :class:`SchemaError` naming the file and the field. ``derived``:
:func:`tokens_per_s`, :func:`speedup`, :func:`ratio` (computed there and nowhere else).
``defaults``: :data:`DEFAULTS`, the parameters each reference record is measured with.

A new kind: a dataclass deriving from ``Kind`` (``_Timed`` for ``times[method]`` per size) in
``kinds``, its ``RECORD``, an entry in :data:`KINDS`, its defaults in :data:`DEFAULTS`.
"""

from __future__ import annotations

from labkit.measure.records.defaults import DEFAULTS, SERVE_RECORDS, default_params, measure_kwargs
from labkit.measure.records.derived import (
    GPU_OPS_COUNTED, GPU_OPS_SCOPE, ratio, speedup, tokens_per_s,
)
from labkit.measure.records.fields import Kind, parse_kind
from labkit.measure.records.kinds import (
    FUSED_STEPS, MULTISTEP_METHODS, OVERHEAD_METHODS, PAGED_LAYOUTS, Bench, BenchPool, BenchRow,
    BenchTarget, Compile, Decode, Dispatcher, DispatcherOverhead, Fused, LaunchOverhead, Modes,
    Multistep, OverheadRun, OverwriteFix, Paged, PagedRun, Pitfall, Pitfalls, PoolAtMaxSeq,
    PoolLayout, PoolMemory, PoolOverwrite, Roofline, RooflineVariant, SweepPoint, Timeline,
    TimelineEvent, TimelineMethod, TPAllReduce, TPDecode, Triton, bench_row,
)
from labkit.measure.records.registry import KINDS, RERECORD, SchemaError, kind_of, parse, view
from labkit.measure.records.serving import Serve, ServeLoad, ServeLoadPoint, ServeRequest, ServeStep
from labkit.timing import Stats

__all__ = [
    "DEFAULTS", "SERVE_RECORDS", "default_params", "measure_kwargs", "GPU_OPS_COUNTED",
    "GPU_OPS_SCOPE", "ratio", "speedup", "tokens_per_s", "Kind", "parse_kind", "FUSED_STEPS",
    "MULTISTEP_METHODS", "OVERHEAD_METHODS", "PAGED_LAYOUTS", "Bench", "BenchPool",
    "BenchRow", "BenchTarget", "Compile", "Decode", "Dispatcher", "DispatcherOverhead",
    "Fused", "Triton", "LaunchOverhead", "Modes", "Multistep", "OverheadRun", "OverwriteFix",
    "Paged",
    "PagedRun", "Pitfall", "Pitfalls", "PoolAtMaxSeq", "PoolLayout", "PoolMemory",
    "PoolOverwrite", "Roofline", "RooflineVariant", "SweepPoint", "Timeline", "TimelineEvent",
    "TimelineMethod", "TPAllReduce", "TPDecode", "bench_row", "KINDS", "RERECORD", "SchemaError",
    "kind_of", "parse", "view", "Serve", "ServeLoad", "ServeLoadPoint", "ServeRequest",
    "ServeStep", "Stats",
]
