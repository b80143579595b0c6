"""Exercise checks of notebook 00 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from typing import Any

from labkit.model import TinyGPT, preset
from labkit.support.env import hardware_tier
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach import exercises as choices
from labkit.teach import launch as regime
from labkit.teach.decode import kv_cache_bytes

KV_SIZES = {"a": 6e6, "b": 6e7, "c": 6e8, "d": 6e9}


def _big() -> Any:
    """Exercise 0.2's ``big``: the GPT-2 shape with 64 live slots in bfloat16 (the records'
    ``gpt2``)."""
    return preset("gpt2", max_batch=64, dtype="bfloat16")


@exercise("0.1", "read the tier", "read")
def _read_the_tier(ex: Exercise, answer_tier: Any, answer_live: Any) -> None:
    ex.check_one_of("tier", answer_tier, [hardware_tier()],
                    hint="the banner under the set-up cell names it")
    ex.check("graphs captured live", answer_live, hardware_tier() == "gpu",
             hint="CUDA graphs need a CUDA GPU")


@exercise("0.2", "predict a KV cache", "predict")
def _predict_kv_cache(ex: Exercise, size: Any, than_weights: Any) -> None:
    big = _big()
    cache = kv_cache_bytes(big)
    weights = regime.weight_bytes(big.n_layer, big.d_model, big.vocab_size)
    ex.check_one_of("size", size, [choices.closest_choice(cache, KV_SIZES)],
                    hint="2 × layers × slots × heads × positions × head_dim × 2 bytes")
    ex.check_one_of("cache vs weights", than_weights,
                    ["larger" if cache > weights else "smaller"],
                    hint="compare your estimate with 250 MB")


@exercise("0.3", "find the bug: the KV-cache formula", "debug")
def _kv_formula_bug(ex: Exercise, kv_bytes: Any, bug: Any, *, model: TinyGPT) -> None:
    if not ex.check_function("kv_bytes is a function (cfg, bytes_per_number) -> int", kv_bytes):
        return
    big = _big()
    ex.check("test model (float32)", kv_bytes(model.cfg, 4), model.cache_bytes(),
             hint="K and V, and max_batch + 1 slots")
    ex.check("big (bfloat16)", kv_bytes(big, 2), kv_cache_bytes(big), hint="same formula, 2 bytes")
    ex.check_true("the bug is explained", isinstance(bug, str) and len(bug.strip()) > 0,
                  hint="a sentence: what did the formula leave out?")
