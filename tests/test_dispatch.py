"""The padding dispatcher on CPU (eager bucketing): table, counters, tokens, scratch slot."""

import pytest
import torch

from labkit.runner import PaddingDispatcher, build_padding_table
from labkit.model import build_model, generate, preset

SIZES = [1, 2, 4, 8]


@pytest.fixture(scope="module")
def model():
    return build_model(preset("test", max_batch=16), seed=0)


def test_padding_table():
    t = build_padding_table(SIZES, 10)
    assert t[1:] == [1, 2, 4, 4, 8, 8, 8, 8, 0, 0]
    assert build_padding_table([3], 4)[1:] == [3, 3, 3, 0]
    with pytest.raises(ValueError, match="positive"):
        build_padding_table([0, 2], 4)


def test_padded_size_and_describe(model):
    d = PaddingDispatcher(model, SIZES)
    assert d.capture is False
    assert [d.padded_size(b) for b in (1, 3, 5, 8, 9, 16)] == [1, 4, 8, 8, None, None]
    rows = d.describe()
    assert rows[4] == {"batch": 5, "padded_to": 8, "padded_rows": 3}
    with pytest.raises(ValueError, match=">= 1"):
        d.padded_size(0)


@pytest.mark.parametrize("bs", range(1, max(SIZES) + 6))
def test_dispatcher_tokens_equal_unpadded_eager(model, bs):
    g = torch.Generator().manual_seed(bs)
    prompts = [torch.randint(0, 97, (int(torch.randint(1, 8, (1,), generator=g)),),
                             generator=g).tolist() for _ in range(bs)]
    d = PaddingDispatcher(model, SIZES)
    assert generate(model, prompts, 6, step_fn=d.step) == generate(model, prompts, 6)
    c = d.counters
    assert c.steps == 5 and c.real_rows == 5 * bs
    if bs > max(SIZES):
        assert c.eager_fallbacks == 5 and c.graph_hits == {} and c.padded_rows == 0
    else:
        p = d.padded_size(bs)
        assert c.graph_hits == {p: 5} and c.padded_rows == 5 * (p - bs)
        assert c.hit_rate == 1.0


def test_padded_rows_touch_only_the_scratch_slot(model):
    model.reset_cache()
    d = PaddingDispatcher(model, SIZES)
    # a live request in slot 7 that is not in this batch, and a batch of 3 padded to 4
    model.prefill(torch.tensor([[1, 2, 3, 4]]), torch.tensor([7]))
    live = (model.k_cache[:, 7].clone(), model.v_cache[:, 7].clone())
    d.step(torch.tensor([1, 2, 3, 4, 5, 6, 7]), torch.tensor([1] * 7), torch.arange(7))  # 7 -> 8
    d.step(torch.tensor([1, 2, 3]), torch.tensor([2, 2, 2]), torch.arange(3))  # 3 -> 4
    assert torch.equal(model.k_cache[:, 7], live[0]) and torch.equal(model.v_cache[:, 7], live[1])
    # rows 3..6 of the slot buffer were reset to the scratch slot after the smaller batch
    assert d.batch.slots[3:7].tolist() == [model.cfg.scratch_slot] * 4
    assert model.k_cache[:, model.cfg.scratch_slot].abs().sum() > 0


def test_outputs_are_copies_unless_asked(model):
    d = PaddingDispatcher(model, SIZES)
    a = d.step(torch.tensor([1, 2]), torch.tensor([0, 0]), torch.tensor([0, 1]))
    keep = a.clone()
    d.step(torch.tensor([5, 6]), torch.tensor([1, 1]), torch.tensor([0, 1]))
    assert torch.equal(a, keep)
    v = PaddingDispatcher(model, SIZES, copy_outputs=False)
    out = v.step(torch.tensor([1, 2]), torch.tensor([0, 0]), torch.tensor([0, 1]))
    assert out.shape == (2, 97)


def test_bad_input_errors_name_the_fix(model):
    d = PaddingDispatcher(model, SIZES)
    with pytest.raises(ValueError, match="max_batch"):
        d.step(torch.zeros(17, dtype=torch.long), torch.zeros(17, dtype=torch.long),
               torch.arange(17))
    with pytest.raises(ValueError, match="past the KV cache"):
        d.step(torch.tensor([1]), torch.tensor([32]), torch.tensor([0]))
    with pytest.raises(ValueError, match="scratch slot"):
        d.step(torch.tensor([1]), torch.tensor([0]), torch.tensor([16]))
    with pytest.raises(TypeError, match="integer"):
        d.step(torch.tensor([1.0]), torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="empty"):
        d.step(*(torch.zeros(0, dtype=torch.long),) * 3)
    with pytest.raises(ValueError, match="max_batch"):
        PaddingDispatcher(model, [1, 32])
    with pytest.raises(TypeError, match="mode"):  # the older spelling of capture= is gone
        PaddingDispatcher(model, SIZES, mode="graph")
    assert d.counters.steps == 0  # rejected steps are not counted


# ------------------------------------------------------------- bad batches change nothing

def _state(model, d):
    return (model.k_cache.clone(), model.v_cache.clone(), d.counters.to_dict(),
            d.batch.tokens.clone(), d.batch.positions.clone(), d.batch.slots.clone(), d.batch._live)


def _same(a, b) -> bool:
    return all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
               for x, y in zip(a, b))


@pytest.mark.parametrize("tokens, positions, slots, words", [
    ([1, 2], [3, 3], [4, 4], "more than once"),
    ([1, 2, 3], [3, 3, 3], [0, 5, 0], "more than once"),
    ([1, 2], [3, 3], [0, 16], "scratch slot"),
    ([1, 2, 3], [3, 3, 3], [0, 16, 1], "scratch slot"),
    ([1], [-2], [0], "position -2 is negative"),
    ([1], [32], [0], "past the KV cache"),
    ([97], [0], [0], "token ids"),
    ([1] * 9, [0] * 9, [0, 1, 2, 3, 4, 5, 6, 7, 7], "more than once"),   # eager fallback size
])
def test_bad_batch_raises_and_changes_nothing(model, tokens, positions, slots, words):
    model.reset_cache()
    d = PaddingDispatcher(model, SIZES)
    d.step(torch.tensor([5, 6, 7, 8, 9]), torch.tensor([1] * 5), torch.tensor([9, 8, 7, 6, 5]))
    before = _state(model, d)
    with pytest.raises(ValueError, match=words):
        d.step(torch.tensor(tokens), torch.tensor(positions), torch.tensor(slots))
    with pytest.raises(ValueError, match=words):
        d.load_inputs(torch.tensor(tokens), torch.tensor(positions), torch.tensor(slots))
    assert _same(_state(model, d), before)


def test_shared_dispatcher_is_correct_from_two_threads(model):
    """Two threads step one dispatcher with different batches: each gets its own logits."""
    import threading

    d = PaddingDispatcher(model, SIZES)
    batches = [(torch.tensor([3, 4]), torch.tensor([5, 6]), torch.tensor([0, 1])),
               (torch.tensor([7, 8, 9]), torch.tensor([2, 9, 4]), torch.tensor([2, 3, 4]))]
    model.reset_cache()
    expected = [d.step(*b) for b in batches]  # one thread; steps are idempotent (same k, v)
    d.reset_counters()
    steps, wrong, errors = 60, [0, 0], []
    barrier = threading.Barrier(2)

    def worker(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(steps):
                out = d.step(*batches[i])
                if out.shape != expected[i].shape or not torch.equal(out, expected[i]):
                    wrong[i] += 1
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and wrong == [0, 0]
    assert d.counters.steps == 2 * steps
    assert d.counters.graph_hits == {2: steps, 4: steps}


def test_copy_outputs_false_belongs_to_one_thread(model):
    import threading

    d = PaddingDispatcher(model, SIZES, copy_outputs=False)
    d.step(torch.tensor([1]), torch.tensor([0]), torch.tensor([0]))
    caught = []

    def other() -> None:
        try:
            d.step(torch.tensor([1]), torch.tensor([0]), torch.tensor([0]))
        except RuntimeError as exc:
            caught.append(str(exc))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(caught) == 1 and "copy_outputs=True" in caught[0]
    assert d.counters.steps == 1


@pytest.mark.parametrize("sizes, error, words", [
    ([1, 2.5], TypeError, r"capture sizes\[1\]"), ([1, "3"], TypeError, "capture sizes"),
    ([True, 2], TypeError, "bool"), ([1, 2, 2], ValueError, "more than once"),
    ([0, 2], ValueError, ">= 1"), ([], ValueError, "empty"), ("1,2", TypeError, "list"),
    ([1, 2**40], ValueError, "max_batch"),
])
def test_capture_sizes_are_refused_not_coerced(model, sizes, error, words):
    with pytest.raises(error, match=words):
        PaddingDispatcher(model, sizes)
    if words != "max_batch":
        with pytest.raises(error, match=words):
            build_padding_table(sizes, 16)


@pytest.mark.parametrize("tokens_on_host", [False, True])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_host_metadata_mixed_with_device_metadata_never_leaves_live_slots_in_padding(
        device, tokens_on_host):
    """Host (CPU) positions/slots go through the ring of staging buffers, device ones are
    copied directly; alternating the two (more steps than the ring has buffers, batch sizes
    going up and down) must leave every padded row at the scratch slot and put the batch's
    tokens in the first rows."""
    from labkit.model import build_model, preset

    m = build_model(preset("test", max_batch=16), device, seed=0)
    d = PaddingDispatcher(m, [4, 8, 16], progress=False)
    scratch = m.cfg.scratch_slot
    for b, host in ((7, True), (2, False), (3, True), (12, False), (1, True), (5, True),
                    (16, False), (2, True), (9, False), (4, True)):
        pos = torch.arange(b) + 1
        slots = torch.arange(b)
        tok = torch.arange(b, dtype=torch.long) + 3
        where = "cpu" if host else device
        d.step(tok.to("cpu" if tokens_on_host and host else device), pos.to(where),
               slots.to(where))
        p = d.padded_size(b)
        assert d.batch.tokens[:b].tolist() == tok.tolist()
        assert d.batch.positions[:b].tolist() == pos.tolist()
        assert d.batch.slots[:b].tolist() == list(range(b))
        assert d.batch.slots[b:].tolist() == [scratch] * (16 - b), (b, host)
        if host:  # the device path leaves old (valid) positions in padded rows
            assert d.batch.positions[b:p].tolist() == [0] * (p - b)
    d.release()


def test_host_metadata_gives_the_same_tokens_as_plain_decode():
    from labkit.model import build_model, generate, preset

    m = build_model(preset("test", max_batch=8), seed=0)
    d = PaddingDispatcher(m, [1, 2, 4, 8], capture=False)
    prompts = [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10], [11]]

    def host_step(t, p, s):  # tokens stay where they are, metadata comes from the host
        return d.step(t, p.cpu(), s.cpu())

    assert generate(m, prompts, 10, step_fn=host_step) == generate(m, prompts, 10)


# ------------------------------------------------------------- the split: decide, stage, run

def test_the_decision_is_a_pure_tuple_and_the_dispatcher_holds_no_tensors(model):
    from labkit.runner import Decision
    from labkit.mixed import TokenDispatcher

    d = PaddingDispatcher(model, SIZES)
    dec = d.decide(3)
    assert isinstance(dec, Decision) and dec == ("FULL", 4) and tuple(dec) == ("FULL", 4)
    mode, padded = d.decide(9)
    assert (mode, padded) == ("NONE", 9)
    pure = TokenDispatcher([1, 2, 4, 8], 2, "FULL_AND_PIECEWISE")  # the one decision
    assert [(m, k.num_tokens) for m, k in (pure.dispatch(b, True) for b in (1, 3, 9))] == \
        [("FULL", 1), ("PIECEWISE", 4), ("NONE", 9)]
    assert not any(isinstance(v, torch.Tensor) for v in vars(pure).values())
    split = PaddingDispatcher(model, [1, 2, 4, 8], cudagraph_mode="FULL_AND_PIECEWISE",
                              max_num_seqs=2)
    assert [split.decide(b) for b in (1, 3, 9)] == [("FULL", 1), ("PIECEWISE", 4), ("NONE", 9)]
    assert (split.full_sizes, split.piecewise_sizes) == ([1, 2], [4, 8])
    assert d.runner("NONE").static is False


def test_the_capture_flag_is_checked(model):
    d = PaddingDispatcher(model, SIZES, capture=False)
    assert d.capture is False and d.graphs is None
    with pytest.raises(RuntimeError, match="capture=False"):
        PaddingDispatcher(model, SIZES, capture=True)


def test_check_none_checks_host_metadata_and_false_skips_values(model):
    d = PaddingDispatcher(model, SIZES)
    bad = (torch.tensor([1]), torch.tensor([0]), torch.tensor([16]))  # the scratch slot
    with pytest.raises(ValueError, match="scratch slot"):
        d.step(*bad, check=None)
    out = d.step(*bad, check=False)  # the caller vouches: nothing read, the scratch row runs
    assert out.shape == (1, 97) and d.counters.steps == 1
    with pytest.raises(TypeError, match="check must be True, False or None"):
        d.step(*bad, check="yes")


@pytest.mark.parametrize("seed", range(3))
def test_staged_loads_leave_every_row_past_the_batch_at_the_pad_row(model, seed):
    """The staging ring (what host metadata takes on a GPU), forced on the CPU: after each
    load the first rows hold the batch and every other row the pad row."""
    from labkit.batch import STAGING_RING, StaticBatch

    g = torch.Generator().manual_seed(seed)
    for stage in (True, False):
        batch = StaticBatch(model, stage=stage)
        for _ in range(3 * STAGING_RING):
            b = int(torch.randint(1, 17, (1,), generator=g))
            t, p = torch.randint(0, 97, (b,), generator=g), torch.randint(0, 32, (b,), generator=g)
            s = torch.randperm(16, generator=g)[:b]
            batch.load(t, p, s)
            assert torch.equal(batch.inputs[:, :b], torch.stack([t, p, s]))
            assert torch.equal(batch.inputs[:, b:], batch.pad[:, b:]), (stage, b)
        assert batch.pad[:, 0].tolist() == [0, 0, model.cfg.scratch_slot]


def test_dispatcher_overhead_measurement_logic_on_cpu():
    """The dispatcher_overhead measurement, on CPU with a host timer: every way of running a
    step is timed for every batch size, gives the same logits, and the record parses."""
    from labkit.measure import records
    from labkit.measure.bench import measure_dispatcher_overhead
    from labkit.timing import time_host

    calls: dict[str, int] = {}

    def timer(fns, **kw):
        for name in fns:
            calls[name] = calls.get(name, 0) + 1
        return {name: time_host(fn, warmup=1, repeats=kw["repeats"]) for name, fn in fns.items()}

    data = measure_dispatcher_overhead(("test",), (1, 4), "float32", repeats=2, inner=2,
                                       device="cpu", timer=timer)
    rec = records.parse("dispatcher_overhead", data)
    (run,) = rec.runs
    assert calls == dict.fromkeys(records.OVERHEAD_METHODS, 2)
    assert run.checks == {"dispatcher_tokens_equal_eager": True, "same_logits_every_method": True}
    assert run.preset == "test" and run.batch_sizes == [1, 4]
    assert all(t is not None for t in run.median_us("step_host") + run.median_us("replay"))
    assert (rec.repeats, rec.inner) == (2, 2)


def _fake_capture(fn, inputs, pool, stream, warmup, check_sync, label=None):
    """A stand-in for ``capture_unchecked`` on the CPU: the "graph" re-runs ``fn`` on the same
    inputs and writes the results into the outputs of the first call, as a replay writes its
    static outputs."""
    from labkit.graphs import CapturedGraph

    def into(static, new):
        if isinstance(static, torch.Tensor):
            static.copy_(new)
        else:
            for a, b in zip(static, new):
                into(a, b)

    output = fn(*inputs)

    class Replay:
        def replay(self):
            into(output, fn(*inputs))

    return CapturedGraph(Replay(), tuple(inputs), output, (0, 1), 0.0, 0.0, label, fn=fn)


@pytest.mark.parametrize("mode, full_max", [("FULL", None), ("PIECEWISE", None),
                                            ("FULL_AND_PIECEWISE", 2)])
@pytest.mark.parametrize("copy", [True, False])
def test_graph_runners_are_wired_to_the_static_batch(monkeypatch, mode, full_max, copy):
    """The capture=True paths on the CPU, with capture replaced by a recorder: the graphs read
    the static batch and write its logits, tokens equal eager tokens with device and host
    metadata, and a graph step's output is the static logits only with copy_outputs=False."""
    import contextlib

    import labkit.graphs as G
    import labkit.piecewise as P

    for mod in (G, P):
        monkeypatch.setattr(mod, "capture_unchecked", _fake_capture)
    monkeypatch.setattr(G, "gc_frozen", contextlib.nullcontext)  # piecewise captures through it
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: None)
    import labkit.runner as R

    monkeypatch.setattr(R, "check_capture_flag", lambda model, capture: True)
    m = build_model(preset("test", max_batch=8), seed=0)
    prompts = [[1, 2, 3], [5, 6, 7, 8, 9], [4], [10, 11], [3, 3], [9]]
    want = generate(m, prompts, 8)
    d = PaddingDispatcher(m, [1, 2, 4, 8], cudagraph_mode=mode, max_num_seqs=full_max,
                          copy_outputs=copy)
    assert (d.graphs is not None) == (mode != "PIECEWISE")
    assert (d.pieces is not None) == ("PIECEWISE" in mode)
    assert generate(m, prompts, 8, step_fn=d.step) == want
    assert generate(m, prompts, 8, step_fn=lambda t, p, s: d.step(t, p.cpu(), s.cpu())) == want
    out = d.step(torch.tensor([1, 2, 3]), torch.tensor([0, 0, 0]), torch.arange(3))
    assert (out.data_ptr() == d.batch.logits.data_ptr()) is (not copy)


def test_lazy_capture_is_checked_and_runs_eagerly_without_a_gpu():
    m = build_model(preset("test", max_batch=8), seed=0)
    want = generate(m, [[1, 2, 3], [4, 5]], 6)
    d = PaddingDispatcher(m, [1, 2, 4, 8], capture=False, lazy=True)
    assert generate(m, [[1, 2, 3], [4, 5]], 6, step_fn=d.step) == want
    assert d.lazy_capture_s == {}  # nothing is captured without a GPU
    with pytest.raises(ValueError, match="lazy=True captures FULL graphs on first use"):
        PaddingDispatcher(m, [1, 2], capture=False, lazy=True, cudagraph_mode="PIECEWISE")
    with pytest.raises(TypeError, match="lazy"):
        PaddingDispatcher(m, [1, 2], capture=False, lazy="yes")


@pytest.mark.gpu
def test_lazy_capture_captures_each_size_once_on_first_use_on_gpu():
    from labkit.measure.bench import tokens_match

    m = build_model(preset("small", max_batch=16, max_seq=64, vocab_size=4096), "cuda")
    d = PaddingDispatcher(m, [1, 2, 4, 8, 16], progress=False, lazy=True)
    assert d.graphs is not None and d.graphs.graphs == {}
    for bs in (3, 1, 3, 13):
        assert tokens_match(m, d.step, bs, new_tokens=6, seed=bs), bs
    assert sorted(d.lazy_capture_s) == [1, 4, 16] == d.graphs.sizes
    assert all(v > 0 for v in d.lazy_capture_s.values())
    assert len({g.pool for g in d.graphs.graphs.values()}) == 1  # one shared pool
    d.release()


@pytest.mark.parametrize("capture", [False, True])
def test_one_decode_step_is_read_end_to_end_in_at_most_six_files(monkeypatch, capture):
    """From the notebook's call (``dispatcher.step``) to the model's kernels, a decode step runs
    code in at most six labkit files (the graph path through a capture recorder on the CPU)."""
    import contextlib
    import sys

    import labkit.graphs as G
    import labkit.runner as R

    if capture:
        monkeypatch.setattr(G, "capture_unchecked", _fake_capture)
        monkeypatch.setattr(G, "gc_frozen", contextlib.nullcontext)
        monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
        monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: None)
        monkeypatch.setattr(R, "check_capture_flag", lambda model, capture: True)
    m = build_model(preset("test", max_batch=8), seed=0)
    d = PaddingDispatcher(m, [1, 2, 4, 8])
    assert (d.graphs is not None) is capture
    files: set[str] = set()

    def trace(frame, event, arg):
        name = frame.f_code.co_filename.replace("\\", "/")
        if "/labkit/" in name:
            files.add(name.rsplit("/labkit/", 1)[1])

    sys.settrace(trace)
    try:
        d.step(torch.tensor([1, 2, 3]), torch.tensor([0, 0, 0]), torch.arange(3))
    finally:
        sys.settrace(None)
    want = {"runner.py", "step_checks.py", "batch.py", "model.py", "kvcache.py"}
    assert files == (want | {"graphs.py"} if capture else want), sorted(files)
