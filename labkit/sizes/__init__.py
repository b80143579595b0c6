"""Choosing CUDA-graph capture sizes from a decode batch-size distribution (notebook 06).

An engine pads every decode step up to the smallest captured size that fits (above the largest
it runs eager): which sizes to capture trades padding waste, graph hit rate and graph memory.
Pure Python and numpy: nothing here imports torch.
"""

from __future__ import annotations

from labkit.sizes.distribution import DistLike, load_trace, to_distribution
from labkit.sizes.engines import SGLANG_VERSION, VLLM_VERSION
from labkit.sizes.engines import sglang_default_capture_sizes as sglang_default_sizes
from labkit.sizes.engines import vllm_default_capture_sizes as vllm_default_sizes
from labkit.sizes.fit import Interpolated, LinearFit, isotonic, linear_fit
from labkit.sizes.lists import coverage_sizes, vllm_v0_sizes
from labkit.sizes.memory import MemoryModel, Pool, set_memory
from labkit.sizes.optimal import ParetoPoint, optimal_sizes, pareto_front
from labkit.sizes.padding import (PaddingReport, expected_padding, expected_step_cost,
                                  padded_size, padding_table)
from labkit.sizes.problem import CostModel

__all__ = [
    "SGLANG_VERSION", "VLLM_VERSION", "Interpolated", "LinearFit", "PaddingReport",
    "ParetoPoint", "coverage_sizes", "expected_padding", "expected_step_cost", "isotonic",
    "linear_fit", "load_trace", "optimal_sizes", "padded_size", "padding_table", "pareto_front",
    "set_memory", "sglang_default_sizes", "to_distribution", "vllm_default_sizes",
    "vllm_v0_sizes",
    # the type aliases of the signatures above
    "CostModel", "DistLike", "MemoryModel", "Pool",
]
