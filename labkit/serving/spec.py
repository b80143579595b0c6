"""Speculative decoding's host side: propose drafts by prompt lookup and accept them greedily.

:func:`propose_ngram` is vLLM's ``ngram`` drafter, :func:`accept_greedy` its rejection sampler
for greedy requests, and :func:`generate_speculative` the greedy loop around a ``verify`` step
that runs ``1 + k`` tokens of every request at once (a uniform batch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from labkit.checks import as_int
from labkit.runner import ModelRunner
from labkit.model import TinyGPT, _check_prompts

#: ``verify(tokens, positions, slots, query_len) -> logits (R * query_len, vocab)``
VerifyFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]


def _check_k_n(k: object, min_n: object, max_n: object) -> tuple[int, int, int]:
    k = as_int(k, "k", minimum=1, fix="ask for 1 or more draft tokens")
    lo = as_int(min_n, "min_n", minimum=1, fix="match n-grams of at least 1 token")
    hi = as_int(max_n, "max_n", minimum=lo, fix=f"give max_n >= min_n={lo}")
    return k, lo, hi


def propose_ngram(context: Sequence[int], k: int, min_n: int = 1, max_n: int = 3) -> list[int]:
    """Up to ``k`` draft tokens by prompt lookup, the rule of vLLM's ``ngram`` method
    (``vllm/v1/spec_decode/ngram_proposer.py``, ``_find_longest_matched_ngram_and_propose_tokens``):
    the longest suffix of ``context`` of ``n`` tokens, ``max_n >= n >= min_n``, that occurs
    earlier in ``context`` (the occurrence may overlap the suffix, but not be it); of several
    occurrences the **earliest** (leftmost) one; the draft is the tokens that followed it, cut
    at the end of ``context``, so a match near the end gives fewer than ``k`` (at least one).
    No match, or a context shorter than ``min_n + 1``: no draft (``[]``). vLLM also cuts ``k``
    to the model's room (``max_model_len - len(context)``); :func:`generate_speculative` checks
    the room beforehand instead."""
    k, min_n, max_n = _check_k_n(k, min_n, max_n)
    ctx = list(context)
    for n in range(min(max_n, len(ctx) - 1), min_n - 1, -1):
        suffix = ctx[-n:]
        for start in range(len(ctx) - n):
            if ctx[start:start + n] == suffix:
                return ctx[start + n:start + n + k]
    return []


def accept_greedy(drafts: Sequence[int], target: Sequence[int]) -> list[int]:
    """The tokens one verify step emits for one greedy request, as vLLM's
    ``rejection_greedy_sample_kernel`` (``vllm/v1/sample/rejection_sampler.py``): ``target[j]``
    is the target's argmax after the ``j``-th fed token (the last emitted one, then the
    ``k`` drafts). Drafts are accepted while each equals the target's token at its place; the
    target's token at the first mismatch follows, or the bonus ``target[k]`` when all ``k``
    are accepted: ``1 .. k + 1`` tokens."""
    drafts, target = list(drafts), list(target)
    if len(target) != len(drafts) + 1:
        raise ValueError(f"{len(drafts)} drafts need {len(drafts) + 1} target tokens (one per "
                         f"verified position), got {len(target)}")
    out = []
    for d, t in zip(drafts, target):
        out.append(t)
        if d != t:
            return out
    return [*out, target[-1]]


@dataclass(frozen=True)
class SpecStats:
    """What a speculative run did: ``steps`` verify steps, ``rows`` (request, step) pairs in
    them, ``drafted`` draft tokens fed (``k`` a row, padding included), ``accepted`` of them
    accepted, ``emitted`` tokens the verify steps added to the outputs (after the cut at
    ``max_new_tokens``; the prefill's first token is not counted)."""

    steps: int
    rows: int
    drafted: int
    accepted: int
    emitted: int

    @property
    def acceptance_rate(self) -> float:
        """Accepted over drafted (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens a request gains per verify step (1 .. k + 1; 0 with no step)."""
        return self.emitted / self.rows if self.rows else 0.0


def _check_verify_owner(model: TinyGPT, verify: VerifyFn, k: int) -> None:
    """Refuse a ``verify`` bound to a runner of another model (it would read and write that
    model's cache), or to a :class:`MixedRunner` keyed by another ``1 + k``."""
    owner = getattr(verify, "__self__", None)
    other = getattr(owner, "model", None)
    if isinstance(other, TinyGPT) and other is not model:
        raise ValueError(f"verify is bound to a runner of another model "
                         f"({type(owner).__name__}.{getattr(verify, '__name__', 'verify')}): it "
                         "would run that model and its KV cache; build the runner on this "
                         "model, e.g. MixedRunner(model, sizes, uniform_query_len=1 + k)")
    if isinstance(owner, ModelRunner) and owner.dispatcher.uniform_query_len != 1 + k:
        raise ValueError(f"verify's runner was built with uniform_query_len="
                         f"{owner.dispatcher.uniform_query_len} but k={k} drafts make rows of "
                         f"{1 + k}; build MixedRunner(model, sizes, uniform_query_len={1 + k})")


@torch.no_grad()
def generate_speculative(model: TinyGPT, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                         k: int, verify: VerifyFn, *, min_n: int = 1,
                         max_n: int = 3) -> tuple[list[list[int]], SpecStats]:
    """Greedy decoding with prompt-lookup drafts: the same tokens as
    :func:`labkit.model.generate` when ``verify`` is exact. Prompt ``i`` is prefilled alone
    into slot ``i``; then every step feeds each unfinished request its last token and ``k``
    drafts (:func:`propose_ngram`, padded by repeating the last token, drafted or not, so
    ``query_len = 1 + k`` for every row, as vLLM pads a uniform batch) at consecutive
    positions, and keeps what :func:`accept_greedy` emits, cut at ``max_new_tokens``. The
    next step starts after the kept tokens, so rejected positions are overwritten. ``L``
    prompt tokens write positions up to ``L + max_new_tokens + k - 2``; everything is checked
    before anything is written, ``verify`` included (a runner's verify must belong to
    ``model`` and, for a :class:`MixedRunner`, be built with ``uniform_query_len = 1 + k``)."""
    ids, n_new = _check_prompts(model, prompts, max_new_tokens, None)
    k, min_n, max_n = _check_k_n(k, min_n, max_n)
    if not callable(verify):
        raise TypeError(f"verify must be callable (tokens, positions, slots, query_len) -> "
                        f"logits, got {type(verify).__name__}")
    _check_verify_owner(model, verify, k)
    room = model.cfg.max_seq
    needs = [len(p) + n_new - 1 + k if n_new > 1 else len(p) for p in ids]
    for i, (p, need) in enumerate(zip(ids, needs)):
        if need > room:
            raise ValueError(f"prompt {i} ({len(p)} tokens) + {n_new} new tokens with k={k} "
                             f"drafts needs {need} cache positions (a verify step writes k "
                             f"past the last token) but max_seq={room}; raise max_seq, or "
                             "ask for fewer tokens or drafts")
    if not ids or n_new == 0:
        return [[] for _ in ids], SpecStats(0, 0, 0, 0, 0)
    dev, q = model.device, 1 + k
    for i, need in enumerate(needs):  # paged layout: blocks for every position written
        model.cache.reserve(i, need)
    try:
        out = [[int(model.prefill(torch.tensor([p], device=dev), torch.tensor([i], device=dev))
                    .argmax(-1))] for i, p in enumerate(ids)]
        steps = rows = drafted = accepted = emitted = 0
        live = [i for i in range(len(ids)) if n_new > 1]
        while live:
            ctxs = [ids[i] + out[i] for i in live]
            drafts = []
            for c in ctxs:
                d = propose_ngram(c, k, min_n, max_n)
                drafts.append(d + [(c + d)[-1]] * (k - len(d)))
            # host tensors: the verify step stages them (a device copy here would wait)
            tokens = torch.tensor([[c[-1], *d] for c, d in zip(ctxs, drafts)])
            positions = torch.tensor([list(range(len(c) - 1, len(c) - 1 + q)) for c in ctxs])
            slots = torch.tensor(live).repeat_interleave(q)
            logits = verify(tokens.view(-1), positions.view(-1), slots, q)
            if logits.dim() != 2 or logits.shape[0] != len(live) * q:
                raise ValueError(f"verify returned logits of shape {tuple(logits.shape)} for "
                                 f"{len(live)} requests of {q} tokens; return "
                                 f"({len(live) * q}, vocab)")
            target = logits.argmax(-1).view(len(live), q).tolist()
            for i, d, t in zip(live, drafts, target):
                emit = accept_greedy(d, t)
                keep = emit[:n_new - len(out[i])]
                out[i].extend(keep)
                accepted += len(emit) - 1
                emitted += len(keep)
            steps, rows, drafted = steps + 1, rows + len(live), drafted + k * len(live)
            live = [i for i in live if len(out[i]) < n_new]
        return out, SpecStats(steps, rows, drafted, accepted, emitted)
    finally:
        for i in range(len(ids)):
            model.cache.release(i)
