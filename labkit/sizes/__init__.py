"""Choosing CUDA-graph capture sizes from a decode batch-size distribution.

A serving engine captures one CUDA graph per *capture size* and pads every decode step up to
the smallest captured size that fits (batches above the largest size run eager). Which sizes
to capture is a trade-off between padding waste, graph hit rate and graph memory. This package
holds the pieces notebook 06 uses, one module per job, all imported from ``labkit.sizes``:

* distributions (:mod:`~labkit.sizes.distribution`): :func:`to_distribution`,
  :func:`load_trace` (the shipped request-size traces);
* padding (:mod:`~labkit.sizes.padding`): :func:`padded_size`, :func:`padding_table`,
  :func:`expected_padding`, :func:`expected_step_cost`;
* engines (:mod:`~labkit.sizes.engines`): the one versioned table of real engines' CUDA-graph
  defaults (vLLM 0.13.0, SGLang 0.5.6: capture sizes, modes, speculative rounding, memory
  budgets), with :func:`vllm_default_sizes` and :func:`sglang_default_sizes` from it;
* size lists (:mod:`~labkit.sizes.lists`): vLLM V0's list (:func:`vllm_v0_sizes`) and the
  coverage heuristic (:func:`coverage_sizes`);
* graph memory (:mod:`~labkit.sizes.memory`): :func:`linear_memory`, :func:`set_memory`;
* cost models from measurements (:mod:`~labkit.sizes.fit`): :func:`linear_fit`,
  :class:`Interpolated` (piecewise linear), :func:`isotonic` (made non-decreasing);
* the exact optimum under a size count and a memory budget (:mod:`~labkit.sizes.optimal`:
  :func:`optimal_sizes`, checked against :func:`brute_force_optimal`), plus the memory/cost
  Pareto front (:func:`pareto_front`); the problem they solve is built in
  :mod:`~labkit.sizes.problem` and searched in :mod:`~labkit.sizes.search`.

A *distribution* is a mapping ``batch size -> count or probability`` or a sequence of observed
batch sizes (one per decode step); :func:`to_distribution` turns either into probabilities.
Pure Python and numpy: nothing here imports torch.
"""

from __future__ import annotations

from labkit.sizes.distribution import DistLike, load_trace, to_distribution, trace_path
from labkit.sizes.engines import SGLANG_VERSION, VLLM_VERSION
from labkit.sizes.engines import sglang_default_capture_sizes as sglang_default_sizes
from labkit.sizes.engines import vllm_default_capture_sizes as vllm_default_sizes
from labkit.sizes.fit import Interpolated, LinearFit, isotonic, linear_fit
from labkit.sizes.lists import coverage_sizes, vllm_v0_sizes
from labkit.sizes.memory import MemoryModel, Pool, linear_memory, set_memory
from labkit.sizes.optimal import ParetoPoint, brute_force_optimal, optimal_sizes, pareto_front
from labkit.sizes.padding import (PaddingReport, expected_padding, expected_step_cost,
                                  padded_size, padding_table)
from labkit.sizes.problem import CostModel

__all__ = [
    "SGLANG_VERSION", "VLLM_VERSION", "Interpolated", "LinearFit", "PaddingReport",
    "ParetoPoint", "brute_force_optimal", "coverage_sizes", "expected_padding",
    "expected_step_cost", "isotonic", "linear_fit", "linear_memory", "load_trace",
    "optimal_sizes", "padded_size", "padding_table", "pareto_front", "set_memory",
    "sglang_default_sizes", "to_distribution", "trace_path", "vllm_default_sizes",
    "vllm_v0_sizes",
    # the type aliases of the signatures above
    "CostModel", "DistLike", "MemoryModel", "Pool",
]
