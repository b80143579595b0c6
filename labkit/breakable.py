"""Breakable capture: one step captured as CUDA-graph segments in one memory pool, with marked
functions run eagerly between them, as SGLang's breakable CUDA graph does without torch.compile.

SGLang (PRs #19102 and #22218,
``python/sglang/srt/model_executor/breakable_cuda_graph/breakable_cuda_graph.py``) marks a
function with ``eager_on_graph``; while a ``BreakableCUDAGraphCapture`` is active (a
``ContextVar``), calling it ends the current segment (``CUDAGraph.capture_end``), runs the
function once, records a closure over its arguments and output, and begins the next segment
(``capture_begin`` on the same pool); ``BreakableCUDAGraph.replay`` runs segment 0, break 0,
segment 1, ..., each break copying its new output into the output it returned at capture
(``_copy_output``). vLLM PR #42304 (``VLLM_USE_BREAKABLE_CUDAGRAPH=1``) is modelled on it.
:func:`break_graph` does the same here, simplified:

* a break's arguments and output are held by strong references (SGLang keeps weak ones,
  ``weak_ref_tensors``, so the pool can reuse a break's inputs: replay order is capture order);
  a little more pool memory, no custom op;
* each segment is replayed once as soon as it is captured, so the marked function reads real
  values at capture (SGLang's reads whatever the segment's memory held: its attention metadata
  lives in buffers filled outside the graph, while labkit's step computes the cache metadata
  inside segment 0, and a garbage write index would write out of bounds);
* no side-stream bookkeeping (SGLang hooks ``Stream.wait_stream`` to join forked streams before
  a segment ends): labkit's steps run on one stream.

Segments begin with ``capture_begin`` directly, as SGLang's do, so none pays the
``synchronize`` / ``empty_cache`` that ``torch.cuda.graph`` runs before every capture; a
breakable graph collects garbage once before its first segment when
``torch.compiler.config.force_cudagraph_gc`` is set, as ``torch.cuda.graph`` does before each
capture (PyTorch PR #158193 made that collection opt-in).

:func:`breakable_step` is the readable decode step built from the model's parts (as
:mod:`labkit.piecewise` builds its pieces) with the attention of layers ``breaks_at`` marked:
every layer gives the hand-cut PIECEWISE shape (``L + 1`` segments), none one FULL graph.
Outside a breakable capture (and without CUDA) the marked functions just run.
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import torch

from labkit.batch import StaticBatch
from labkit.checks import as_bool, as_int, as_int_list
from labkit.graphs import (
    PoolId, capturing, check_capture, new_batch, progress_bar, release, require_cuda,
    translate_capture_error, warm_up,
)
from labkit.model import Decode, TinyGPT, attention

F = TypeVar("F", bound=Callable[..., Any])


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _check_output(out: object, name: str) -> None:
    """A marked function's output must be something a later replay can copy into."""
    if out is None or isinstance(out, torch.Tensor):
        return
    if isinstance(out, (tuple, list)):
        for item in out:
            _check_output(item, name)
        return
    raise TypeError(f"the marked function {name} returned {type(out).__name__}; a graph break "
                    "must return None, a tensor or a tuple of tensors (the static buffers the "
                    "next segment reads, refilled at every replay)")


def _copy_into(dst: Any, src: Any) -> None:
    """Copy a marked function's new output into the one it returned at capture."""
    if isinstance(dst, torch.Tensor):
        dst.copy_(src)
    elif isinstance(dst, (tuple, list)):
        for d, s in zip(dst, src):
            _copy_into(d, s)


@dataclass
class EagerBreak:
    """One marked function run eagerly between two segments, with its static arguments (what
    the segments before it wrote) and static output (what the segments after it read)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any

    @property
    def name(self) -> str:
        return _name(self.fn)

    def run(self) -> None:
        """Call the function on the static arguments and copy its result into the output."""
        _copy_into(self.output, self.fn(*self.args, **self.kwargs))


class _Segments:
    """The segments and breaks of one breakable capture in progress (``new_graph``: what makes
    a segment, ``torch.cuda.CUDAGraph``)."""

    def __init__(self, pool: Any, new_graph: Callable[[], Any] | None = None) -> None:
        self.pool = pool
        self.new_graph = new_graph or torch.cuda.CUDAGraph
        self.segments: list[Any] = []
        self.breaks: list[EagerBreak] = []
        self.open = False

    def begin(self) -> None:
        graph = self.new_graph()
        self.segments.append(graph)
        graph.capture_begin(pool=self.pool, capture_error_mode="global")
        self.open = True

    def end(self) -> None:
        self.open = False
        self.segments[-1].capture_end()

    def split(self, fn: Callable[..., Any], args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Any:
        """End the segment, replay it (real inputs), run ``fn`` eagerly, begin the next."""
        self.end()
        self.segments[-1].replay()
        with _recording(None):  # a marked function called inside fn just runs
            out = fn(*args, **kwargs)
        _check_output(out, _name(fn))
        self.breaks.append(EagerBreak(fn, args, dict(kwargs), out))
        self.begin()
        return out

    def abort(self) -> None:
        """End a segment left open by an error (its own error is the one worth raising)."""
        if self.open:
            self.open = False
            with suppress(Exception):  # it failed already: the caller raises the cause
                self.segments[-1].capture_end()
        self.segments.clear()
        self.breaks.clear()


_ACTIVE: ContextVar[_Segments | None] = ContextVar("labkit_breakable_capture", default=None)


@contextmanager
def _recording(segments: _Segments | None) -> Iterator[None]:
    token = _ACTIVE.set(segments)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def capturing_breakable() -> bool:
    """Whether a breakable capture is running in this thread (context)."""
    return _ACTIVE.get() is not None


def break_graph(fn: F) -> F:
    """Mark ``fn`` as a graph break (SGLang's ``eager_on_graph``): inside a breakable capture a
    call ends the current segment, runs ``fn`` eagerly and begins the next segment in the same
    pool; at replay ``fn`` runs again between the segments on the same argument tensors and its
    result is copied into the output it returned at capture. Anywhere else it just calls ``fn``.
    ``fn`` must return None, a tensor or a tuple of tensors of fixed shapes."""
    if not callable(fn):
        raise TypeError(f"break_graph marks a function; got {type(fn).__name__}. Use it as "
                        "@break_graph or break_graph(f)")

    @functools.wraps(fn)
    def marked(*args: Any, **kwargs: Any) -> Any:
        segments = _ACTIVE.get()
        if segments is None:
            return fn(*args, **kwargs)
        return segments.split(fn, args, kwargs)

    return cast(F, marked)


@dataclass
class BreakableGraph:
    """One callable captured as ``len(breaks) + 1`` segments in one pool with an eager function
    between each two; ``output`` is what the callable returned at capture (static buffers)."""

    segments: list[torch.cuda.CUDAGraph]
    breaks: list[EagerBreak]
    inputs: tuple[torch.Tensor, ...]
    output: Any
    capture_s: float
    warmup_s: float
    label: object = None
    #: kept as long as the graph: tensors it owns would be freed while the segments read them
    fn: Callable[..., Any] | None = None

    @property
    def pool(self) -> PoolId:
        """The pool every segment allocated from."""
        return cast(PoolId, tuple(self.segments[0].pool()))

    def pools(self) -> set[PoolId]:
        """The pools of the segments: one, by construction."""
        return {cast(PoolId, tuple(s.pool())) for s in self.segments}

    def replay(self) -> Any:
        """Segment 0, break 0, segment 1, ...; returns the static output."""
        for i, segment in enumerate(self.segments):
            segment.replay()
            if i < len(self.breaks):
                self.breaks[i].run()
        return self.output


def capture_breakable(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], pool: Any = None,
                      *, stream: torch.cuda.Stream | None = None, warmup: int = 3,
                      check_sync: bool = True, label: object = None) -> BreakableGraph:
    """Warm up ``fn(*inputs)`` on a side stream (sync debug mode, as
    :func:`labkit.graphs.capture_callable`), then capture it as segments split at every call
    of a :func:`break_graph` function, all in ``pool`` (a handle or another graph's ``pool()``;
    None: a new one). A failed capture raises :class:`labkit.graphs.CaptureError` and leaves
    nothing behind. Marked functions run in the warm-up too, so ``check_sync`` checks them."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if isinstance(inputs, torch.Tensor) or not isinstance(inputs, Sequence):
        raise TypeError(f"inputs must be a tuple of CUDA tensors, got {type(inputs).__name__}; "
                        "wrap one tensor as (x,)")
    warmup = as_int(warmup, "warmup", minimum=0, fix="warm up 0 or more times (3 is usual)")
    as_bool(check_sync, "check_sync")
    require_cuda("CUDA graphs need a CUDA GPU (torch.cuda.is_available() is False); on CPU call "
                 "the function eagerly: its marked functions just run")
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
            raise ValueError(f"inputs[{i}] must be a CUDA tensor allocated before capture; got "
                             f"{getattr(t, 'device', type(t).__name__)}")
    handle = pool if pool is not None else torch.cuda.graph_pool_handle()
    return capture_breakable_unchecked(fn, tuple(inputs), handle, stream or torch.cuda.Stream(),
                                       warmup, check_sync, label)


def _torch_collects() -> bool:
    """Whether ``torch.compiler.config.force_cudagraph_gc`` is set (False where torch lacks it)."""
    return bool(getattr(getattr(torch.compiler, "config", None), "force_cudagraph_gc", False))


def capture_breakable_unchecked(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...],
                                pool: Any, stream: torch.cuda.Stream, warmup: int,
                                check_sync: bool, label: object = None) -> BreakableGraph:
    """:func:`capture_breakable` on checked arguments and a pool handle."""
    warmup_s = warm_up(fn, inputs, stream, warmup, check_sync)
    t1 = time.perf_counter()
    if _torch_collects():
        gc.collect()  # what torch.cuda.graph does before a capture when this is set
    segments = _Segments(pool)
    try:
        with _recording(segments), torch.cuda.stream(stream):
            segments.begin()
            output = fn(*inputs)
            segments.end()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
    except Exception as exc:
        segments.abort()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        raise translate_capture_error(exc) from exc
    return BreakableGraph(segments.segments, segments.breaks, inputs, output,
                          time.perf_counter() - t1, warmup_s, label, fn=fn)


# ------------------------------------------------------------------ the decode step, broken

#: the attention of a step (cache write and attend), marked: a break where a step calls it
eager_attention = break_graph(attention)


def check_breaks(breaks_at: object, n_layer: int) -> tuple[int, ...]:
    """``breaks_at`` (layers whose attention runs eagerly) checked: sorted, distinct layers."""
    layers = as_int_list(breaks_at, "breaks_at", minimum=0, maximum=n_layer - 1,
                         fix=f"give layer indices 0..{n_layer - 1} whose attention runs eagerly "
                         "between segments ([] for one FULL graph)")
    dup = sorted({b for b in layers if layers.count(b) > 1})
    if dup:
        raise ValueError(f"breaks_at names layer(s) {dup} more than once; give each layer once")
    return tuple(sorted(layers))


def spread_breaks(n_layer: int, count: int) -> tuple[int, ...]:
    """``count`` break layers spread evenly over ``n_layer`` (``0``: none; ``n_layer``: all)."""
    n_layer = as_int(n_layer, "n_layer", minimum=1, fix="give the model's layer count")
    count = as_int(count, "count", minimum=0, maximum=n_layer,
                   fix=f"give 0..{n_layer} breaks (at most one per layer)")
    return tuple(j * n_layer // count for j in range(count))


def _step(model: TinyGPT, breaks_at: tuple[int, ...]) -> Decode:
    """:func:`breakable_step` on checked arguments."""
    at = frozenset(breaks_at)
    blocks, cache = model.layers, model.cache

    @torch.no_grad()
    def step(tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
             out: torch.Tensor | None = None) -> torch.Tensor:
        x, meta = model.embed_step(tokens, positions, slots)
        for i, block in enumerate(blocks):
            q, k, v = block.pre_attention(x)
            attend = eager_attention if i in at else attention
            x = block.post_attention(x, attend(cache, i, q, k, v, meta))
        return model.head(x, out=out)

    return step


def breakable_step(model: TinyGPT, breaks_at: Sequence[int]) -> Decode:
    """The readable decode step (:meth:`TinyGPT.decode`'s operations, so its logits) with the
    attention of layers ``breaks_at`` marked by :func:`break_graph`: unchecked
    ``(tokens, positions, slots, out=None) -> logits``. Eager outside a breakable capture."""
    if not isinstance(model, TinyGPT):
        raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}")
    return _step(model, check_breaks(breaks_at, model.cfg.n_layer))


@dataclass
class BreakableGraphs:
    """Breakable decode steps for several batch sizes in one pool over one static batch: a
    runner of the dispatcher (``replay(rows)`` writes the static logits)."""

    model: TinyGPT
    graphs: dict[int, BreakableGraph]
    batch: StaticBatch
    breaks_at: tuple[int, ...]
    static: bool = True

    @property
    def sizes(self) -> list[int]:
        return sorted(self.graphs)

    def graphs_per_step(self) -> int:
        """Segments replayed per step: one more than the breaks."""
        return len(self.breaks_at) + 1

    def copy_inputs(self, tokens: torch.Tensor, positions: torch.Tensor,
                    slots: torch.Tensor) -> int:
        """Copy a batch into the first rows of the static buffers; returns its size."""
        return self.batch.load(tokens, positions, slots)

    def replay(self, rows: int) -> torch.Tensor:
        """Replay the breakable graph of ``rows`` rows on the static batch; its static logits."""
        if rows not in self.graphs:
            raise KeyError(f"no breakable graph for batch size {rows}; captured: {self.sizes}")
        return cast(torch.Tensor, self.graphs[rows].replay())

    def pools(self) -> dict[PoolId, list[int]]:
        """Pool id -> the batch sizes with a segment in it."""
        out: dict[PoolId, list[int]] = {}
        for bs, g in sorted(self.graphs.items()):
            for pid in g.pools():
                out.setdefault(pid, []).append(bs)
        return out

    def capture_s(self) -> float:
        """Seconds spent capturing (segments and the eager calls between them), warm-up not."""
        return sum(g.capture_s for g in self.graphs.values())

    def release(self) -> None:
        release(self.graphs)


def capture_breakable_graphs(model: TinyGPT, sizes: Sequence[int], breaks_at: Sequence[int], *,
                             pool: Any = None, warmup: int = 3, progress: bool | None = None,
                             check_sync: bool = True, freeze_gc: bool = True
                             ) -> BreakableGraphs:
    """Capture :func:`breakable_step` for each size in ``sizes`` (largest first) into one
    pool (``pool``: a handle or another graph's ``pool()``; None: a new one) on a new static
    batch. ``freeze_gc=False`` leaves the garbage collector running during capture."""
    checked = check_capture(model, sizes, "shared", "largest_first", warmup, progress,
                            check_sync)
    at = check_breaks(breaks_at, model.cfg.n_layer)
    as_bool(freeze_gc, "freeze_gc")
    require_cuda("capturing CUDA graphs needs the model on a CUDA GPU (model is on "
                 f"{model.device}); on CPU run breakable_step eagerly", model)
    return capture_breakable_set(model, checked, new_batch(model, checked[-1]), at, pool=pool,
                                 warmup=warmup, progress=progress, check_sync=check_sync,
                                 freeze_gc=freeze_gc)


def capture_breakable_set(model: TinyGPT, sizes: list[int], batch: StaticBatch,
                          breaks_at: tuple[int, ...], *, pool: Any, warmup: int,
                          progress: bool | None, check_sync: bool,
                          freeze_gc: bool = True) -> BreakableGraphs:
    """:func:`capture_breakable_graphs` on checked arguments and a given static batch."""
    handle = pool if pool is not None else torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream()
    step = _step(model, breaks_at)
    graphs: dict[int, BreakableGraph] = {}
    with capturing(graphs, "breakable graphs", freeze_gc=freeze_gc):
        for bs in progress_bar(sorted(sizes, reverse=True), progress, "capturing segments"):
            out = None if batch.logits is None else batch.logits[:bs]

            def one_step(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor,
                         o: torch.Tensor | None = out) -> torch.Tensor:
                return step(t, p, s, o)

            graphs[bs] = capture_breakable_unchecked(one_step, batch.view(bs), handle, stream,
                                                     warmup, check_sync, label=bs)
    return BreakableGraphs(model, graphs, batch, breaks_at)
