"""The result records labkit writes, as typed data: one place for their fields, derived values
and default measurement parameters.

A record file (see :mod:`labkit.measure.results`) holds ``{"schema", "name", "created",
"params", "env", "data"}``; this package describes ``data``, by record kind:

=========================  ======================  ==========================================
record name                kind                    written by
=========================  ======================  ==========================================
``launch_overhead``        :class:`LaunchOverhead` ``bench.measure_launch_overhead``
``decode_<preset>``        :class:`Decode`         ``bench.measure_decode``
``compile_times_<preset>`` :class:`Decode`         ``bench.measure_decode`` (``labkit bench``)
``timeline_<preset>``      :class:`Timeline`       ``bench.measure_timeline``
``pool_memory_<preset>``   :class:`PoolMemory`     ``bench.measure_pool_memory``
``dispatcher_<preset>``    :class:`Dispatcher`     ``bench.measure_dispatcher``
``compile_<preset>``       :class:`Compile`        ``bench.measure_compile``
``pitfalls``               :class:`Pitfalls`       ``pitfalls.run_all_pitfalls``
``bench``                  :class:`Bench`          ``labkit bench`` (``suite.bench_cli``)
``modes_<preset>``         :class:`Modes`          ``modes.measure_modes``
``paged_<preset>``         :class:`Paged`          ``paged.measure_paged``
``serve_<name>``           :class:`Serve`          ``labkit serve`` (``serve.measure_serving``)
``serving_load_<preset>``  :class:`ServeLoad`      ``serve_load.measure_load_curve``
``pool_overwrite``         :class:`PoolOverwrite`  ``pool_overwrite.measure_pool_overwrite``
``fused_<preset>``         :class:`Fused`          ``fused_bench.measure_fused``
``roofline_<preset>``      :class:`Roofline`       ``roofline.measure_roofline``
``multistep_<preset>``     :class:`Multistep`      ``roofline.measure_multistep``
``tp_allreduce``           :class:`TPAllReduce`    ``labkit tp`` (``measure.tp.measure_tp``)
``tp_decode_<preset>``     :class:`TPDecode`       ``labkit tp`` (``measure.tp.measure_tp``)
=========================  ======================  ==========================================

* :func:`parse` turns a record's ``data`` into its kind (checking required fields and their
  types; extra fields are kept in ``data`` and ignored here); :func:`kind_of` says which kind
  a record name has (``None``: a record this package does not describe, checked only as JSON).
* Derived values (tokens/s, speed-up over eager, dispatcher over graph, ...) are computed by
  :func:`tokens_per_s`, :func:`speedup` and :func:`ratio` only: the writers store them with
  these functions and the readers recompute them with the same ones.
* :data:`DEFAULTS` says with which parameters each reference record is measured.

Times are in microseconds (``*_us``, and every :class:`Stats` with ``unit == "us"``), memory in
bytes (``*_bytes``), durations of set-up work in seconds (``*_s``).

The package, one job a module: ``fields`` (the private field checks: ``_req``, ``_opt``,
``_num``, ..., stored :class:`Stats`, ``_Timed``), ``derived`` (:func:`tokens_per_s`,
:func:`speedup`, :func:`ratio`, what a GPU operation count counts), the kinds by area
(``decode``, ``memory``, ``pitfalls``, ``compare``, ``serving``, ``roofline``, ``tp``),
``registry`` (:data:`KINDS`, :func:`kind_of`, :func:`parse`, :func:`view`,
:class:`SchemaError`) and ``defaults`` (:data:`DEFAULTS` and the parameter dicts).

To add a kind: write a dataclass with a ``from_data(data, where)`` classmethod in the module of
its area (use the ``_req`` / ``_opt`` helpers of ``fields``), re-export it here, and add
``(name pattern, class)`` to :data:`KINDS` and, if it is measured with parameters, its
defaults to :data:`DEFAULTS`.
"""

from __future__ import annotations

from labkit.measure.records.compare import (
    PAGED_LAYOUTS, Bench, BenchPool, BenchRow, BenchTarget, Modes, Paged, PagedRun, bench_row,
)
from labkit.measure.records.decode import (
    Compile, Decode, Dispatcher, LaunchOverhead, SweepPoint, Timeline, TimelineEvent,
    TimelineMethod,
)
from labkit.measure.records.defaults import (
    DEFAULTS, SERVE_RECORDS, default_params, measure_kwargs,
)
from labkit.measure.records.derived import (
    GPU_OPS_COUNTED, GPU_OPS_SCOPE, ratio, speedup, tokens_per_s,
)
from labkit.measure.records.memory import (
    OverwriteFix, PoolAtMaxSeq, PoolLayout, PoolMemory, PoolOverwrite,
)
from labkit.measure.records.pitfalls import Pitfall, Pitfalls
from labkit.measure.records.registry import KINDS, SchemaError, kind_of, parse, view
from labkit.measure.records.roofline import (
    FUSED_STEPS, MULTISTEP_METHODS, Fused, Multistep, Roofline, RooflineVariant,
)
from labkit.measure.records.serving import (
    Serve, ServeLoad, ServeLoadPoint, ServeRequest, ServeStep,
)
from labkit.measure.records.tp import TPAllReduce, TPDecode
from labkit.timing import Stats

__all__ = [
    "SchemaError", "Stats", "LaunchOverhead", "SweepPoint", "Decode", "Timeline",
    "TimelineMethod", "TimelineEvent", "PoolMemory", "PoolLayout", "PoolAtMaxSeq", "Dispatcher",
    "Compile", "Pitfalls", "Pitfall", "Bench", "BenchRow", "BenchTarget", "BenchPool", "Paged",
    "PagedRun", "KINDS",
    "DEFAULTS", "kind_of", "parse", "view", "tokens_per_s", "speedup", "ratio",
    "default_params", "measure_kwargs", "bench_row", "Modes", "Serve", "ServeRequest",
    "ServeStep", "PoolOverwrite", "OverwriteFix", "GPU_OPS_COUNTED", "GPU_OPS_SCOPE", "Fused",
    "Roofline", "RooflineVariant", "Multistep", "MULTISTEP_METHODS",
    "ServeLoad", "ServeLoadPoint", "SERVE_RECORDS",
    "TPAllReduce", "TPDecode", "PAGED_LAYOUTS", "FUSED_STEPS",
]
