"""The result records labkit writes, as typed data: one place for their fields, derived values
and default measurement parameters.

A record file (:mod:`labkit.measure.results`) holds ``{"schema", "name", "created", "params",
"env", "data"}``; this package describes ``data`` by record kind, one frozen dataclass each
(``kinds``; serving's in ``serving``) whose ``RECORD`` names its records (``decode_<preset>``
...) and whose typed fields are the schema, read by ``fields``; ``registry`` maps names to
kinds and parses (:func:`parse`, :func:`view`, :class:`SchemaError` naming file and field);
``derived`` computes tokens/s, speed-ups and ratios; ``defaults`` holds :data:`DEFAULTS`.

A new kind: a dataclass deriving from ``Kind`` (``_Timed`` for ``times[method]`` per size) in
``kinds``, its ``RECORD``, an entry in :data:`KINDS`, its defaults in :data:`DEFAULTS`.
"""

from __future__ import annotations

from labkit.measure.records.defaults import DEFAULTS, SERVE_RECORDS, default_params, measure_kwargs
from labkit.measure.records.derived import (
    GPU_OPS_COUNTED, GPU_OPS_SCOPE, ratio, speedup, tokens_per_s,
)
from labkit.measure.records.kinds import (
    FUSED_STEPS, MULTISTEP_METHODS, OVERHEAD_METHODS, PAGED_LAYOUTS, Bench, Compile, Decode,
    Dispatcher, DispatcherOverhead, Fused, LaunchOverhead, Modes, Multistep, Paged, Pitfall,
    Pitfalls, PoolAtMaxSeq, PoolMemory, PoolOverwrite, Roofline, Timeline, TPAllReduce, TPDecode,
    Triton, bench_row,
)
from labkit.measure.records.registry import KINDS, RERECORD, SchemaError, kind_of, parse, view
from labkit.measure.records.serving import Serve, ServeLoad

#: the record kinds and what they are built from (the field kinds, e.g. ``PagedRun``, stay in
#: their modules)
__all__ = [
    "DEFAULTS", "SERVE_RECORDS", "default_params", "measure_kwargs", "GPU_OPS_COUNTED",
    "GPU_OPS_SCOPE", "ratio", "speedup", "tokens_per_s", "FUSED_STEPS", "MULTISTEP_METHODS",
    "OVERHEAD_METHODS", "PAGED_LAYOUTS", "Bench", "Compile", "Decode", "Dispatcher",
    "DispatcherOverhead", "Fused", "LaunchOverhead", "Modes", "Multistep", "Paged", "Pitfall",
    "Pitfalls", "PoolAtMaxSeq", "PoolMemory", "PoolOverwrite", "Roofline", "Timeline",
    "TPAllReduce", "TPDecode", "Triton", "bench_row", "KINDS", "RERECORD", "SchemaError",
    "kind_of", "parse", "view", "Serve", "ServeLoad",
]
