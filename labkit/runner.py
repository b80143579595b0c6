"""The one model runner: every step, decode, mixed or verify, as vLLM V1's
``GPUModelRunner.execute_model`` (``vllm/v1/worker/gpu_model_runner.py``) runs it: check the
batch at the edge, decide once (:class:`labkit.mixed.TokenDispatcher`, vLLM's
``CudagraphDispatcher``, by the rules of :mod:`labkit.rules`), stage it into the one static
batch (:class:`labkit.batch.StaticBatch`, vLLM's ``InputBatch``), then replay the graph its key
names or run eagerly, and count.

A decode step is the uniform batch of query length 1: :meth:`ModelRunner.decode` takes its
rows as tensors (the contract of :meth:`TinyGPT.decode_step`), :meth:`ModelRunner.run` a
token-flattened :class:`labkit.mixed.FlatBatch`, :meth:`ModelRunner.verify` speculative verify
rows of ``1 + k``. FULL graphs are captured for the uniform keys (the readable step, or the
fused or Triton step when ``uniform_query_len`` is 1), PIECEWISE graphs
(:mod:`labkit.piecewise`) for the others, all in one pool; ``decode_only`` captures only what a
decode step can reach (vLLM captures every key). ``lazy=True`` captures each FULL size the first
time a step needs it (vLLM RFC #20098). ``breaks_at`` (decode only) makes the PIECEWISE
graphs breakable ones (:mod:`labkit.breakable`), broken at those layers' attention. Without
CUDA (``capture=False``) the same decisions run eagerly on the same padded inputs: the CPU
stand-in.

:class:`PaddingDispatcher` (decode steps: the padding table, ``decide(bs)`` as a
:class:`Decision`) and :class:`MixedRunner` (mixed and verify steps) are this runner under the
names the notebooks use.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, Literal, NamedTuple, Protocol

import torch

from labkit.batch import StaticBatch
from labkit.breakable import BreakableGraphs, breakable_step, capture_breakable_set, check_breaks
from labkit.checks import as_bool, as_int
from labkit.fused import make_fused_step
from labkit.graphs import (
    GraphSet, Order, PoolMode, capture_full, capture_unchecked, capturing, check_capture,
    new_batch,
)
from labkit.kernels.step import Schedule, make_triton_step
from labkit.mixed import FlatBatch, TokenDispatcher, check_flat
from labkit.model import Decode, TinyGPT
from labkit.piecewise import PiecewiseGraphs, capture_pieces, piecewise_step
from labkit.rules import BatchDescriptor, GraphMode, RuntimeMode, padded_size, padding_table
from labkit.step_checks import Check, check_capture_sizes, check_choice, check_id_tensor

StepName = Literal["readable", "fused", "triton", "triton_pdl", "triton_persistent"]
#: the decode steps a runner can run: the readable one, PyTorch's fused one, and the Triton
#: step's three schedules (``triton``: one kernel after another; ``_pdl``: programmatic
#: dependent launch; ``_persistent``: one launch per layer), all FULL-graph choices
STEP_NAMES: tuple[StepName, ...] = ("readable", "fused", "triton", "triton_pdl",
                                    "triton_persistent")


def triton_schedule(step: StepName) -> Schedule:
    """The :data:`labkit.kernels.step.SCHEDULES` entry of a Triton step name."""
    return "kernels" if step == "triton" else step.removeprefix("triton_")  # type: ignore


@dataclass
class StepCounters:
    """What the runner did: steps per runtime mode, graph hits per padded size, eager
    fallbacks, rows (tokens) run for real and for padding."""

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

    def count(self, mode: RuntimeMode, real: int, run: int) -> None:
        """Count one step of ``real`` rows that ran as ``mode`` on ``run`` rows."""
        self.steps += 1
        self.real_rows += real
        self.mode_steps[mode] = self.mode_steps.get(mode, 0) + 1
        if mode == "NONE":
            self.eager_fallbacks += 1
        else:
            self.graph_hits[run] = self.graph_hits.get(run, 0) + 1
            self.padded_rows += run - real

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["graph_hits"] = {str(k): v for k, v in sorted(self.graph_hits.items())}
        d.update(hit_rate=self.hit_rate, waste=self.waste)
        return d


class Runner(Protocol):
    """Computes the logits of the first ``rows`` rows of the static batch."""

    static: bool  # True: the output is a buffer the next replay overwrites

    def replay(self, rows: int) -> torch.Tensor: ...


class EagerRunner:
    """Runs ``step`` eagerly on the static batch: NONE, and the CPU stand-in of the graphs."""

    static = False

    def __init__(self, batch: StaticBatch, step: Decode | Any) -> None:
        self.batch, self.step = batch, step

    def replay(self, rows: int) -> torch.Tensor:
        return self.step(*self.batch.view(rows))


def check_capture_flag(model: TinyGPT, capture: object) -> bool:
    """Whether to capture: ``None`` on CUDA; ``True`` without CUDA raises, naming the fix."""
    if capture is None:
        return model.device.type == "cuda"
    if as_bool(capture, "capture") and model.device.type != "cuda":
        raise RuntimeError(f"capture=True needs the model on a CUDA GPU (it is on "
                           f"{model.device}); use capture=False to run the same decisions "
                           "eagerly")
    return bool(capture)


class ModelRunner:
    """The one runner (see the module docstring). ``capture`` (None: on CUDA) captures the
    graphs; ``copy_outputs=False``: a graph step returns a view of the static logits that the
    next step overwrites, and the first thread that steps it owns it. One lock serialises each
    step; on CUDA, threads sharing a runner must use the same stream. ``graphs=``: FULL graphs
    of the reachable sizes, captured before (a tensor-parallel shard captures its own).
    ``breaks_at``: the PIECEWISE graphs of a ``decode_only`` runner are breakable graphs broken
    at these layers' attention (every layer: the hand cut's shape; ``None``: the hand cut)."""

    def __init__(self, model: TinyGPT, capture_sizes: Sequence[int], *,
                 cudagraph_mode: GraphMode = "FULL_AND_PIECEWISE", uniform_query_len: int = 1,
                 max_num_seqs: int | None = None, decode_only: bool = False,
                 step: StepName = "readable", capture: bool | None = None, lazy: bool = False,
                 copy_outputs: bool = True, pool: PoolMode = "shared",
                 order: Order = "largest_first", warmup: int = 3, progress: bool | None = None,
                 graphs: GraphSet | None = None,
                 breaks_at: Sequence[int] | None = None) -> None:
        if not isinstance(model, TinyGPT):
            raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}; build one "
                            "with labkit.model.build_model")
        self.decode_only = as_bool(decode_only, "decode_only")
        if self.decode_only:  # decode rows: sizes up to max_batch
            sizes = check_capture(model, capture_sizes, pool, order, warmup, progress, True)
        else:  # token sizes may pass max_batch; the other arguments checked alike
            sizes = check_capture_sizes(capture_sizes)
            check_capture(model, [1], pool, order, warmup, progress, True)
        self.model, cfg = model, model.cfg
        self.copy_outputs = as_bool(copy_outputs, "copy_outputs")
        self.lazy = as_bool(lazy, "lazy")
        self.capture = check_capture_flag(model, capture)
        self.dispatcher = d = TokenDispatcher(sizes, cfg.max_batch if max_num_seqs is None
                                              else max_num_seqs, cudagraph_mode,
                                              uniform_query_len)
        q = d.uniform_query_len
        if self.decode_only and q != 1:
            raise ValueError(f"decode_only runs decode rows of one token; uniform_query_len={q} "
                             "is for verify steps: build a runner without decode_only")
        check_choice(step, "step", STEP_NAMES)
        #: the decision for a decode step of ``b`` rows (one token each), ``b`` in 1..max_batch
        none: RuntimeMode = "NONE"
        self._decode_table: list[tuple[RuntimeMode, int]] = [(none, 0)] + [
            (m, k.num_tokens) for m, k in (d.dispatch(b, q == 1)
                                           for b in range(1, cfg.max_batch + 1))]
        if self.decode_only:  # only what a decode step reaches
            reach = self._decode_table[1:]
            self.full_sizes = sorted({n for m, n in reach if m == "FULL"})
            self.piecewise_sizes = sorted({n for m, n in reach if m == "PIECEWISE"})
        else:
            self.full_sizes = sorted(k.num_tokens for k in d.keys["FULL"] if k.uniform)
            self.piecewise_sizes = sorted(k.num_tokens for k in d.keys["PIECEWISE"])
        if step != "readable" and (q != 1 or self.piecewise_sizes):
            raise ValueError(f"step={step!r} is a FULL graph of a decode step and runs as one "
                             "piece; piecewise capture cuts the readable step at attention. Use "
                             "it with cudagraph_mode='FULL' (or 'NONE') and decode_only, or "
                             "step='readable' for piecewise graphs and verify rows")
        if breaks_at is not None and not (self.decode_only and self.piecewise_sizes):
            raise ValueError("breaks_at makes the PIECEWISE graphs of decode steps breakable: "
                             "use it with decode_only=True and a cudagraph_mode that captures "
                             "PIECEWISE sizes ('PIECEWISE', or 'FULL_AND_PIECEWISE' with "
                             "max_num_seqs below the largest size), or leave it None")
        #: layers whose attention breaks the PIECEWISE graphs (None: the hand cut at attention)
        self.breaks_at = None if breaks_at is None else check_breaks(breaks_at, cfg.n_layer)
        if graphs is not None:
            if not isinstance(graphs, GraphSet):
                raise TypeError(f"graphs must be a GraphSet from capture_decode_graphs, got "
                                f"{type(graphs).__name__}")
            if not self.capture or self.lazy or self.piecewise_sizes:
                raise ValueError("pass captured graphs only with capture=True, FULL graphs "
                                 "alone (cudagraph_mode='FULL') and lazy=False")
            if graphs.sizes != self.full_sizes:
                raise ValueError(f"graphs were captured for {graphs.sizes}, not "
                                 f"{self.full_sizes}; pass the same capture sizes")
        self.step_name = step
        #: a decode step's eager function (the chosen step; checks nothing)
        self._decode: Decode = (model.decode if step == "readable" else
                                make_fused_step(model).decode if step == "fused" else
                                make_triton_step(model, schedule=triton_schedule(step)).decode)

        def uniform(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor,
                    out: torch.Tensor | None = None) -> torch.Tensor:
            return model.forward_tokens(t, model.cache.step_meta(p, s, q), q, out)

        #: the FULL graphs' function: a uniform batch of ``q`` tokens per request
        self._uniform: Decode = self._decode if q == 1 else uniform
        self._lock = threading.Lock()
        self._owner: int | None = None  # with copy_outputs=False: the one thread allowed
        self.graphed = self.capture and bool(self.full_sizes or self.piecewise_sizes)
        top = max(d.sizes)
        self.batch: StaticBatch = graphs.batch if graphs is not None else (
            new_batch(model, top, rows=max(cfg.max_batch, top)) if self.graphed
            else StaticBatch(model))
        self.graphs: GraphSet | None = graphs
        self.pieces: PiecewiseGraphs | None = None
        self.breakable: BreakableGraphs | None = None
        #: lazy capture: seconds each size's first step waited for its warm-up and capture
        self.lazy_capture_s: dict[int, float] = {}
        self._lazy = (pool, warmup)
        kw: dict[str, Any] = dict(warmup=warmup, progress=progress, check_sync=True)
        if self.capture and graphs is None and self.full_sizes:
            self.graphs = (GraphSet({}, self.batch, pool, order) if self.lazy else
                           capture_full(model, self.full_sizes, self.batch, self._uniform,
                                        pool=pool, order=order, **kw))
        if self.capture and self.piecewise_sizes:
            shared = (next(iter(self.graphs.graphs.values())).pool
                      if self.graphs is not None and self.graphs.graphs else None)
            if self.breaks_at is None:
                self.pieces = capture_pieces(model, self.piecewise_sizes, self.batch,
                                             pool=shared, with_meta=self.decode_only, **kw)
            else:
                self.breakable = capture_breakable_set(model, self.piecewise_sizes, self.batch,
                                                       self.breaks_at, pool=shared, **kw)
        eager = EagerRunner(self.batch, self._decode)
        pieces = (partial(piecewise_step, model) if self.breaks_at is None
                  else breakable_step(model, self.breaks_at))
        self._runners: dict[RuntimeMode, Runner] = {
            "NONE": eager, "FULL": self.graphs or eager,
            "PIECEWISE": self.pieces or self.breakable or EagerRunner(self.batch, pieces)}
        self.counters = StepCounters()
        #: (runtime mode, rows run) of the last step: what a caller records, decided once
        self.last_step: tuple[RuntimeMode, int] | None = None

    @property
    def sizes(self) -> list[int]:
        """The capture sizes, in rows (tokens), as vLLM adjusts them."""
        return self.dispatcher.sizes

    def runner(self, mode: RuntimeMode) -> Runner:
        """What runs a decode step of runtime mode ``mode`` on the staged rows (the graphs on
        CUDA, the eager stand-in without)."""
        return self._runners[check_choice(mode, "mode", ("NONE", "PIECEWISE", "FULL"))]

    def dispatch(self, batch: FlatBatch | int) -> tuple[RuntimeMode, BatchDescriptor]:
        """The runtime mode and key of a step (nothing run): a :class:`FlatBatch`, or a
        decode step of ``batch`` rows."""
        if isinstance(batch, FlatBatch):
            d = self.dispatcher
            return d.dispatch(batch.num_tokens, batch.is_uniform(d.uniform_query_len))
        b = as_int(batch, "batch size", minimum=1, fix="a decode step has at least one row")
        if b >= len(self._decode_table):
            return "NONE", BatchDescriptor(b)
        return self.dispatcher.dispatch(b, self.dispatcher.uniform_query_len == 1)

    def reset_counters(self) -> None:
        with self._lock:
            self.counters = StepCounters()

    # ------------------------------------------------------------------ decode steps

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, *,
               check: Check = True) -> torch.Tensor:
        """Logits ``(b, V)`` for one decode step of ``b`` rows (the contract of
        :meth:`TinyGPT.decode_step`): check at the edge, decide, stage, run."""
        with self._lock:
            if not self.copy_outputs:
                self._claim()
            b = self.model.check_step(tokens, positions, slots, check, who="the runner",
                                      host_ok=True)
            mode, rows = self._decode_table[b]  # NONE: the batch's own rows
            self.batch.load(tokens, positions, slots)
            if mode == "FULL" and self.lazy and self.graphs is not None and \
                    rows not in self.graphs.graphs:
                self._capture_lazily(rows)
            if mode == "PIECEWISE" and self.pieces is not None and not self.decode_only:
                _, p, s = self.batch.view(rows)  # pieces of a mixed runner: metadata outside
                runner: Runner = self.pieces
                out = self.pieces.replay(rows, self.model.cache.step_meta(p, s))
            else:
                runner = self._runners[mode]
                out = runner.replay(rows)
            self.counters.count(mode, b, rows)
            self.last_step = (mode, rows)
            out = out[:b]
            return out.clone() if runner.static and self.copy_outputs else out

    def load_inputs(self, tokens: torch.Tensor, positions: torch.Tensor,
                    slots: torch.Tensor, *, check: Check = True) -> int:
        """Check a decode batch, copy it into the static batch and return the padded size (0
        above the largest size). A bad batch raises and copies nothing."""
        with self._lock:
            b = self.model.check_step(tokens, positions, slots, check, who="the runner",
                                      host_ok=True)
            p = padded_size(self.sizes, b) or 0
            if p:
                self.batch.load(tokens, positions, slots)
            return p

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
            return self._uniform(t, p, s, out)

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
                f"this {type(self).__name__} was built with copy_outputs=False, so its result "
                "is a view the next step overwrites, and it belongs to the first thread that "
                "stepped it; another thread's step would hand out the wrong logits. Build it "
                "with copy_outputs=True (the default) to share it between threads")

    # ------------------------------------------------------------------ mixed steps

    def _padded_inputs(self, host: torch.Tensor, run: int
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(tokens, positions, slots) of ``run`` tokens: the batch's, then pad tokens (token 0,
        position 0, the scratch slot); staged into the static batch when graphs read it, else
        padded per step (no buffer of the largest size)."""
        if self.graphed:
            self.batch.load(*host)
            return self.batch.view(run)
        pad = torch.tensor([[0], [0], [self.model.cfg.scratch_slot]]).expand(
            3, run - host.shape[1])
        t, p, s = torch.cat([host, pad], 1).to(self.model.device)
        return t, p, s

    @torch.no_grad()
    def run(self, batch: FlatBatch) -> torch.Tensor:
        """Logits ``(num_tokens, V)`` of every token of a mixed ``batch``: check, decide, stage,
        run (padded tokens: one-token requests at position 0 of the scratch slot)."""
        with self._lock:
            if not self.copy_outputs:
                self._claim()
            check_flat(self.model, batch)
            mode, key = self.dispatch(batch)
            m, n, run = self.model, batch.num_tokens, key.num_tokens
            q = self.dispatcher.uniform_query_len
            host, static = batch.host, False
            if mode == "NONE":
                dev = (host.pin_memory().to(m.device, non_blocking=True)
                       if m.device.type == "cuda" else host)
                out = m.forward_tokens(dev[0], m.cache.mixed_meta(dev[1], dev[2],
                                                                  batch.query_lens),
                                       max(batch.query_lens))
            else:
                t, p, s = self._padded_inputs(host, run)
                lens = batch.query_lens + [1] * (run - n)  # padded tokens: one-token requests
                if mode == "FULL" and self.graphs is not None:
                    if self.lazy and run not in self.graphs.graphs:
                        self._capture_lazily(run)
                    out, static = self.graphs.replay(run), True
                elif mode == "FULL":
                    out = self._uniform(t, p, s) if q == 1 else m.forward_tokens(
                        t, m.cache.step_meta(p, s, q), q)
                elif self.pieces is not None:
                    out, static = self.pieces.replay(run, m.cache.mixed_meta(p, s, lens),
                                                     max(lens)), True
                else:
                    out = m.forward_tokens(t, m.cache.mixed_meta(p, s, lens), max(lens))
            self.counters.count(mode, n, run)
            self.last_step = (mode, run)
            return out[:n].clone() if static and self.copy_outputs else out[:n]

    def verify(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
               query_len: int) -> torch.Tensor:
        """:meth:`run` of a uniform batch given as 1-D int64/int32 tensors (on the host or the
        model's device), request ``r``'s ``query_len`` tokens at ``r * query_len``, each row one
        slot at consecutive positions: the verify step of
        :func:`labkit.serving.spec.generate_speculative`. ``query_len`` must be the runner's
        ``uniform_query_len`` (``1 + k``: the length its FULL graphs are keyed by). A batch this
        would not run exactly as given is refused, before anything is written."""
        q = as_int(query_len, "query_len", minimum=1,
                   fix="give 1 + k, the tokens of each verify row")
        own = self.dispatcher.uniform_query_len
        if q != own:
            raise ValueError(f"query_len={q} but this runner was built with uniform_query_len="
                             f"{own}, the row length its FULL graphs are keyed by; build "
                             f"MixedRunner(model, sizes, uniform_query_len={q}) for k={q - 1}")
        dev = self.model.device
        for name, x in (("tokens", tokens), ("positions", positions), ("slots", slots)):
            check_id_tensor(name, x, 1, dev, host_ok=True)
        n = tokens.shape[0]
        if positions.shape[0] != n or slots.shape[0] != n:
            raise ValueError(f"tokens, positions and slots must have one entry per token; got "
                             f"{n}, {positions.shape[0]}, {slots.shape[0]}")
        if n == 0:
            raise ValueError("verify needs at least one row of query_len tokens; got none")
        if n % q:
            raise ValueError(f"{n} tokens is not a multiple of query_len={q}: every request "
                             f"verifies exactly {q} tokens (its last token and {q - 1} drafts)")
        t, p, s = (x.tolist() for x in (tokens, positions, slots))
        rows = []
        for r in range(n // q):
            part = slice(r * q, (r + 1) * q)
            if len(set(s[part])) != 1:
                raise ValueError(f"row {r} holds slots {s[part]}: a verify row is one request's "
                                 f"{q} tokens, give them one slot")
            if p[part] != list(range(p[r * q], p[r * q] + q)):
                raise ValueError(f"row {r} has positions {p[part]}: a verify row's tokens sit at "
                                 "consecutive positions; give first, first + 1, ...")
            rows.append((s[r * q], p[r * q], t[part]))
        return self.run(FlatBatch.of(rows))

    def release(self) -> None:
        """Free the captured graphs (eager: nothing to free)."""
        with self._lock:
            for runner in (self.graphs, self.pieces, self.breakable):
                if runner is not None:
                    runner.release()


class MixedRunner(ModelRunner):
    """The runner of token-flattened steps (decode rows, prefill chunks, verify rows of
    ``1 + k``) under the name notebooks 10, 13 and 15 use: FULL graphs for the uniform keys,
    PIECEWISE graphs for the others (``cudagraph_mode='FULL_AND_PIECEWISE'`` by default)."""

    def __init__(self, model: TinyGPT, capture_sizes: Sequence[int], *,
                 cudagraph_mode: GraphMode = "FULL_AND_PIECEWISE", uniform_query_len: int = 1,
                 capture: bool | None = None, warmup: int = 3,
                 progress: bool | None = None) -> None:
        super().__init__(model, capture_sizes, cudagraph_mode=cudagraph_mode,
                         uniform_query_len=uniform_query_len, capture=capture, warmup=warmup,
                         progress=progress)

    def decide(self, batch: FlatBatch) -> tuple[RuntimeMode, BatchDescriptor]:
        """The runtime mode and key of ``batch`` (nothing run)."""
        if not isinstance(batch, FlatBatch):
            raise TypeError(f"batch must be a FlatBatch (FlatBatch.of(...)), got "
                            f"{type(batch).__name__}")
        return self.dispatch(batch)

    def step(self, batch: FlatBatch) -> torch.Tensor:
        """Logits ``(num_tokens, V)`` of every token of ``batch`` (:meth:`ModelRunner.run`)."""
        return self.run(batch)


# ------------------------------------------------------------------ decode steps only

CudagraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE"]
CUDAGRAPH_MODES: tuple[CudagraphMode, ...] = ("NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE")


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

    ``capture`` (``None``: on CUDA) captures the graphs; ``False`` runs the same padded
    batches eagerly. Every batch is checked (``check`` as in :mod:`labkit.step_checks`,
    ``True`` by default) before anything is copied. ``step``: one of :data:`STEP_NAMES` in
    FULL graphs. ``max_num_seqs`` (vLLM's; default the model's ``max_batch``): decode batches up
    to it run FULL graphs, larger ones PIECEWISE in ``FULL_AND_PIECEWISE``. ``lazy=True`` (FULL
    graphs): capture each size the first time a batch needs it (:attr:`lazy_capture_s`). The rest as
    :class:`labkit.runner.ModelRunner`, with ``decode_only``: only the graphs a decode step
    reaches are captured.
    """

    def __init__(self, model: TinyGPT, capture_sizes: Sequence[int], *,
                 capture: bool | None = None, pool: PoolMode = "shared",
                 order: Order = "largest_first", copy_outputs: bool = True, warmup: int = 3,
                 progress: bool | None = None, graphs: GraphSet | None = None,
                 cudagraph_mode: CudagraphMode = "FULL", max_num_seqs: int | None = None,
                 step: StepName = "readable", lazy: bool = False) -> None:
        if not isinstance(model, TinyGPT):
            raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}; build one "
                            "with labkit.model.build_model")
        capture = check_capture_flag(model, capture)
        check_choice(cudagraph_mode, "cudagraph_mode", CUDAGRAPH_MODES)
        if lazy and cudagraph_mode != "FULL":
            raise ValueError("lazy=True captures FULL graphs on first use: use it with "
                             "cudagraph_mode='FULL' and no graphs=")
        super().__init__(model, capture_sizes, cudagraph_mode=cudagraph_mode,
                         max_num_seqs=max_num_seqs, decode_only=True, step=step,
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
