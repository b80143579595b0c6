"""Piecewise capture: the decode step cut at attention, as vLLM's PIECEWISE CUDA-graph mode.

vLLM compiles the model and splits the graph at its attention ops
(``CompilationConfig`` splitting ops, e.g. ``vllm::unified_attention_with_output``); each piece
between two attentions is captured as a CUDA graph, all in one memory pool
(``vllm/compilation/cuda_graph.py``, ``CUDAGraphWrapper``), and attention -- with the KV-cache
write inside it -- runs eagerly between them, so an attention backend that cannot be captured
(or that needs varying shapes, as prefill does) still works. ``vllm/config/compilation.py``
``CUDAGraphMode`` names the modes: NONE, PIECEWISE, FULL, FULL_DECODE_ONLY and
FULL_AND_PIECEWISE (today's default).

Here the same cut is made by hand on the tiny GPT. For ``L`` layers a step is ``L + 1``
captured pieces and ``L`` eager attentions::

    piece 0      embeddings, cache metadata, LayerNorm + qkv of layer 0
    attention 0  write k, v of layer 0; attend               (eager)
    piece i      output projection + MLP of layer i-1, LayerNorm + qkv of layer i
    ...
    piece L      output projection + MLP of layer L-1, final LayerNorm, output head

Each attention's result is copied into one static buffer that the next piece reads. The
pieces of every batch size share one pool (and, in FULL_AND_PIECEWISE, the pool of the full
graphs). On a machine without CUDA, :func:`piecewise_step` runs the same cut eagerly, so the
logic is tested everywhere.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from labkit.graphs import (CapturedGraph, _progress, capture_callable, check_capture_sizes,
                           gc_frozen, release_after_failure, static_buffers)
from labkit.kvcache import StepMeta
from labkit.model import TinyGPT, attention

_META_FIELDS = ("positions", "rows", "write_index", "seq_lens", "key_start", "query_start")


def _pieces(model: TinyGPT):
    """The ``L + 1`` pure pieces of a step (no cache access inside): callables on tensors."""
    blocks = list(model.blocks)

    def first(tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor):
        x, meta = model.embed_step(tokens, positions, slots)
        q, k, v = blocks[0].pre_attention(x)
        return (x, q, k, v) + tuple(getattr(meta, f) for f in _META_FIELDS)

    def middle(i: int):
        def piece(x: torch.Tensor, y: torch.Tensor):
            x = blocks[i - 1].post_attention(x, y)
            return (x,) + blocks[i].pre_attention(x)
        return piece

    def last(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None):
        return model.head(blocks[-1].post_attention(x, y), out=out)

    return first, [middle(i) for i in range(1, len(blocks))], last


@torch.no_grad()
def piecewise_step(model: TinyGPT, tokens: torch.Tensor, positions: torch.Tensor,
                   slots: torch.Tensor) -> torch.Tensor:
    """One decode step run piece by piece, eagerly (the CPU stand-in and the reference):
    the same operations as :meth:`TinyGPT.decode_step`, so the same logits."""
    first, middles, last = _pieces(model)
    x, q, k, v, *m = first(tokens, positions, slots)
    meta = StepMeta(*m)
    y = attention(model.cache, 0, q, k, v, meta)
    for i, piece in enumerate(middles, start=1):
        x, q, k, v = piece(x, y)
        y = attention(model.cache, i, q, k, v, meta)
    return last(x, y)


@dataclass
class PiecewiseGraphs:
    """Piecewise-captured decode steps for several batch sizes over shared static buffers."""

    model: TinyGPT
    pieces: dict[int, list[CapturedGraph]]
    tokens: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    y: torch.Tensor
    logits: torch.Tensor
    pool: Any
    capture_order: list[int] = field(default_factory=list)

    @property
    def sizes(self) -> list[int]:
        return sorted(self.pieces)

    def graphs_per_step(self) -> int:
        return self.model.cfg.n_layer + 1

    @torch.no_grad()
    def replay(self, bs: int) -> torch.Tensor:
        """Replay the pieces of size ``bs`` with eager attention between them, on what is in
        the static buffers; returns the static logits ``(bs, V)``."""
        if bs not in self.pieces:
            raise KeyError(f"no piecewise graphs for batch size {bs}; captured: {self.sizes}")
        pieces = self.pieces[bs]
        cache, y = self.model.cache, self.y[:bs]
        x, q, k, v, *m = pieces[0].replay()
        meta = StepMeta(*m)
        y.copy_(attention(cache, 0, q, k, v, meta))
        for i in range(1, len(pieces) - 1):
            x, q, k, v = pieces[i].replay()
            y.copy_(attention(cache, i, q, k, v, meta))
        return pieces[-1].replay()

    def release(self) -> None:
        self.pieces.clear()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


@torch.no_grad()
def capture_piecewise_graphs(model: TinyGPT, sizes: Sequence[int], *, pool: Any = None,
                             tokens: torch.Tensor | None = None,
                             index: torch.Tensor | None = None,
                             logits: torch.Tensor | None = None, warmup: int = 3,
                             progress: bool | None = None,
                             check_sync: bool = True) -> PiecewiseGraphs:
    """Capture the ``L + 1`` pieces of the decode step for each size in ``sizes`` (largest
    first) into one shared pool (``pool``: a handle or another graph's ``pool()``; None makes
    a new one). ``tokens``, ``index`` (positions and slots as two rows) and ``logits`` may be
    the static buffers of full graphs, so one copy-in serves both modes."""
    if not torch.cuda.is_available() or model.device.type != "cuda":
        raise RuntimeError("capturing CUDA graphs needs the model on a CUDA GPU (model is on "
                           f"{model.device}); on CPU use piecewise_step")
    sizes = check_capture_sizes(sizes, model.cfg.max_batch)
    cfg, dev, n = model.cfg, model.device, sizes[-1]
    tokens, index, logits = static_buffers(model, n, tokens, index, logits)
    for name, buf in (("tokens", tokens), ("index", index[0]), ("logits", logits)):
        if buf.shape[0] < n:
            raise ValueError(f"static {name} buffer holds {buf.shape[0]} rows; the largest size "
                             f"is {n}")
    # the heads this model's cache holds (a tensor-parallel shard: n_head / world_size)
    y = torch.zeros((n, model.cache.heads, cfg.head_dim), dtype=cfg.torch_dtype, device=dev)
    handle = pool if pool is not None else torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream()
    first, middles, last = _pieces(model)
    order = sorted(sizes, reverse=True)
    captured: dict[int, list[CapturedGraph]] = {}
    try:
        with gc_frozen():
            for bs in _progress(order, progress, "capturing pieces"):
                kw = dict(pool=handle, stream=stream, warmup=warmup, check_sync=check_sync)
                g0 = capture_callable(first, tokens[:bs], index[0, :bs], index[1, :bs],
                                      label=(bs, 0), **kw)
                graphs = [g0]
                x = g0.output[0]
                for i, piece in enumerate(middles, start=1):
                    g = capture_callable(piece, x, y[:bs], label=(bs, i), **kw)
                    graphs.append(g)
                    x = g.output[0]
                out = logits[:bs]
                graphs.append(capture_callable(lambda x_, y_, o=out: last(x_, y_, out=o), x,
                                               y[:bs], label=(bs, len(middles) + 1), **kw))
                captured[bs] = graphs
    except BaseException as exc:
        err = release_after_failure(captured, exc, "pieces")
        if err is exc:
            raise
        raise err from exc
    return PiecewiseGraphs(model, captured, tokens, index[0], index[1], y, logits, handle,
                           capture_order=order)
