"""Mixed batches as vLLM V1 runs them: one step of ``num_tokens`` tokens from ``num_reqs``
requests (decode rows of one token, prefill chunks, speculative verify rows of ``1 + k``).

Three places, as in vLLM: a :class:`FlatBatch` (the host side of vLLM's ``InputBatch``: each
request's slot, first position and tokens); :class:`TokenDispatcher`, vLLM's
``CudagraphDispatcher`` (``vllm/v1/cudagraph_dispatcher.py``) transcribed: graphs keyed by a
:class:`BatchDescriptor` ``(num_tokens, num_reqs, uniform)``, FULL graphs for uniform batches
(every request ``uniform_query_len`` tokens), PIECEWISE graphs for the rest padded to a
captured ``num_tokens``, NONE above the largest size; and the one runner,
:class:`labkit.runner.ModelRunner` (``MixedRunner``), which checks, decides, stages and runs
(vLLM's ``GPUModelRunner.execute_model``). A decode step is the uniform case of query length 1.

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
from dataclasses import dataclass
from functools import cached_property

import torch

from labkit import rules
from labkit.checks import as_int
from labkit.model import TinyGPT
from labkit.rules import (  # noqa: F401  (the names this module has always offered)
    GRAPH_MODES, LABKIT_SUPPORT, ROUTINES, SUPPORTS, BatchDescriptor, GraphMode, RuntimeMode,
    Support, resolve_mode,
)
from labkit.step_checks import check_capture_sizes, check_slots, check_token_ids

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
