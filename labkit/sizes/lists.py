"""Capture-size lists: vLLM V0's fixed list and the coverage heuristic (engines.py: V1, SGLang)."""

from __future__ import annotations

from labkit.checks import as_int, as_number
from labkit.sizes.distribution import DistLike, to_distribution


def vllm_v0_sizes() -> list[int]:
    """vLLM V0 ``_BATCH_SIZES_TO_CAPTURE = [1, 2, 4] + [8 * i for i in range(1, 33)]`` (1..256;
    source: ``vllm/worker/model_runner.py``)."""
    return [1, 2, 4] + [8 * i for i in range(1, 33)]


def coverage_sizes(dist: DistLike, target: float = 0.95, max_sizes: int | None = None) -> list[int]:
    """The coverage heuristic: powers of two up to the ``target`` quantile of the sizes."""
    p = to_distribution(dist)
    target = as_number(target, "target", fix="give a share of steps in (0, 1], e.g. 0.95")
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target is a share of steps in (0, 1], got {target}; give e.g. 0.95")
    if max_sizes is not None:
        max_sizes = as_int(max_sizes, "max_sizes", minimum=1, fix="keep at least one size")
    cum, q = 0.0, max(p)
    for b, w in p.items():
        cum += w
        if cum >= target - 1e-12:
            q = b
            break
    ladder = [1 << i for i in range(q.bit_length()) if (1 << i) < q]
    if max_sizes is not None:
        ladder = ladder[len(ladder) - (int(max_sizes) - 1):] if int(max_sizes) > 1 else []
    return [*ladder, q]
