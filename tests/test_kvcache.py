"""The KV-cache module: slot and paged layouts behind one interface (CPU)."""

import pytest
import torch

from labkit.kvcache import (PAD_BLOCK, BlockAllocator, CacheFullError, PagedKVCache,
                            SlotKVCache, cache_for_config)
from labkit.model import build_model, generate, preset

PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9], [4], [10, 11]]


def _model(layout: str, **over):
    return build_model(preset("test", max_batch=6, kv_layout=layout, **over), seed=0)


def test_slot_layout_shape_and_bytes():
    m = _model("slot")
    cfg = m.cfg
    assert tuple(m.k_cache.shape) == (cfg.n_layer, cfg.max_batch + 1, cfg.max_seq, cfg.n_head,
                                      cfg.head_dim)
    assert m.cache_bytes() == 2 * m.k_cache.numel() * 4


@pytest.mark.parametrize("block_size", [1, 4, 16, 32])
def test_paged_equals_slot_token_for_token(block_size):
    slot = generate(_model("slot"), PROMPTS, 12)
    paged = generate(_model("paged", block_size=block_size), PROMPTS, 12)
    assert paged == slot


def test_paged_logits_equal_slot_logits():
    a, b = _model("slot"), _model("paged", block_size=4)
    b.load_state_dict(a.state_dict())
    for m in (a, b):
        m.cache.reserve(0, 10)
        m.cache.reserve(3, 10)
        m.prefill(torch.tensor([[1, 2, 3, 4]]), torch.tensor([0]))
        m.prefill(torch.tensor([[7, 8, 9, 1]]), torch.tensor([3]))
    step = (torch.tensor([5, 6]), torch.tensor([4, 4]), torch.tensor([3, 0]))
    assert torch.equal(a.decode_step(*step), b.decode_step(*step))


def test_cached_decode_equals_full_forward_paged():
    m = _model("paged", block_size=4)
    out = generate(m, [[1, 2, 3]], 8)[0]
    seq = [1, 2, 3]
    for _ in range(8):
        seq.append(int(m(torch.tensor([seq]))[0, -1].argmax()))
    assert out == seq[3:]


def test_generate_returns_every_block():
    m = _model("paged", block_size=4)
    total = m.cache.allocator.free
    generate(m, PROMPTS, 6)
    assert m.cache.allocator.free == total
    assert torch.all(m.cache.block_table == PAD_BLOCK)


def test_allocator_out_of_blocks_takes_nothing():
    alloc = BlockAllocator(5)
    got = alloc.allocate(3)
    assert got == [1, 2, 3] and alloc.free == 1
    with pytest.raises(CacheFullError, match="needs 2 more block"):
        alloc.allocate(2)
    assert alloc.free == 1
    alloc.release(got)
    assert alloc.free == 4
    with pytest.raises(ValueError, match="double free"):
        alloc.release([2])


def test_allocator_never_hands_out_the_pad_block():
    alloc = BlockAllocator(4)
    assert PAD_BLOCK not in alloc.allocate(3)


def test_paged_reserve_too_many_blocks_is_a_clear_error():
    m = _model("paged", block_size=4, num_blocks=4)  # 3 usable blocks = 12 positions
    m.cache.reserve(0, 8)
    with pytest.raises(CacheFullError, match="num_blocks"):
        m.cache.reserve(1, 8)
    assert m.cache.blocks_of(1) == [] and m.cache.allocator.free == 1


def test_paged_step_past_reserved_room_is_refused_and_writes_nothing():
    m = _model("paged", block_size=4)
    m.cache.reserve(0, 4)
    m.prefill(torch.tensor([[1, 2, 3, 4]]), torch.tensor([0]))
    before = m.k_cache.clone()
    with pytest.raises(ValueError, match=r"reserve blocks first"):
        m.decode_step(torch.tensor([1]), torch.tensor([4]), torch.tensor([0]))
    assert torch.equal(m.k_cache, before)


def test_paged_prefill_without_room_is_refused():
    m = _model("paged", block_size=4)
    with pytest.raises(ValueError, match="reserve"):
        m.prefill(torch.tensor([[1, 2, 3]]), torch.tensor([2]))


def test_padded_row_writes_only_the_pad_block():
    m = _model("paged", block_size=4)
    m.cache.reserve(0, 8)
    m.prefill(torch.tensor([[1, 2, 3]]), torch.tensor([0]))
    live = m.k_cache[:, m.cache.blocks_of(0)].clone()
    scratch = m.cfg.scratch_slot
    m.decode_step(torch.tensor([1, 2]), torch.tensor([3, 5]), torch.tensor([0, scratch]),
                  check=False)  # a padded row, as the dispatcher sends it
    blocks = m.cache.blocks_of(0)
    # row 0 wrote position 3 of its own first block; the padded row wrote only the pad block
    assert torch.equal(m.k_cache[:, blocks][:, 1], live[:, 1])
    assert m.k_cache[:, PAD_BLOCK].abs().sum() > 0
    others = [b for b in range(m.cache.num_blocks) if b not in blocks and b != PAD_BLOCK]
    assert m.k_cache[:, others].abs().sum() == 0


def test_paged_pool_can_be_smaller_than_the_slot_cache():
    slot = _model("slot")
    paged = _model("paged", block_size=8, num_blocks=9)
    assert paged.cache_bytes() < slot.cache_bytes() / 2
    out = generate(paged, [[1, 2, 3]] * 3, 10)  # 3 x 12 positions in 8 usable blocks of 8
    assert out == generate(slot, [[1, 2, 3]] * 3, 10)


def test_the_config_refuses_bad_layouts_and_block_sizes():
    with pytest.raises(ValueError, match="multiple of block_size"):  # checked at the config
        preset("test", kv_layout="paged", block_size=5)
    with pytest.raises(ValueError, match="kv_layout"):
        preset("test", kv_layout="ring")


def test_cache_for_config_follows_the_config():
    slot = cache_for_config(preset("test", max_batch=3))
    cfg = preset("test", max_batch=3)
    assert isinstance(slot, SlotKVCache)
    assert tuple(slot.k.shape) == (cfg.n_layer, 4, cfg.max_seq, cfg.n_head, cfg.head_dim)
    assert slot.k.dtype == torch.float32
    pcfg = preset("test", kv_layout="paged", block_size=8, num_blocks=9)
    paged = cache_for_config(pcfg, heads=1)
    assert isinstance(paged, PagedKVCache)
    assert tuple(paged.k.shape) == (pcfg.n_layer, 9, 8, 1, pcfg.head_dim)
    for bad in (0, cfg.n_head + 1):
        with pytest.raises(ValueError, match="heads"):
            cache_for_config(cfg, heads=bad)
    with pytest.raises(TypeError, match="heads"):
        cache_for_config(cfg, heads=1.5)


# ----------------------------------------------------------------------------- on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_in_place_attention_equals_gathered_reference_on_gpu(dtype):
    from labkit.measure.bench import step_inputs

    m = build_model(preset("small", max_batch=16, max_seq=128, vocab_size=4096, dtype=dtype),
                    "cuda")
    for bs in (1, 5, 16):
        t, p, s = step_inputs(m, bs, seed=bs)
        m.cache.in_place = True
        fast = m.decode_step(t, p, s).float()
        m.cache.in_place = False
        ref = m.decode_step(t, p, s).float()
        m.cache.in_place = True
        tol = 1e-4 if dtype == "float32" else 3e-2
        assert torch.allclose(fast, ref, atol=tol, rtol=tol), (bs, (fast - ref).abs().max())
        if dtype == "float32":
            assert torch.equal(fast.argmax(-1), ref.argmax(-1))


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_graph_equals_eager_in_both_layouts_on_gpu(layout):
    from labkit.runner import PaddingDispatcher
    from labkit.measure.bench import tokens_match

    m = build_model(preset("small", max_batch=24, max_seq=64, vocab_size=4096,
                           kv_layout=layout), "cuda")
    d = PaddingDispatcher(m, [1, 2, 4, 8, 16], progress=False)
    for bs in (1, 3, 8, 13, 16, 20):
        assert tokens_match(m, d.step, bs, new_tokens=8, seed=bs), (layout, bs)
    d.release()


@pytest.mark.gpu
def test_paged_equals_slot_tokens_on_gpu():
    prompts = [[1, 2, 3], [5, 6, 7, 8, 9], [4], [10, 11]]
    a = build_model(preset("small", max_batch=8, max_seq=64, vocab_size=4096), "cuda")
    b = build_model(preset("small", max_batch=8, max_seq=64, vocab_size=4096,
                           kv_layout="paged"), "cuda")
    assert generate(a, prompts, 20) == generate(b, prompts, 20)


@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_attend_refuses_an_unknown_kernel_in_every_layout(layout):
    cache = SlotKVCache(1, 2, 8, 2, 4) if layout == "slot" else PagedKVCache(1, 2, 8, 2, 4,
                                                                             block_size=4)
    meta = cache.step_meta(torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="kernel must be one of"):
        cache.attend(0, torch.zeros(1, 2, 4), meta, kernel="fast")
    assert cache.attend(0, torch.zeros(1, 2, 4), meta, kernel="flash").shape == (1, 2, 4)
