"""LoRA under CUDA graphs (labkit.lora): the delta against merged weights, rows without an
adapter exactly the plain step, graph keys by has_lora, padding, errors; the record's assembly
on CPU with stand-ins; on a GPU, graph tokens equal eager ones for both keys in one pool."""

import json

import pytest
import torch

from labkit.lora import (
    TARGETS, LoRAAdapters, LoRAGraphs, lora_key, make_lora_step, pool_bytes_by_case,
)
from labkit.measure import lora_graphs as lg_mod
from labkit.model import build_model, generate, preset
from labkit.rules import BatchDescriptor
from labkit.timing import Stats

PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10], [3, 3], [5, 1]]


def _model(device="cpu", dtype="float32", **kw):
    return build_model(preset("test", max_batch=8, dtype=dtype, **kw), device, seed=0)


def _adapters(m, targets=("qkv", "fc"), rank=4, slots=(0, 1, 2)):
    ad = LoRAAdapters(m, max_loras=4, rank=rank, targets=targets)
    for s in slots:
        ad.random_adapter(s, seed=10 + s)
    return ad


def _weights(m, ad, seed):
    """Random A, B of the adapters' shapes (on the host)."""
    g = torch.Generator().manual_seed(seed)
    n = m.cfg.n_layer
    A = {t: torch.randn((n, ad.dims(t)[0], ad.rank), generator=g) * 0.3 for t in ad.targets}
    B = {t: torch.randn((n, ad.rank, ad.dims(t)[1]), generator=g) * 0.3 for t in ad.targets}
    return A, B


def _eager(ad, step, ids):
    """A step_fn for generate: the LoRA step with ``ids`` written into the index first."""
    def fn(t, p, s):
        ad.set_index(ids[:t.shape[0]])
        return step(t, p, s)
    return fn


# ---------------------------------------------------------------------------------- the math


@pytest.mark.parametrize("targets", [("qkv", "fc"), tuple(TARGETS)])
def test_a_row_with_an_adapter_equals_the_model_with_it_merged(targets):
    """W' = W + scale * (A @ B)^T in every adapted projection: the same logits (float32) and
    the same greedy tokens, step after step from an empty cache."""
    m, merged = _model(), _model()
    ad = LoRAAdapters(m, max_loras=3, rank=4, targets=targets)
    A, B = _weights(m, ad, seed=1)
    ad.load(2, A, B, scale=0.5)
    with torch.no_grad():
        for i, blk in enumerate(merged.layers):
            for t in targets:
                getattr(blk, t).weight += 0.5 * (A[t][i] @ B[t][i]).t()
    step = make_lora_step(m, ad)
    ad.set_index([2, 2, 2])
    tokens, slots = torch.tensor([5, 17, 60]), torch.arange(3)
    for pos in range(6):
        positions = torch.full((3,), pos)
        got = step(tokens, positions, slots)
        want = merged.decode_step(tokens, positions, slots)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        assert got.argmax(-1).tolist() == want.argmax(-1).tolist()
        tokens = got.argmax(-1)


def test_rows_without_an_adapter_get_the_plain_logits_exactly():
    m, plain = _model(), _model()
    ad = _adapters(m)
    step = make_lora_step(m, ad)
    ad.set_index([-1, 0, -1, 1])
    t, p, s = torch.tensor([3, 4, 5, 6]), torch.tensor([0, 0, 0, 0]), torch.arange(4)
    got, want = step(t, p, s), plain.decode_step(t, p, s)
    assert torch.equal(got[[0, 2]], want[[0, 2]])
    assert not torch.allclose(got[[1, 3]], want[[1, 3]], atol=1e-3)


def test_adapters_change_greedy_tokens_of_their_rows_only():
    m = _model()
    ad = _adapters(m, slots=(0, 1, 2, 3))
    ids = [0, 1, 2, 3, -1, -1]
    plain = generate(m, PROMPTS, 8)
    lora = generate(m, PROMPTS, 8, step_fn=_eager(ad, make_lora_step(m, ad), ids))
    assert [a == b for a, b in zip(lora, plain)] == [False] * 4 + [True] * 2
    assert lora[4:] == plain[4:]


def test_load_folds_the_scale_into_b_and_records_the_slot():
    m = _model()
    ad = LoRAAdapters(m, max_loras=2, rank=2)
    A, B = _weights(m, ad, seed=3)
    ad.load(1, A, B, scale=2.0)
    assert ad.scales == {1: 2.0}
    assert torch.equal(ad.A["qkv"][:, 1], A["qkv"])
    torch.testing.assert_close(ad.B["fc"][:, 1], 2.0 * B["fc"])
    assert ad.A["qkv"][:, 0].abs().sum().item() == 0.0  # slot 0 untouched
    assert ad.nbytes() == 4 * sum(a.numel() + b.numel() for a, b in zip(ad.A.values(),
                                                                          ad.B.values()))


# ---------------------------------------------------------------------------------- keys


def test_keys_are_per_size_and_has_lora_in_vllm_capture_order():
    m = _model()
    g = LoRAGraphs(m, _adapters(m), [1, 2, 4])
    assert g.capture is False and g.graphs == {}
    assert g.keys == [lora_key(4, True), lora_key(4, False), lora_key(2, True),
                      lora_key(2, False), lora_key(1, True), lora_key(1, False)]
    assert lora_key(4, True) == BatchDescriptor(4, 4, True, True)
    only = LoRAGraphs(m, _adapters(m), [1, 2, 4], specialize=False)
    assert only.keys == [lora_key(4, True), lora_key(2, True), lora_key(1, True)]


def test_dispatch_pads_and_keys_by_whether_any_row_has_an_adapter():
    m = _model()
    g = LoRAGraphs(m, _adapters(m), [1, 2, 4])
    assert g.dispatch([-1]) == ("FULL", BatchDescriptor(1, 1, True, False))
    assert g.dispatch([-1, -1, 0]) == ("FULL", BatchDescriptor(4, 4, True, True))
    assert g.dispatch([-1, -1, -1]) == ("FULL", BatchDescriptor(4, 4, True, False))
    assert g.dispatch([-1] * 5) == ("NONE", BatchDescriptor(5, 5, True, False))
    assert g.dispatch([1] * 6) == ("NONE", BatchDescriptor(6, 6, True, True))
    only = LoRAGraphs(m, _adapters(m), [1, 2, 4], specialize=False)
    assert only.dispatch([-1, -1, -1]) == ("FULL", BatchDescriptor(4, 4, True, True))


@pytest.mark.parametrize("specialize", [True, False])
def test_step_on_cpu_gives_the_eager_tokens_and_counts_keys(specialize):
    m = _model()
    ad = _adapters(m)
    g = LoRAGraphs(m, ad, [1, 2, 4, 8], specialize=specialize)
    mixed = [0, -1, 1]
    want = generate(m, PROMPTS[:3], 6, step_fn=_eager(ad, make_lora_step(m, ad), mixed))
    got = generate(m, PROMPTS[:3], 6, step_fn=lambda t, p, s: g.step(t, p, s, mixed))
    assert got == want
    assert ad.index.tolist() == [0, -1, 1, -1, -1, -1, -1, -1]  # padded rows: no adapter
    plain = generate(m, PROMPTS[:3], 6, step_fn=lambda t, p, s: g.step(t, p, s, [-1] * 3))
    assert plain == generate(m, PROMPTS[:3], 6)
    key = lora_key(4, True)
    assert g.counts == ({key: 5, lora_key(4, False): 5} if specialize else {key: 10})
    assert g.last == ("FULL", key if not specialize else lora_key(4, False))


def test_above_the_largest_size_the_step_runs_eagerly_unpadded():
    m = _model()
    ad = _adapters(m)
    g = LoRAGraphs(m, ad, [1, 2])
    ids = [2, -1, 0]
    want = generate(m, PROMPTS[:3], 4, step_fn=_eager(ad, make_lora_step(m, ad), ids))
    assert generate(m, PROMPTS[:3], 4, step_fn=lambda t, p, s: g.step(t, p, s, ids)) == want
    assert g.last == ("NONE", lora_key(3, True)) and g.counts == {lora_key(3, True): 3}


def test_replay_runs_a_key_on_the_staged_batch_and_refuses_unknown_keys():
    m = _model()
    g = LoRAGraphs(m, _adapters(m), [2], specialize=False)
    t, p, s = torch.tensor([1, 2]), torch.tensor([0, 0]), torch.arange(2)
    g.batch.load(t, p, s)
    assert torch.equal(g.replay(lora_key(2, True)), _model().decode_step(t, p, s))
    with pytest.raises(KeyError, match="no graph"):
        g.replay(lora_key(2, False))


# ---------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("kw,err,match", [
    ({"rank": 0}, ValueError, "rank"), ({"rank": 33}, ValueError, "rank"),
    ({"max_loras": 0}, ValueError, "max_loras"), ({"rank": 2.0}, TypeError, "rank"),
    ({"targets": ["nope"]}, ValueError, "targets"), ({"targets": "qkv"}, TypeError, "targets"),
    ({"targets": ["fc", "fc"]}, ValueError, "distinct"),
])
def test_adapters_refuse_bad_shapes(kw, err, match):
    with pytest.raises(err, match=match):
        LoRAAdapters(_model(), **kw)


def test_adapters_need_a_tinygpt():
    with pytest.raises(TypeError, match="TinyGPT"):
        LoRAAdapters(torch.nn.Linear(2, 2))  # type: ignore[arg-type]


@pytest.mark.parametrize("bad,err,match", [
    ("slot", ValueError, "slot"), ("target", ValueError, "each target"),
    ("shape", ValueError, "shape"), ("dtype", TypeError, "floating point"),
    ("device", ValueError, "is on meta"), ("scale", ValueError, "finite"),
])
def test_load_checks_everything_before_writing(bad, err, match):
    m = _model()
    ad = LoRAAdapters(m, max_loras=2, rank=2)
    A, B = _weights(m, ad, seed=0)
    slot, scale = 0, 1.0
    if bad == "slot":
        slot = 2
    elif bad == "target":
        A = {"qkv": A["qkv"]}
    elif bad == "shape":
        B["fc"] = B["fc"][:, :1]
    elif bad == "dtype":
        B["fc"] = B["fc"].long()
    elif bad == "device":
        B["fc"] = torch.empty(B["fc"].shape, device="meta")
    else:
        scale = float("nan")
    with pytest.raises(err, match=match):
        ad.load(slot, A, B, scale=scale)
    assert ad.scales == {} and all(a.abs().sum().item() == 0 for a in ad.A.values())


@pytest.mark.parametrize("ids,err,match", [
    ([0, -1], ValueError, "2 entries for 3 rows"), ([0, 4, -1], ValueError, "lora_ids\\[1\\]"),
    ([-2, 0, 0], ValueError, "lora_ids\\[0\\]"), ([0, 3, -1], ValueError, "hold no adapter"),
    ([True, 0, 0], TypeError, "lora_ids\\[0\\]"), ("abc", TypeError, "list of adapter ids"),
    (torch.tensor([0.0, 1.0, 2.0]), TypeError, "integer"),
    (torch.zeros(3, dtype=torch.long, device="meta"), ValueError, "on the host"),
])
def test_step_refuses_bad_lora_ids_before_writing_anything(ids, err, match):
    m = _model()
    ad = _adapters(m)
    g = LoRAGraphs(m, ad, [1, 2, 4])
    t, p, s = torch.tensor([1, 2, 3]), torch.tensor([0, 0, 0]), torch.arange(3)
    k0 = m.k_cache.clone()
    with pytest.raises(err, match=match):
        g.step(t, p, s, ids)
    assert ad.index.tolist() == [-1] * 8 and g.counts == {} and torch.equal(m.k_cache, k0)


def test_a_cpu_tensor_of_ids_is_accepted():
    m = _model()
    ad = _adapters(m)
    assert ad.check_ids(torch.tensor([0, -1, 2]), 3) == [0, -1, 2]


def test_adapters_of_another_model_or_dtype_are_refused():
    m, other = _model(), _model()
    ad = _adapters(m)
    with pytest.raises(ValueError, match="another model"):
        make_lora_step(other, ad)
    with pytest.raises(ValueError, match="another model"):
        LoRAGraphs(other, ad, [1])
    with pytest.raises(TypeError, match="LoRAAdapters"):
        make_lora_step(m, object())  # type: ignore[arg-type]
    m.to(torch.float64)
    with pytest.raises(ValueError, match="float32"):
        make_lora_step(m, ad)


def test_graph_arguments_are_checked():
    m = _model()
    ad = _adapters(m)
    with pytest.raises(ValueError, match="max_batch"):
        LoRAGraphs(m, ad, [1, 16])
    with pytest.raises(TypeError, match="specialize"):
        LoRAGraphs(m, ad, [1], specialize=1)  # type: ignore[arg-type]
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="capture=True"):
            LoRAGraphs(m, ad, [1], capture=True)
        with pytest.raises(RuntimeError, match="CUDA"):
            pool_bytes_by_case(m, ad, [1])
        with pytest.raises(RuntimeError, match="no graphs"):
            LoRAGraphs(m, ad, [1]).memory_report()


# ---------------------------------------------------------------------------------- record


def test_mixed_ids_give_row_zero_an_adapter_and_leave_some_rows_without():
    assert lg_mod.mixed_ids(1, 4) == [0]
    assert lg_mod.mixed_ids(7, 2) == [0, 1, -1, 0, 1, -1, 0]


def test_measure_lora_graphs_assembles_its_record_on_cpu(monkeypatch):
    """The record's assembly on CPU: the model on CPU, LoRAGraphs eager (no capture), pool
    bytes and timings stand-ins (timings [100 + i, 110 + i] us for the i-th replay of a
    round); the token checks run for real."""
    monkeypatch.setattr(lg_mod, "_need_cuda", lambda what: None)
    monkeypatch.setattr(lg_mod, "_free", lambda: None)
    monkeypatch.setattr(lg_mod, "make_model", lambda name, max_batch, dtype, **kw: build_model(
        preset(name, max_batch=max_batch, dtype=dtype, **kw), seed=0))
    pools = {c: {"reserved_bytes": 2**20 * (i + 1), "active_bytes": 0, "graphs": 2}
             for i, c in enumerate(("plain", "lora", "both"))}
    monkeypatch.setattr(lg_mod, "pool_bytes_by_case", lambda model, adapters, sizes: pools)
    monkeypatch.setattr(lg_mod, "time_cuda_interleaved", lambda fns, **kw: {
        name: (fn(), Stats.from_samples([100.0 + i, 110.0 + i]))[1]
        for i, (name, fn) in enumerate(fns.items())})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "cpu (stand-ins)")
    data = lg_mod.measure_lora_graphs("test", batch_sizes=[4, 1], dtype="float32", rank=4,
                                      context=8, max_seq=32, repeats=2, inner=1, new_tokens=4)
    assert data["batch_sizes"] == [1, 4] and data["steps"] == ["plain", "lora_idle",
                                                               "lora_active"]
    assert all(v is True for v in data["checks"].values()), data["checks"]
    assert "graph_tokens_equal_eager.lora@4" in data["checks"]
    assert [t["median"] for t in data["times"]["lora_active"]] == [107.0, 107.0]
    assert data["pool_bytes"] == pools and data["keys"][0] == {
        "num_tokens": 4, "num_reqs": 4, "uniform": True, "has_lora": True}
    assert data["adapter_bytes"] == 4 * 4 * 2 * (32 * 4 + 4 * 96 + 32 * 4 + 4 * 128)
    json.dumps(data)


@pytest.mark.parametrize("kw,match", [({"rank": 64}, "rank"), ({"context": 300}, "context"),
                                      ({"batch_sizes": []}, "batch_sizes"),
                                      ({"max_loras": 0}, "max_loras")])
def test_measure_lora_graphs_checks_arguments_first(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        lg_mod.measure_lora_graphs("test", **kw)


# ---------------------------------------------------------------------------------- GPU


def _cuda_setup(specialize=True):
    m = _model("cuda")
    ad = _adapters(m)
    return m, ad, LoRAGraphs(m, ad, [1, 2, 4, 8], specialize=specialize, progress=False)


@pytest.mark.gpu
def test_gpu_graph_tokens_equal_eager_tokens_for_both_keys():
    m, ad, g = _cuda_setup()
    try:
        prompts = PROMPTS[:4]
        for ids, has_lora in (([0, -1, 1, 2], True), ([-1] * 4, False)):
            want = (generate(m, prompts, 8, step_fn=_eager(ad, make_lora_step(m, ad), ids))
                    if has_lora else generate(m, prompts, 8))
            got = generate(m, prompts, 8, step_fn=lambda t, p, s, ids=ids: g.step(t, p, s, ids))
            assert got == want
            assert g.last == ("FULL", lora_key(4, has_lora))
        assert g.counts == {lora_key(4, True): 7, lora_key(4, False): 7}
    finally:
        g.release()


@pytest.mark.gpu
def test_gpu_both_graph_sets_share_one_pool():
    _, ad, g = _cuda_setup()
    try:
        assert len(g.graphs) == 8 and set(g.graphs) == set(g.keys)
        assert len(g.pools()) == 1
        report = g.memory_report()
        assert report["graphs"] == 8 and report["pool_reserved_bytes"] > 0
        assert report["adapter_bytes"] == ad.nbytes()
    finally:
        g.release()


@pytest.mark.gpu
def test_gpu_unspecialised_graphs_replay_the_lora_graph_for_plain_batches():
    m, _, g = _cuda_setup(specialize=False)
    try:
        got = generate(m, PROMPTS[:4], 8, step_fn=lambda t, p, s: g.step(t, p, s, [-1] * 4))
        assert got == generate(m, PROMPTS[:4], 8)
        assert g.counts == {lora_key(4, True): 7} and len(g.pools()) == 1
    finally:
        g.release()


@pytest.mark.gpu
def test_gpu_pool_bytes_by_case_captures_each_set_into_its_own_pool():
    m = _model("cuda")
    got = pool_bytes_by_case(m, _adapters(m), [1, 2, 4])
    assert {c: v["graphs"] for c, v in got.items()} == {"plain": 3, "lora": 3, "both": 6}
    assert all(v["reserved_bytes"] > 0 for v in got.values())
