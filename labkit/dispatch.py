"""The padding dispatcher: serve any decode batch from a few captured graphs, padding each batch
to the smallest size that holds it, as vLLM does. :class:`PaddingDispatcher` is the one runner
(:class:`labkit.runner.ModelRunner`) for the uniform case, decode steps of one token a row,
under the name notebooks 04-16 use; the decision is vLLM's (:class:`labkit.mixed.TokenDispatcher`
by the rules of :mod:`labkit.rules`). Modes are vLLM's ``CUDAGraphMode``
(``vllm/config/compilation.py``); ``FULL_AND_PIECEWISE``: full graphs up to ``full_max_size``
(vLLM's ``max_num_seqs``), pieces above. Batches above the largest size run eager (counted).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Literal, NamedTuple

from labkit.checks import as_bool, as_int
from labkit.graphs import GraphSet, Order, PoolMode
from labkit.model import TinyGPT
from labkit.rules import RuntimeMode, padded_size, padding_table
from labkit.runner import STEP_NAMES, ModelRunner, StepName
from labkit.step_checks import check_capture_sizes, check_choice

CudagraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE"]
CUDAGRAPH_MODES: tuple[CudagraphMode, ...] = ("NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE")
__all__ = ["CUDAGRAPH_MODES", "STEP_NAMES", "CudagraphMode", "Decision", "PaddingDispatcher",
           "StepName", "build_padding_table"]


class Decision(NamedTuple):
    """What one decode step runs: ``mode`` and the rows it computes (``padded``; NONE: the
    batch's own). vLLM keys it by a ``BatchDescriptor(num_tokens, num_reqs, uniform)``; a decode
    batch is uniform, so its row count is the whole key."""

    mode: RuntimeMode
    padded: int


def build_padding_table(sizes: Sequence[int], max_bs: int) -> list[int]:
    """``table[b]`` = smallest size in ``sizes`` that is >= ``b``, or 0 (run eager): the checked
    :func:`labkit.rules.padding_table`."""
    max_bs = as_int(max_bs, "max_bs", minimum=0, fix="give the largest batch size to serve")
    return padding_table(check_capture_sizes(sizes), max_bs)


class PaddingDispatcher(ModelRunner):
    """Route each decode step to the smallest captured graph that fits, padding the rest.

    ``capture`` (``None``: on CUDA; ``mode='graph'``/``'eager'`` is its deprecated spelling)
    captures the graphs; ``False`` runs the same padded batches eagerly. Every batch is checked
    (``check`` as in :mod:`labkit.step_checks`, ``True`` by default) before anything is copied.
    ``step``: the readable, fused or Triton step in FULL graphs. ``lazy=True`` (FULL graphs):
    capture each size the first time a batch needs it (:attr:`lazy_capture_s`). The rest as
    :class:`labkit.runner.ModelRunner`, with ``decode_only``: only the graphs a decode step
    reaches are captured.
    """

    def __init__(self, model: TinyGPT, capture_sizes: Sequence[int], *,
                 capture: bool | None = None, pool: PoolMode = "shared",
                 order: Order = "largest_first", copy_outputs: bool = True, warmup: int = 3,
                 progress: bool | None = None, graphs: GraphSet | None = None,
                 cudagraph_mode: CudagraphMode = "FULL", full_max_size: int | None = None,
                 step: StepName = "readable", mode: Literal["graph", "eager"] | None = None,
                 lazy: bool = False) -> None:
        if not isinstance(model, TinyGPT):
            raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}; build one "
                            "with labkit.model.build_model")
        capture = _check_capture_flag(model, capture, mode)
        check_choice(cudagraph_mode, "cudagraph_mode", CUDAGRAPH_MODES)
        if cudagraph_mode == "FULL_AND_PIECEWISE":
            if full_max_size is None:
                raise ValueError("cudagraph_mode='FULL_AND_PIECEWISE' needs full_max_size: full "
                                 "graphs up to it, pieces above it")
            full_max_size = as_int(full_max_size, "full_max_size", minimum=1,
                                   fix="give the largest size captured as a full graph")
        elif full_max_size is not None:
            raise ValueError("full_max_size only applies to cudagraph_mode='FULL_AND_PIECEWISE'")
        if lazy and cudagraph_mode != "FULL":
            raise ValueError("lazy=True captures FULL graphs on first use: use it with "
                             "cudagraph_mode='FULL' and no graphs=")
        super().__init__(model, capture_sizes, cudagraph_mode=cudagraph_mode,
                         max_num_seqs=full_max_size, decode_only=True, step=step,
                         capture=capture, lazy=lazy, copy_outputs=copy_outputs, pool=pool,
                         order=order, warmup=warmup, progress=progress, graphs=graphs)
        self.cudagraph_mode = cudagraph_mode

    def padded_size(self, bs: int) -> int | None:
        """The graph size a batch of ``bs`` rows runs in, or ``None`` for eager."""
        bs = as_int(bs, "batch size", minimum=1, fix="a decode step has at least one row")
        return padded_size(self.sizes, bs) if bs <= self.model.cfg.max_batch else None

    def decide(self, bs: int) -> Decision:
        """``Decision('FULL', p)``, ``('PIECEWISE', p)`` with ``p`` the padded size, or
        ``('NONE', bs)`` (eager: above the largest size, or ``cudagraph_mode='NONE'``)."""
        mode, key = self.dispatch(bs)
        return Decision(mode, key.num_tokens)

    def describe(self) -> list[dict[str, int | None]]:
        """The padding table as rows: batch size, padded size (None = eager), padded rows."""
        table = padding_table(self.sizes, self.model.cfg.max_batch)
        return [{"batch": b, "padded_to": table[b] or None,
                 "padded_rows": (table[b] - b) if table[b] else 0}
                for b in range(1, len(table))]

    step = ModelRunner.decode
    __call__ = ModelRunner.decode


def _check_capture_flag(model: TinyGPT, capture: object, mode: object) -> bool:
    """``capture`` from ``capture`` or the deprecated ``mode`` (``None``: on CUDA)."""
    if mode is not None:
        check_choice(mode, "mode", ("graph", "eager"))
        warnings.warn(f"PaddingDispatcher(mode={mode!r}) is the older spelling of "
                      f"capture={mode == 'graph'}; pass capture=... instead",
                      DeprecationWarning, stacklevel=3)
        if capture is not None:
            raise ValueError("give capture=... or the older mode=..., not both")
        capture = mode == "graph"
    if capture is None:
        return model.device.type == "cuda"
    as_bool(capture, "capture")
    if capture and model.device.type != "cuda":
        raise RuntimeError(f"capture=True (mode='graph') needs the model on a CUDA GPU (it is "
                           f"on {model.device}); use capture=False (mode='eager') to run the "
                           "same bucketing")
    return bool(capture)
