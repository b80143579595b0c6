"""Exercise checks of notebook 15 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from typing import Any

import torch

from labkit.mixed import FlatBatch
from labkit.runner import MixedRunner
from labkit.model import build_model, preset
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach import mixed as lx

#: exercise 15.1's runner: capture sizes, and the steps whose mode and descriptor to predict
SIZES_15_1 = [1, 2, 4, 8, 16, 32]
STEPS_15_1 = {"a": (1, [(0, 4, [1]), (1, 0, [2]), (2, 6, [3])]),
              "b": (1, [(0, 4, [1]), (2, 6, [3]), (1, 0, [4] * 10)]),
              "c": (1, [(1, 0, [5] * 40)]),
              "d": (3, [(0, 4, [1, 2, 3]), (2, 6, [3, 4, 5])])}


@exercise("15.1", "descriptor and mode", "predict")
def _descriptor_and_mode(ex: Exercise, predicted: Any, *, model: Any) -> None:
    runners = {q: MixedRunner(model, SIZES_15_1, capture=False) if q == 1 else
               MixedRunner(model, SIZES_15_1, uniform_query_len=q, capture=False)
               for q in {q for q, _ in STEPS_15_1.values()}}
    if not isinstance(predicted, dict):
        ex.check("a dict of the four predictions", predicted, "a dict")
        return
    for key, (q, rows) in STEPS_15_1.items():
        got = predicted.get(key, ...)
        ex.check(f"{key}: (mode, descriptor)", tuple(got) if isinstance(got, list) else got,
                 runners[q].decide(FlatBatch.of(rows)),
                 hint="pad to a capture size; uniform means every request 1 + k tokens")


@exercise("15.2", "a slot mapping into another request", "debug")
def _slot_mapping(ex: Exercise, fixed_slots: Any) -> None:
    if fixed_slots is ... or not isinstance(fixed_slots, (list, tuple)) or len(fixed_slots) != 5:
        ex.check("five slots, one per token", ... if fixed_slots is ... else fixed_slots,
                 "a list of five slots", hint="bad_slots with one entry changed")
        return
    debug = build_model(preset("test", max_batch=4), "cpu", seed=0)
    debug.prefill(torch.tensor([[5, 6, 7]]), torch.tensor([0]))
    kv_before = debug.cache.kv.clone()
    batch = FlatBatch([11, 1, 2, 3, 4], [3, 0, 1, 2, 3], list(fixed_slots), [1, 4], [0, 1])
    got = MixedRunner(debug, [8], capture=False).step(batch)
    want = torch.stack([debug(torch.tensor([[5, 6, 7, 11]]))[0, 3]]
                       + [debug(torch.tensor([[1, 2, 3, 4]]))[0, i] for i in range(4)])
    slot0 = (debug.cache.kv != kv_before)[:, :, 0].any(-1).any(-1).any(0).any(0)
    ex.check("slot 0 changed at its position 3 only", slot0.nonzero().flatten().tolist(), [3],
             hint="which token wrote into slot 0?")
    ex.check_true("every token's logits equal the full forward pass",
                  torch.allclose(got, want, atol=2e-5, rtol=1e-4), hint="fix that token's slot")


@exercise("15.3", "choose k", "read")
def _choose_k(ex: Exercise, best_k: Any, k4_break_even: Any, *, ver: Any) -> None:
    if ver is None:
        ex.check_true("a recorded verify step", ver is not None,
                      hint="this exercise needs spec_verify_gpt2 (data/reference/h200/)")
        return
    cost = {k: lx.verify_ratio(ver, k, 8) for k in (1, 2, 4)}
    rate = {k: lx.expected_tokens(0.6, k) / cost[k] for k in cost}
    top = max(rate.values())
    # a k within 1% of the best rate is as good an answer as the best
    ex.check_one_of("best k at a = 0.6", best_k, [k for k, r in rate.items() if r >= 0.99 * top],
                    hint="expected tokens / cost")
    ex.check("break-even acceptance of k = 4", k4_break_even, lx.break_even(cost[4], 4),
             rel=0.02, hint="where expected tokens / cost equals 1")
