"""Breakable capture (labkit.breakable): the marker, break points, the segment recorder, the
breakable decode step and the runner with ``breaks_at``; the breakable record's assembly on
CPU with stand-ins; on a GPU (marker ``gpu``) the graphs against eager, one pool, new inputs."""

import gc
import json
from functools import partial

import pytest
import torch

from labkit import breakable as bk
from labkit.breakable import (
    BreakableGraph, break_graph, breakable_step, capture_breakable, capture_breakable_graphs,
    capturing_breakable, check_breaks, spread_breaks,
)
from labkit.graphs import CaptureSyncError
from labkit.measure import breakable as mb
from labkit.model import build_model, generate, preset
from labkit.piecewise import piecewise_step
from labkit.runner import ModelRunner
from labkit.timing import Stats

PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9], [4], [10, 11], [3, 3]]
cpu = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU stand-in path")


def _model(layout="slot", n_layer=4, device="cpu", **kw):
    return build_model(preset("test", max_batch=8, n_layer=n_layer, kv_layout=layout, **kw),
                       device, seed=0)


# ---------------------------------------------------------------------- the marker

def test_the_marker_runs_the_function_outside_a_capture():
    calls = []

    @break_graph
    def plus_one(x):
        calls.append(capturing_breakable())
        return x + 1

    assert plus_one.__name__ == "plus_one"
    assert torch.equal(plus_one(torch.tensor([1, 2])), torch.tensor([2, 3]))
    assert calls == [False] and not capturing_breakable()


def test_break_graph_refuses_what_is_not_a_function():
    with pytest.raises(TypeError, match="break_graph marks a function; got int"):
        break_graph(3)


class _FakeGraph:
    """A segment that logs what the recorder asks of it (a CUDA graph's calls, on CPU)."""

    def __init__(self, log):
        self.log, self.n = log, sum(1 for e in log if e[0] == "begin")

    def capture_begin(self, pool, capture_error_mode):
        self.log.append(("begin", self.n, pool, capture_error_mode))

    def capture_end(self):
        self.log.append(("end", self.n))

    def replay(self):
        self.log.append(("replay", self.n))

    def pool(self):
        return (7, 7)


def test_the_recorder_splits_at_each_mark_and_replays_segment_break_segment():
    log, state = [], {"v": 1.0}

    @break_graph
    def read_state(x):
        log.append(("eager", float(state["v"])))
        return torch.full_like(x, state["v"])

    @break_graph
    def nothing():
        log.append(("bare",))

    def fn(x):
        y = read_state(x * 2)
        nothing()
        return y + 1

    segs = bk._Segments((7, 7), new_graph=partial(_FakeGraph, log))
    with bk._recording(segs):
        segs.begin()
        out = fn(torch.zeros(2))
        segs.end()
    # each segment captured, then replayed once before its eager function reads real values
    assert [e[0] for e in log] == ["begin", "end", "replay", "eager", "begin", "end", "replay",
                                   "bare", "begin", "end"]
    assert all(e[2:] == ((7, 7), "global") for e in log if e[0] == "begin")
    g = BreakableGraph(segs.segments, segs.breaks, (), out, 0.0, 0.0)
    assert [b.name for b in g.breaks] == ["read_state", "nothing"] and g.pools() == {(7, 7)}
    static = g.breaks[0].output
    log.clear()
    state["v"] = 5.0
    g.replay()
    assert log == [("replay", 0), ("eager", 5.0), ("replay", 1), ("bare",), ("replay", 2)]
    assert g.breaks[0].output is static and torch.equal(static, torch.full((2,), 5.0))


def test_a_marked_function_inside_a_marked_function_does_not_split_again():
    log = []
    inner = break_graph(lambda x: x + 1)
    outer = break_graph(lambda x: inner(x) * 2)
    segs = bk._Segments(None, new_graph=partial(_FakeGraph, log))
    with bk._recording(segs):
        segs.begin()
        out = outer(torch.ones(1))
        segs.end()
    assert len(segs.segments) == 2 and len(segs.breaks) == 1
    assert torch.equal(out, torch.tensor([4.0]))


def test_a_marked_function_must_return_tensors():
    segs = bk._Segments(None, new_graph=partial(_FakeGraph, []))
    with bk._recording(segs), pytest.raises(TypeError, match=r"returned str.*None, a tensor"):
        segs.begin()
        break_graph(lambda: "text")()
    segs.abort()
    assert segs.segments == [] and segs.breaks == [] and not segs.open


# ---------------------------------------------------------------------- break points

def test_check_breaks_sorts_and_refuses_bad_layers():
    assert check_breaks([3, 0, 1], 4) == (0, 1, 3) and check_breaks([], 4) == ()
    with pytest.raises(ValueError, match=r"breaks_at\[1\] must be <= 3.*layer indices 0..3"):
        check_breaks([0, 4], 4)
    with pytest.raises(ValueError, match=r"layer\(s\) \[1\] more than once"):
        check_breaks([1, 1], 4)
    with pytest.raises(TypeError, match="breaks_at must be a list of ints"):
        check_breaks("01", 4)
    with pytest.raises(TypeError, match=r"breaks_at\[0\] must be an int"):
        check_breaks([True], 4)


def test_spread_breaks_spreads_evenly():
    assert spread_breaks(12, 0) == ()
    assert spread_breaks(12, 1) == (0,)
    assert spread_breaks(12, 4) == (0, 3, 6, 9)
    assert spread_breaks(12, 8) == (0, 1, 3, 4, 6, 7, 9, 10)
    assert spread_breaks(4, 4) == (0, 1, 2, 3)
    with pytest.raises(ValueError, match="count must be <= 4"):
        spread_breaks(4, 5)


# ---------------------------------------------------------------------- the step, eager

@pytest.mark.parametrize("layout", ["slot", "paged"])
@pytest.mark.parametrize("breaks", [(), (2,), (0, 1, 2, 3)])
def test_the_eager_breakable_step_equals_decode_step(layout, breaks):
    m = _model(layout, block_size=8)
    for i in range(3):
        m.cache.reserve(i, 12)
        m.prefill(torch.tensor([[1 + i, 2, 3]]), torch.tensor([i]))
    t, p, s = torch.tensor([4, 5, 6]), torch.tensor([3, 3, 3]), torch.tensor([2, 0, 1])
    k0 = m.k_cache.clone()
    want = m.decode_step(t, p, s)
    m.k_cache.copy_(k0)
    got = breakable_step(m, breaks)(t, p, s)
    assert torch.equal(got, want)
    assert got.argmax(-1).tolist() == want.argmax(-1).tolist()


def test_breakable_step_and_graphs_check_their_arguments():
    m = _model()
    with pytest.raises(TypeError, match="model must be a TinyGPT"):
        breakable_step("model", [0])
    with pytest.raises(ValueError, match=r"breaks_at\[0\] must be <= 3"):
        capture_breakable_graphs(m, [1, 2], [9])  # before any CUDA check
    with pytest.raises(TypeError, match="inputs must be a tuple of CUDA tensors"):
        capture_breakable(lambda x: x, torch.zeros(1))


@cpu
def test_capture_needs_a_gpu():
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        capture_breakable(lambda x: x, [torch.zeros(1)])
    with pytest.raises(RuntimeError, match="breakable_step eagerly"):
        capture_breakable_graphs(_model(), [1, 2], [0])


# ---------------------------------------------------------------------- the runner

@pytest.mark.parametrize("breaks", [[1], [0, 1, 2, 3]])
def test_a_runner_with_breaks_gives_eager_tokens(breaks):
    m = _model()
    want = generate(m, PROMPTS, 8)
    r = ModelRunner(m, [1, 2, 4, 8], cudagraph_mode="PIECEWISE", decode_only=True,
                    breaks_at=breaks, progress=False)
    assert r.breaks_at == tuple(breaks) and r.pieces is None
    assert generate(m, PROMPTS, 8, step_fn=r.decode) == want
    assert r.counters.mode_steps == {"PIECEWISE": 7}  # five rows padded to 8, seven steps
    r.release()


def test_a_runner_refuses_breaks_it_cannot_use():
    m = _model()
    with pytest.raises(ValueError, match="decode_only=True"):
        ModelRunner(m, [1, 2], cudagraph_mode="PIECEWISE", breaks_at=[0])
    with pytest.raises(ValueError, match="PIECEWISE sizes"):
        ModelRunner(m, [1, 2], cudagraph_mode="FULL", decode_only=True, breaks_at=[0])
    with pytest.raises(ValueError, match=r"breaks_at\[0\] must be <= 3"):
        ModelRunner(m, [1, 2], cudagraph_mode="PIECEWISE", decode_only=True, breaks_at=[4])


# ---------------------------------------------------------------------- the record, pure parts

def test_default_break_counts_and_variants():
    assert mb.default_break_counts(12) == [0, 1, 2, 4, 8, 12]
    assert mb.default_break_counts(4) == [0, 1, 2, 4]
    assert mb.default_break_counts(1) == [0, 1]
    assert mb.variant_names([0, 2]) == ["full", "breaks_0", "breaks_2", "piecewise"]
    assert mb.variant_shape("breaks_2", 12) == {"breaks_at": [0, 6], "segments": 3, "eager": 2}
    assert mb.variant_shape("piecewise", 3) == {"breaks_at": [0, 1, 2], "segments": 4,
                                                "eager": 3}
    assert mb.variant_shape("full", 3) == {"breaks_at": [], "segments": 1, "eager": 0}


def test_the_synthetic_heap_holds_tracked_objects():
    heap = mb.synthetic_heap(1000)
    assert len(heap) == 1000 and heap[999] == [999] and gc.is_tracked(heap[0])
    assert len(mb.gc_collections()) == 3


@pytest.mark.skipif(not mb.force_gc_available(), reason="torch without force_cudagraph_gc")
def test_torch_collects_sets_and_restores_the_flag():
    before = torch.compiler.config.force_cudagraph_gc
    with mb.torch_collects(not before):
        assert torch.compiler.config.force_cudagraph_gc is (not before)
    assert torch.compiler.config.force_cudagraph_gc is before


@pytest.mark.parametrize("kw,err,match", [
    ({"break_counts": [5]}, ValueError, r"break_counts\[0\] must be <= 2"),
    ({"break_counts": []}, ValueError, "break_counts is empty"),
    ({"heap_objects": [-1]}, ValueError, r"heap_objects\[0\] must be >= 0"),
    ({"capture_repeats": 0}, ValueError, "capture_repeats must be >= 1"),
    ({"gc_break_count": 3}, ValueError, "gc_break_count must be <= 2"),
    ({"gc_sizes": []}, ValueError, "gc_sizes must not be empty"),
    ({"preset_name": "nope"}, ValueError, "unknown preset"),
])
def test_measure_breakable_checks_its_arguments_first(kw, err, match):
    with pytest.raises(err, match=match):
        mb.measure_breakable(**{"preset_name": "test", **kw})


class _Eager:
    """A variant's stand-in: its step run eagerly on the static batch."""

    def __init__(self, batch, step):
        self.batch, self.step = batch, step

    def replay(self, rows):
        return self.step(*self.batch.view(rows))

    def release(self):
        pass


@cpu
def test_measure_breakable_assembles_its_record_on_cpu(monkeypatch):
    """The record on CPU: capture and CUDA-event timing replaced by stand-ins (each variant's
    step run eagerly; timings [100 + i, 110 + i] us for the i-th variant of a round), the token
    checks and the collector's bookkeeping run for real."""
    captured = []

    def fake_capture(model, name, sizes, batch, *, warmup, freeze_gc=True):
        captured.append((name, tuple(sizes), freeze_gc))
        at = mb.variant_shape(name, model.cfg.n_layer)["breaks_at"]
        step = (model.decode if name == "full" else partial(piecewise_step, model)
                if name == "piecewise" else breakable_step(model, at))
        return _Eager(batch, step), 0.25

    monkeypatch.setattr(mb, "_need_cuda", lambda what: None)
    monkeypatch.setattr(mb, "_free", lambda: None)
    monkeypatch.setattr(mb, "make_model", lambda name, max_batch, dtype, **kw: build_model(
        preset(name, max_batch=max_batch, dtype=dtype, **kw), seed=1))
    monkeypatch.setattr(mb, "capture_variant", fake_capture)
    monkeypatch.setattr(mb, "time_cuda_interleaved", lambda fns, **kw: {
        name: (fn(), Stats.from_samples([100.0 + i, 110.0 + i]))[1]
        for i, (name, fn) in enumerate(fns.items())})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "cpu (stand-ins)")
    data = mb.measure_breakable("test", batch_sizes=[2, 1], dtype="float32", context=8,
                                max_seq=32, repeats=2, inner=1, new_tokens=2,
                                capture_repeats=2, gc_sizes=[4, 1], heap_objects=[0, 1000])
    names = ["full", "breaks_0", "breaks_1", "breaks_2", "piecewise"]
    assert data["variants"] == names and data["timed"] == names
    assert data["checks"]["graph_tokens_equal_eager"] is True and len(data["checks"]) == 6
    assert data["segments_per_step"] == {"full": 1, "breaks_0": 1, "breaks_1": 2,
                                         "breaks_2": 3, "piecewise": 3}
    assert data["breaks_at"]["breaks_1"] == [0]
    assert [t["median"] for t in data["times"]["breaks_1"]] == [107.0, 107.0]  # [102, 112]
    assert data["capture_s"]["piecewise"] == {"median": 0.25, "p10": 0.25, "p90": 0.25,
                                              "mean": 0.25, "n": 2, "unit": "s"}
    assert data["build_s"]["full"]["n"] == 2 and data["build_s"]["full"]["unit"] == "s"
    configs = 4 if mb.force_gc_available() else 2
    rows = data["gc"]["rows"]
    assert len(rows) == 2 * configs and data["gc"]["variant"] == "breaks_2"
    assert [r["heap_objects"] for r in rows] == [0] * configs + [1000] * configs
    assert {(r["torch_collects"], r["freeze_gc"]) for r in rows} >= {(False, True),
                                                                      (False, False)}
    assert all(len(r["collections"]) == 2 and all(len(c) == 3 for c in r["collections"])
               for r in rows)
    # one capture per variant to check, two rounds of capture time, then the GC comparison
    assert [c[0] for c in captured[:10]] == names * 2
    gc_calls = captured[15:]
    assert len(gc_calls) == 2 * 2 * configs
    assert all(c[:2] == ("breaks_2", (1, 4)) for c in gc_calls)
    assert [c[2] for c in gc_calls[:2]] == [True, False]
    json.dumps(data)


@cpu
def test_measure_breakable_needs_a_gpu():
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        mb.measure_breakable("test", batch_sizes=[1])


# ---------------------------------------------------------------------- GPU

def _inputs(bs, seed, vocab=97, max_pos=30):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, vocab, (bs,), generator=g).cuda(),
            torch.randint(0, max_pos, (bs,), generator=g).cuda(),
            torch.randperm(bs, generator=g).cuda())


def _graph_step(bg):
    def step(t, p, s):
        b = bg.copy_inputs(t, p, s)
        return bg.replay(b)[:b].clone()
    return step


@pytest.mark.gpu
@pytest.mark.parametrize("breaks", [(), (1,), (0, 1, 2, 3)])
def test_gpu_breakable_graph_logits_equal_eager(breaks):
    m = _model(device="cuda")
    bg = capture_breakable_graphs(m, [1, 4, 8], breaks, progress=False)
    try:
        assert bg.graphs_per_step() == len(breaks) + 1
        assert bg.sizes == [1, 4, 8]
        for g in bg.graphs.values():
            assert len(g.segments) == len(breaks) + 1 and len(g.breaks) == len(breaks)
            assert all(b.name == "attention" for b in g.breaks)
        for bs in (1, 4, 8):
            for seed in (0, 1):  # new inputs copied into the same static batch
                t, p, s = _inputs(bs, seed * 10 + bs)
                want = m.decode_step(t, p, s).clone()
                bg.copy_inputs(t, p, s)
                assert torch.equal(bg.replay(bs)[:bs], want), (bs, seed)
    finally:
        bg.release()


@pytest.mark.gpu
def test_gpu_segments_of_every_size_share_one_pool():
    m = _model(device="cuda")
    handle = torch.cuda.graph_pool_handle()
    bg = capture_breakable_graphs(m, [1, 2, 8], [0, 2], pool=handle, progress=False)
    try:
        assert bg.pools() == {tuple(handle): [1, 2, 8]}
        assert all(g.pool == tuple(handle) for g in bg.graphs.values())
    finally:
        bg.release()


@pytest.mark.gpu
@pytest.mark.parametrize("freeze_gc", [True, False])
def test_gpu_breakable_graph_tokens_equal_eager_with_new_inputs(freeze_gc):
    m = _model(device="cuda")
    bg = capture_breakable_graphs(m, [5], [0, 3], progress=False, freeze_gc=freeze_gc)
    try:
        assert generate(m, PROMPTS, 10, step_fn=_graph_step(bg)) == generate(m, PROMPTS, 10)
    finally:
        bg.release()


@pytest.mark.gpu
def test_gpu_a_marked_function_may_do_what_capture_forbids():
    """A host read (``.item()``) cannot be captured; between segments it runs every replay."""
    x = torch.ones(4, device="cuda")

    @break_graph
    def add_host_sum(y):
        return y + y.sum().item()

    g = capture_breakable(lambda x: add_host_sum(x * 2) * 3, [x], check_sync=False)
    assert len(g.segments) == 2 and len(g.breaks) == 1
    x.copy_(torch.arange(4.0, device="cuda"))
    want = (torch.arange(4.0) * 2 + 12.0) * 3
    assert torch.equal(g.replay().cpu(), want)


@pytest.mark.gpu
def test_gpu_a_sync_inside_a_segment_is_a_capture_sync_error():
    x = torch.ones(4, device="cuda")
    with pytest.raises(CaptureSyncError):
        capture_breakable(lambda x: x * float(x.sum().item()), [x])


@pytest.mark.gpu
@pytest.mark.parametrize("mode,extra", [("PIECEWISE", {}),
                                        ("FULL_AND_PIECEWISE", {"max_num_seqs": 2})])
def test_gpu_runner_with_breaks_equals_eager(mode, extra):
    m = _model(device="cuda")
    r = ModelRunner(m, [1, 2, 4, 8], cudagraph_mode=mode, decode_only=True, breaks_at=[0, 2],
                    progress=False, **extra)
    try:
        assert r.breakable is not None and r.pieces is None
        if r.graphs is not None:  # FULL graphs and breakable segments in one pool
            assert set(r.breakable.pools()) == set(r.graphs.pools())
        for rows in (PROMPTS, PROMPTS[:2]):
            assert generate(m, rows, 10, step_fn=r.decode) == generate(m, rows, 10)
        assert r.counters.mode_steps.get("PIECEWISE", 0) > 0
    finally:
        r.release()


@pytest.mark.gpu
def test_gpu_measure_breakable_small_run():
    data = mb.measure_breakable("test", batch_sizes=[1, 2], dtype="float32", context=8,
                                max_seq=32, repeats=2, inner=1, new_tokens=2,
                                capture_repeats=1, gc_sizes=[1, 2], heap_objects=[0, 1000])
    assert data["checks"]["graph_tokens_equal_eager"] is True, data["checks"]
    assert data["timed"] == data["variants"]
    json.dumps(data)
