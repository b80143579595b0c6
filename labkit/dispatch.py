"""The padding dispatcher: serve any batch size from a few captured graphs.

For a batch of ``b`` rows it looks up the smallest captured size ``p >= b`` in a precomputed
table, copies the inputs into persistent buffers, points the ``p - b`` padded rows at the
model's scratch cache slot, replays graph ``p`` and returns the first ``b`` rows of logits.
Batches above the largest captured size run eager (counted, never an error while the cache
has room). On a machine without CUDA the same bucketing runs with eager execution, so the
logic is tested everywhere.

The capture mode follows vLLM's ``CUDAGraphMode`` (``vllm/config/compilation.py``): ``FULL``
(one graph per size, attention inside), ``PIECEWISE`` (the step cut at attention, which runs
eagerly between captured pieces: :mod:`labkit.piecewise`), ``FULL_AND_PIECEWISE`` (full graphs
up to ``full_max_size``, pieces above) and ``NONE`` (eager). As vLLM's
``CudagraphDispatcher`` (``vllm/v1/cudagraph_dispatcher.py``) does from a ``BatchDescriptor``,
:meth:`PaddingDispatcher.decide` picks (runtime mode, padded size) for each batch from one
key, the number of rows; an unknown key falls back to eager.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Literal, Sequence

import torch

from labkit.checks import as_bool, as_int
from labkit.fused import step_function
from labkit.graphs import GraphSet, Order, PoolMode, capture_decode_graphs, check_capture_sizes
from labkit.model import TinyGPT
from labkit.piecewise import PiecewiseGraphs, capture_piecewise_graphs, piecewise_step
from labkit.sizes import padding_table
from labkit.step_checks import check_positions, check_slots, check_step_shapes, check_token_ids

#: staging buffers for host metadata: how many steps the host may run ahead of the GPU
STAGING_RING = 4

Mode = Literal["graph", "eager"]
CudagraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE"]
CUDAGRAPH_MODES: tuple[str, ...] = ("NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE")


def build_padding_table(sizes: Sequence[int], max_bs: int) -> list[int]:
    """``table[b]`` = smallest size in ``sizes`` that is >= ``b``, or 0 (run eager)."""
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

    def to_dict(self) -> dict:
        d = asdict(self)
        d["graph_hits"] = {str(k): v for k, v in sorted(self.graph_hits.items())}
        d.update(hit_rate=self.hit_rate, waste=self.waste)
        return d


class PaddingDispatcher:
    """Route each decode step to the smallest captured graph that fits, padding the rest.

    ``mode='graph'`` (default on CUDA) captures one graph per size; ``mode='eager'`` (default
    on CPU) runs the same padded batches eagerly. ``copy_outputs=True`` returns a fresh
    tensor each step; with ``False`` the result is a view of the graph's static output that
    the next step overwrites (faster, but hold on to it at your own risk).

    The checked path: every batch is checked on the host before anything is copied (one
    entry per row, ids inside the vocabulary, positions in ``[0, max_seq)``, slots distinct
    live slots, never the scratch slot). A bad batch raises ``ValueError``/``TypeError`` and
    changes nothing: no buffer, cache or counter is touched. CPU metadata is always checked;
    CUDA metadata costs one ``.cpu()`` of the three small tensors (a host sync) per step,
    which ``check=False`` skips when the caller vouches for the batch (benchmarks timing the
    replay path do this). :meth:`TinyGPT.decode_step` does not check CUDA tensors.

    ``step='fused'`` runs (and captures) the fused decode step of :mod:`labkit.fused` instead
    of the readable ``model.decode_step``: same cache, same logits contract, fewer kernels;
    full graphs and eager only (piecewise capture cuts the readable step). Graphs passed in
    with ``graphs=`` must have been captured with the same step.

    Threads: a dispatcher may be shared by threads. One lock serialises the copy-in, the
    replay and the copy-out of each step, and with ``copy_outputs=True`` every caller gets its
    own tensor. With ``copy_outputs=False`` the returned view is overwritten by the next step,
    so such a dispatcher belongs to the first thread that steps it and a step from any other
    thread raises ``RuntimeError``. On CUDA, threads sharing a dispatcher must issue their
    work on the same stream (the default one).
    """

    def __init__(self, model: TinyGPT, capture_sizes: Sequence[int], *, mode: Mode | None = None,
                 pool: PoolMode = "shared", order: Order = "largest_first",
                 copy_outputs: bool = True, warmup: int = 3, progress: bool | None = None,
                 graphs: GraphSet | None = None, cudagraph_mode: CudagraphMode = "FULL",
                 full_max_size: int | None = None, step: str = "readable") -> None:
        if not isinstance(model, TinyGPT):
            raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}; build one "
                            "with labkit.model.build_model")
        self.model = model
        cfg = model.cfg
        self.sizes = check_capture_sizes(capture_sizes, cfg.max_batch)
        if mode is not None and mode not in ("graph", "eager"):
            raise ValueError(f"mode must be 'graph', 'eager' or None (pick by device), got "
                             f"{mode!r}")
        if pool not in ("shared", "private"):
            raise ValueError(f"pool must be 'shared' or 'private', got {pool!r}")
        if order not in ("largest_first", "smallest_first"):
            raise ValueError(f"order must be 'largest_first' or 'smallest_first', got {order!r}")
        self.copy_outputs = as_bool(copy_outputs, "copy_outputs")
        warmup = as_int(warmup, "warmup", minimum=0, fix="warm up 0 or more times (3 is usual)")
        if progress is not None:
            as_bool(progress, "progress")
        if graphs is not None and not isinstance(graphs, GraphSet):
            raise TypeError(f"graphs must be a GraphSet from capture_decode_graphs, got "
                            f"{type(graphs).__name__}")
        if mode is None:
            mode = "graph" if model.device.type == "cuda" else "eager"
        if mode == "graph" and model.device.type != "cuda":
            raise RuntimeError(f"mode='graph' needs the model on a CUDA GPU (it is on "
                               f"{model.device}); use mode='eager' to run the same bucketing")
        if cudagraph_mode not in CUDAGRAPH_MODES:
            raise ValueError(f"cudagraph_mode must be one of {list(CUDAGRAPH_MODES)}, got "
                             f"{cudagraph_mode!r}")
        if cudagraph_mode == "FULL_AND_PIECEWISE":
            if full_max_size is None:
                raise ValueError("cudagraph_mode='FULL_AND_PIECEWISE' needs full_max_size: full "
                                 "graphs up to it, pieces above it")
            full_max_size = as_int(full_max_size, "full_max_size", minimum=1,
                                   fix="give the largest size captured as a full graph")
        elif full_max_size is not None:
            raise ValueError("full_max_size only applies to cudagraph_mode='FULL_AND_PIECEWISE'")
        if step not in ("readable", "fused"):
            raise ValueError(f"step must be 'readable' or 'fused' (labkit.fused), got {step!r}")
        if step != "readable" and cudagraph_mode in ("PIECEWISE", "FULL_AND_PIECEWISE"):
            raise ValueError(f"step={step!r} runs as one piece; piecewise capture cuts the "
                             "readable step at attention. Use cudagraph_mode='FULL' or 'NONE' "
                             "with the fused step, or step='readable' for piecewise graphs")
        #: which decode step runs: 'readable' (model.decode_step) or 'fused'
        self.step_name = step
        self._step_fn = step_function(model, step)
        self.cudagraph_mode: str = cudagraph_mode
        self.full_max_size = full_max_size
        full_sizes = {"FULL": self.sizes, "PIECEWISE": [], "NONE": [],
                      "FULL_AND_PIECEWISE": [b for b in self.sizes
                                             if b <= (full_max_size or 0)]}[cudagraph_mode]
        self.full_sizes = full_sizes
        self.piecewise_sizes = [] if cudagraph_mode in ("FULL", "NONE") else [
            b for b in self.sizes if b not in full_sizes]
        if graphs is not None and graphs.sizes != full_sizes:
            raise ValueError(f"graphs were captured for {graphs.sizes}, not {full_sizes}; "
                             "pass the same capture sizes")
        self.mode: Mode = mode
        self.table = build_padding_table(self.sizes, cfg.max_batch)
        self.counters = DispatchCounters()
        self._dirty = 0  # rows [0, _dirty) of the slot buffer may hold live slots
        self._lock = threading.Lock()
        self._owner: int | None = None  # with copy_outputs=False: the one thread allowed
        n, dev = self.sizes[-1], model.device
        self.graphs: GraphSet | None = None
        self.pieces: PiecewiseGraphs | None = None
        self._inputs: torch.Tensor | None = None
        if graphs is not None:
            if cudagraph_mode != "FULL" or mode != "graph":
                raise ValueError("pass captured graphs only with cudagraph_mode='FULL' and "
                                 "mode='graph'")
            self.graphs = graphs
            if graphs.index is None:  # a GraphSet built by hand: one index buffer
                graphs.index = torch.stack([graphs.positions, graphs.slots])
                graphs.positions, graphs.slots = graphs.index[0], graphs.index[1]
            self._tokens, self._index = graphs.tokens, graphs.index
        else:  # one set of static inputs and one static logits buffer for every graph
            # tokens, positions and slots are the three rows of one buffer, so that a batch
            # whose metadata is on the host arrives in one copy
            self._inputs = torch.zeros((3, n), dtype=torch.long, device=dev)
            self._inputs[2].fill_(cfg.scratch_slot)
            self._tokens, self._index = self._inputs[0], self._inputs[1:]
            logits = (torch.empty((n, cfg.vocab_size), dtype=cfg.torch_dtype, device=dev)
                      if mode == "graph" else None)
            if mode == "graph" and full_sizes:
                self.graphs = capture_decode_graphs(
                    model, full_sizes, pool=pool, order=order, warmup=warmup,
                    progress=progress, tokens=self._tokens, index=self._index, logits=logits,
                    step=self._step_fn)
            if mode == "graph" and self.piecewise_sizes:
                shared = next(iter(self.graphs.graphs.values())).pool if self.graphs else None
                self.pieces = capture_piecewise_graphs(
                    model, self.piecewise_sizes, pool=shared, tokens=self._tokens,
                    index=self._index, logits=logits, warmup=warmup, progress=progress)
        self._positions, self._slots = self._index[0], self._index[1]
        # host-side metadata: tokens, positions and slots are written into a staging buffer
        # (pinned on CUDA) and reach the device in one non-blocking copy of the whole buffer.
        # A ring of STAGING_RING buffers, each with an event that says when its last copy has
        # read it, lets the host prepare the next steps while the GPU still runs earlier ones
        # (with one buffer the host waited for the GPU every step: measured on the H200, that
        # serialised host and GPU and doubled the step time of the small model).
        pin = dev.type == "cuda"
        ring = STAGING_RING
        self._staging = [torch.zeros((3, n), dtype=torch.long, pin_memory=pin)
                         for _ in range(ring)]
        for st in self._staging:
            st[2].fill_(cfg.scratch_slot)
        self._staged = [torch.cuda.Event() if pin else None for _ in range(ring)]
        self._staged_rows = [0] * ring  # rows [0, k) of each staging buffer hold live rows
        self._ring_next = 0
        self._foreach_copy = getattr(torch, "_foreach_copy_", None)

    # ------------------------------------------------------------------ lookup
    def padded_size(self, bs: int) -> int | None:
        """The graph size a batch of ``bs`` rows runs in, or ``None`` for eager."""
        bs = as_int(bs, "batch size", minimum=1, fix="a decode step has at least one row")
        p = self.table[bs] if bs < len(self.table) else 0
        return p or None

    def decide(self, bs: int) -> tuple[str, int]:
        """(runtime mode, rows computed) for a batch of ``bs`` rows: ``('FULL', p)``,
        ``('PIECEWISE', p)`` with ``p`` the padded size, or ``('NONE', bs)`` (eager: above the
        largest size, or ``cudagraph_mode='NONE'``)."""
        p = self.padded_size(bs)
        if p is None or self.cudagraph_mode == "NONE":
            return "NONE", bs
        return ("FULL" if p in self.full_sizes else "PIECEWISE"), p

    def describe(self) -> list[dict]:
        """The padding table as rows: batch size, padded size (None = eager), padded rows."""
        rows = []
        for b in range(1, len(self.table)):
            p = self.table[b] or None
            rows.append({"batch": b, "padded_to": p, "padded_rows": (p - b) if p else 0})
        return rows

    def reset_counters(self) -> None:
        with self._lock:
            self.counters = DispatchCounters()

    # ------------------------------------------------------------------ the step
    def _validate(self, tokens: torch.Tensor, positions: torch.Tensor,
                  slots: torch.Tensor, check: bool) -> int:
        """Check a batch on the host before anything is written; returns its size."""
        m = self.model
        cfg = m.cfg
        as_bool(check, "check")
        b = check_step_shapes(tokens, positions, slots, m.device, cfg.max_batch, host_ok=True)
        host = (tokens, positions, slots)
        if not check and any(t.device.type != "cpu" for t in host):
            return b  # the caller vouches for CUDA metadata
        tok, pos, slo = _host_lists(host)
        check_token_ids(min(tok), max(tok), cfg.vocab_size)
        check_positions(min(pos), max(pos), cfg.max_seq)
        check_slots(slo, cfg.max_batch)
        return b

    def _load(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
              check: bool) -> int:
        b = self._validate(tokens, positions, slots, check)
        p = self.table[b]
        if p == 0:
            return 0
        self._copy_in(tokens, positions, slots, b, p)
        return p

    def _copy_in(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                 b: int, p: int) -> None:
        """Copy a checked batch of ``b`` rows into the static buffers, padded to ``p``."""
        if positions.device.type == "cpu" and slots.device.type == "cpu":
            self._load_host(tokens, positions, slots, b, p)
            return
        dst = (self._tokens[:b], self._positions[:b], self._slots[:b])
        src = (tokens, positions, slots)
        if (self._foreach_copy is not None and all(t.device == self._tokens.device for t in src)
                and all(t.dtype == torch.long for t in src)):
            self._foreach_copy(dst, src)
        else:
            for d, s in zip(dst, src):
                d.copy_(s, non_blocking=True)
        if self._dirty > b:  # rows a larger batch left behind must not point at live slots
            self._slots[b:self._dirty].fill_(self.model.cfg.scratch_slot)
        self._dirty = b

    def _load_host(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                   b: int, p: int) -> None:
        """Host metadata: fill the next staging buffer of the ring (rows past ``b``: token 0,
        position 0, the scratch slot) and copy all of it in at once. Tokens on the host ride
        in the same copy; tokens on the GPU (fed back from the last step's argmax) are copied
        on their own."""
        k = self._ring_next
        self._ring_next = (k + 1) % len(self._staging)
        st, event = self._staging[k], self._staged[k]
        if event is not None:
            event.synchronize()  # the copy that last read this buffer is done
        host_tokens = tokens.device.type == "cpu" and self._inputs is not None
        if host_tokens:
            st[0, :b].copy_(tokens)
        st[1, :b].copy_(positions)
        st[2, :b].copy_(slots)
        rows = self._staged_rows[k]
        if rows > b:  # rows a larger batch left here: back to harmless values
            st[:2, b:rows].zero_()
            st[2, b:rows].fill_(self.model.cfg.scratch_slot)
        self._staged_rows[k] = b
        n = st.shape[1]
        if host_tokens:
            self._inputs[:, :n].copy_(st, non_blocking=True)  # one copy: tokens and metadata
        else:
            self._index[:, :n].copy_(st[1:], non_blocking=True)
            self._tokens[:b].copy_(tokens, non_blocking=True)
        if event is not None:
            event.record()
        self._dirty = b  # every device row past b now holds harmless values

    def load_inputs(self, tokens: torch.Tensor, positions: torch.Tensor,
                    slots: torch.Tensor, *, check: bool = True) -> int:
        """Copy a batch into the persistent buffers, point padded rows at the scratch slot,
        and return the padded size (0 when the batch is above the largest graph). The batch
        is checked first (see the class docstring); a bad one raises and copies nothing."""
        with self._lock:
            return self._load(tokens, positions, slots, check)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor,
             slots: torch.Tensor, *, check: bool = True) -> torch.Tensor:
        """Logits ``(b, V)`` for one decode step of ``b`` rows; same contract as
        :meth:`TinyGPT.decode_step`. ``check=False`` skips the host copy of CUDA metadata
        (CPU metadata is always checked). Safe to call from several threads."""
        with self._lock:
            if not self.copy_outputs:
                me = threading.get_ident()
                if self._owner is None:
                    self._owner = me
                elif self._owner != me:
                    raise RuntimeError(
                        "this PaddingDispatcher was built with copy_outputs=False, so its "
                        "result is a view the next step overwrites, and it belongs to the "
                        "first thread that stepped it; another thread's step would hand out "
                        "the wrong logits. Build it with copy_outputs=True (the default) to "
                        "share it between threads")
            b = self._validate(tokens, positions, slots, check)
            runtime, p = self.decide(b)
            if runtime == "NONE":  # eager: no padding, nothing copied
                dev = self.model.device
                out = self._step_fn(tokens.to(dev), positions.to(dev),
                                    slots.to(dev), check=False)  # checked above
            else:
                self._copy_in(tokens, positions, slots, b, p)
                t, pos, slo = self._tokens[:p], self._positions[:p], self._slots[:p]
                if runtime == "FULL" and self.graphs is not None:
                    out = self.graphs.replay(p)[:b]
                elif runtime == "PIECEWISE" and self.pieces is not None:
                    out = self.pieces.replay(p)[:b]
                elif runtime == "PIECEWISE":  # no CUDA: the same cut, run eagerly
                    out = piecewise_step(self.model, t, pos, slo)[:b]
                else:
                    out = self._step_fn(t, pos, slo, check=False)[:b]
                out = out.clone() if self.copy_outputs else out
            c = self.counters
            c.steps += 1
            c.real_rows += b
            c.mode_steps[runtime] = c.mode_steps.get(runtime, 0) + 1
            if runtime == "NONE":
                c.eager_fallbacks += 1
            else:
                c.graph_hits[p] = c.graph_hits.get(p, 0) + 1
                c.padded_rows += p - b
            return out

    __call__ = step

    def release(self) -> None:
        """Free the captured graphs (eager mode: nothing to free)."""
        with self._lock:
            if self.graphs is not None:
                self.graphs.release()
            if self.pieces is not None:
                self.pieces.release()


def _host_lists(tensors: Sequence[torch.Tensor]) -> list[list[int]]:
    """The values of small 1-D integer tensors as lists, with at most one device-to-host copy
    (one host sync) for those not on the CPU."""
    on_dev = [t for t in tensors if t.device.type != "cpu"]
    parts = iter(())
    if on_dev:
        flat = torch.cat([t.to(torch.long) for t in on_dev]).cpu()
        parts = iter(flat.split([t.shape[0] for t in on_dev]))
    return [t.tolist() if t.device.type == "cpu" else next(parts).tolist() for t in tensors]
