"""Piecewise capture: the decode step cut at attention, as vLLM's PIECEWISE CUDA-graph mode.

vLLM splits the compiled model at its attention ops (``CompilationConfig`` splitting ops, e.g.
``vllm::unified_attention_with_output``), captures each piece between two attentions into one
pool (``vllm/compilation/cuda_graph.py``, ``CUDAGraphWrapper``) and runs attention, with the
KV-cache write inside, eagerly between them, so an attention that cannot be captured (or needs
varying shapes, as prefill does) still works. Here the same cut is made by hand: for ``L``
layers, ``L + 1`` captured pieces and ``L`` eager attentions::

    piece 0      embeddings, cache metadata, LayerNorm + qkv of layer 0
    attention 0  write k, v of layer 0; attend               (eager)
    piece i      output projection + MLP of layer i-1, LayerNorm + qkv of layer i
    piece L      output projection + MLP of layer L-1, final LayerNorm, output head

Each attention's result is copied into one static buffer the next piece reads; all pieces share
one pool (in FULL_AND_PIECEWISE the full graphs' too). Without CUDA :func:`piecewise_step` runs
the same cut.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from labkit.batch import StaticBatch
from labkit.graphs import (
    CapturedGraph, capture_unchecked, capturing, check_capture, new_batch, progress_bar,
    release, require_cuda,
)
from labkit.kvcache import StepMeta
from labkit.model import TinyGPT, attention

_META = tuple(f.name for f in dataclasses.fields(StepMeta))
Piece = Callable[..., Any]


def _pieces(model: TinyGPT, with_meta: bool = True) -> tuple[Piece, list[Piece], Piece]:
    """The ``L + 1`` pure pieces of a step (no cache access inside): callables on tensors.
    ``with_meta``: the first piece also computes a decode step's metadata (mixed batches bring
    their own, built on the host)."""
    blocks = model.layers

    def first(tokens: torch.Tensor, positions: torch.Tensor,
              slots: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if not with_meta:
            x = model.embed(tokens, positions)
            return (x, *blocks[0].pre_attention(x))
        x, meta = model.embed_step(tokens, positions, slots)
        return (x, *blocks[0].pre_attention(x), *(getattr(meta, f) for f in _META))

    def middle(i: int) -> Piece:
        def piece(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
            x = blocks[i - 1].post_attention(x, y)
            return (x, *blocks[i].pre_attention(x))
        return piece

    def last(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return model.head(blocks[-1].post_attention(x, y), out=out)

    return first, [middle(i) for i in range(1, len(blocks))], last


@torch.no_grad()
def piecewise_step(model: TinyGPT, tokens: torch.Tensor, positions: torch.Tensor,
                   slots: torch.Tensor) -> torch.Tensor:
    """One decode step run piece by piece, eagerly (the CPU stand-in and the reference): the
    same operations as :meth:`TinyGPT.decode`, so the same logits. Checks nothing."""
    first, middles, last = _pieces(model)
    x, q, k, v, *m = first(tokens, positions, slots)
    meta = StepMeta(*m)
    y = attention(model.cache, 0, q, k, v, meta)
    for i, piece in enumerate(middles, start=1):
        x, q, k, v = piece(x, y)
        y = attention(model.cache, i, q, k, v, meta)
    return last(x, y)  # type: ignore[no-any-return]


@dataclass
class PiecewiseGraphs:
    """Piecewise-captured decode steps for several batch sizes over one static batch, with the
    buffer ``y`` the attentions write: a runner of the dispatcher (``replay(rows)``)."""

    model: TinyGPT
    pieces: dict[int, list[CapturedGraph]]
    y: torch.Tensor
    static: bool = True

    @property
    def sizes(self) -> list[int]:
        return sorted(self.pieces)

    def graphs_per_step(self) -> int:
        return self.model.cfg.n_layer + 1

    @torch.no_grad()
    def replay(self, bs: int, meta: StepMeta | None = None, max_query: int = 1) -> torch.Tensor:
        """Replay the pieces of size ``bs`` with eager attention between them on the static
        buffers (``meta``: a mixed step's); returns the static logits ``(bs, V)``."""
        if bs not in self.pieces:
            raise KeyError(f"no piecewise graphs for batch size {bs}; captured: {self.sizes}")
        pieces, cache, y = self.pieces[bs], self.model.cache, self.y[:bs]
        _, q, k, v, *m = pieces[0].replay()  # x stays in the pool for the next piece
        meta = meta or StepMeta(*m)
        y.copy_(attention(cache, 0, q, k, v, meta, max_query))
        for i in range(1, len(pieces) - 1):
            _, q, k, v = pieces[i].replay()
            y.copy_(attention(cache, i, q, k, v, meta, max_query))
        return pieces[-1].replay()  # type: ignore[no-any-return]

    def release(self) -> None:
        release(self.pieces)


def capture_piecewise_graphs(model: TinyGPT, sizes: Sequence[int], *, pool: Any = None,
                             warmup: int = 3, progress: bool | None = None,
                             check_sync: bool = True) -> PiecewiseGraphs:
    """Capture the ``L + 1`` pieces of the decode step for each size in ``sizes`` (largest
    first) into one shared pool (``pool``: a handle or another graph's ``pool()``; None makes
    a new one)."""
    checked = check_capture(model, sizes, "shared", "largest_first", warmup, progress,
                            check_sync)
    require_cuda("capturing CUDA graphs needs the model on a CUDA GPU (model is on "
               f"{model.device}); on CPU use piecewise_step", model)
    return capture_pieces(model, checked, new_batch(model, checked[-1]), pool=pool,
                          warmup=warmup, progress=progress, check_sync=check_sync)


@torch.no_grad()
def capture_pieces(model: TinyGPT, sizes: list[int], batch: StaticBatch, *, pool: Any,
                   warmup: int, progress: bool | None, check_sync: bool,
                   with_meta: bool = True) -> PiecewiseGraphs:
    """:func:`capture_piecewise_graphs` on checked arguments (``with_meta=False``: pieces of a
    token-flattened step, whose metadata is built on the host, :mod:`labkit.mixed`)."""
    cfg, n = model.cfg, sizes[-1]
    # the heads this model's cache holds (a tensor-parallel shard: n_head / world_size)
    y = torch.zeros((n, model.cache.heads, cfg.head_dim), dtype=cfg.torch_dtype,
                    device=model.device)
    handle = pool if pool is not None else torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream()
    first, middles, last = _pieces(model, with_meta)
    captured: dict[int, list[CapturedGraph]] = {}
    with capturing(captured, "pieces"):
        for bs in progress_bar(sorted(sizes, reverse=True), progress, "capturing pieces"):
            out = None if batch.logits is None else batch.logits[:bs]
            def head(x: torch.Tensor, y_: torch.Tensor, o: torch.Tensor | None = out) -> Any:
                return last(x, y_, out=o)
            graphs: list[CapturedGraph] = []
            for i, piece in enumerate([first, *middles, head]):
                inputs = batch.view(bs) if i == 0 else (graphs[-1].output[0], y[:bs])
                graphs.append(capture_unchecked(piece, inputs, handle, stream, warmup,
                                                check_sync, label=(bs, i)))
            captured[bs] = graphs
    return PiecewiseGraphs(model, captured, y)
