"""The fidelity gate of a decode step: does a faster step still compute the same model?

Two figures per step, both against a **float32 reference**, the readable step of a float32
twin of the model (the same weights, upcast, so the figures show the step's arithmetic, not
the rounding of the weights):

- ``agreement``: the share of greedy tokens equal to the reference's, decoded freely.
- ``kl``: the KL divergence ``KL(p_ref || p_step)`` of the next-token distributions, mean and
  largest over rows and steps, with both models fed the reference's tokens (teacher forcing:
  one early disagreement does not make every later step differ).

A step **passes** when its mean KL is at most :data:`KL_FACTOR` times the readable step's in
the same dtype (the rounding the model already has) plus :data:`KL_FLOOR`, and, where a
float32 check was made, its float32 tokens equal the readable step's. A step that fails shows
no speed (:mod:`labkit.measure.past_launch` times only the steps that pass).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import torch

from labkit.model import StepFn, TinyGPT, build_model, generate

#: a step passes with a mean KL up to this many times the readable step's in its dtype...
KL_FACTOR = 2.0
#: ... plus this (nats), so that a readable KL of zero does not demand exactly zero
KL_FLOOR = 1e-6


def float32_twin(model: TinyGPT) -> TinyGPT:
    """A float32 copy of ``model`` (its weights upcast) with a cache of its own."""
    twin = build_model(replace(model.cfg, dtype="float32"), model.device)
    with torch.no_grad():
        for p, q in zip(model.parameters(), twin.parameters()):
            q.copy_(p.float())
    return twin


@torch.no_grad()
def teacher_forced_kl(model: TinyGPT, step: StepFn, reference: TinyGPT,
                      prompts: Sequence[Sequence[int]], new_tokens: int) -> dict[str, float]:
    """Mean and largest ``KL(p_reference || p_step)`` over every row of ``new_tokens - 1``
    decode steps, both models fed the reference's greedy tokens."""
    dev, n = model.device, len(prompts)
    for m in (model, reference):
        m.reset_cache()
        for i, p in enumerate(prompts):
            m.cache.reserve(i, len(p) + new_tokens)
    try:
        tokens = torch.cat([reference.prefill(torch.tensor([list(p)], device=dev),
                                              torch.tensor([i], device=dev)).argmax(-1)
                            for i, p in enumerate(prompts)])
        for i, p in enumerate(prompts):
            model.prefill(torch.tensor([list(p)], device=dev), torch.tensor([i], device=dev))
        positions = torch.tensor([len(p) for p in prompts], device=dev)
        slots = torch.arange(n, device=dev)
        kls = []
        for _ in range(new_tokens - 1):
            want = reference.decode_step(tokens, positions, slots).float()
            got = step(tokens, positions, slots).float()
            log_p = torch.log_softmax(want, dim=-1)
            log_q = torch.log_softmax(got, dim=-1)
            kls.append((log_p.exp() * (log_p - log_q)).sum(-1))
            tokens = want.argmax(-1)
            positions = positions + 1
        kl = torch.cat(kls).clamp_min(0.0)
        return {"mean": float(kl.mean()), "max": float(kl.max())}
    finally:
        for m in (model, reference):
            for i in range(n):
                m.cache.release(i)
            m.reset_cache()


def step_fidelity(model: TinyGPT, steps: Mapping[str, StepFn],
                  prompts: Sequence[Sequence[int]], new_tokens: int = 16,
                  float32_equal: Mapping[str, bool] | None = None) -> dict[str, dict]:
    """Per step of ``model``: ``agreement`` with the float32 reference's greedy tokens, ``kl``
    (:func:`teacher_forced_kl`), ``float32_tokens_equal`` where given, and ``passes``
    (:func:`passes`); ``steps`` must hold ``"readable"`` (the yardstick)."""
    if "readable" not in steps:
        raise ValueError("steps must include 'readable', the yardstick of the KL gate")
    reference = float32_twin(model)
    ref_tokens = generate(reference, prompts, new_tokens)
    out: dict[str, dict] = {}
    for name, step in steps.items():
        got = generate(model, prompts, new_tokens, step_fn=step)
        pairs = [(a, b) for r, g in zip(ref_tokens, got) for a, b in zip(r, g)]
        out[name] = {"agreement": sum(a == b for a, b in pairs) / len(pairs),
                     "kl": teacher_forced_kl(model, step, reference, prompts, new_tokens)}
        if float32_equal is not None and name in float32_equal:
            out[name]["float32_tokens_equal"] = bool(float32_equal[name])
    yardstick = out["readable"]["kl"]["mean"]
    for row in out.values():
        row["passes"] = passes(row, yardstick)
    return out


def kl_limit(readable_kl: float) -> float:
    """The largest mean KL that passes, given the readable step's in the same dtype."""
    return KL_FACTOR * readable_kl + KL_FLOOR


def passes(row: Mapping, readable_kl: float) -> bool:
    """The gate (the module docstring) for one step's fidelity ``row``."""
    return (row.get("float32_tokens_equal", True) is True
            and row["kl"]["mean"] <= kl_limit(readable_kl))
