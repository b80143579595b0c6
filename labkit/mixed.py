"""Mixed batches as vLLM V1 runs them: one step of ``num_tokens`` tokens from ``num_reqs``
requests (decode rows of one token, prefill chunks, speculative verify rows of ``1 + k``).

Three places, as in vLLM: a :class:`FlatBatch` (the host side of vLLM's ``InputBatch``: each
request's slot, first position and tokens); :class:`TokenDispatcher`, vLLM's
``CudagraphDispatcher`` (``vllm/v1/cudagraph_dispatcher.py``) transcribed: graphs keyed by a
:class:`BatchDescriptor` ``(num_tokens, num_reqs, uniform)``, FULL graphs for uniform batches
(every request ``uniform_query_len`` tokens), PIECEWISE graphs for the rest padded to a
captured ``num_tokens``, NONE above the largest size; and :class:`MixedRunner`, which checks,
decides, stages and runs (vLLM's ``GPUModelRunner.execute_model``).

Why mixed batches are not FULL graphs: labkit's attention (:meth:`KVCache.attend`) launches its
varlen kernel with the longest query and the number of requests, host ints fixed at capture.
A uniform batch always has the same ones, a mixed batch does not: the attention is capturable
for uniform batches only, what vLLM calls ``AttentionCGSupport.UNIFORM_BATCH`` (FlashAttention
2's backend, ``vllm/v1/attention/backends/flash_attn.py``). vLLM then turns a FULL request into
FULL_AND_PIECEWISE (``resolve_cudagraph_mode_and_sizes`` in ``vllm/config/compilation.py``).
Simplified here: logits for every token (vLLM computes them for the sampled positions only,
outside the graph) and no LoRA or cascade attention in the key.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import torch

from labkit.checks import as_int
from labkit.graphs import GraphSet, capture_full, new_batch
from labkit.model import TinyGPT
from labkit.piecewise import PiecewiseGraphs, capture_pieces
from labkit.step_checks import check_capture_sizes, check_choice, check_slots, check_token_ids

GraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
GRAPH_MODES: tuple[GraphMode, ...] = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY",
                                      "FULL_AND_PIECEWISE")
RuntimeMode = Literal["NONE", "PIECEWISE", "FULL"]
#: vLLM's ``CUDAGraphMode``: (mode of uniform decode batches, mode of the other batches)
ROUTINES: dict[GraphMode, tuple[RuntimeMode, RuntimeMode]] = {
    "NONE": ("NONE", "NONE"), "PIECEWISE": ("PIECEWISE", "PIECEWISE"), "FULL": ("FULL", "FULL"),
    "FULL_DECODE_ONLY": ("FULL", "NONE"), "FULL_AND_PIECEWISE": ("FULL", "PIECEWISE")}
Support = Literal["NEVER", "UNIFORM_SINGLE_TOKEN_DECODE", "UNIFORM_BATCH", "ALWAYS"]
SUPPORTS: tuple[Support, ...] = ("NEVER", "UNIFORM_SINGLE_TOKEN_DECODE", "UNIFORM_BATCH",
                                 "ALWAYS")
#: what labkit's attention supports (see the module docstring)
LABKIT_SUPPORT: Support = "UNIFORM_BATCH"


@dataclass(frozen=True)
class BatchDescriptor:
    """vLLM's graph key (``vllm/forward_context.py``): tokens run, and for a uniform batch the
    requests (``num_tokens // uniform_query_len``)."""

    num_tokens: int
    num_reqs: int | None = None
    uniform: bool = False

    @property
    def non_uniform(self) -> BatchDescriptor:
        return BatchDescriptor(self.num_tokens)


def resolve_mode(mode: GraphMode, support: Support = LABKIT_SUPPORT,
                 uniform_query_len: int = 1) -> GraphMode:
    """The mode vLLM runs when ``mode`` is asked for and the attention has ``support``: mixed
    FULL graphs need ALWAYS (else FULL_AND_PIECEWISE, labkit always cuts at attention), FULL
    decode graphs need more than NEVER (else PIECEWISE), a verify batch (``1 + k > 1`` tokens)
    needs UNIFORM_BATCH (``resolve_cudagraph_mode_and_sizes``, ``vllm/config/compilation.py``)."""
    check_choice(mode, "cudagraph_mode", GRAPH_MODES)
    check_choice(support, "support", SUPPORTS)
    decode, mixed = ROUTINES[mode]
    if mixed == "FULL" and support != "ALWAYS":
        if support == "NEVER":
            raise ValueError(f"cudagraph_mode={mode} needs an attention that can be captured; "
                             "use cudagraph_mode='PIECEWISE'")
        mode, decode = "FULL_AND_PIECEWISE", "FULL"
    if decode == "FULL" and (support == "NEVER" or (
            uniform_query_len > 1 and support == "UNIFORM_SINGLE_TOKEN_DECODE")):
        return "PIECEWISE"
    return mode


def spec_capture_sizes(sizes: Sequence[int], uniform_query_len: int) -> list[int]:
    """Capture sizes rounded up to multiples of ``1 + k`` (sizes past the largest dropped; none
    left: ``[1 + k]``), as vLLM's ``adjust_cudagraph_sizes_for_spec_decode``
    (``vllm/config/compilation.py``, PR #23679) does, so a uniform key splits into requests."""
    q, top = uniform_query_len, max(sizes)
    if q <= 1:
        return sorted(sizes)
    out = sorted(r for r in {-(-s // q) * q for s in sizes} if r <= top)
    return out or ([q] if q <= top else [])


class TokenDispatcher:
    """vLLM's ``CudagraphDispatcher``: the keys of the graphs a mode captures, and the decision
    for each step; holds no tensors. ``sizes``: capture sizes in tokens (checked, sorted)."""

    def __init__(self, sizes: Sequence[int], max_num_seqs: int, cudagraph_mode: GraphMode,
                 uniform_query_len: int = 1, support: Support = LABKIT_SUPPORT) -> None:
        q = as_int(uniform_query_len, "uniform_query_len", minimum=1,
                   fix="give 1 + the number of speculative tokens (1 without speculation)")
        self.uniform_query_len = q
        self.mode = resolve_mode(cudagraph_mode, support, q)
        self.sizes = spec_capture_sizes(sizes, q)
        self.keys: dict[RuntimeMode, set[BatchDescriptor]] = {"FULL": set(), "PIECEWISE": set()}
        decode, mixed = ROUTINES[self.mode]
        if mixed != "NONE":
            self.keys[mixed] |= {BatchDescriptor(s) for s in self.sizes}
        if decode == "FULL" and decode != mixed:  # vLLM's separate_routine()
            self.keys["FULL"] |= {BatchDescriptor(s, s // q, True) for s in self.sizes
                                  if q <= s <= q * max_num_seqs}

    def padded(self, num_tokens: int) -> int | None:
        """The smallest capture size holding ``num_tokens``, or None (above all of them)."""
        i = bisect.bisect_left(self.sizes, num_tokens)
        return self.sizes[i] if i < len(self.sizes) else None

    def dispatch(self, num_tokens: int, uniform: bool) -> tuple[RuntimeMode, BatchDescriptor]:
        """The runtime mode and key of a step of ``num_tokens`` tokens (``uniform``: every
        request ``uniform_query_len`` of them); NONE runs the tokens unpadded."""
        p = self.padded(num_tokens) if self.mode != "NONE" else None
        if p is None:
            return "NONE", BatchDescriptor(num_tokens)
        key = BatchDescriptor(p, p // self.uniform_query_len, True) if uniform else \
            BatchDescriptor(p)
        if key in self.keys["FULL"]:
            return "FULL", key
        if key.non_uniform in self.keys["FULL"]:
            return "FULL", key.non_uniform
        if key.non_uniform in self.keys["PIECEWISE"]:
            return "PIECEWISE", key.non_uniform
        return "NONE", BatchDescriptor(num_tokens)


@dataclass
class FlatBatch:
    """One step's requests flattened into tokens (host lists): per token its id, position and
    request slot; per request its slot and token count. Build it with :meth:`of`."""

    tokens: list[int]
    positions: list[int]
    slots: list[int]
    query_lens: list[int]
    req_slots: list[int]

    @classmethod
    def of(cls, requests: Sequence[tuple[int, int, Sequence[int]]]) -> FlatBatch:
        """From ``(slot, first_position, tokens)`` per request: a decode row has one token at
        its next position, a prefill chunk many, a verify row ``1 + k``."""
        b = cls([], [], [], [], [])
        for i, req in enumerate(requests):
            if not (isinstance(req, tuple) and len(req) == 3):
                raise TypeError(f"request {i} must be (slot, first_position, tokens), got "
                                f"{req!r}")
            slot = as_int(req[0], f"request {i} slot", minimum=0)
            start = as_int(req[1], f"request {i} first position", minimum=0)
            toks = [as_int(t, f"request {i} token") for t in req[2]]
            if not toks:
                raise ValueError(f"request {i} has no tokens; give at least one")
            b.tokens += toks
            b.positions += range(start, start + len(toks))
            b.slots += [slot] * len(toks)
            b.query_lens.append(len(toks))
            b.req_slots.append(slot)
        if not b.query_lens:
            raise ValueError("a step needs at least one request")
        return b

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def num_reqs(self) -> int:
        return len(self.query_lens)

    @cached_property
    def host(self) -> torch.Tensor:
        """Tokens, positions and slots as one ``(3, num_tokens)`` int64 host tensor (made once:
        the lists stay the batch, do not change them afterwards)."""
        return torch.tensor([self.tokens, self.positions, self.slots])

    def is_uniform(self, query_len: int) -> bool:
        """vLLM's ``uniform_decode``: every request exactly ``query_len`` tokens."""
        return all(n == query_len for n in self.query_lens)

    def last_token(self) -> list[int]:
        """Index of each request's last token (where its next token is sampled)."""
        out, t = [], 0
        for n in self.query_lens:
            t += n
            out.append(t - 1)
        return out


def check_flat(model: TinyGPT, batch: FlatBatch) -> None:
    """Refuse a batch the cache cannot hold, before anything is written: token ids outside the
    vocabulary, slots outside ``[0, max_batch)`` or repeated, positions past ``max_seq``, and
    (paged layout) a slot without blocks for the positions it writes."""
    if not isinstance(batch, FlatBatch):
        raise TypeError(f"batch must be a FlatBatch (FlatBatch.of(...)), got "
                        f"{type(batch).__name__}")
    cfg = model.cfg
    check_token_ids(min(batch.tokens), max(batch.tokens), cfg.vocab_size)
    check_slots(batch.req_slots, cfg.max_batch)
    ends = [batch.positions[t] + 1 for t in batch.last_token()]
    for slot, end in zip(batch.req_slots, ends):
        if end > cfg.max_seq:
            raise ValueError(f"slot {slot} writes position {end - 1} but the KV cache holds "
                             f"max_seq={cfg.max_seq}; shorten the request or raise max_seq")
    if cfg.kv_layout == "paged":
        model._check_room(batch.req_slots, ends)


@dataclass
class MixedCounters:
    """Steps per runtime mode, and tokens run, real and padded."""

    mode_steps: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    padded_tokens: int = 0

    def count(self, mode: RuntimeMode, real: int, run: int) -> None:
        self.mode_steps[mode] = self.mode_steps.get(mode, 0) + 1
        self.tokens += real
        self.padded_tokens += run - real


class MixedRunner:
    """Run token-flattened steps as vLLM V1 does: check, decide (:class:`TokenDispatcher`),
    stage into the static batch (padded tokens: token 0 at position 0 of the scratch slot),
    replay the graph the decision names or run eager. ``capture`` (None: on CUDA) captures
    FULL graphs for the uniform keys and PIECEWISE graphs for the others into one pool;
    without it the same decisions run eagerly (the CPU stand-in)."""

    def __init__(self, model: TinyGPT, capture_sizes: Sequence[int], *,
                 cudagraph_mode: GraphMode = "FULL_AND_PIECEWISE", uniform_query_len: int = 1,
                 capture: bool | None = None, warmup: int = 3,
                 progress: bool | None = None) -> None:
        if not isinstance(model, TinyGPT):
            raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}")
        sizes = check_capture_sizes(capture_sizes)
        warmup = as_int(warmup, "warmup", minimum=0, fix="warm up 0 or more times (3 is usual)")
        self.model = model
        self.dispatcher = d = TokenDispatcher(sizes, model.cfg.max_batch, cudagraph_mode,
                                              uniform_query_len)
        self.capture = model.device.type == "cuda" if capture is None else bool(capture)
        if self.capture and model.device.type != "cuda":
            raise RuntimeError("capture=True needs the model on a CUDA GPU; use capture=False "
                               "to run the same decisions eagerly")
        q, top = d.uniform_query_len, max(d.sizes, default=1)
        self.batch = new_batch(model, top, rows=top)
        self.counters = MixedCounters()
        self.graphs: GraphSet | None = None
        self.pieces: PiecewiseGraphs | None = None
        full = sorted(k.num_tokens for k in d.keys["FULL"] if k.uniform)
        piecewise = sorted(k.num_tokens for k in d.keys["PIECEWISE"])
        kw: dict[str, Any] = dict(warmup=warmup, progress=progress, check_sync=True)
        if self.capture and full:
            def uniform(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor,
                        out: torch.Tensor | None = None) -> torch.Tensor:
                return model.forward_tokens(t, model.cache.step_meta(p, s, q), q, out)
            self.graphs = capture_full(model, full, self.batch, uniform, pool="shared",
                                       order="largest_first", **kw)
        if self.capture and piecewise:
            pool = next(iter(self.graphs.graphs.values())).pool if self.graphs else None
            self.pieces = capture_pieces(model, piecewise, self.batch, pool=pool,
                                         with_meta=False, **kw)

    def decide(self, batch: FlatBatch) -> tuple[RuntimeMode, BatchDescriptor]:
        """The runtime mode and key of ``batch`` (nothing run)."""
        d = self.dispatcher
        return d.dispatch(batch.num_tokens, batch.is_uniform(d.uniform_query_len))

    @torch.no_grad()
    def step(self, batch: FlatBatch) -> torch.Tensor:
        """Logits ``(num_tokens, V)`` of every token of ``batch`` (a copy)."""
        check_flat(self.model, batch)
        mode, key = self.decide(batch)
        m, n, run = self.model, batch.num_tokens, key.num_tokens
        q = self.dispatcher.uniform_query_len
        host = batch.host
        if mode == "NONE":
            dev = (host.pin_memory().to(m.device, non_blocking=True) if m.device.type == "cuda"
                   else host)
            out = m.forward_tokens(dev[0], m.cache.mixed_meta(dev[1], dev[2], batch.query_lens),
                                   max(batch.query_lens))
        else:
            self.batch.load(*host)
            t, p, s = self.batch.view(run)
            lens = batch.query_lens + [1] * (run - n)  # padded tokens: one-token requests
            if mode == "FULL":
                out = (self.graphs.replay(run) if self.graphs else
                       m.forward_tokens(t, m.cache.step_meta(p, s, q), q))
            elif self.pieces:
                out = self.pieces.replay(run, m.cache.mixed_meta(p, s, lens), max(lens))
            else:
                out = m.forward_tokens(t, m.cache.mixed_meta(p, s, lens), max(lens))
        self.counters.count(mode, n, run)
        return out[:n].clone()

    def verify(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
               query_len: int) -> torch.Tensor:
        """:meth:`step` of a uniform batch given as 1-D tensors, request ``r``'s ``query_len``
        tokens at ``r * query_len``: the verify step of
        :func:`labkit.serving.spec.generate_speculative`."""
        t, p, s = (x.tolist() for x in (tokens, positions, slots))
        q = query_len
        return self.step(FlatBatch.of([(s[i], p[i], t[i:i + q]) for i in range(0, len(t), q)]))

    def release(self) -> None:
        """Free the captured graphs."""
        for runner in (self.graphs, self.pieces):
            if runner is not None:
                runner.release()
