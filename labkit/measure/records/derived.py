"""Derived values of records (tokens/s, speed-up, ratio) and what a GPU operation count counts:
the writers store them with these functions and the readers recompute them with the same ones.
"""

from __future__ import annotations


def tokens_per_s(batch_size: int, step_us: float | None) -> float | None:
    """Tokens per second of a decode step of ``batch_size`` rows taking ``step_us`` µs
    (every step makes one token per row); ``None`` when the step was not timed."""
    if step_us is None:
        return None
    return batch_size / (step_us * 1e-6)


def speedup(eager_us: float | None, method_us: float | None) -> float | None:
    """How many times faster than eager: ``eager_us / method_us`` (``None`` if either is
    missing)."""
    return ratio(eager_us, method_us)


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` for two timings of one batch size (e.g. dispatcher over graph); ``None``
    when either is missing."""
    if a is None or b is None:
        return None
    return a / b


# ----------------------------------------------------------------------------- GPU op counts

#: what a record's GPU operation count (``kernels_per_step``, ``gpu_ops_per_step``) counts,
#: said once: :func:`labkit.measure.bench.count_step_ops` makes every such count
GPU_OPS_COUNTED = ("kernels plus memory copies and fills of one decode step at batch 1, its "
                   "inputs already on the GPU, counted by torch.profiler")
#: the ``gpu_ops_counted`` field of a record whose count counted the step alone; records
#: without the field were made before it existed (``decode_<preset>`` records of that time
#: also counted the three host-to-device copies of the step's inputs)
GPU_OPS_SCOPE = "decode_step"
