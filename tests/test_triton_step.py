"""The Triton decode step (labkit.kernels.step, labkit.kernels): same tokens as the readable
step in float32, same cache writes (slot and paged layouts, padded rows in the scratch slot
only), bf16 agreement, five kernels per layer and one for the head; the kernel plan's bytes.

Without a GPU the kernels run in Triton's interpreter on CPU tensors (small shapes: the
interpreter runs each program in Python). The interpreter must be chosen before triton is
first imported, so this module sets ``TRITON_INTERPRET=1`` when no GPU is visible and triton
is not imported yet; run the file alone if another module imported triton first
(``TRITON_INTERPRET=1 python -m pytest tests/test_triton_step.py``). Tests that need Triton
are skipped with the reason when it is missing; the plan's arithmetic runs everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch

from labkit import kernels
from labkit.fused import agreement
from labkit.roofline.kernel_plan import kernel_plan, kernels_per_step, plan_totals
from labkit.measure import triton_bench
from labkit.model import GPTConfig, build_model, generate, preset
from labkit.roofline.stepcost import step_bytes
from labkit.kernels.step import (PDL_MODES, WAITS, Blocks, choose_blocks, gpu_launches,
                                 make_triton_step, stage_tiles)

#: the kernels of a step: the plan's rows name them
step_kernels = {r["kernel"] for r in kernel_plan(preset("small"), 1, 1)}


def _load_kernels() -> tuple[str | None, bool]:
    """(why the Triton tests skip, or None; whether the kernels are interpreted)."""
    here = (not torch.cuda.is_available() and "triton" not in sys.modules
            and "TRITON_INTERPRET" not in os.environ)
    if here:  # no GPU: the interpreter, chosen before triton is imported
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        reason = kernels.unavailable_reason()
        if reason is not None:
            return reason, False
        try:
            return None, kernels.interpreted()
        except RuntimeError as exc:
            return str(exc), False
    finally:
        if here:
            # Triton reads the mode again at run time (its lazily imported parts): keep it
            # inside this process, out of the environment that child processes (notebook
            # kernels of the same session) inherit
            knobs = getattr(sys.modules.get("triton"), "knobs", None)
            if knobs is not None:
                knobs.runtime.interpret = True
                os.environ.pop("TRITON_INTERPRET", None)


MISSING, INTERPRETED = _load_kernels()
needs_triton = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
cpu = pytest.mark.skipif(
    MISSING is not None or not INTERPRETED,
    reason=MISSING or "the kernels are compiled for the GPU (triton was imported before "
                      "TRITON_INTERPRET=1 was set); run `TRITON_INTERPRET=1 python -m pytest "
                      "tests/test_triton_step.py` for the interpreter tests")
gpu_compiled = pytest.mark.skipif(MISSING is not None or INTERPRETED,
                                  reason=MISSING or "the kernels run in the interpreter here")

PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20],
           [21, 22, 23, 24, 25], [3] * 16, [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51,
                                             52, 53, 54]]


def _randomise(m):
    """Non-zero biases and LayerNorm parameters, so a missing bias or gamma shows."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.copy_((torch.randn(p.shape, generator=g) * 0.1).to(p))
            elif (name.startswith("blocks") and ".ln" in name) or name.startswith("ln_f"):
                p.copy_((1 + torch.randn(p.shape, generator=g) * 0.1).to(p))
    return m


def _model(layout="slot", dtype="float32", **kw):
    kw = {"max_batch": 4, **kw}
    if layout == "paged":
        kw.setdefault("block_size", 8)
    return _randomise(build_model(preset("test", kv_layout=layout, dtype=dtype, **kw), seed=1))


def _odd_model(layout="slot"):
    """Sizes that fill no tile: d_model 48, head_dim 24, vocabulary 61, one layer."""
    cfg = GPTConfig(vocab_size=61, n_layer=1, n_head=2, d_model=48, max_batch=3, max_seq=24,
                    kv_layout=layout, block_size=8)
    return _randomise(build_model(cfg, seed=2))


def _prefill(m, prompts):
    """Prefill each prompt into its slot; the first new tokens, positions and slots."""
    m.reset_cache()
    for i, p in enumerate(prompts):
        m.cache.reserve(i, len(p) + 1)
    first = [m.prefill(torch.tensor([p]), torch.tensor([i])).argmax(-1)
             for i, p in enumerate(prompts)]
    return (torch.cat(first), torch.tensor([len(p) for p in prompts]),
            torch.arange(len(prompts)))


def _one_step_both(m, step, t, p, s, **kw):
    """The readable step's logits and cache, then the Triton step's, from the same cache."""
    kv0 = m.cache.kv.clone()
    want = m.decode_step(t, p, s, **kw)
    kv_want = m.cache.kv.clone()
    m.cache.kv.copy_(kv0)
    got = step(t, p, s, **kw)
    return want, kv_want, got, m.cache.kv.clone(), kv0


def _assert_step_matches_readable(m, step, t, p, s):
    """One float32 step: the Triton step's logits within 1e-5 of the readable step's, the cache
    written alike (within 1e-6)."""
    want, kv_want, got, kv_got, _ = _one_step_both(m, step, t, p, s)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(kv_got, kv_want, rtol=1e-6, atol=1e-6)


def _first_launch(m, step):
    """The first launch a step of one prefilled row would make (nothing runs)."""
    return step.launches(*_prefill(m, PROMPTS[:1]),
                         torch.empty(1, m.cfg.vocab_size, dtype=m.cfg.torch_dtype))[0]


def _assert_tokens_and_step_match(m, step, sizes):
    """Greedy tokens of every batch size in ``sizes`` equal the readable step's, then one
    step of three rows matches it (:func:`_assert_step_matches_readable`)."""
    for bs in sizes:
        prompts = PROMPTS[:bs]
        assert generate(m, prompts, 5, step_fn=step) == generate(m, prompts, 5), bs
    _assert_step_matches_readable(m, step, *_prefill(m, PROMPTS[:3]))


# ---------------------------------------------------------------------------------- correctness


@cpu
@pytest.mark.parametrize("layout,sizes", [("slot", (1, 4)), ("paged", (3,))])
def test_float32_greedy_tokens_equal_the_readable_step(layout, sizes):
    m = _model(layout)
    step = make_triton_step(m)
    for bs in sizes:
        prompts = PROMPTS[:bs]
        assert generate(m, prompts, 5, step_fn=step) == generate(m, prompts, 5)


@cpu
@pytest.mark.parametrize("schedule", ["pdl", "persistent"])
@pytest.mark.parametrize("layout,sizes", [("slot", (1, 4)), ("paged", (3,))])
def test_every_schedule_gives_the_readable_steps_float32_tokens(schedule, layout, sizes):
    """PDL's order (weights first) and the persistent layer launch (one program in the
    interpreter, reaching its barriers alone) compute the same tokens and cache."""
    m = _model(layout)
    step = make_triton_step(m, schedule=schedule)
    _assert_tokens_and_step_match(m, step, sizes)


@cpu
@pytest.mark.parametrize("layout,sizes", [("slot", (1, 2)), ("paged", (3,))])
def test_persistent_stripes_give_the_readable_steps_float32_tokens(layout, sizes):
    """One stripe per program per stage (cut for 3 programs in the interpreter: widths that
    are not powers of two, so the stripes' lane masks and the column offsets between them
    are exercised) computes the same tokens and cache as the readable step."""
    m = _model(layout)
    step = make_triton_step(m, schedule="persistent", stripes=True)
    launch = _first_launch(m, step)
    c, d = launch.constants, m.cfg.d_model
    assert (c["QKV_W"], c["QKV_COLS"]) == (3 * d // 3, 3)          # 3 programs, 1 row tile
    assert c["OUT_W"] * c["OUT_COLS"] >= d and c["OUT_W"] <= c["BLOCK_N_OUT"]
    assert c["OUT_W"] < c["BLOCK_N_OUT"] and c["UP_W"] < c["BLOCK_N_UP"]  # lanes masked
    _assert_tokens_and_step_match(m, step, sizes)


@cpu
@pytest.mark.parametrize("waits", WAITS)
@pytest.mark.parametrize("layout,sizes", [("slot", (1, 2)), ("paged", (3,))])
def test_persistent_step_gives_the_readable_steps_float32_tokens_whichever_tiles_wait(
        waits, layout, sizes):
    """``waits="stage"`` (the default): a stage's later tiles skip the wait (the
    interpreter's one program walks every tile of a stage, so the later tiles without a wait
    run); ``"tile"``: each waits. Same tokens and cache as the readable step either way; the
    launch says which wait its later tiles use."""
    m = _model(layout)
    step = make_triton_step(m, schedule="persistent", waits=waits)
    launch = _first_launch(m, step)
    assert launch.constants["LATER"] == (2 if waits == "tile" else 0)
    assert step.launch_shape(1)["waits"] == waits == make_triton_step(
        m, schedule="persistent", waits=waits).waits
    assert make_triton_step(m, schedule="persistent").waits == "stage"
    _assert_tokens_and_step_match(m, step, sizes)


@cpu
@pytest.mark.parametrize("layout,sizes", [("slot", (1, 2)), ("paged", (3,))])
def test_persistent_step_polling_with_acquire_loads_gives_the_readable_steps_tokens(
        layout, sizes):
    """``poll="acquire"``: every poll of the counter is the acquire (READY_ACQUIRE, 6), for
    the stage's first tile and, with ``waits="tile"``, every later one; same tokens and cache
    as the readable step, and the launch says which wait it compiled."""
    m = _model(layout)
    for waits in WAITS:
        step = make_triton_step(m, schedule="persistent", poll="acquire", waits=waits)
        launch = _first_launch(m, step)
        assert launch.constants["READY"] == 6
        assert launch.constants["LATER"] == (6 if waits == "tile" else 0)
        assert step.launch_shape(1)["poll"] == "acquire"
        _assert_tokens_and_step_match(m, step, sizes)
    default = make_triton_step(m, schedule="persistent")
    assert default.poll == "volatile" and _first_launch(m, default).constants["READY"] == 2


def _three_head_model(layout="slot"):
    """Three heads (head_dim 16): a tile of two or four heads has masked heads past the last."""
    cfg = GPTConfig(vocab_size=61, n_layer=2, n_head=3, d_model=48, max_batch=4, max_seq=40,
                    kv_layout=layout, block_size=8)
    return _randomise(build_model(cfg, seed=4))


@cpu
@pytest.mark.parametrize("layout", ["slot", "paged"])
@pytest.mark.parametrize("make,heads", [(_model, 2), (_three_head_model, 2),
                                        (_three_head_model, 4)])
def test_persistent_attention_tiles_of_several_heads_give_the_readable_steps_tokens(
        layout, make, heads):
    """``heads=``: the attention stage's tiles hold several heads of one row, unsplit (one
    split, whatever the tiles ask for); with three heads a tile of two or four has masked
    heads past the last. Same float32 tokens, logits and cache as the readable step."""
    m = make(layout)
    step = make_triton_step(m, schedule="persistent", heads=heads,
                            blocks={"splits": 4, "t": 8})
    shape = step.launch_shape(3)
    assert (shape["heads"], shape["splits"], shape["split_size"]) == (
        heads, 1, -(-m.cfg.max_seq // 8) * 8)
    launch = _first_launch(m, step)
    assert (launch.constants["HEADS"], launch.constants["GROUPS"]) == (
        heads, -(-m.cfg.n_head // heads))
    for bs in (1, 3):
        prompts = PROMPTS[:bs]  # up to 25 positions: several chunks of 8
        assert generate(m, prompts, 5, step_fn=step) == generate(m, prompts, 5), bs
    t, p, sl = _prefill(m, PROMPTS[:3])
    _assert_step_matches_readable(m, step, t, p, sl)


@needs_triton
def test_attention_heads_per_tile_are_checked():
    m = _model("slot")
    assert make_triton_step(m, schedule="persistent").heads == 1
    for bad in (3, 4):  # not a power of two; more than the model's two heads
        with pytest.raises(ValueError, match=f"heads={bad}.*power of two no larger than 2"):
            make_triton_step(m, schedule="persistent", heads=bad)
    with pytest.raises(ValueError, match=r"heads=.*schedule='persistent' only"):
        make_triton_step(m, heads=2)
    with pytest.raises(TypeError, match="heads must be an int"):
        make_triton_step(m, schedule="persistent", heads=2.0)
    with pytest.raises(ValueError, match="heads must be >= 1"):
        make_triton_step(m, schedule="persistent", heads=0)


def test_stripes_cut_each_stage_into_one_tile_per_program():
    from labkit.kernels.step import stripes

    assert stripes(2304, 1, 132, False) == (18, 32, 128)   # gpt2 QKV at one row: 128 stripes
    assert stripes(768, 1, 132, False) == (6, 8, 128)
    assert stripes(768, 1, 132, True) == (6, 16, 128)       # tl.dot: a block of 16 at least
    assert stripes(3072, 4, 132, True) == (94, 128, 33)     # 4 row tiles: 33 stripes each
    assert stripes(64, 1, 200, False) == (1, 1, 64)         # more programs than columns
    for width, rows, programs in ((2304, 1, 132), (768, 4, 132), (100, 2, 7)):
        w, block, n = stripes(width, rows, programs, False)
        assert n * rows <= max(programs, rows) and (n - 1) * w < width <= n * w <= n * block


@cpu
def test_a_persistent_step_launches_once_per_layer_and_its_counters_only_grow(monkeypatch):
    """``L + 1`` launches; each layer's barrier counter grows by 4 P per step (never reset)."""
    from labkit.kernels.step import Launch

    m = _model("slot")
    step = make_triton_step(m, schedule="persistent")
    names = []
    real = Launch.run
    monkeypatch.setattr(Launch, "run", lambda self: (names.append(self.name), real(self))[1])
    t, p, sl = _prefill(m, PROMPTS[:2])
    step(t, p, sl)
    step(t, p + 1, sl)
    assert names == (["layer_kernel"] * m.cfg.n_layer + ["ln_linear_kernel"]) * 2
    assert len(names) == 2 * kernels_per_step(m.cfg.n_layer, "persistent")
    ready = step._workspaces[2].ready
    assert ready.tolist() == [[2 * 4 * step.programs, 0, 0, 0, 0]] * m.cfg.n_layer


@cpu
@pytest.mark.parametrize("layout,sizes", [("slot", (1, 2)), ("paged", (3,))])
def test_persistent_step_with_a_counter_per_stage_gives_the_readable_steps_tokens(
        layout, sizes):
    """``counters="stage"``: each stage's producers arrive on a counter of their own and only
    the next stage's programs with a tile wait on it. Same tokens and cache as the readable
    step; per step the start counter grows by the programs and each stage counter by the
    stage's programs with a tile (the interpreter's one program: 1 each)."""
    m = _model(layout)
    step = make_triton_step(m, schedule="persistent", counters="stage")
    launch = _first_launch(m, step)
    assert launch.constants["STAGE_COUNTERS"] is True
    assert step.launch_shape(1)["counters"] == "stage"
    assert make_triton_step(m, schedule="persistent").counters == "layer"
    _assert_tokens_and_step_match(m, step, sizes)
    ready = step._workspaces[3].ready
    assert ready[:, 0].tolist() == ready[:, 1].tolist() == ready[:, 4].tolist()
    assert int(ready[0, 0]) >= 1 and (ready == ready[:, :1]).all()


@needs_triton
def test_schedule_options_are_checked():
    m = _model("slot")
    with pytest.raises(ValueError, match="schedule"):
        make_triton_step(m, schedule="megakernel")
    with pytest.raises(ValueError, match="'persistent' only"):
        make_triton_step(m, programs=8)
    with pytest.raises(ValueError, match="programs"):
        make_triton_step(m, schedule="persistent", programs=0)
    with pytest.raises(TypeError, match="cooperative"):
        make_triton_step(m, schedule="persistent", cooperative="yes")
    with pytest.raises(TypeError, match="stripes"):
        make_triton_step(m, schedule="persistent", stripes=1)
    with pytest.raises(ValueError, match="'persistent' only"):
        make_triton_step(m, stripes=True)
    with pytest.raises(ValueError, match="'persistent' only"):
        make_triton_step(m, schedule="pdl", stamps=True)
    with pytest.raises(TypeError, match="stamps"):
        make_triton_step(m, schedule="persistent", stamps="on")
    with pytest.raises(ValueError, match="writes no stamps"):
        make_triton_step(m, schedule="persistent").stamps_at(1)
    with pytest.raises(ValueError, match="'persistent' only"):
        make_triton_step(m, prefetch=True)
    with pytest.raises(TypeError, match="prefetch"):
        make_triton_step(m, schedule="persistent", prefetch=1)
    with pytest.raises(ValueError, match="waits"):
        make_triton_step(m, schedule="persistent", waits="never")
    with pytest.raises(ValueError, match="'persistent' only"):
        make_triton_step(m, waits="tile")
    with pytest.raises(ValueError, match="counters"):
        make_triton_step(m, schedule="persistent", counters="tile")
    with pytest.raises(ValueError, match="'persistent' only"):
        make_triton_step(m, counters="stage")
    with pytest.raises(ValueError, match="poll"):
        make_triton_step(m, schedule="persistent", poll="spin")
    with pytest.raises(ValueError, match="'persistent' only"):
        make_triton_step(m, schedule="pdl", poll="acquire")
    if INTERPRETED:
        with pytest.raises(ValueError, match="interpreter does not run"):
            make_triton_step(m, schedule="persistent", prefetch=True)
        with pytest.raises(ValueError, match="one after another"):
            make_triton_step(m, schedule="persistent", programs=4)
        with pytest.raises(ValueError, match="interpreter does not have"):
            make_triton_step(m, schedule="persistent", stamps=True)
    with pytest.raises(ValueError, match="pdl"):
        make_triton_step(m, schedule="pdl", pdl="sometimes")
    with pytest.raises(ValueError, match="schedule='pdl' only"):
        make_triton_step(m, pdl="wait_first")


@cpu
@pytest.mark.parametrize("mode", PDL_MODES)
def test_every_pdl_mode_gives_the_readable_steps_float32_tokens(mode):
    """The interpreter runs the kernels in order (PDL's order without its instructions), so
    each mode is the same arithmetic: the readable step's tokens."""
    m = _model("slot")
    step = make_triton_step(m, schedule="pdl", pdl=mode)
    assert step.pdl == mode
    assert generate(m, PROMPTS[:2], 4, step_fn=step) == generate(m, PROMPTS[:2], 4)


@cpu
def test_the_dispatcher_runs_the_triton_step_and_pads_it():
    """``PaddingDispatcher(step="triton")`` (eager bucketing on the CPU): a batch of 3 runs in
    the bucket of 4 and gives the readable step's greedy tokens."""
    from labkit.runner import PaddingDispatcher

    m = _model("slot")
    disp = PaddingDispatcher(m, [1, 4], step="triton")
    assert disp.padded_size(3) == 4
    prompts = PROMPTS[:3]
    assert generate(m, prompts, 3, step_fn=disp.step) == generate(m, prompts, 3)


@cpu
@pytest.mark.parametrize("layout", ["slot", "paged"])
@pytest.mark.parametrize("tiles", [{"n": 16, "n_out": 16, "head_n": 16},
                                   {"rows": 2, "n": 4, "n_out": 2, "head_n": 8}],
                         ids=["tensor-cores", "cuda-cores"])
def test_logits_and_cache_writes_match_across_splits_and_tiles(layout, tiles):
    """Attention in two splits of 16 positions (rows at 20, 5, 16 and 15: the second split
    full, empty, starting, empty), chunks of 8, reduction chunks of 16, on the tensor cores
    (16-row tiles) and on the CUDA cores (two row blocks of two rows): every loop runs more
    than once. Float32 logits within 1e-5 of the readable step's; the cache written alike."""
    m = _model(layout)
    step = make_triton_step(m, blocks={"splits": 2, "t": 8, "k": 16, **tiles})
    assert step.launch_shape(4)["splits"] == 2
    t, p, s = _prefill(m, PROMPTS)
    _assert_step_matches_readable(m, step, t, p, s)


@cpu
@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_sizes_that_fill_no_tile(layout):
    m = _odd_model(layout)
    step = make_triton_step(m, blocks={"splits": 3, "t": 4})
    t, p, s = _prefill(m, [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [7, 8], [9] * 9])
    _assert_step_matches_readable(m, step, t, p, s)


@cpu
@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_padded_rows_write_only_the_scratch_slot(layout):
    m = _model(layout)
    t, p, s = _prefill(m, PROMPTS[:2])
    scratch = m.cfg.scratch_slot
    t = torch.cat([t, torch.tensor([0, 0])])
    p = torch.cat([p, torch.tensor([0, 7])])
    s = torch.cat([s, torch.tensor([scratch, scratch])])
    want, _, got, kv_got, kv0 = _one_step_both(m, make_triton_step(m), t, p, s,
                                               check=False)
    torch.testing.assert_close(got[:2], want[:2], rtol=1e-5, atol=1e-5)
    changed = (kv_got != kv0).flatten(4).any(-1)  # (2, layers, slots or blocks, positions)
    if layout == "slot":
        allowed = torch.zeros_like(changed)
        for slot, pos in zip(s.tolist(), p.tolist()):
            allowed[:, :, slot, pos] = True
        assert changed[:, :, :2].any() and not (changed & ~allowed).any()
    else:  # the scratch slot owns no blocks: its rows land in the pad block 0
        live = {b for i in range(2) for b in m.cache.blocks_of(i)}
        touched = set(changed.any(-1).any(0).any(0).nonzero().flatten().tolist())
        assert 0 in touched and touched <= live | {0}


@cpu
def test_bf16_agreement_with_the_readable_step():
    """Reported as for the fused step. The interpreter rounds float32 to bf16 towards zero
    (the GPU to nearest), so this is the interpreter's figure; the GPU run records its own."""
    m = _model(dtype="bfloat16")
    a = agreement(m, PROMPTS[:3], 5, step=make_triton_step(m))
    print(f"bf16 agreement (interpreter): {a.to_dict()}")
    assert a.fraction >= 0.9 and a.max_logit_diff <= 0.05


@cpu
def test_a_step_launches_five_kernels_per_layer_and_one_for_the_head(monkeypatch):
    from triton.runtime import interpreter

    names: list[str] = []
    run = interpreter.GridExecutor.__call__

    def counting(self, *args, **kwargs):
        names.append(self.fn.__name__)
        return run(self, *args, **kwargs)

    m = _model()
    step = make_triton_step(m)
    t, p, s = _prefill(m, PROMPTS[:2])
    monkeypatch.setattr(interpreter.GridExecutor, "__call__", counting)
    step(t, p, s)
    layers = m.cfg.n_layer
    assert len(names) == kernels_per_step(layers) == 5 * layers + 1
    plan = kernel_plan(m.cfg, 2, 21)
    for kernel in step_kernels:
        assert names.count(kernel) == sum(r["launches"] for r in plan if r["kernel"] == kernel)


@cpu
def test_out_buffer_checks_and_nothing_written_on_a_bad_batch():
    m = _model()
    step = make_triton_step(m)
    t, p, s = _prefill(m, PROMPTS[:2])
    kv0 = m.cache.kv.clone()
    with pytest.raises(ValueError):
        step(torch.tensor([m.cfg.vocab_size, 0]), p, s)  # a token id outside the vocabulary
    with pytest.raises(ValueError):
        step(t, p, torch.tensor([1, 1]))  # one slot for two rows
    with pytest.raises(ValueError, match="out must be"):
        step(t, p, s, out=torch.empty(3, m.cfg.vocab_size))
    assert torch.equal(m.cache.kv, kv0)
    want = m.decode_step(t, p, s)
    m.cache.kv.copy_(kv0)
    out = torch.full((2, m.cfg.vocab_size), float("nan"))
    assert step(t, p, s, out=out) is out
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    m.cache.kv.copy_(kv0)  # strided ids (every other entry of a larger buffer) work too
    strided = [torch.stack([x, x], 1)[:, 0] for x in (t, p, s)]
    assert not strided[1].is_contiguous()
    torch.testing.assert_close(step(*strided), want, rtol=1e-5, atol=1e-5)


@cpu
def test_the_step_reads_the_live_weights_every_call():
    m = _model()
    step = make_triton_step(m)
    t, p, s = _prefill(m, PROMPTS[:2])
    step(t, p, s)
    with torch.no_grad():  # updated in place after the step was built (and used)
        m.lm_head.weight.mul_(1.5)
        m.blocks[0].ln2.weight.add_(0.2)
        m.blocks[-1].fc_out.bias.add_(0.3)
    want, _, got, _, _ = _one_step_both(m, step, t, p, s)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@cpu
def test_more_rows_than_one_row_block():
    m = _model(max_batch=17)
    step = make_triton_step(m, blocks={"n": 64, "head_n": 128})
    assert step.blocks_for(17).rows == 16  # two row blocks, the second with one live row
    t, p, s = torch.arange(17) * 5 % 97, torch.arange(17) % 9, torch.arange(17)
    _assert_step_matches_readable(m, step, t, p, s)


@cpu
def test_a_model_cast_after_the_step_was_built_is_refused():
    m = _model()
    step = make_triton_step(m)
    m.to(torch.bfloat16)
    with pytest.raises(RuntimeError, match="build it again"):
        step(torch.tensor([1]), torch.tensor([0]), torch.tensor([0]))


def _compiled(script: str) -> dict:
    """Run ``script`` in a process without TRITON_INTERPRET (kernels compiled for the GPU,
    none run) and return the JSON it prints after ``AOT ``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("AOT "))
    return json.loads(line[4:])


_AOT = """
import json
import torch
from labkit.kernels.aot import compile_step
from labkit.model import build_model, preset
from labkit.kernels.step import make_triton_step
out = {}
try:  # kernels compiled for the GPU: a CPU model builds (its launches compile) but cannot run
    make_triton_step(build_model(preset("test")))(*[torch.tensor([0])] * 3)
except RuntimeError as exc:
    out["refused"] = "TRITON_INTERPRET=1" in str(exc)
for name, dtype, layout, batch in (("bf16-slot", "bfloat16", "slot", 3),
                                   ("fp32-paged", "float32", "paged", 17)):
    m = build_model(preset("test", max_batch=17, dtype=dtype, kv_layout=layout,
                           block_size=8))
    out[name] = compile_step(m, batch)
print("AOT " + json.dumps(out))
"""


@needs_triton
def test_every_kernel_compiles_for_sm90_without_spills():
    """What the interpreter cannot check: the kernels go through Triton's compiler and
    ptxas for sm_90 (no GPU needed), in a process without TRITON_INTERPRET; the bf16 tiles
    spill no register. There a CPU model's step builds but refuses to run."""
    result = _compiled(_AOT)
    assert result.pop("refused") is True
    for name, rows in result.items():
        assert sum(r["launches"] for r in rows) == kernels_per_step(2)
        assert {r["kernel"] for r in rows} == step_kernels
        assert all(r["registers"] > 0 for r in rows)
        if name.startswith("bf16"):  # the timed dtype: its tiles fit in registers
            assert all(r["spill_stores"] == 0 for r in rows), rows


@needs_triton
def test_the_compiler_sees_the_arguments_as_the_jit_specializes_them():
    """``labkit.kernels.aot`` compiles what the GPU's JIT would: a row count or program count
    divisible by 16 and a 16-byte-aligned pointer get ``tt.divisibility`` (layer 1's barrier
    counter, 8 bytes into the counters, does not), and an integer argument equal to 1 becomes
    a constant. Compiled without them (Triton 3.6), gpt2's persistent layer kernel took 255
    registers at 64 rows instead of the JIT's 96, so four programs per SM looked impossible
    where the H100 ran them."""
    from labkit.kernels.aot import _specialized

    m = build_model(GPTConfig(vocab_size=64, n_layer=2, n_head=4, d_model=64, max_batch=64,
                              max_seq=64, dtype="bfloat16"))
    names = None
    for batch, programs in ((64, 528), (5, 132)):
        layers = gpu_launches(m, batch, sm_count=programs, schedule="persistent")[:2]
        for i, launch in enumerate(layers):
            sig, constants, attrs = _specialized(launch)
            names = launch.kernel.arg_names
            marked = {names[k[0]] for k, v in attrs.items() if v == [["tt.divisibility", 16]]}
            assert ("B" in marked) == (batch == 64) and ("P" in marked) == (programs == 528)
            assert ("ready_ptr" in marked) == (i == 0), (i, marked)
            assert {"x_ptr", "qkv_w_ptr", "k_cache_ptr"} <= marked
            assert sig["x_ptr"] == "*bf16" and sig["B"] == "i32" and sig["scale"] == "fp32"
            assert constants["D"] == 64 and sig["D"] == "constexpr"
    one = gpu_launches(m, 1, sm_count=132, schedule="persistent")[0]
    sig, constants, _ = _specialized(one)
    assert sig["B"] == "constexpr" and constants["B"] == 1


@needs_triton
def test_a_compiled_record_replaces_its_triton_versions_row(tmp_path):
    """The compile-only records (``acquire``, ``resources``) keep one row per Triton version,
    sorted, each naming this Triton, its ptxas, the date, the commit and that no kernel ran."""
    import triton

    from labkit.kernels.aot import _replace_row, _stamped

    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"triton": "9.0.0", "x": 0}, {"triton": triton.__version__,
                                                            "x": 1}]))
    row = _stamped({"x": 2})
    assert _replace_row(str(path), row) == row
    rows = json.loads(path.read_text())
    assert [(r["triton"], r["x"]) for r in rows] == [(triton.__version__, 2), ("9.0.0", 0)]
    assert rows[0]["ptxas"].startswith("V") and rows[0]["commit"] is not None
    assert rows[0]["machine"] == "compiled without a GPU (no kernel ran)"


_ACQUIRE = """
import json
from labkit.kernels.aot import acquire_sass, compile_step
from labkit.model import build_model, preset
out = {"acquire": acquire_sass()}
m = build_model(preset("small", max_batch=1, dtype="float32"))
out["persistent"] = compile_step(m, 1, schedule="persistent")
out["stamped"] = compile_step(m, 1, schedule="persistent", stamps=True)
out["prefetch"] = compile_step(m, 1, schedule="persistent", prefetch=True)
out["tile_waits"] = compile_step(m, 1, schedule="persistent", waits="tile")
out["heads"] = compile_step(m, 1, schedule="persistent", heads=4)
import labkit.kernels.aot as aot
aot.RESOURCE_PRESETS, aot.RESOURCE_SIZES, aot.RESOURCE_PER_SM = ("small",), (1,), (4,)
out["resources"] = aot.layer_resources()
m = build_model(preset("test", max_batch=17))
out["pdl"] = {mode: compile_step(m, 17, schedule="pdl", pdl=mode)
              for mode in ("overlap", "release_at_end", "wait_first")}
print("AOT " + json.dumps(out))
"""


@needs_triton
def test_every_wait_keeps_its_acquire_in_the_compiled_code():
    """What made the persistent step read stale rows on an H100 (Triton 3.6): an acquire whose
    value nothing used was dropped with the SM's L1 invalidation. Compiled for sm_90 (no GPU
    needed): labkit's wait keeps an acquire load and a ``CCTL.IVALL``, and the persistent
    layer kernel (small preset, one row: several tiles per program) keeps one invalidation per
    wait site and the attention's acq_rel count: with every tile waiting (``waits="tile"``)
    stage 2 once, stages 3 and 4 three times (the first tile, the later ones, a program
    without a tile), stage 5 twice: 10; with only a stage's first tile waiting
    (``waits="stage"``, the default) stages 3 and 4 twice and stage 5 once: 7. Every PDL
    mode compiles to the same kernels."""
    result = _compiled(_ACQUIRE)
    used = result["acquire"]["wait_value_used"]
    assert used["acquire_loads"] >= 1 and used["l1_invalidations"] >= 1, result["acquire"]
    layer = [r for r in result["persistent"] if r["kernel"] == "layer_kernel"]
    assert layer and all(r["l1_invalidations"] == 7 for r in layer), layer
    every = [r for r in result["tile_waits"] if r["kernel"] == "layer_kernel"]
    assert every and all(r["l1_invalidations"] == 10 for r in every), every
    assert all(r["acquire_loads"] >= 6 for r in layer), layer
    for mode, rows in result["pdl"].items():
        assert {r["kernel"] for r in rows} == step_kernels, mode
        assert all(r["l1_invalidations"] <= 1 for r in rows), (mode, rows)
    # the stage table's stamps: six clock reads per layer kernel (start, four arrivals, end),
    # none without them, and the same waits either way
    assert all(r["clock_reads"] == 0 for r in result["persistent"]), result["persistent"]
    stamped = [r for r in result["stamped"] if r["kernel"] == "layer_kernel"]
    assert stamped and all(r["clock_reads"] == 6 and r["l1_invalidations"] == 7
                           for r in stamped), stamped
    # the L2 prefetch: one prefetch instruction per matrix stage's loop, and one for the next
    # layer's QKV stage in every layer but the last; none without it, the same waits either
    # way
    assert all(r["prefetches"] == 0 for r in result["persistent"]), result["persistent"]
    fetched = [r for r in result["prefetch"] if r["kernel"] == "layer_kernel"]
    per_count = {n: sum(r["launches"] for r in fetched if r["prefetches"] == n) for n in (4, 5)}
    assert per_count == {4: 1, 5: 3}, fetched  # the small preset: 4 layers
    assert all(r["l1_invalidations"] == 7 for r in fetched), fetched
    # tiles of four heads (the small preset's all, unsplit): the same six wait sites, and no
    # split to combine, so no acq_rel count (its invalidation) and no ".cg" loads of partials
    heads = [r for r in result["heads"] if r["kernel"] == "layer_kernel"]
    assert heads and all(r["l1_invalidations"] == 6 for r in heads), heads
    assert all(r["acquire_loads"] < min(x["acquire_loads"] for x in layer) for r in heads)
    # what notebook 17 reads how many programs fit from: the layer kernels' largest
    # registers and shared memory, per launch (here one: small, batch 1, 4 per SM, each wait)
    assert [(r["preset"], r["batch"], r["per_sm"], r["waits"]) for r in result["resources"]] \
        == [("small", 1, 4, "tile"), ("small", 1, 4, "stage")]
    assert all(0 < r["registers"] <= 255 and r["shared_bytes"] > 0 and r["num_warps"] == 4
               for r in result["resources"]), result["resources"]


# ---------------------------------------------------------------------------------- pure parts


def test_blocks_are_checked():
    with pytest.raises(ValueError, match="power of two"):
        Blocks(n=24)
    with pytest.raises(ValueError, match="below 16"):
        Blocks(n_out=8)  # 16 rows: tl.dot
    assert not Blocks(rows=8, n=1, n_out=2, k=16, head_n=4).dot  # the CUDA-core product
    with pytest.raises(ValueError, match="positive int"):
        Blocks(splits=0)


@needs_triton
def test_block_options_are_checked_when_the_step_is_built():
    m = _model()
    with pytest.raises(ValueError, match="unknown Blocks"):
        make_triton_step(m, blocks={"cols": 16})
    with pytest.raises(ValueError, match="power of two"):
        make_triton_step(m, blocks={"t": 3})
    with pytest.raises(TypeError):
        make_triton_step(m, blocks=[16])


def test_attention_splits_follow_the_row_head_pairs_on_the_gpu():
    # gpt2's 12 heads and 256 positions (the rest small: the choice reads only these)
    m = build_model(GPTConfig(vocab_size=64, n_layer=1, n_head=12, d_model=96, max_batch=64,
                              max_seq=256, dtype="bfloat16"))
    # 132 SMs (an H200): about two programs per SM, at most one split per 64 positions on the
    # tensor cores
    # one row on the CUDA cores: splits of 32 positions, at most 8 (the combine's budget)
    assert choose_blocks(m, 1, sm_count=132).splits == 8
    assert choose_blocks(m, 8, sm_count=132).splits == 3   # 96 pairs: ceil(264 / 96)
    assert choose_blocks(m, 64, sm_count=132).splits == 1  # 768 pairs fill the GPU
    assert choose_blocks(m, 64, sm_count=132).rows == 16
    assert choose_blocks(m, 1, sm_count=132).rows == 1


def test_stage_tiles_are_the_tiles_of_the_persistent_launch():
    # the counts notebook 17 reads (labkit.teach.past_launch.later_tiles) without a model
    assert stage_tiles(preset("gpt2", max_seq=256), 1, 132) == {
        "qkv": 288, "out": 384, "up": 384, "down": 384}   # 2, 1 and 2 columns a tile, one row
    assert stage_tiles(preset("small", max_seq=256), 64, 132) == {
        "qkv": 48, "out": 64, "up": 64, "down": 64}       # 16-row tiles: 4 row tiles


@needs_triton
@pytest.mark.parametrize("batch", [1, 8, 64])
def test_stage_tiles_match_the_planned_layer_launch(batch):
    m = build_model(GPTConfig(vocab_size=64, n_layer=1, n_head=12, d_model=96, max_batch=64,
                              max_seq=256, dtype="bfloat16"))
    layer = gpu_launches(m, batch, sm_count=132, schedule="persistent")[0]
    c = layer.constants
    tiles = stage_tiles(m.cfg, batch, 132)
    assert tiles == {"qkv": c["QKV_COLS"] * c["ROW_TILES"], "out": c["OUT_COLS"] * c["ROW_TILES"],
                     "up": c["UP_COLS"] * c["ROW_TILES"], "down": c["OUT_COLS"] * c["ROW_TILES"]}


@needs_triton
@pytest.mark.parametrize("n_head", [4, 12])   # the small preset's heads and gpt2's
def test_the_heads_sweeps_candidates_plan_their_launches(n_head):
    """Every candidate of ``scripts/triton_sweep.py --schedule heads`` plans its layer launch
    (one attention split wherever a tile has several heads, or the control asks for one);
    eight heads a tile is refused on four heads, as the sweep expects."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "triton_sweep", Path(__file__).parents[1] / "scripts" / "triton_sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    m = build_model(GPTConfig(vocab_size=64, n_layer=1, n_head=n_head, d_model=8 * n_head,
                              max_batch=64, max_seq=256, dtype="bfloat16"))
    planned = 0
    for change, per_sm, stripes, prefetch, waits, heads in sweep.HEADS:
        for batch in (1, 8, 64):
            kw = dict(sm_count=per_sm * 132, blocks=change or None, schedule="persistent",
                      stripes=stripes, prefetch=prefetch, waits=waits, heads=heads)
            if heads > n_head:
                with pytest.raises(ValueError, match=f"heads={heads}"):
                    gpu_launches(m, batch, **kw)
                continue
            c = gpu_launches(m, batch, **kw)[0].constants
            assert (c["HEADS"], c["GROUPS"]) == (heads, -(-n_head // heads))
            if heads > 1 or change.get("splits") == 1:
                assert c["NSPLIT"] == 1 and c["SPLIT"] == 256
            planned += 1
    assert planned == 3 * (len(sweep.HEADS) - (n_head == 4))


def test_kernels_per_step():
    assert kernels_per_step(12) == 61 and kernels_per_step(4) == 21
    assert step_kernels == {"ln_qkv_kernel", "attention_split_kernel",
                            "ln_linear_kernel", "linear_residual_kernel"}


@pytest.mark.parametrize("name", ["small", "gpt2"])
@pytest.mark.parametrize("batch", [1, 8, 64])
def test_the_plan_moves_the_bytes_of_the_floor(name, batch):
    cfg = preset(name, max_batch=64, dtype="bfloat16")
    plan = kernel_plan(cfg, batch, 128, splits=4)
    totals = plan_totals(plan)
    floor = step_bytes(cfg, batch, 128)
    assert totals["compulsory"] == floor.total
    assert {k: totals[k] for k in ("weights", "embedding_rows", "kv_read", "kv_write",
                                   "logits_write")} == {
        k: v for k, v in floor.to_dict().items() if k != "total"}
    assert totals["launches"] == kernels_per_step(cfg.n_layer)
    assert 0 < totals["activations"] < totals["compulsory"]


def test_plan_refuses_a_context_past_the_cache():
    with pytest.raises(ValueError):
        kernel_plan(preset("test"), 1, 33)


def test_triton_bench_derives_floor_and_ratios():
    out = triton_bench.derived({"readable": [{"median": 300.0}, {"median": 400.0}],
                                "fused": [{"median": 200.0}, {"median": 300.0}],
                                "triton": [{"median": 100.0}, {"median": 330.0}]},
                               floors=[50.0, 100.0])
    assert out["x_floor"]["triton"] == [2.0, 3.3]
    assert out["speedup_vs_fused"] == [2.0, 300.0 / 330.0]
    assert out["speedup_vs_readable"] == [3.0, 400.0 / 330.0]


class _EagerGraphs:
    """Stands in for a GraphSet on CPU: static inputs, ``replay`` runs the step eagerly."""

    def __init__(self, model, sizes, step):
        n = max(sizes)
        self.step, self.sizes = step, sizes
        self.t = torch.zeros(n, dtype=torch.long)
        self.p = torch.zeros(n, dtype=torch.long)
        self.s = torch.full((n,), model.cfg.scratch_slot)

    def copy_inputs(self, t, p, s):
        b = t.shape[0]
        self.t[:b], self.p[:b], self.s[:b] = t, p, s
        return b

    def replay(self, b):
        assert b in self.sizes
        return self.step(self.t[:b], self.p[:b], self.s[:b], check=False)

    def release(self):
        pass


def _stand_ins(monkeypatch, module):
    """A record module's GPU parts replaced by CPU stand-ins: no CUDA or compile check, a
    4000 GB/s copy, models built on CPU, graphs that run the step eagerly, and timings of
    [100 + i, 110 + i] us for the i-th function of a round (the timing loop is
    ``triton_bench.time_replays``'s)."""
    from labkit.model import build_model as build
    from labkit.timing import Stats

    monkeypatch.setattr(module, "_need_cuda", lambda what: None)
    monkeypatch.setattr(module, "_need_compiled", lambda: None)
    monkeypatch.setattr(module, "_free", lambda: None)
    monkeypatch.setattr(module, "copy_bandwidth", lambda: {"gbps": 4000.0})
    monkeypatch.setattr(module, "make_model", lambda name, max_batch, dtype, **kw: _randomise(
        build(preset(name, max_batch=max_batch, dtype=dtype, **kw), seed=1)))
    monkeypatch.setattr(module, "capture_decode_graphs",
                        lambda model, sizes, step, progress: _EagerGraphs(model, sizes, step))
    monkeypatch.setattr(triton_bench, "time_cuda_interleaved", lambda fns, **kw: {
        name: (fn(), Stats.from_samples([100.0 + i, 110.0 + i]))[1]
        for i, (name, fn) in enumerate(fns.items())})


@cpu
def test_measure_triton_assembles_its_record_on_cpu(monkeypatch):
    """The record's assembly, on CPU: the GPU parts (bandwidth, capture, CUDA-event timing,
    profiler) replaced by stand-ins, the token checks run for real (interpreter)."""
    tb = triton_bench
    _stand_ins(monkeypatch, tb)
    monkeypatch.setattr(tb, "gpu_op_profile", lambda fn: (fn(), {"k": {"count": 11, "us": 2.0}})[1])
    monkeypatch.setattr(tb, "profile_call", lambda fn: (fn(), {"gpu_ops": 11})[1])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "cpu (stand-ins)")
    data = tb.measure_triton("test", batch_sizes=[2, 1], dtype="float32", context=8,
                             max_seq=32, repeats=2, inner=1, new_tokens=2)
    assert data["batch_sizes"] == [1, 2] and data["steps"] == ["readable", "fused", "triton"]
    assert all(v is True or (isinstance(v, float) and v == 1.0) for v in data["checks"].values())
    assert data["triton_kernels_per_step"] == 11 and data["ops_total"]["triton"] == [11, 11]
    assert [len(data["times"][s]) for s in data["steps"]] == [2, 2, 2]
    assert data["floor_us"][0] == step_bytes(preset("test"), 1, 8).total / 4e6
    assert data["speedup_vs_fused"] == [106.0 / 107.0] * 2  # medians of [101, 111], [102, 112]
    assert len(data["plan_totals"]) == 2 and data["plan"][0]["kernel"] == "ln_qkv_kernel"
    json.dumps(data)  # a plain, JSON-able dict


@cpu
def test_measure_past_launch_assembles_its_record_on_cpu(monkeypatch):
    """The past_launch record's assembly on CPU (GPU parts replaced by stand-ins, the token
    and fidelity checks run for real in the interpreter): every schedule passes the gate and is
    timed, the persistent step launches L + 1 kernels."""
    import types

    from labkit.measure import past_launch as pl

    _stand_ins(monkeypatch, pl)
    counts = {"triton": 11, "triton_pdl": 11, "triton_persistent": 3}
    calls = iter(n for s in counts for n in [counts[s]] * 2)
    monkeypatch.setattr(pl, "gpu_op_profile",
                        lambda fn: (fn(), {"k": {"count": next(calls), "us": 2.0}})[1])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "cpu (stand-ins)")
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda dev: types.SimpleNamespace(multi_processor_count=1))
    data = pl.measure_past_launch("test", batch_sizes=[2, 1], dtype="bfloat16", context=8,
                                  max_seq=32, repeats=2, inner=1, new_tokens=2,
                                  fidelity_tokens=3, programs_per_sm=[1])
    assert data["timed"] == list(pl.STEPS) and data["cooperative"] is True
    assert all(v is True for v in data["checks"].values()), data["checks"]
    assert set(data["fidelity"]) == set(pl.FIDELITY_STEPS)
    assert all(r["passes"] and r["float32_tokens_equal"] for r in data["fidelity"].values())
    assert data["kernels"]["triton_persistent"] == [3, 3]
    assert set(data["times"]) == {*pl.STEPS, "triton_persistent@1"}
    json.dumps(data)


def test_triton_bench_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        triton_bench.measure_triton("test", batch_sizes=[1])


# ---------------------------------------------------------------------------------- GPU


def _cuda_model(name="test", dtype="float32", **kw):
    m = build_model(preset(name, dtype=dtype, **{"max_batch": 8, **kw}), "cuda", seed=1)
    return _randomise(m)


@pytest.mark.gpu
@gpu_compiled
@pytest.mark.parametrize("layout", ["slot", "paged"])
@pytest.mark.parametrize("bs", [1, 5, 8])
def test_gpu_float32_tokens_equal_the_readable_step(layout, bs):
    m = _cuda_model(kv_layout=layout, block_size=8)
    prompts = [[(7 * i + j) % 97 for j in range(3 + 2 * i)] for i in range(bs)]
    assert generate(m, prompts, 10, step_fn=make_triton_step(m)) == generate(m, prompts, 10)


@pytest.mark.gpu
@gpu_compiled
@pytest.mark.parametrize("schedule", ["pdl", "persistent"])
@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_gpu_every_schedule_gives_the_readable_steps_float32_tokens(schedule, layout):
    m = _cuda_model(kv_layout=layout, block_size=8)
    step = make_triton_step(m, schedule=schedule)
    for bs in (1, 5, 8):
        prompts = [[(7 * i + j) % 97 for j in range(3 + 2 * i)] for i in range(bs)]
        assert generate(m, prompts, 10, step_fn=step) == generate(m, prompts, 10), bs


@pytest.mark.gpu
@gpu_compiled
@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_gpu_persistent_stripes_give_the_readable_steps_float32_tokens(layout):
    m = _cuda_model(kv_layout=layout, block_size=8, max_batch=64)
    step = make_triton_step(m, schedule="persistent", stripes=True)
    for bs in (1, 5, 8, 40):
        prompts = [[(7 * i + j) % 97 for j in range(3 + 2 * i % 11)] for i in range(bs)]
        assert generate(m, prompts, 6, step_fn=step) == generate(m, prompts, 6), bs


@pytest.mark.gpu
@gpu_compiled
@pytest.mark.parametrize("bs", [1, 8])
def test_gpu_stamped_persistent_step_gives_the_same_tokens_and_ordered_stamps(bs):
    """The clock stamps change no token; each program's six stamps never go back, every
    program of a layer launch starts before any arrives at the last barrier, and the
    stage split of the stamps (notebook 17's table) is all positive."""
    from labkit.measure.past_launch import stage_split

    m = _cuda_model("small", dtype="bfloat16", max_batch=8)
    step = make_triton_step(m, schedule="persistent", stamps=True)
    prompts = [[(7 * i + j) % 97 for j in range(3 + 2 * i)] for i in range(bs)]
    plain = make_triton_step(m, schedule="persistent")
    assert generate(m, prompts, 6, step_fn=step) == generate(m, prompts, 6, step_fn=plain)
    stamps = step.stamps_at(bs).tolist()
    assert len(stamps) == m.cfg.n_layer and len(stamps[0]) == step.programs
    for layer in stamps:
        assert all(p[0] > 0 and p == sorted(p) for p in layer), layer[:2]
        assert max(p[0] for p in layer) <= max(p[4] for p in layer)
    split = stage_split(stamps)
    assert all(v > 0 for layer in split["stages"] for v in layer), split["stages"]


@pytest.mark.gpu
@gpu_compiled
@pytest.mark.parametrize("layout", ["slot", "paged"])
@pytest.mark.parametrize("waits", WAITS)
def test_gpu_prefetching_persistent_step_gives_the_readable_steps_float32_tokens(layout, waits):
    """The L2 prefetch only asks for bytes early: float32 tokens still equal the readable
    step's, with the heuristic's tiles (several per program at one row) and with stripes,
    at one and at several row tiles, whichever tiles wait."""
    m = _cuda_model(kv_layout=layout, block_size=8, max_batch=40)
    for stripes in (False, True):
        step = make_triton_step(m, schedule="persistent", prefetch=True, stripes=stripes,
                                waits=waits)
        for bs in (1, 5, 40):
            prompts = [[(7 * i + j) % 97 for j in range(3 + 2 * i % 11)] for i in range(bs)]
            assert generate(m, prompts, 6, step_fn=step) == generate(m, prompts, 6), \
                (stripes, bs)


@pytest.mark.gpu
@gpu_compiled
@pytest.mark.parametrize("layout", ["slot", "paged"])
@pytest.mark.parametrize("name,heads", [("small", 2), ("small", 4), ("gpt2", 8),
                                        ("gpt2", 16)])
def test_gpu_persistent_attention_tiles_of_several_heads_give_the_readable_steps_tokens(
        layout, name, heads):
    """Compiled, with programs walking several tiles each at 40 rows: float32 tokens equal
    the readable step's; on gpt2's twelve heads a tile of 8 or 16 has masked heads."""
    m = _cuda_model(name, kv_layout=layout, block_size=8, max_batch=40)
    step = make_triton_step(m, schedule="persistent", heads=heads)
    for bs in (1, 5, 40):
        prompts = [[(7 * i + j) % 97 for j in range(3 + 2 * i % 11)] for i in range(bs)]
        assert generate(m, prompts, 6, step_fn=step) == generate(m, prompts, 6), bs


@pytest.mark.gpu
@gpu_compiled
@pytest.mark.parametrize("bs", [1, 2])
@pytest.mark.parametrize("waits", WAITS)
@pytest.mark.parametrize("poll,counters", [("volatile", "layer"), ("acquire", "layer"),
                                           ("volatile", "stage")])
def test_gpu_persistent_step_reads_no_stale_row_with_several_tiles_per_program(bs, waits, poll,
                                                                               counters):
    """The shape that failed on an H100 before every wait used its acquire's value: the small
    preset in float32 at one or two rows (CUDA-core tiles, 1-2 output columns each, so several
    tiles per program share a 32-byte sector of the rows they read). Float32 tokens equal the
    readable step's, and the same step from the same state repeats itself exactly."""
    m = _cuda_model("small", max_batch=8)
    step = make_triton_step(m, schedule="persistent", waits=waits, poll=poll, counters=counters)
    prompts = [[(7 * i + j) % 97 for j in range(3 + 2 * i)] for i in range(bs)]
    assert generate(m, prompts, 8, step_fn=step) == generate(m, prompts, 8)
    t = torch.arange(5, 5 + bs, device="cuda")
    p = torch.full((bs,), 20, device="cuda")
    s = torch.arange(bs, device="cuda")
    for i in range(bs):
        m.cache.reserve(i, 21)
    first = step(t, p, s).clone()
    assert all(torch.equal(step(t, p, s), first) for _ in range(3))


@pytest.mark.gpu
@gpu_compiled
@pytest.mark.parametrize("mode", PDL_MODES)
def test_gpu_every_pdl_mode_gives_the_readable_steps_float32_tokens(mode):
    m = _cuda_model("small", max_batch=16)
    step = make_triton_step(m, schedule="pdl", pdl=mode)
    for bs in (1, 16):
        prompts = [[(7 * i + j) % 97 for j in range(3 + 2 * i)] for i in range(bs)]
        assert generate(m, prompts, 6, step_fn=step) == generate(m, prompts, 6), bs


@pytest.mark.gpu
@gpu_compiled
@pytest.mark.parametrize("schedule", ["kernels", "pdl", "persistent"])
def test_gpu_graphs_of_every_schedule_replay_what_eager_computes(schedule):
    """A graph of each schedule (PDL edges, cooperative launches) gives the eager step's
    logits, replay after replay (the persistent counters keep growing inside the graph)."""
    from labkit.graphs import capture_decode_graphs

    m = _cuda_model("small", dtype="bfloat16")
    step = make_triton_step(m, schedule=schedule)
    gs = capture_decode_graphs(m, [1, 4], step=step, progress=False)
    try:
        t = torch.tensor([5, 6, 7, 8], device="cuda")
        p = torch.tensor([3, 9, 1, 200], device="cuda")
        s = torch.arange(4, device="cuda")
        want = step(t, p, s, check=False).clone()
        for _ in range(3):
            gs.copy_inputs(t, p, s)
            assert torch.equal(gs.replay(4)[:4].clone(), want)
    finally:
        gs.release()


@pytest.mark.gpu
@gpu_compiled
def test_gpu_graph_replays_equal_eager_and_see_weight_updates():
    from labkit.graphs import capture_decode_graphs

    m = _cuda_model("small", dtype="bfloat16")
    step = make_triton_step(m)
    gs = capture_decode_graphs(m, [1, 4], step=step, progress=False)
    try:
        t = torch.tensor([5, 6, 7, 8], device="cuda")
        p = torch.tensor([3, 9, 1, 200], device="cuda")
        s = torch.arange(4, device="cuda")
        gs.copy_inputs(t, p, s)
        assert torch.equal(gs.replay(4)[:4].clone(), step(t, p, s, check=False))
        with torch.no_grad():
            m.lm_head.weight.mul_(1.5)
        gs.copy_inputs(t, p, s)
        assert torch.equal(gs.replay(4)[:4].clone(), step(t, p, s, check=False))
    finally:
        gs.release()


@pytest.mark.gpu
@gpu_compiled
def test_gpu_bf16_agreement_and_kernel_count():
    from labkit.measure.opcount import op_counts

    m = _cuda_model("small", dtype="bfloat16", max_seq=256)
    step = make_triton_step(m)
    a = agreement(m, [[(5 * i + j) % 50257 for j in range(4 + 3 * i)] for i in range(8)], 8,
                  step=step)
    # bf16 rounds in other places than the readable step: greedy rows may part ways (the
    # fused step agreed on 92% of gpt2's tokens on the H200); one step's logits stay close
    assert a.fraction >= 0.5 and a.max_logit_diff < 0.1, a.to_dict()
    t, p, s = (x.cuda() for x in (torch.tensor([3]), torch.tensor([10]), torch.tensor([0])))
    counts = op_counts(lambda: step(t, p, s, check=False), device="cuda")
    assert sum(counts.values()) == kernels_per_step(m.cfg.n_layer)


@pytest.mark.gpu
@gpu_compiled
def test_measure_triton_on_the_gpu():
    data = triton_bench.measure_triton("test", batch_sizes=[1, 4], context=8, max_seq=32,
                                       repeats=3, inner=2, new_tokens=3)
    assert all(v is True for k, v in data["checks"].items() if k != "triton_token_agreement")
    assert data["graph_ops"]["triton"] == [kernels_per_step(2)] * 2
    assert all(t["median"] > 0 for s in data["steps"] for t in data["times"][s])
    json.dumps(data)


@cpu
@pytest.mark.parametrize("barriers,ready", [(0, 2), (1, 2), (4, 2), (4, 6)])
def test_sync_kernel_counts_every_arrival(barriers, ready):
    """The synchronisation-only launch (labkit.kernels.sync_floor) arrives once per barrier and
    passes its waits: one program alone (the interpreter), three launches on one counter."""
    import importlib

    kernel = importlib.import_module("labkit.kernels.sync_floor").sync_kernel
    counter = torch.zeros(1, dtype=torch.int64)
    for _ in range(3):
        kernel[(1,)](counter, 1, BARRIERS=barriers, READY=ready)
    assert int(counter) == 3 * barriers


@cpu
@pytest.mark.parametrize("launches", [1, 3])
def test_sync_kernel_passes_the_row_from_stage_to_stage(launches):
    """With ROW, each of a launch's five stages reads the whole row the stage before wrote and
    writes half its mean plus the column (labkit.kernels.sync_floor.exchange_row); launches
    continue the alternation of the two buffers (first = 5 i), as a graph's layers do."""
    import importlib

    from labkit.measure.sync_floor import settled_row

    kernel = importlib.import_module("labkit.kernels.sync_floor").sync_kernel
    d = 10
    counter = torch.zeros(1, dtype=torch.int64)
    row = torch.zeros(2, d)
    row[0] = torch.linspace(-50.0, 70.0, d)
    expect = row[0].clone()
    for i in range(launches):
        kernel[(1,)](counter, 1, BARRIERS=4, row_ptr=row, first=5 * i, ROW=d, BLOCK_ROW=16)
        for _ in range(5):
            expect = expect.mean() * 0.5 + torch.arange(d, dtype=torch.float32)
    assert int(counter) == 4 * launches
    last = (5 * launches) % 2  # the buffer the last stage wrote
    torch.testing.assert_close(row[last], expect)
    # where it settles: the mean's distance from d - 1 halves each stage
    gap = (torch.linspace(-50.0, 70.0, d).mean() - (d - 1)) * 0.5 ** (5 * launches)
    torch.testing.assert_close(row[last] - settled_row(d), torch.full((d,), float(gap)))


def test_measure_sync_floor_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the GPU test below measures")
    from labkit.measure.sync_floor import measure_sync_floor

    with pytest.raises(RuntimeError, match="CUDA GPU"):
        measure_sync_floor(("test",))


@pytest.mark.gpu
@gpu_compiled
def test_measure_sync_floor_on_the_gpu():
    from labkit.measure.sync_floor import STEPS, VARIANTS, measure_sync_floor, sync_summary

    rec = measure_sync_floor(("test",), repeats=3, inner=2)
    p = rec["presets"]["test"]
    assert p["counters_met"] is True and p["launches"]["kernels"] == kernels_per_step(2)
    assert set(p["times"]) == set(VARIANTS) | set(STEPS)
    s = sync_summary(rec, "test")
    assert s["sync_us"] > 0 and 0 < s["sync_share"] < 1, s
    assert p["tokens_equal_eager"] == dict.fromkeys(STEPS, True)
    assert p["launches"]["barriers_acquire"] == kernels_per_step(2, "persistent")
    assert p["launches"]["kernels_one"] == kernels_per_step(2)
    assert p["launches"]["chain"] == p["launches"]["barriers_8"] == kernels_per_step(
        2, "persistent")
    assert {f"per_barrier_{n}_us" for n in p["fan_in"]} <= set(s), s
    json.dumps(rec)
