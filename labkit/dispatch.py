"""The padding dispatcher: serve any batch size from a few captured graphs, split as vLLM
splits it. :class:`CudagraphDispatcher` only decides (vLLM's ``CudagraphDispatcher``,
``vllm/v1/cudagraph_dispatcher.py``) each batch's :class:`Decision` by the rules of
:mod:`labkit.rules` (a decode batch is the uniform batch of query length 1), and counts;
:class:`labkit.batch.StaticBatch` stages the static inputs (vLLM's ``InputBatch``); runners
(``replay(rows)``) compute: :class:`labkit.graphs.GraphSet` (FULL),
:class:`labkit.piecewise.PiecewiseGraphs` (PIECEWISE), :class:`EagerRunner` (NONE, and the CPU
stand-in of both). Modes are vLLM's ``CUDAGraphMode`` (``vllm/config/compilation.py``);
``FULL_AND_PIECEWISE``: full graphs up to ``full_max_size``, pieces above. Batches above the
largest size run eager (counted).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, Literal, NamedTuple, Protocol

import torch

from labkit import rules
from labkit.batch import StaticBatch
from labkit.checks import as_bool, as_int
from labkit.fused import make_fused_step
from labkit.kernels.step import make_triton_step
from labkit.graphs import (
    GraphSet, Order, PoolMode, capture_full, capture_unchecked, capturing, check_capture, new_batch,
)
from labkit.model import Decode, StepFn, TinyGPT
from labkit.piecewise import PiecewiseGraphs, capture_pieces, piecewise_step
from labkit.rules import RuntimeMode, padding_table
from labkit.step_checks import Check, check_capture_sizes, check_choice

CudagraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE"]
CUDAGRAPH_MODES: tuple[CudagraphMode, ...] = ("NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE")
StepName = Literal["readable", "fused", "triton"]
STEP_NAMES: tuple[StepName, ...] = ("readable", "fused", "triton")


class Decision(NamedTuple):
    """What one step runs: ``mode`` and the rows it computes (``padded``; NONE: the batch's own).
    vLLM keys it by a ``BatchDescriptor(num_tokens, num_reqs, uniform)``; a batch here is
    uniform decode, so its row count is the whole key."""

    mode: RuntimeMode
    padded: int


def build_padding_table(sizes: Sequence[int], max_bs: int) -> list[int]:
    """``table[b]`` = smallest size in ``sizes`` that is >= ``b``, or 0 (run eager): the checked
    :func:`labkit.rules.padding_table`."""
    max_bs = as_int(max_bs, "max_bs", minimum=0, fix="give the largest batch size to serve")
    return padding_table(check_capture_sizes(sizes), max_bs)


@dataclass
class DispatchCounters:
    """What the dispatcher did: graph hits per captured size, eager fallbacks, padded rows."""

    graph_hits: dict[int, int] = field(default_factory=dict)
    #: steps per runtime mode: FULL, PIECEWISE, NONE (eager)
    mode_steps: dict[str, int] = field(default_factory=dict)
    eager_fallbacks: int = 0
    padded_rows: int = 0
    real_rows: int = 0
    steps: int = 0

    @property
    def hit_rate(self) -> float:
        """Share of steps served by a graph."""
        return sum(self.graph_hits.values()) / self.steps if self.steps else 0.0

    @property
    def waste(self) -> float:
        """Padded rows as a share of all rows computed."""
        total = self.padded_rows + self.real_rows
        return self.padded_rows / total if total else 0.0

    def count(self, d: Decision, rows: int) -> None:
        """Count one step of ``rows`` real rows that ran as ``d``."""
        self.steps += 1
        self.real_rows += rows
        self.mode_steps[d.mode] = self.mode_steps.get(d.mode, 0) + 1
        if d.mode == "NONE":
            self.eager_fallbacks += 1
        else:
            self.graph_hits[d.padded] = self.graph_hits.get(d.padded, 0) + 1
            self.padded_rows += d.padded - rows

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["graph_hits"] = {str(k): v for k, v in sorted(self.graph_hits.items())}
        d.update(hit_rate=self.hit_rate, waste=self.waste)
        return d


class CudagraphDispatcher:
    """The decision alone: which runtime mode and padded size each batch gets, and the counters;
    takes values :class:`PaddingDispatcher` checked (``sizes`` sorted). The decisions are vLLM's
    (:func:`labkit.rules.dispatch` of a uniform batch of query length 1), made once per batch
    size up to ``max_batch`` and looked up per step; ``full_max_size`` (FULL_AND_PIECEWISE) plays
    vLLM's ``max_num_seqs``: FULL decode graphs up to it, pieces above."""

    def __init__(self, sizes: list[int], max_batch: int, cudagraph_mode: CudagraphMode = "FULL",
                 full_max_size: int | None = None) -> None:
        self.sizes, self.cudagraph_mode = sizes, cudagraph_mode
        self.table = padding_table(sizes, max_batch)
        keys = rules.graph_keys(sizes, cudagraph_mode, 1, full_max_size or max_batch)
        decided = [rules.dispatch(keys, sizes, cudagraph_mode, 1, b, True)
                   for b in range(1, max_batch + 1)]
        #: the decision of each batch size ``1..max_batch`` (index 0 unused)
        self.decisions = [Decision("NONE", 0)] + [Decision(m, k.num_tokens) for m, k in decided]
        self.full_sizes = sorted({d.padded for d in self.decisions if d.mode == "FULL"})
        self.piecewise_sizes = sorted({d.padded for d in self.decisions
                                       if d.mode == "PIECEWISE"})
        self.counters = DispatchCounters()

    def padded_size(self, bs: int) -> int | None:
        """The graph size a batch of ``bs`` rows runs in, or ``None`` for eager."""
        bs = as_int(bs, "batch size", minimum=1, fix="a decode step has at least one row")
        return (self.table[bs] if bs < len(self.table) else 0) or None

    def decide(self, bs: int) -> Decision:
        """``Decision('FULL', p)``, ``('PIECEWISE', p)`` with ``p`` the padded size, or
        ``('NONE', bs)`` (eager: above the largest size, or ``cudagraph_mode='NONE'``)."""
        return self.dispatch(as_int(bs, "batch size", minimum=1,
                                    fix="a decode step has at least one row"))

    def dispatch(self, b: int) -> Decision:
        """:meth:`decide` for a checked batch size ``b`` (at most ``max_batch``)."""
        return self.decisions[b] if b < len(self.decisions) else Decision("NONE", b)

    def describe(self) -> list[dict[str, int | None]]:
        """The padding table as rows: batch size, padded size (None = eager), padded rows."""
        return [{"batch": b, "padded_to": self.table[b] or None,
                 "padded_rows": (self.table[b] - b) if self.table[b] else 0}
                for b in range(1, len(self.table))]


class Runner(Protocol):
    """Computes the logits of the first ``rows`` rows of a static batch."""

    static: bool  # True: the output is a buffer the next replay overwrites

    def replay(self, rows: int) -> torch.Tensor: ...


class EagerRunner:
    """A runner that runs ``step`` eagerly on the static batch: NONE, and the CPU stand-in of
    the graph modes."""

    static = False

    def __init__(self, batch: StaticBatch, step: StepFn) -> None:
        self.batch, self.step = batch, step

    def replay(self, rows: int) -> torch.Tensor:
        return self.step(*self.batch.view(rows))


class PaddingDispatcher:
    """Route each decode step to the smallest captured graph that fits, padding the rest.

    ``capture`` (``None``: on CUDA; ``mode='graph'``/``'eager'`` is its deprecated spelling)
    captures the graphs; ``False`` runs the same padded batches eagerly. ``copy_outputs=False``:
    a graph step returns a view of the static logits that the next step overwrites, and the
    first thread that steps it owns it. Every batch is checked (``check`` as in
    :mod:`labkit.step_checks`, ``True`` by default) before anything is copied. ``graphs=``: a
    FULL :class:`GraphSet` of the same sizes and step, captured before and never changed. One
    lock serialises each step; on CUDA, threads sharing a dispatcher must use the same stream.
    ``lazy=True`` (FULL graphs only): capture each size the first time a batch needs it, as
    vLLM RFC #20098 proposes; that step waits for the capture (:attr:`lazy_capture_s`).
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
        sizes = check_capture(model, capture_sizes, pool, order, warmup, progress, True)
        capture = _check_capture_flag(model, capture, mode)
        self.copy_outputs = as_bool(copy_outputs, "copy_outputs")
        check_choice(cudagraph_mode, "cudagraph_mode", CUDAGRAPH_MODES)
        if cudagraph_mode == "FULL_AND_PIECEWISE":
            if full_max_size is None:
                raise ValueError("cudagraph_mode='FULL_AND_PIECEWISE' needs full_max_size: full "
                                 "graphs up to it, pieces above it")
            full_max_size = as_int(full_max_size, "full_max_size", minimum=1,
                                   fix="give the largest size captured as a full graph")
        elif full_max_size is not None:
            raise ValueError("full_max_size only applies to cudagraph_mode='FULL_AND_PIECEWISE'")
        if step not in STEP_NAMES:
            raise ValueError(f"step must be one of {list(STEP_NAMES)} (labkit.fused, "
                             f"labkit.kernels.step), got {step!r}")
        if step != "readable" and cudagraph_mode in ("PIECEWISE", "FULL_AND_PIECEWISE"):
            raise ValueError(f"step={step!r} runs as one piece; piecewise capture cuts the "
                             "readable step at attention. Use cudagraph_mode='FULL' or 'NONE' "
                             "with the fused step, or step='readable' for piecewise graphs")
        if graphs is not None and not isinstance(graphs, GraphSet):
            raise TypeError(f"graphs must be a GraphSet from capture_decode_graphs, got "
                            f"{type(graphs).__name__}")
        if graphs is not None and (cudagraph_mode != "FULL" or not capture):
            raise ValueError("pass captured graphs only with cudagraph_mode='FULL' and "
                             "capture=True (mode='graph')")
        if graphs is not None and graphs.sizes != sizes:
            raise ValueError(f"graphs were captured for {graphs.sizes}, not {sizes}; pass the "
                             "same capture sizes")
        self.lazy = as_bool(lazy, "lazy")
        if self.lazy and (cudagraph_mode != "FULL" or graphs is not None):
            raise ValueError("lazy=True captures FULL graphs on first use: use it with "
                             "cudagraph_mode='FULL' and no graphs=")
        self.model, self.capture, self.step_name = model, capture, step
        self.dispatcher = CudagraphDispatcher(sizes, model.cfg.max_batch, cudagraph_mode,
                                              full_max_size)
        #: the step every runner computes, unchecked (this class checks at its edge)
        self._decode: Decode = (model.decode if step == "readable" else
                                make_fused_step(model).decode if step == "fused" else
                                make_triton_step(model).decode)
        self._lock = threading.Lock()
        self._owner: int | None = None  # with copy_outputs=False: the one thread allowed
        d = self.dispatcher
        graphed = capture and bool(d.full_sizes or d.piecewise_sizes)
        self.batch = graphs.batch if graphs is not None else (
            new_batch(model, sizes[-1]) if graphed else StaticBatch(model))
        self.graphs: GraphSet | None = graphs
        self.pieces: PiecewiseGraphs | None = None
        kw: dict[str, Any] = dict(warmup=warmup, progress=progress, check_sync=True)
        #: lazy capture: seconds each size's first step waited for its warm-up and capture
        self.lazy_capture_s: dict[int, float] = {}
        self._lazy = (pool, warmup)
        if capture and graphs is None and d.full_sizes and self.lazy:
            self.graphs = GraphSet({}, self.batch, pool, order)  # filled on first use
        elif capture and graphs is None and d.full_sizes:
            self.graphs = capture_full(model, d.full_sizes, self.batch, self._decode, pool=pool,
                                       order=order, **kw)
        if capture and d.piecewise_sizes:
            shared = next(iter(self.graphs.graphs.values())).pool if self.graphs else None
            self.pieces = capture_pieces(model, d.piecewise_sizes, self.batch, pool=shared,
                                         **kw)
        eager = EagerRunner(self.batch, self._decode)
        self._runners: dict[RuntimeMode, Runner] = {
            "NONE": eager, "FULL": self.graphs or eager,
            "PIECEWISE": self.pieces or EagerRunner(self.batch, partial(piecewise_step, model))}

    # what the decision says, read through (vLLM's runner asks its dispatcher the same)
    sizes = property(lambda self: self.dispatcher.sizes)
    counters = property(lambda self: self.dispatcher.counters)

    def padded_size(self, bs: int) -> int | None:
        """The graph size a batch of ``bs`` rows runs in, or ``None`` for eager."""
        return self.dispatcher.padded_size(bs)

    def decide(self, bs: int) -> Decision:
        """The :class:`Decision` for a batch of ``bs`` rows (:meth:`CudagraphDispatcher.decide`)."""
        return self.dispatcher.decide(bs)

    def describe(self) -> list[dict[str, int | None]]:
        return self.dispatcher.describe()

    def runner(self, mode: RuntimeMode) -> Runner:
        """The runner of runtime mode ``mode`` (graphs on CUDA, the eager stand-in without)."""
        return self._runners[check_choice(mode, "mode", ("NONE", "PIECEWISE", "FULL"))]

    def reset_counters(self) -> None:
        with self._lock:
            self.dispatcher.counters = DispatchCounters()

    def _check(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
               check: Check) -> int:
        return self.model.check_step(tokens, positions, slots, check, who="the dispatcher",
                                     host_ok=True)

    def load_inputs(self, tokens: torch.Tensor, positions: torch.Tensor,
                    slots: torch.Tensor, *, check: Check = True) -> int:
        """Check a batch, copy it into the static batch and return the padded size (0 above the
        largest graph). A bad batch raises and copies nothing."""
        with self._lock:
            b = self._check(tokens, positions, slots, check)
            p = self.dispatcher.table[b]
            if p:
                self.batch.load(tokens, positions, slots)
            return p

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, *,
             check: Check = True) -> torch.Tensor:
        """Logits ``(b, V)`` for one decode step of ``b`` rows (the contract of
        :meth:`TinyGPT.decode_step`): check at the edge, decide, stage, run."""
        with self._lock:
            if not self.copy_outputs:
                self._claim()
            b = self._check(tokens, positions, slots, check)
            d = self.dispatcher.dispatch(b)
            self.batch.load(tokens, positions, slots)
            if self.lazy and self.graphs is not None and d.mode == "FULL" and \
                    d.padded not in self.graphs.graphs:
                self._capture_lazily(d.padded)
            runner = self._runners[d.mode]
            out = runner.replay(d.padded)[:b]
            self.dispatcher.counters.count(d, b)
            return out.clone() if runner.static and self.copy_outputs else out

    __call__ = step

    def _capture_lazily(self, bs: int) -> None:
        """Capture size ``bs`` now, into the pool of the graphs captured so far (shared); its
        warm-up reruns this step on the staged batch, which writes the same keys and values."""
        assert self.graphs is not None
        pool, warmup = self._lazy
        graphs = self.graphs.graphs
        handle = (next(iter(graphs.values())).pool if graphs else
                  torch.cuda.graph_pool_handle()) if pool == "shared" else None
        out = None if self.batch.logits is None else self.batch.logits[:bs]

        def one_step(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
            return self._decode(t, p, s, out)

        with capturing(graphs, "graphs"):
            g = capture_unchecked(one_step, self.batch.view(bs), handle, torch.cuda.Stream(),
                                  warmup, True, label=bs)
        graphs[bs] = g
        self.graphs.capture_order.append(bs)
        self.lazy_capture_s[bs] = g.warmup_s + g.capture_s

    def _claim(self) -> None:
        me = threading.get_ident()
        if self._owner is None:
            self._owner = me
        elif self._owner != me:
            raise RuntimeError(
                "this PaddingDispatcher was built with copy_outputs=False, so its result is a "
                "view the next step overwrites, and it belongs to the first thread that "
                "stepped it; another thread's step would hand out the wrong logits. Build it "
                "with copy_outputs=True (the default) to share it between threads")

    def release(self) -> None:
        """Free the captured graphs (eager: nothing to free)."""
        with self._lock:
            for runner in (self.graphs, self.pieces):
                if runner is not None:
                    runner.release()


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
