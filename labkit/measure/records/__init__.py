"""The result records labkit writes, as typed data (the ``data`` of a record file,
:mod:`labkit.measure.results`).

To add a record kind: a ``@dataclass(frozen=True, kw_only=True)`` in ``kinds`` deriving from
``Kind`` (``_Run`` for ``times[method]`` per batch size) with ``RECORD``, its name pattern
(``decode_<preset>``), and type-hinted fields (a field with a default is optional in the file);
a ``validate(self, data, where)`` only for what the types cannot say (raise
``_Fail(f"{where}.<field>", problem)``); one entry in :data:`KINDS`; its recipe in
:data:`RECIPES` (``recipes``: its measuring function and what differs from the function's
defaults). The one parser (``fields``) reads every kind from its fields and type hints;
``registry`` maps names to kinds (:func:`parse`, :func:`view`, :class:`SchemaError` naming
file and field); ``derived`` computes tokens/s, speed-ups and ratios.
"""

from __future__ import annotations

from labkit.measure.records.recipes import (
    MADE_BY_COMMAND, RECIPES, SERVE_RECORDS, Recipe, default_params, measure_kwargs, recipe,
)
from labkit.measure.records.derived import (
    GPU_OPS_COUNTED, GPU_OPS_SCOPE, ratio, speedup, tokens_per_s,
)
from labkit.measure.records.kinds import (
    FUSED_STEPS, MULTISTEP_CONTROLS, MULTISTEP_METHODS, OVERHEAD_METHODS, PAGED_LAYOUTS, Bench,
    Chunked, Compile, Decode, Dispatcher, DispatcherOverhead, Fused, LaunchOverhead, Lazy,
    MemoryBudget, Mixed,
    Modes, Multistep, Numerics, NumericsDtype, Paged, Pitfall, Pitfalls, PoolAtMaxSeq,
    PoolMemory, PoolOverwrite, Recaptures, Roofline, Spec, SpecVerify, Timeline, TPAllReduce,
    TPDecode, Triton, bench_row, PastLaunch, WhileDecode, Breakable, LoRAGraphs, GraphMemory,
    PersistentStages, PAST_LAUNCH_STEPS, PERSISTENT_STAGE_STEPS, WHILE_METHODS, LORA_STEPS,
)
from labkit.measure.records.registry import KINDS, RERECORD, SchemaError, kind_of, parse, view
from labkit.measure.records.serving import Serve, ServeLoad

#: the record kinds and what they are built from (the field kinds, e.g. ``PagedRun``, stay in
#: their modules)
__all__ = [
    "MADE_BY_COMMAND", "RECIPES", "SERVE_RECORDS", "Recipe", "default_params", "measure_kwargs",
    "recipe", "GPU_OPS_COUNTED",
    "GPU_OPS_SCOPE", "ratio", "speedup", "tokens_per_s", "FUSED_STEPS", "MULTISTEP_CONTROLS",
    "MULTISTEP_METHODS",
    "OVERHEAD_METHODS", "PAGED_LAYOUTS", "Bench", "Chunked", "Compile", "Decode", "Dispatcher",
    "DispatcherOverhead", "Fused", "LaunchOverhead", "Lazy", "MemoryBudget", "Mixed", "Modes",
    "Multistep", "Numerics", "NumericsDtype", "Paged", "Pitfall", "Pitfalls", "PoolAtMaxSeq",
    "PoolMemory", "PoolOverwrite", "Recaptures", "Roofline", "Spec", "SpecVerify", "Timeline",
    "TPAllReduce", "TPDecode", "Triton", "bench_row", "KINDS", "RERECORD", "SchemaError",
    "kind_of", "parse", "view", "Serve", "ServeLoad", "PastLaunch", "WhileDecode", "Breakable",
    "LoRAGraphs", "GraphMemory", "PAST_LAUNCH_STEPS", "WHILE_METHODS", "LORA_STEPS",
    "PersistentStages", "PERSISTENT_STAGE_STEPS",
]
