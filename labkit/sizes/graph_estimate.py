"""Estimates of the memory of CUDA graphs captured into ONE shared pool, from the bytes of a few
sampled captures: vLLM's linear extrapolation and labkit's largest-plus-residue estimate (pure;
no torch).

**Why vLLM's over-estimates.** ``GPUModelRunner.profile_cudagraph_memory``
(vllm/v1/worker/gpu_model_runner.py, PR #30515) captures the two largest sizes into a temporary
pool and reserves ``first + max(second, 1 MiB) x (n - 1)``
(:func:`labkit.sizes.engines.vllm_graph_estimate`): every further graph is charged as if it
kept memory of its own. In one shared pool captured largest first, a later graph runs its
intermediates in the blocks the earlier ones freed, so the pool ends near the largest graph's
working set, not a sum; the 1 MiB floor alone charges ``n - 1`` MiB that no graph takes
(vLLM #45178, whose root-cause comment names the linear ``x N`` over one shared mempool; #53013).

**labkit's estimate.** Two captures into a temporary shared pool, against the cache the graphs
will really be captured against (graph memory follows the cache's shape: the readable step's
attention reads ``max_seq`` positions per row): the largest size alone, then the smallest into
the same pool. The pool is then

    largest's growth + smallest's growth + what each other graph keeps,

where a graph *keeps* the pool blocks still live after its capture (outputs or buffers it
retains; none in labkit's step, whose logits lie outside the pool), interpolated linearly in
the batch size between the two samples. The smallest's growth covers the one-off step a small
graph can add (a block size the largest never asked for opens a segment of its own); it is not
charged again per graph, because later graphs find that segment free. vLLM's model runner V2
(vllm/v1/worker/gpu/, ``_extrapolate_full_graph_memory`` with ``_FullGraphMemorySample``'s
``growth`` and ``cost``) moved to the same split: the growth of its sampled FULL graphs (the two
largest and the smallest), then per unsampled graph what the sampled graphs keep, interpolated
in their token counts, at least 1 MiB; labkit simplifies it to two samples and no floor.
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.checks import as_int_list, as_number, as_size_list
from labkit.sizes.engines import vllm_graph_estimate, vllm_sample_sizes

__all__ = ["estimate_error_pct", "labkit_graph_estimate", "labkit_sample_sizes",
           "vllm_estimate", "vllm_sample_sizes"]


def _sizes(sizes: Sequence[int]) -> list[int]:
    """The capture sizes, sorted, each once."""
    return sorted(as_size_list(sizes, "sizes", distinct=True,
                               fix="give the capture sizes of one list, each once"))


def _bytes(values: Sequence[int], name: str, count: int) -> list[int]:
    """``count`` byte counts (ints >= 0) named ``name``: the largest size's, then the
    smallest's."""
    out = as_int_list(values, name, minimum=0, fix="give byte counts as whole numbers >= 0")
    if len(out) != count:
        raise ValueError(f"{name} holds {len(out)} values for {count} sampled capture(s); give "
                         f"{count}: the largest size's bytes" + (", then the smallest's"
                                                                 if count == 2 else ""))
    return out


def vllm_estimate(sample_bytes: Sequence[int], sizes: Sequence[int]) -> int:
    """vLLM's estimate for capture list ``sizes`` from the bytes its two samples added
    (:func:`vllm_sample_sizes`, largest first): :func:`labkit.sizes.engines.vllm_graph_estimate`
    with ``n = len(sizes)``."""
    return vllm_graph_estimate(sample_bytes, len(_sizes(sizes)))


def labkit_sample_sizes(sizes: Sequence[int]) -> list[int]:
    """The sizes labkit's estimate captures, in capture order: the largest, then the smallest
    (one size: itself)."""
    s = _sizes(sizes)
    return [s[-1]] if len(s) == 1 else [s[-1], s[0]]


def labkit_graph_estimate(sizes: Sequence[int], grown: Sequence[int],
                          kept: Sequence[int] | None = None) -> int:
    """labkit's estimate of one shared pool holding a graph per size of ``sizes``, captured
    largest first: ``grown[0] + grown[1] + sum(kept(b) for the other sizes b)``.

    ``grown``: the pool bytes each of :func:`labkit_sample_sizes`' captures added to a fresh
    pool (the largest's, then the smallest's); ``kept``: the live (active) pool bytes each
    added, what that graph keeps (``None``: nothing, as labkit's step). ``kept(b)`` is
    interpolated linearly in ``b`` between the smallest's and the largest's, rounded up.
    One size: ``grown[0]``."""
    s = _sizes(sizes)
    n = 1 if len(s) == 1 else 2
    g = _bytes(grown, "grown", n)
    k = [0] * n if kept is None else _bytes(kept, "kept", n)
    if n == 1:
        return g[0]
    lo, hi = s[0], s[-1]
    k_hi, k_lo = k
    middle = sum(k_lo - (-(k_hi - k_lo) * (b - lo) // (hi - lo)) for b in s[1:-1])  # ceil
    return g[0] + g[1] + middle


def estimate_error_pct(estimate: int, measured: int) -> float:
    """How far ``estimate`` is from ``measured`` bytes, in percent of ``measured``: > 0 reserves
    too much (KV cache given up), < 0 too little (the capture can run out of memory)."""
    est = as_number(estimate, "estimate", minimum=0, fix="give the estimated bytes, >= 0")
    meas = as_number(measured, "measured", minimum=0, fix="give the measured bytes, > 0")
    if meas == 0:
        raise ValueError("measured is 0 bytes: an error in percent needs measured graph memory "
                         "> 0; compare the bytes instead")
    return 100.0 * (est - meas) / meas
