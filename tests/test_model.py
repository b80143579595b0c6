"""TinyGPT on CPU: exact tokens under a seed, cache == full forward, mixed positions, errors."""

import pytest
import torch

from labkit.model import GPTConfig, TinyGPT, build_model, generate, preset

EXPECTED = [[6, 23, 9, 43, 1, 27, 1, 69, 44, 5, 50, 24],
            [0, 8, 73, 82, 6, 53, 80, 5, 50, 24, 32, 79]]


@pytest.fixture()
def model() -> TinyGPT:
    return build_model(preset("test", max_batch=8), seed=0)


def test_exact_token_ids_under_fixed_seed(model):
    assert generate(model, [[1, 2, 3], [10, 20, 30, 40, 50]], 12) == EXPECTED


def test_same_seed_same_weights_other_seed_other_tokens():
    a = build_model(preset("test"), seed=0)
    b = build_model(preset("test"), seed=0)
    c = build_model(preset("test"), seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert generate(c, [[1, 2, 3]], 12) != generate(a, [[1, 2, 3]], 12)


def test_cached_decode_equals_full_forward(model):
    x = torch.randint(0, model.cfg.vocab_size, (3, 20), generator=torch.Generator().manual_seed(1))
    full = model(x)
    slots = torch.tensor([4, 0, 2])
    last = model.prefill(x[:, :6], slots)
    assert torch.allclose(last, full[:, 5], atol=1e-5)
    for t in range(6, 20):
        logits = model.decode_step(x[:, t], torch.full((3,), t), slots)
        assert torch.allclose(logits, full[:, t], atol=1e-5), t


def test_rows_at_different_positions_match_running_alone(model):
    prompts = [[5], [1, 2, 3, 4, 5, 6, 7, 8, 9], [7, 7, 7], [3, 1, 4, 1, 5]]
    together = generate(model, prompts, 10)
    alone = [generate(model, [p], 10)[0] for p in prompts]
    assert together == alone


def test_decode_step_writes_only_its_slots(model):
    model.reset_cache()
    model.prefill(torch.tensor([[1, 2, 3]]), torch.tensor([5]))
    before = model.k_cache[:, 5].clone()
    model.decode_step(torch.tensor([4, 4]), torch.tensor([3, 7]), torch.tensor([0, 1]))
    assert torch.equal(model.k_cache[:, 5], before)
    assert model.k_cache[:, 0, 3].abs().sum() > 0
    assert model.k_cache[:, 1, 7].abs().sum() > 0


def test_save_load_roundtrip(tmp_path, model):
    path = tmp_path / "m.safetensors"
    model.save(path)
    loaded = TinyGPT.load(path)
    assert loaded.cfg == model.cfg
    assert generate(loaded, [[1, 2, 3], [10, 20, 30, 40, 50]], 12) == EXPECTED
    bigger = TinyGPT.load(path, max_batch=32)
    assert bigger.cfg.max_batch == 32
    assert generate(bigger, [[1, 2, 3]], 12)[0] == EXPECTED[0]


def test_load_missing_checkpoint_says_how_to_make_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="labkit train"):
        TinyGPT.load(tmp_path / "none.safetensors")


@pytest.mark.parametrize("kwargs, match", [
    (dict(dtype="float64"), "dtype"),
    (dict(d_model=30, n_head=4), "divisible"),
    (dict(n_layer=0), "n_layer"),
])
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(**kwargs)


def test_sequence_past_cache_is_refused_before_any_work(model):
    model.reset_cache()
    with pytest.raises(ValueError, match="max_seq"):
        generate(model, [[1] * 30], 5)  # 30 + 5 > max_seq 32
    assert model.k_cache.abs().sum() == 0  # nothing was written
    with pytest.raises(ValueError, match="past the KV cache"):
        model.decode_step(torch.tensor([1]), torch.tensor([32]), torch.tensor([0]))
    with pytest.raises(ValueError, match="longer than"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_too_many_prompts_and_bad_ids(model):
    with pytest.raises(ValueError, match="max_batch"):
        generate(model, [[1]] * 9, 2)
    with pytest.raises(ValueError, match="outside"):
        generate(model, [[1, 500]], 2)
    with pytest.raises(ValueError, match="empty"):
        generate(model, [[]], 2)
    with pytest.raises(ValueError, match="token ids"):
        model.decode_step(torch.tensor([97]), torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="slots"):
        model.decode_step(torch.tensor([1]), torch.tensor([0]), torch.tensor([9]))


def test_wrong_dtype_shape_and_device_are_named(model):
    with pytest.raises(TypeError, match="integer ids"):
        model.decode_step(torch.tensor([1.0]), torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="one entry per row"):
        model.decode_step(torch.tensor([1, 2]), torch.tensor([0]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="dimension"):
        model.decode_step(torch.tensor([[1]]), torch.tensor([0]), torch.tensor([0]))
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="cuda"):
            build_model(preset("test"), "cuda")
    meta = torch.tensor([1], device="meta")
    with pytest.raises(ValueError, match="move it"):
        model.decode_step(meta, torch.tensor([0]), torch.tensor([0]))


def test_bfloat16_model_runs_on_cpu():
    m = build_model(preset("test", dtype="bfloat16"), seed=0)
    out = generate(m, [[1, 2, 3]], 4)
    assert len(out[0]) == 4 and all(0 <= t < 97 for t in out[0])
    assert m.k_cache.dtype == torch.bfloat16


# ------------------------------------------------------------- boundaries that never fail silently

def _cache(model):
    return model.k_cache.clone(), model.v_cache.clone()


def _unchanged(model, before) -> bool:
    return torch.equal(model.k_cache, before[0]) and torch.equal(model.v_cache, before[1])


@pytest.mark.parametrize("slots, words", [
    ([0, 0], "more than once"), ([3, 1, 3], "more than once"), ([8], "scratch slot"),
    ([0, 8], "scratch slot"), ([-1], r"\[0, 8\)"),
])
def test_decode_step_refuses_shared_and_scratch_slots_and_writes_nothing(model, slots, words):
    model.reset_cache()
    model.prefill(torch.tensor([[1, 2, 3]]), torch.tensor([0]))
    before = _cache(model)
    b = len(slots)
    with pytest.raises(ValueError, match=words):
        model.decode_step(torch.ones(b, dtype=torch.long), torch.full((b,), 3),
                          torch.tensor(slots))
    assert _unchanged(model, before)


@pytest.mark.parametrize("slots, words", [([2, 2], "more than once"), ([8, 1], "scratch slot")])
def test_prefill_refuses_shared_and_scratch_slots_and_writes_nothing(model, slots, words):
    model.reset_cache()
    before = _cache(model)
    with pytest.raises(ValueError, match=words):
        model.prefill(torch.ones(len(slots), 4, dtype=torch.long), torch.tensor(slots))
    assert _unchanged(model, before)


def test_negative_position_is_called_negative(model):
    with pytest.raises(ValueError, match="position -1 is negative") as info:
        model.decode_step(torch.tensor([1]), torch.tensor([-1]), torch.tensor([0]))
    assert "past" not in str(info.value)


def test_generate_runs_that_exactly_fit_the_cache(model):
    # prompt L, N new tokens: positions 0 .. L + N - 2 are written (the last token is not)
    max_seq = model.cfg.max_seq
    for L, n in ((30, 2), (31, 2), (32, 1), (1, max_seq), (20, max_seq - 19)):
        out = generate(model, [[1] * L], n)
        assert len(out[0]) == n, (L, n)
        ref = model(torch.tensor([[1] * L + out[0][:-1]]))[0].argmax(-1)[L - 1:].tolist()
        assert out[0] == ref, (L, n)                     # same tokens as the full forward
    model.reset_cache()
    for L, n in ((32, 2), (33, 1), (1, max_seq + 1)):
        with pytest.raises(ValueError, match="max_seq"):
            generate(model, [[1] * L], n)
    assert model.k_cache.abs().sum() == 0


@pytest.mark.parametrize("field", ["vocab_size", "n_layer", "n_head", "d_model", "max_batch",
                                   "max_seq"])
@pytest.mark.parametrize("value, error", [
    (2.5, TypeError), (2.0, TypeError), ("3", TypeError), (True, TypeError), (None, TypeError),
    (0, ValueError), (-4, ValueError), (2**40, ValueError),
])
def test_config_refuses_non_int_and_non_positive_values(field, value, error):
    with pytest.raises(error, match=f"GPTConfig.{field}"):
        GPTConfig(**{"vocab_size": 16, "n_layer": 1, "n_head": 2, "d_model": 8, "max_batch": 2,
                     "max_seq": 8, field: value})


def test_config_refuses_inconsistent_values_and_keeps_ints():
    with pytest.raises(ValueError, match="not divisible by n_head"):
        GPTConfig(d_model=30, n_head=4)
    with pytest.raises(ValueError, match=r"GPTConfig.n_head"):
        GPTConfig(n_head=0)                             # not a ZeroDivisionError
    with pytest.raises(ValueError, match="dtype"):
        GPTConfig(dtype=torch.float32)
    import numpy as np
    cfg = GPTConfig(n_layer=np.int64(2))
    assert cfg.n_layer == 2 and type(cfg.n_layer) is int
    assert "extra" not in cfg.to_dict()


def test_checkpoint_with_the_old_extra_field_still_loads(tmp_path, model):
    import json

    from safetensors.torch import save_file
    path = tmp_path / "old.safetensors"
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path), metadata={"config": json.dumps({**model.cfg.to_dict(),
                                                                "extra": {}})})
    assert TinyGPT.load(path).cfg == model.cfg
    save_file(state, str(path), metadata={"config": json.dumps({**model.cfg.to_dict(),
                                                                "bogus": 1})})
    with pytest.raises(ValueError, match="bogus"):
        TinyGPT.load(path)
