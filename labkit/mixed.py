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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch

from labkit import rules
from labkit.checks import as_int
from labkit.graphs import GraphSet, capture_full, new_batch
from labkit.model import TinyGPT
from labkit.piecewise import PiecewiseGraphs, capture_pieces
from labkit.rules import (  # noqa: F401  (the names this module has always offered)
    GRAPH_MODES, LABKIT_SUPPORT, ROUTINES, SUPPORTS, BatchDescriptor, GraphMode, RuntimeMode,
    Support, resolve_mode,
)
from labkit.step_checks import check_capture_sizes, check_id_tensor, check_slots, check_token_ids

#: vLLM's spec-decode rounding (:func:`labkit.rules.spec_decode_sizes`), by its older name
spec_capture_sizes = rules.spec_decode_sizes


class TokenDispatcher:
    """vLLM's ``CudagraphDispatcher``: the keys of the graphs a mode captures, and the decision
    for each step, by the rules of :mod:`labkit.rules`; holds no tensors. ``sizes``: capture
    sizes in tokens (checked; rounded to multiples of ``uniform_query_len`` only where vLLM
    rounds, :func:`labkit.rules.rounds_for_spec_decode`)."""

    def __init__(self, sizes: Sequence[int], max_num_seqs: int, cudagraph_mode: GraphMode,
                 uniform_query_len: int = 1, support: Support = LABKIT_SUPPORT) -> None:
        given = check_capture_sizes(sizes)
        self.max_num_seqs = as_int(max_num_seqs, "max_num_seqs", minimum=1,
                                   fix="give the most requests one step holds (the slots)")
        q = as_int(uniform_query_len, "uniform_query_len", minimum=1,
                   fix="give 1 + the number of speculative tokens (1 without speculation)")
        self.uniform_query_len = q
        self.mode = resolve_mode(cudagraph_mode, support, q)
        self.sizes = rules.capture_sizes(given, self.mode, q)
        self.keys = rules.graph_keys(self.sizes, self.mode, q, self.max_num_seqs)

    def padded(self, num_tokens: int) -> int | None:
        """The smallest capture size holding ``num_tokens``, or None (above all of them)."""
        return rules.padded_size(self.sizes, num_tokens)

    def dispatch(self, num_tokens: int, uniform: bool) -> tuple[RuntimeMode, BatchDescriptor]:
        """The runtime mode and key of a step of ``num_tokens`` tokens (``uniform``: every
        request ``uniform_query_len`` of them); NONE runs the tokens unpadded."""
        n = as_int(num_tokens, "num_tokens", minimum=1, fix="a step runs at least one token")
        return rules.dispatch(self.keys, self.sizes, self.mode, self.uniform_query_len, n,
                              bool(uniform))


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
            given = req[2]
            if isinstance(given, (str, bytes, Mapping)) or not isinstance(given, Iterable):
                raise TypeError(f"request {i} tokens must be a list of token ids, got "
                                f"{given!r}; give (slot, first_position, [token, ...])")
            toks = [as_int(t, f"request {i} token") for t in given]
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


def max_step_tokens(model: TinyGPT) -> int:
    """The most tokens one step can hold: ``max_batch`` slots of at most ``max_seq``
    positions each (a bound for token budgets and capture sizes)."""
    return model.cfg.max_batch * model.cfg.max_seq


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
    without it the same decisions run eagerly (the CPU stand-in), on inputs padded per step:
    no buffer of the largest size is allocated."""

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
        q = d.uniform_query_len
        self.counters = MixedCounters()
        self.graphs: GraphSet | None = None
        self.pieces: PiecewiseGraphs | None = None
        full = sorted(k.num_tokens for k in d.keys["FULL"] if k.uniform)
        piecewise = sorted(k.num_tokens for k in d.keys["PIECEWISE"])
        #: the static batch the graphs read (None when nothing is captured: eager steps pad
        #: their own inputs)
        self.batch = (new_batch(model, max(d.sizes), rows=max(d.sizes))
                      if self.capture and (full or piecewise) else None)
        kw: dict[str, Any] = dict(warmup=warmup, progress=progress, check_sync=True)
        if self.batch is not None and full:
            def uniform(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor,
                        out: torch.Tensor | None = None) -> torch.Tensor:
                return model.forward_tokens(t, model.cache.step_meta(p, s, q), q, out)
            self.graphs = capture_full(model, full, self.batch, uniform, pool="shared",
                                       order="largest_first", **kw)
        if self.batch is not None and piecewise:
            pool = next(iter(self.graphs.graphs.values())).pool if self.graphs else None
            self.pieces = capture_pieces(model, piecewise, self.batch, pool=pool,
                                         with_meta=False, **kw)

    def decide(self, batch: FlatBatch) -> tuple[RuntimeMode, BatchDescriptor]:
        """The runtime mode and key of ``batch`` (nothing run)."""
        d = self.dispatcher
        return d.dispatch(batch.num_tokens, batch.is_uniform(d.uniform_query_len))

    def _padded_inputs(self, host: torch.Tensor, run: int
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(tokens, positions, slots) of ``run`` tokens: the batch's, then pad tokens (token 0,
        position 0, the scratch slot); staged into the static batch when there is one."""
        if self.batch is not None:
            self.batch.load(*host)
            return self.batch.view(run)
        pad = torch.tensor([[0], [0], [self.model.cfg.scratch_slot]]).expand(
            3, run - host.shape[1])
        t, p, s = torch.cat([host, pad], 1).to(self.model.device)
        return t, p, s

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
            t, p, s = self._padded_inputs(host, run)
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
        """:meth:`step` of a uniform batch given as 1-D int64/int32 tensors (on the host or the
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
        return self.step(FlatBatch.of(rows))

    def release(self) -> None:
        """Free the captured graphs."""
        for runner in (self.graphs, self.pieces):
            if runner is not None:
                runner.release()
