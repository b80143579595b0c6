"""Malformed inputs to the public core entry points (model, dispatch, sizes, graphs' CPU parts,
timing): each raises a TypeError or ValueError whose message names the input and the fix, and
changes nothing (KV cache, dispatcher counters and buffers, the caller's arguments)."""

from __future__ import annotations

import copy
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit import graphs, sizes, timing
from labkit.runner import PaddingDispatcher, build_padding_table
from labkit.model import GPTConfig, TinyGPT, build_model, generate, generate_text, preset

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

#: a message names the fix when it says what to do
FIX = re.compile(r"\b(use|give|pass|pick|raise|build|list|move|map|capture|take|wrap|keep|"
                 r"warm|make|divide|lower|ask|encode|fix|choose|drop|restrict|allow|"
                 r"stop|shorten|send|reserve|must be|must lie|must have|needs?)\b", re.I)

NOT_INT = st.one_of(st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=3), st.none(), st.lists(st.integers(0, 3), max_size=2),
                    st.just(2.0), st.just("3"), st.just(b"2"), st.just(torch.tensor(2)))
NOT_NUMBER = st.one_of(st.booleans(), st.text(max_size=3), st.none(), st.just(float("nan")),
                       st.just([1.0]))
NOT_BOOL = st.one_of(st.integers(), st.text(max_size=3), st.floats(), st.just([True]))


def bad_int(minimum: int, maximum: int | None = None, *,
            none_ok: bool = False) -> st.SearchStrategy:
    """Values an int argument in ``[minimum, maximum]`` must refuse (``None`` too, unless
    ``none_ok``: it means "the default" there)."""
    not_int = NOT_INT.filter(lambda x: x is not None) if none_ok else NOT_INT
    parts = [not_int, st.integers(max_value=minimum - 1)]
    if maximum is not None:
        parts.append(st.integers(min_value=maximum + 1, max_value=2**70))
    return st.one_of(*parts)


def bad_size_list(maximum: int = 8) -> st.SearchStrategy:
    """Capture-size lists to refuse: a bad entry, a repeated size, empty, or not a list."""
    good = st.lists(st.integers(1, maximum), max_size=3, unique=True)
    return st.one_of(
        st.tuples(good, bad_int(1), good).map(lambda t: t[0] + [t[1]] + t[2]),
        st.lists(st.integers(1, maximum), min_size=1, max_size=3).map(lambda xs: xs + xs[:1]),
        st.just([]),
        st.one_of(st.text(max_size=3), st.integers(), st.none(), st.just({1: 1})))


def refused(fn, *names: str) -> str:
    """Call ``fn``: it must raise TypeError/ValueError naming one of ``names`` and the fix."""
    with pytest.raises((TypeError, ValueError)) as info:
        fn()
    msg = str(info.value)
    assert any(n.lower() in msg.lower() for n in names), (names, msg)
    assert FIX.search(msg), f"no fix in: {msg}"
    return msg


_MODEL: dict[str, TinyGPT] = {}


def model() -> TinyGPT:
    """A test model (max_batch 4) with a live request prefilled in slot 0."""
    if "m" not in _MODEL:
        m = build_model(preset("test", max_batch=4), seed=0)
        _MODEL["m"] = m
    m = _MODEL["m"]
    m.reset_cache()
    m.prefill(torch.tensor([[1, 2, 3]]), torch.tensor([0]))
    return m


def cache_of(m: TinyGPT) -> tuple[torch.Tensor, torch.Tensor]:
    return m.k_cache.clone(), m.v_cache.clone()


def same_cache(m: TinyGPT, before) -> bool:
    return torch.equal(m.k_cache, before[0]) and torch.equal(m.v_cache, before[1])


# ------------------------------------------------------------------------------ bad batches

BATCH_FAULTS = ["dup_slot", "scratch_slot", "slot_high", "slot_negative", "pos_negative",
                "pos_high", "tok_negative", "tok_high", "float_dtype", "bool_dtype", "shape",
                "length", "device", "not_tensor"]


@st.composite
def bad_batch(draw, max_batch: int = 4, max_seq: int = 32, vocab: int = 97):
    """A decode batch with one fault; returns (tokens, positions, slots, words)."""
    b = draw(st.integers(1, max_batch))
    tok = torch.tensor(draw(st.lists(st.integers(0, vocab - 1), min_size=b, max_size=b)))
    pos = torch.tensor(draw(st.lists(st.integers(3, max_seq - 1), min_size=b, max_size=b)))
    slots = torch.tensor(draw(st.permutations(range(max_batch)))[:b])
    fault = draw(st.sampled_from(BATCH_FAULTS))
    i = draw(st.integers(0, b - 1))
    words: tuple[str, ...]
    if fault == "dup_slot":
        if b == 1:
            tok, pos, slots = tok.repeat(2), pos.repeat(2), slots.repeat(2)
        else:
            slots[i] = slots[(i + 1) % b]
        words = ("more than once",)
    elif fault == "scratch_slot":
        slots[i] = max_batch
        words = ("scratch slot",)
    elif fault == "slot_high":
        slots[i] = draw(st.integers(max_batch + 1, 2**40))
        words = ("slot",)
    elif fault == "slot_negative":
        slots[i] = draw(st.integers(-2**40, -1))
        words = ("slot",)
    elif fault == "pos_negative":
        pos[i] = draw(st.integers(-2**40, -1))
        words = ("negative",)
    elif fault == "pos_high":
        pos[i] = draw(st.integers(max_seq, 2**40))
        words = ("past the KV cache",)
    elif fault == "tok_negative":
        tok[i] = draw(st.integers(-2**40, -1))
        words = ("token ids",)
    elif fault == "tok_high":
        tok[i] = draw(st.integers(vocab, 2**40))
        words = ("token ids",)
    elif fault in ("float_dtype", "bool_dtype"):
        dtype = torch.float32 if fault == "float_dtype" else torch.bool
        which = draw(st.sampled_from(["tok", "pos", "slots"]))
        tok, pos, slots = [t.to(dtype) if n == which else t
                           for n, t in zip(("tok", "pos", "slots"), (tok, pos, slots))]
        words = ("dtype",)
    elif fault == "shape":
        pos = pos[:, None]
        words = ("positions",)
    elif fault == "length":
        slots = slots[:-1] if b > 1 else torch.tensor([0, 1])
        words = ("one entry per row",)
    elif fault == "device":
        tok = tok.to("meta")
        words = ("tokens",)
    else:
        tok = tok.tolist()
        words = ("tokens",)
    return tok, pos, slots, words


@SETTINGS
@given(bad_batch())
def test_decode_step_refuses_bad_batches_and_writes_nothing(batch):
    m = model()
    before = cache_of(m)
    tok, pos, slots, words = batch
    refused(lambda: m.decode_step(tok, pos, slots), *words)
    assert same_cache(m, before)


@SETTINGS
@given(bad_batch(), st.booleans())
def test_dispatcher_refuses_bad_batches_and_changes_nothing(batch, load_only):
    m = model()
    d = PaddingDispatcher(m, [1, 2])
    d.step(torch.tensor([1, 2, 3]), torch.tensor([4, 4, 4]), torch.tensor([1, 2, 3]))
    d.step(torch.tensor([5]), torch.tensor([5]), torch.tensor([0]))
    before = (cache_of(m), d.counters.to_dict(), d.batch.tokens.clone(), d.batch.positions.clone(),
              d.batch.slots.clone(), d.batch._live)
    tok, pos, slots, words = batch
    if isinstance(tok, torch.Tensor) and tok.device.type == "meta":
        words = ("move it",)
    call = d.load_inputs if load_only else d.step
    refused(lambda: call(tok, pos, slots), *words)
    assert same_cache(m, before[0]) and d.counters.to_dict() == before[1]
    assert torch.equal(d.batch.tokens, before[2]) and torch.equal(d.batch.positions, before[3])
    assert torch.equal(d.batch.slots, before[4]) and d.batch._live == before[5]


def fresh(layout: str) -> TinyGPT:
    """A test model (max_batch 4, max_seq 32, blocks of 8) of ``layout`` with an empty cache
    and, paged, no blocks reserved."""
    if layout not in _MODEL:
        _MODEL[layout] = build_model(preset("test", max_batch=4, kv_layout=layout,
                                            block_size=8), seed=0)
    m = _MODEL[layout]
    for s in range(4):
        m.cache.release(s)
    m.reset_cache()
    return m


def dispatcher_state(d: PaddingDispatcher) -> tuple:
    return (cache_of(d.model), d.counters.to_dict(), d.batch.inputs.clone(), d.batch._live)


def same_state(d: PaddingDispatcher, before: tuple) -> bool:
    return (same_cache(d.model, before[0]) and d.counters.to_dict() == before[1]
            and torch.equal(d.batch.inputs, before[2]) and d.batch._live == before[3])


@SETTINGS
@given(st.data(), st.sampled_from(["decode_step", "step", "load_inputs"]),
       st.sampled_from([True, None]))
def test_a_paged_row_without_room_is_refused_and_changes_nothing(data, call, check):
    m = fresh("paged")
    b = data.draw(st.integers(1, 4))
    slots = data.draw(st.permutations(range(4)))[:b]
    short = data.draw(st.sampled_from(slots))  # the one slot without room for its position
    room = {s: data.draw(st.integers(0, 24) if s == short else st.integers(1, 32))
            for s in range(4)}
    for s, n in room.items():
        m.cache.reserve(s, n)
    pos = [data.draw(st.integers(m.cache.capacity(s), 31) if s == short
                     else st.integers(0, m.cache.capacity(s) - 1)) for s in slots]
    d = PaddingDispatcher(m, [1, 2])
    live = next(s for s in range(4) if s != short)
    d.step(torch.tensor([5]), torch.tensor([0]), torch.tensor([live]))  # a live static batch
    before = dispatcher_state(d)
    tok = torch.tensor(data.draw(st.lists(st.integers(0, 96), min_size=b, max_size=b)))
    fn = m.decode_step if call == "decode_step" else getattr(d, call)
    msg = refused(lambda: fn(tok, torch.tensor(pos), torch.tensor(slots), check=check),
                  f"slot {short} owns room")
    assert "reserve blocks first" in msg
    assert same_state(d, before)


def int32_run(layout: str, batch: tuple, int32: set[str]) -> list[torch.Tensor]:
    """Prefill, a decode step, a dispatcher step and a load of one batch with the named
    metadata as int32: the logits, each slot's keys and values (paged: wherever its blocks
    lie) and the static batch."""
    tok, pos, slots = (torch.tensor(x, dtype=torch.int32 if name in int32 else torch.int64)
                       for name, x in zip(("tokens", "positions", "slots"), batch))
    m = fresh(layout)
    for s in range(4):
        m.cache.reserve(s, 32)
    d = PaddingDispatcher(m, [1, 2])
    out = [m.prefill(tok[:, None].expand(-1, 3), slots), m.decode_step(tok, pos, slots),
           d.step(tok, pos + 1, slots)]
    d.load_inputs(tok, pos + 2, slots)
    kv = [torch.stack(m.cache.gathered(i, torch.arange(4))) for i in range(m.cfg.n_layer)]
    return [*out, *kv, d.batch.inputs.clone()]


@SETTINGS
@given(st.sampled_from(["slot", "paged"]), st.integers(1, 4).flatmap(lambda b: st.tuples(
    st.lists(st.integers(0, 96), min_size=b, max_size=b),
    st.lists(st.integers(3, 29), min_size=b, max_size=b),
    st.permutations(range(4)).map(lambda p: p[:b]))),
    st.sets(st.sampled_from(["tokens", "positions", "slots"]), min_size=1))
def test_int32_metadata_gives_what_int64_gives(layout, batch, int32):
    got, want = int32_run(layout, batch, int32), int32_run(layout, batch, set())
    assert all(torch.equal(g, w) for g, w in zip(got, want))


@SETTINGS
@given(st.integers(1, 4), st.sampled_from(["dup", "scratch", "high", "tok", "float", "empty"]))
def test_prefill_refuses_bad_prompts_and_writes_nothing(b, fault):
    m = model()
    before = cache_of(m)
    tokens = torch.ones(b, 3, dtype=torch.long)
    slots = torch.arange(b)
    words = {"dup": "more than once", "scratch": "scratch slot", "high": "slot",
             "tok": "token ids", "float": "dtype", "empty": "prompt"}[fault]
    if fault == "dup":
        slots = torch.zeros(b + 1, dtype=torch.long)
        tokens = torch.ones(b + 1, 3, dtype=torch.long)
    elif fault == "scratch":
        slots[-1] = 4
    elif fault == "high":
        slots[-1] = 5 + b
    elif fault == "tok":
        tokens[0, 1] = 97
    elif fault == "float":
        tokens = tokens.float()
    else:
        tokens = tokens[:, :0]
    refused(lambda: m.prefill(tokens, slots), words)
    assert same_cache(m, before)


def test_forward_refuses_token_ids_outside_the_vocabulary():
    m = model()
    refused(lambda: m(torch.tensor([[1, 97]])), "token ids")
    refused(lambda: m(torch.tensor([[-1, 2]])), "token ids")


# ------------------------------------------------------------------------------ model set-up

INT_FIELDS = ["vocab_size", "n_layer", "n_head", "d_model", "max_batch", "max_seq"]


@SETTINGS
@given(st.sampled_from(INT_FIELDS), bad_int(1, 2**31 - 1))
def test_config_refuses_bad_sizes(field, value):
    kw = dict(vocab_size=16, n_layer=1, n_head=2, d_model=8, max_batch=2, max_seq=8)
    kw[field] = value
    refused(lambda: GPTConfig(**kw), f"GPTConfig.{field}")


@SETTINGS
@given(st.integers(1, 64), st.integers(1, 64))
def test_config_refuses_heads_that_do_not_divide_the_width(d_model, n_head):
    if d_model % n_head:
        refused(lambda: GPTConfig(d_model=d_model, n_head=n_head), "d_model", "n_head")
    else:
        assert GPTConfig(d_model=d_model, n_head=n_head).head_dim == d_model // n_head


@SETTINGS
@given(st.one_of(st.text(max_size=8), st.none(), st.integers(), st.just(torch.float32)))
def test_config_and_preset_refuse_unknown_names(name):
    if name not in ("float32", "float16", "bfloat16"):
        refused(lambda: GPTConfig(dtype=name), "dtype")
    if name not in ("char", "small", "gpt2", "test"):
        refused(lambda: preset(name), "preset")


@SETTINGS
@given(st.one_of(st.sampled_from(["gpu", "cuda:x", "", "cpu:0:1", "tpu", "meta", "CPU "]),
                 st.integers(), st.none(), st.floats()),
       bad_int(0, 2**63 - 1))
def test_build_model_refuses_bad_device_and_seed(device, seed):
    cfg = preset("test")
    refused(lambda: build_model(cfg, device), "device")
    refused(lambda: build_model(cfg, "cpu", seed=seed), "seed")
    refused(lambda: build_model(cfg.to_dict()), "GPTConfig")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "m.safetensors"
    build_model(preset("test", max_batch=2), seed=0).save(path)
    return path


@SETTINGS
@given(st.sampled_from(INT_FIELDS), bad_int(1, 2**31 - 1))
def test_load_refuses_bad_overrides(checkpoint, field, value):
    refused(lambda: TinyGPT.load(checkpoint, **{field: value}), f"GPTConfig.{field}")


GEN_FAULTS = st.sampled_from(["n_bad", "prompt_str", "prompts_str", "token_float",
                              "token_bool", "token_high", "too_long", "too_many", "empty",
                              "step_fn"])


@SETTINGS
@given(GEN_FAULTS, bad_int(0))
def test_generate_refuses_bad_requests_and_writes_nothing(fault, n_bad):
    m = model()
    before = cache_of(m)
    prompts, n, kw = [[1, 2], [3]], 3, {}
    words = {"n_bad": "max_new_tokens", "prompt_str": "prompt 1", "prompts_str": "prompts",
             "token_float": "prompt 0 token 1", "token_bool": "prompt 0 token 1",
             "token_high": "outside", "too_long": "max_seq", "too_many": "max_batch",
             "empty": "empty", "step_fn": "step_fn"}[fault]
    if fault == "n_bad":
        n = n_bad
    elif fault == "prompt_str":
        prompts = [[1], "ab"]
    elif fault == "prompts_str":
        prompts = "hello"
    elif fault == "token_float":
        prompts = [[1, 2.5]]
    elif fault == "token_bool":
        prompts = [[1, True]]
    elif fault == "token_high":
        prompts = [[1, 97]]
    elif fault == "too_long":
        prompts, n = [[1] * 30], 4
    elif fault == "too_many":
        prompts = [[1]] * 5
    elif fault == "empty":
        prompts = [[1], []]
    else:
        kw["step_fn"] = "decode"
    refused(lambda: generate(m, prompts, n, **kw), words)
    assert same_cache(m, before)
    refused(lambda: generate_text(m, [1, 2], 3), "prompt")


# ------------------------------------------------------------------------------ dispatcher set-up

@SETTINGS
@given(bad_size_list(4))
def test_dispatcher_refuses_bad_capture_sizes(bad):
    m = model()
    refused(lambda: PaddingDispatcher(m, bad), "capture size")
    refused(lambda: build_padding_table(bad, 8), "capture size")
    refused(lambda: graphs.check_capture_sizes(bad), "capture size")


@SETTINGS
@given(st.sampled_from(["cudagraph_mode", "step", "pool", "order", "copy_outputs", "warmup",
                        "progress", "graphs", "model", "too_big"]), bad_int(0), NOT_BOOL)
def test_dispatcher_refuses_bad_options(option, bad_count, not_bool):
    m = model()
    kw: dict = {}
    args = [m, [1, 2]]
    if option in ("cudagraph_mode", "step", "pool", "order"):
        kw[option] = "fast"
    elif option in ("copy_outputs", "progress"):
        kw[option] = not_bool
    elif option == "warmup":
        kw[option] = bad_count
    elif option == "graphs":
        kw[option] = {1: "graph"}
    elif option == "model":
        args[0] = "model"
    else:
        args[1] = [1, 5]
    word = {"too_big": "max_batch"}.get(option, option)
    refused(lambda: PaddingDispatcher(*args, **kw), word)


@SETTINGS
@given(bad_int(1), bad_int(0))
def test_dispatcher_lookups_refuse_bad_sizes(bs, max_bs):
    d = PaddingDispatcher(model(), [1, 2])
    refused(lambda: d.padded_size(bs), "batch size")
    refused(lambda: build_padding_table([1, 2], max_bs), "max_bs")
    refused(lambda: d.step(torch.tensor([1]), torch.tensor([4]), torch.tensor([0]), check=1),
            "check")
    assert d.counters.steps == 0


# ------------------------------------------------------------------------------ graphs (CPU parts)

@SETTINGS
@given(bad_int(1, none_ok=True),
       st.sampled_from(["pool", "order", "warmup", "check_sync", "on_captured"]),
       bad_int(0), NOT_BOOL)
def test_capture_arguments_are_checked_before_the_gpu_is_needed(max_batch, option, count,
                                                                  not_bool):
    refused(lambda: graphs.check_capture_sizes([1, 2], max_batch), "max_batch")
    value = {"pool": "pooled", "order": "random", "warmup": count, "check_sync": not_bool,
             "on_captured": 3}[option]
    refused(lambda: graphs.capture_decode_graphs(model(), [1, 2], **{option: value}), option)
    if option == "warmup":
        refused(lambda: graphs.capture_callable(lambda t: t, torch.ones(1), warmup=count),
                "warmup")
    refused(lambda: graphs.capture_callable("f", torch.ones(1)), "fn")


@SETTINGS
@given(st.one_of(NOT_INT, st.integers()))
def test_graphset_replay_refuses_non_int_sizes(bs):
    gs = graphs.GraphSet({}, None, "shared", "largest_first")  # type: ignore[arg-type]
    with pytest.raises((TypeError, KeyError)) as info:
        gs.replay(bs)
    assert "bs" in str(info.value) or "batch size" in str(info.value)


# ------------------------------------------------------------------------------ sizes

@SETTINGS
@given(st.one_of(
    st.lists(bad_int(1), min_size=1, max_size=3),
    st.dictionaries(bad_int(1).filter(lambda x: x.__hash__ is not None), st.floats(0.1, 5),
                    min_size=1, max_size=2),
    st.dictionaries(st.integers(1, 9), st.one_of(NOT_NUMBER, st.floats(max_value=-0.01)),
                    min_size=1, max_size=2),
    st.one_of(st.text(max_size=3), st.integers(), st.none())))
def test_to_distribution_refuses_bad_sizes_and_weights(bad):
    snapshot = copy.deepcopy(bad)
    refused(lambda: sizes.to_distribution(bad), "batch size", "weight", "distribution",
            "empty", "must be")
    if isinstance(bad, (list, dict)):
        assert repr(bad) == repr(snapshot)          # the argument was not changed


@SETTINGS
@given(bad_size_list(), bad_int(1), bad_int(0, none_ok=True))
def test_padding_functions_refuse_bad_sizes(bad, bs, max_bs):
    dist = {1: 2, 3: 1}
    refused(lambda: sizes.padded_size(bs, [1, 2]), "batch size")
    refused(lambda: sizes.padded_size(1, bad), "capture size")
    refused(lambda: sizes.padding_table(bad), "capture size")
    refused(lambda: sizes.padding_table([1, 2], max_bs), "max_bs")
    refused(lambda: sizes.expected_padding(bad, dist), "capture size")
    refused(lambda: sizes.expected_step_cost(bad, dist, float), "capture size")
    refused(lambda: sizes.expected_step_cost([1, 3], dist, "fast"), "step_time")
    refused(lambda: sizes.set_memory(bad, lambda size: 1 + size), "capture size")
    assert dist == {1: 2, 3: 1}


@SETTINGS
@given(bad_int(1), st.one_of(NOT_NUMBER, st.floats(max_value=0), st.floats(min_value=1.01)),
       bad_int(1, none_ok=True), st.one_of(NOT_NUMBER, st.floats(max_value=-0.01)))
def test_size_list_helpers_refuse_bad_arguments(max_size, target, max_sizes, byte_count):
    dist = {1: 2, 3: 1}
    refused(lambda: sizes.vllm_default_sizes(max_size), "max_capture_size")
    refused(lambda: sizes.sglang_default_sizes(max_size), "max_bs")
    refused(lambda: sizes.coverage_sizes(dist, target), "target")
    refused(lambda: sizes.coverage_sizes(dist, 0.9, max_sizes=max_sizes), "max_sizes")
    mem = {1: 11.0, 2: 12.0}
    refused(lambda: sizes.set_memory([1, 2], mem, residual_per_graph=byte_count),
            "residual_per_graph")
    refused(lambda: sizes.set_memory([1, 2], mem, pool="pooled"), "pool")
    refused(lambda: sizes.set_memory([1, 2], "mem"), "memory_per_size")


@SETTINGS
@given(st.sampled_from(["k", "max_size", "memory_budget", "candidates", "pool", "residual",
                        "eager_cost", "cost", "candidates_k"]),
       bad_int(1, none_ok=True), st.one_of(NOT_NUMBER.filter(lambda x: x is not None),
                                           st.floats(max_value=-0.01)), bad_size_list(12))
def test_optimal_sizes_refuses_bad_arguments(option, count, amount, size_list):
    dist = {1: 5, 4: 2, 9: 1}
    mem = {1: 10.0, 4: 12.0, 9: 20.0}
    kw: dict = dict(memory_per_size=mem)
    k = 2
    word = option
    if option == "k":
        k, word = count, "k (the most sizes"
    elif option == "max_size":
        kw["max_size"] = count
    elif option == "memory_budget":
        kw["memory_budget"] = amount
    elif option == "candidates":
        kw = dict(candidates="1,2" if size_list is None else size_list)  # None: the default
    elif option == "pool":
        kw["pool"] = "pooled"
    elif option == "residual":
        kw["residual_per_graph"], word = amount, "residual_per_graph"
    elif option == "eager_cost":
        kw["eager_cost"] = 3.0
    elif option == "cost":
        kw["cost"] = "time"
    snapshot = (dict(dist), dict(mem))
    if option == "candidates_k":
        refused(lambda: sizes.pareto_front(dist, size_list, memory_per_size=mem), "candidates_k")
    else:
        if option == "candidates":
            word = "candidates"
        refused(lambda: sizes.optimal_sizes(dist, k, **kw), word)
    assert (dist, mem) == snapshot


def test_load_trace_refuses_bad_cells(tmp_path):
    for cell in ("2.5", "True", "-3", "", "x"):
        path = tmp_path / "t.csv"
        path.write_text(f"step,batch_size\n0,4\n1,{cell}\n", encoding="utf-8")
        refused(lambda path=path: sizes.load_trace(path), "batch_size")


# ------------------------------------------------------------------------------ timing

@SETTINGS
@given(st.sampled_from(["warmup", "repeats", "inner", "fn"]), st.data())
def test_timers_refuse_bad_counts_and_never_call_fn(option, data):
    calls = []
    fn = lambda: calls.append(1)  # noqa: E731
    minimum = 0 if option == "warmup" else 1
    kw = {}
    if option == "fn":
        fn = data.draw(st.one_of(st.none(), st.integers(), st.text(max_size=3)))
    else:
        kw[option] = data.draw(bad_int(minimum))
    refused(lambda: timing.time_host(fn, **kw), option)
    refused(lambda: timing.time_cuda(fn, **kw), option)
    assert calls == []


@SETTINGS
@given(st.one_of(st.sampled_from(["gpu", "", "tpu", "meta", "cuda:x"]), st.integers(),
                 st.none()),
       bad_int(1), st.one_of(st.lists(bad_int(1), min_size=1, max_size=2),
                             st.lists(st.integers(2**31, 2**40), min_size=1, max_size=1),
                             st.integers(), st.text(max_size=2)))
def test_launch_probes_refuse_bad_devices_and_counts(device, count, numels):
    if device is not None:
        refused(lambda: timing.launch_overhead(device), "device")
        refused(lambda: timing.launch_bound_sweep([1], device), "device")
        refused(lambda: timing.time_any(lambda: None, device), "device")
    refused(lambda: timing.launch_overhead("cpu", n_kernels=count), "n_kernels")
    refused(lambda: timing.launch_overhead("cpu", repeats=count), "repeats")
    refused(lambda: timing.launch_bound_sweep([1], "cpu", n_kernels=count), "n_kernels")
    refused(lambda: timing.launch_bound_sweep(numels, "cpu"), "numels")


@SETTINGS
@given(st.one_of(st.lists(NOT_NUMBER, min_size=1, max_size=3), st.just([]), st.text(max_size=2),
                 st.integers(), st.none()),
       bad_int(1))
def test_stats_refuse_bad_samples_and_counts(samples, count):
    refused(lambda: timing.Stats.from_samples(samples), "samples", "repeats")
    refused(lambda: timing.Stats.from_samples([1.0, 2.0]).per(count), "count")
