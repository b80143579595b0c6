"""Decoding until a stop token in one CUDA graph (a WHILE node): the semantics on CPU (the cut
at the stop token, the padding, the steps run), the loop's own init and body driven from the
host against the plain decode, the argument errors, the support probe, the record's assembly
with stand-ins; on a GPU (marker ``gpu``) the graph against the plain decode, token for token."""

from __future__ import annotations

import json
import types

import pytest
import torch

from labkit.measure import while_decode as wd
from labkit.model import build_model, preset
from labkit.roofline import while_loop as wl
from labkit.roofline.multistep import multistep_decode, single_steps
from labkit.roofline.while_loop import PAD, WhileDecode, WhileDecodeGraph, WhileResult, \
    capture_decode_while, decode_until_stop, route_error, stop_after, while_support
from labkit.timing import Stats

ROWS = [[5, 7, 9, 7], [3, 3, 3, 3]]


def _model(device: str = "cpu", **kw):
    return build_model(preset("test", max_batch=4, **kw), device, seed=0)


def _batch(model, seed: int = 0, b: int = 3, length: int = 5):
    """``b`` random prompts of ``length`` tokens prefilled into slots 0..b-1: (first new
    tokens, their positions, the slots)."""
    dev = model.device
    prompts = torch.randint(0, model.cfg.vocab_size, (b, length),
                            generator=torch.Generator().manual_seed(seed)).to(dev)
    slots = torch.arange(b, device=dev)
    first = model.prefill(prompts, slots).argmax(-1)
    return first, torch.full((b,), length, device=dev), slots


# ------------------------------------------------------------------------------ semantics

def test_stop_after_cuts_each_row_after_its_stop_token():
    t = torch.tensor(ROWS)
    r = stop_after(t, [7, 4])  # row 1 never stops: the loop runs all 4 steps
    assert r.tokens.tolist() == [[5, 7, PAD, PAD], [3, 3, 3, 3]] and r.steps == 4
    r = stop_after(t, [7, 3])  # both stop: the loop ends after the later one (step 2)
    assert r.tokens.tolist() == [[5, 7, PAD, PAD], [3, PAD, PAD, PAD]] and r.steps == 2
    r = stop_after(t, [9, 3])
    assert r.tokens.tolist() == [[5, 7, 9, PAD], [3, PAD, PAD, PAD]] and r.steps == 3
    assert r.generated() == [[5, 7, 9], [3]]
    assert stop_after(t, 9) == WhileResult(torch.tensor([[5, 7, 9, PAD], [3, 3, 3, 3]]), 4)


def test_decode_until_stop_pinned_token_ids():
    """Rows stop at steps 2, 4 and 5: the loop runs 5 steps, every row padded after its stop."""
    model = _model()
    t, p, s = _batch(model)
    assert t.tolist() == [44, 70, 0]
    fixed = single_steps(model, t, p, s, 8)
    assert fixed.tolist() == [[28, 48, 61, 25, 27, 76, 5, 50], [59, 6, 2, 1, 27, 76, 0, 50],
                              [15, 90, 24, 53, 80, 32, 5, 50]]
    r = decode_until_stop(model, t, p, s, 8, [48, 1, 80])
    assert r.steps == 5
    assert r.tokens.tolist() == [[28, 48, PAD, PAD, PAD, PAD, PAD, PAD],
                                 [59, 6, 2, 1, PAD, PAD, PAD, PAD],
                                 [15, 90, 24, 53, 80, PAD, PAD, PAD]]
    assert r == stop_after(fixed, [48, 1, 80])
    never = decode_until_stop(model, t, p, s, 8, 96)  # 96 is produced by no row
    assert never.steps == 8 and torch.equal(never.tokens, fixed)


@pytest.mark.parametrize("stops", [[48, 1, 80], [28, 59, 15], 96, [96, 1, 96]])
def test_the_loops_init_and_body_driven_from_the_host_equal_the_plain_decode(stops):
    """What the WHILE node runs on the device (init, then the body while ``go``), here driven
    from the host: the same tokens and steps as the plain decode, early stop or not."""
    model = _model()
    t, p, s = _batch(model)
    plain = decode_until_stop(model, t, p, s, 8, stops)
    loop = WhileDecode(model, 3, 8, stops)
    assert loop.run(t, p, s) == plain
    assert bool(loop.go) is False and int(loop.step) == plain.steps
    assert torch.equal(loop.pos.cpu(), p + plain.steps)


def test_the_loop_runs_again_from_new_inputs_and_stop_tokens():
    model = _model()
    loop = WhileDecode(model, 3, 6, 96)
    first = _batch(model, seed=0)
    assert loop.run(*first) == decode_until_stop(model, *first, 6, 96)
    second = _batch(model, seed=1, length=7)
    fixed = multistep_decode(model, *second, 6)
    stop = fixed[:, 1].tolist()
    got = loop.run(*second, stop_token=stop)
    assert got == decode_until_stop(model, *second, 6, stop) == stop_after(fixed, stop)
    assert got.steps <= 2


def test_a_while_graph_object_drives_any_launcher_and_refuses_after_release():
    """:class:`WhileDecodeGraph` over an eager launcher (the CPU stand-in the record test uses):
    replay loads, launches once and reads back; a released graph refuses."""
    model = _model()
    t, p, s = _batch(model)
    loop = WhileDecode(model, 3, 8, [48, 1, 80])
    released = []
    g = WhileDecodeGraph(loop, "eager", loop.run_eager, [], lambda: released.append(True))
    assert g.replay(t, p, s) == decode_until_stop(model, t, p, s, 8, [48, 1, 80])
    assert g.out.tolist()[0][:3] == [28, 48, PAD]
    g.release()
    assert released == [True]
    with pytest.raises(RuntimeError, match="released"):
        g.launch()


# ------------------------------------------------------------------------------ the edge

def test_bad_arguments_are_refused_with_the_fix():
    model = _model()
    t, p, s = _batch(model)
    with pytest.raises(TypeError, match="model must be a TinyGPT"):
        decode_until_stop("gpt", t, p, s, 4, 1)
    with pytest.raises(ValueError, match="max_steps must be >= 1"):
        decode_until_stop(model, t, p, s, 0, 1)
    with pytest.raises(TypeError, match="max_steps must be an int"):
        decode_until_stop(model, t, p, s, True, 1)
    with pytest.raises(ValueError, match=r"stop_token must be <= 96.*\[0, 97\)"):
        decode_until_stop(model, t, p, s, 4, 97)
    with pytest.raises(ValueError, match="2 entries for 3 rows"):
        decode_until_stop(model, t, p, s, 4, [1, 2])
    with pytest.raises(TypeError, match="stop_token must be an int"):
        decode_until_stop(model, t, p, s, 4, "eos")
    with pytest.raises(ValueError, match="write past the KV cache"):
        decode_until_stop(model, t, p + 24, s, 4, 1)  # positions 29 + 4 > max_seq 32
    with pytest.raises(ValueError, match="batch_size must be <= 4"):
        WhileDecode(model, 5, 4, 1)
    with pytest.raises(ValueError, match="built for 2 rows, got 3"):
        WhileDecode(model, 2, 4, 1).load(t, p, s)
    with pytest.raises(ValueError, match="tokens must be an integer tensor"):
        stop_after(torch.tensor([1, 2]), 1)


def test_capture_refuses_bad_arguments_before_asking_for_a_gpu():
    model = _model()
    with pytest.raises(ValueError, match="route must be one of"):
        capture_decode_while(model, 4, 1, route="cuda")
    with pytest.raises(ValueError, match="warmup must be >= 1"):
        capture_decode_while(model, 4, 1, warmup=0)
    with pytest.raises(ValueError, match="batch_size must be <= 4"):
        capture_decode_while(model, 4, 1, batch_size=9)
    with pytest.raises(RuntimeError, match="needs the model on a CUDA GPU"):
        capture_decode_while(model, 4, 1)


def test_while_support_never_raises_and_says_what_is_missing(monkeypatch):
    support = while_support()
    assert support["torch"] == torch.__version__
    if not torch.cuda.is_available():
        assert support["route"] is None and support["routes"] == []
        assert any("no CUDA GPU" in m for m in support["missing"])
        msg = route_error(support)
        assert torch.__version__ in msg and "cudaGraphConditionalHandleCreate" in msg

    def broken() -> bool:
        raise RuntimeError("driver gone")

    monkeypatch.setattr(torch.cuda, "is_available", broken)
    out = while_support()
    assert out["route"] is None
    assert any("driver gone" in m for m in out["missing"])


def test_while_support_picks_the_cuda_python_route_when_torch_lacks_the_binding(monkeypatch):
    """With a GPU, CUDA 13, cuda-python and NVRTC (faked) but no WHILE binding in torch, the
    route is cuda-python; with the binding (faked) torch's own comes first."""
    nvrtc = types.SimpleNamespace(nvrtcVersion=lambda: (0, 13, 0))
    drv = types.SimpleNamespace(cuDriverGetVersion=lambda: (0, 13000))
    monkeypatch.setattr(wl, "_cuda_python", lambda: (None, drv, nvrtc, "13.0.3"))
    monkeypatch.setattr(wl, "_has_keep_graph", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    fake = type("FakeGraph", (), {})
    monkeypatch.setattr(torch._C, "_CUDAGraph", fake)
    out = while_support()
    assert out["routes"] == ["cuda-python"] and out["route"] == "cuda-python"
    assert (out["driver"], out["nvrtc"], out["cuda_python"]) == ("13.0", "13.0", "13.0.3")
    assert any("PyTorch PR #184989" in m for m in out["missing"])
    for name in wl.TORCH_WHILE_METHODS:
        monkeypatch.setattr(fake, name, lambda *a: None, raising=False)
    assert while_support()["routes"] == ["torch", "cuda-python"]
    old = types.SimpleNamespace(cuDriverGetVersion=lambda: (0, 12020))
    monkeypatch.setattr(wl, "_cuda_python", lambda: (None, old, nvrtc, "13.0.3"))
    out = while_support()
    assert out["routes"] == [] and any("CUDA >= 12.4" in m for m in out["missing"])


def test_nvrtc_compiles_the_condition_kernel():
    """The condition kernel compiles (NVRTC needs no GPU): a cubin, and PTX that calls
    ``cudaGraphSetConditional``."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from labkit.roofline import while_node

    _, _, nvrtc, _ = while_node.cuda_python()
    try:
        while_node.nvrtc_version(nvrtc)
    except RuntimeError as exc:
        pytest.skip(f"NVRTC cannot be loaded here: {exc}")
    assert while_node._compile_retrying(nvrtc, "sm_90", "CUBIN")[:4] == b"\x7fELF"
    ptx = while_node._compile_retrying(nvrtc, "compute_90", "PTX").decode(errors="replace")
    assert ".entry labkit_set_while" in ptx and "cudaGraphSetConditional" in ptx


# ----------------------------------------------------------------------------- the record

def test_place_stops():
    t = torch.tensor(ROWS)
    assert wd.place_stops(t, "early", 10) == [7, 3]    # each row's token at step k // 2 - 1
    assert wd.place_stops(t, "never", 10) == [0, 0]    # the smallest id no row produced
    assert wd.place_stops(torch.tensor([[0, 1], [2, 4]]), "never", 5) == [3, 3]
    with pytest.raises(ValueError, match="every one of the 4 token ids"):
        wd.place_stops(torch.tensor([[0, 1], [2, 3]]), "never", 4)
    with pytest.raises(ValueError, match="where must be one of"):
        wd.place_stops(t, "late", 10)


class _EagerSteps:
    """``capture_multistep``'s stand-in on CPU: the same buffers, the steps run eagerly."""

    def __init__(self, model, b, n_steps, pool=None):
        self.model, self.n_steps = model, n_steps
        self.tokens = torch.zeros(b, dtype=torch.long)
        self.positions = torch.zeros(b, dtype=torch.long)
        self.slots = torch.full((b,), model.cfg.scratch_slot, dtype=torch.long)
        self.out = torch.zeros((b, n_steps), dtype=torch.long)

    def load(self, t, p, s):
        self.tokens.copy_(t)
        self.positions.copy_(p)
        self.slots.copy_(s)

    def replay(self):
        return multistep_decode(self.model, self.tokens, self.positions, self.slots,
                                self.n_steps, out=self.out)


def test_host_loop_equals_the_plain_decode_on_cpu():
    model = _model()
    t, p, s = _batch(model)
    got = wd.host_loop(_EagerSteps(model, 3, 1), t, p, s, 8, [48, 1, 80])
    assert got == decode_until_stop(model, t, p, s, 8, [48, 1, 80])


SUPPORT = {"torch": "2.11.0+cu130", "cuda_runtime": "13.0", "gpu_available": True,
           "driver": "13.0", "torch_while_node": False, "torch_keep_graph": True,
           "cuda_python": "13.0.3", "nvrtc": "13.0", "routes": ["cuda-python"],
           "route": "cuda-python", "missing": ["torch 2.11.0+cu130 has no WHILE-node binding"]}


def _stand_ins(monkeypatch, module, support=SUPPORT):
    """The record module's GPU parts on CPU: no CUDA check, models built on CPU, graphs that
    run eagerly (the WHILE graph: its init and body driven from the host), and timings of
    [100 + i, 110 + i] µs for the i-th way of a round."""
    monkeypatch.setattr(module, "_need_cuda", lambda what: None)
    monkeypatch.setattr(module, "_free", lambda: None)
    monkeypatch.setattr(module, "while_support", lambda: dict(support))
    monkeypatch.setattr(module, "make_model", lambda name, max_batch, dtype, **kw: build_model(
        preset(name, max_batch=max_batch, dtype=dtype, **kw), seed=1))
    monkeypatch.setattr(module, "capture_multistep", _EagerSteps)

    def eager_while(model, k, stop, *, batch_size, pool=None):
        loop = WhileDecode(model, batch_size, k, stop)
        return WhileDecodeGraph(loop, "eager", loop.run_eager, [], lambda: None)

    monkeypatch.setattr(module, "capture_decode_while", eager_while)
    monkeypatch.setattr(module, "time_cuda_interleaved", lambda fns, **kw: {
        name: (fn(), Stats.from_samples([100.0 + i, 110.0 + i]))[1]
        for i, (name, fn) in enumerate(fns.items())})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "cpu (stand-ins)")
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)


def test_measure_while_decode_assembles_its_record_on_cpu(monkeypatch):
    _stand_ins(monkeypatch, wd)
    data = wd.measure_while_decode("test", batch_sizes=[2, 1], max_steps=[6, 4],
                                   dtype="float32", max_seq=32, repeats=2, warmup=1)
    assert data["timed"] is True and data["verdict"] is None and data["route"] == "cuda-python"
    assert data["checks"] == dict.fromkeys([
        "plain_decode_equals_fixed_k_cut_at_stop", "host_loop_equals_plain_decode",
        "multistep_cut_at_stop_equals_plain_decode", "while_node_equals_plain_decode",
        "early_steps_as_placed", "while_node_equals_plain_decode_after_timing",
        "never_steps_as_placed"], True)
    assert data["batch_sizes"] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert data["max_steps"] == [4, 4, 6, 6] * 2
    assert data["stop"] == ["early", "never"] * 4
    for k, where, steps in zip(data["max_steps"], data["stop"], data["steps_run"]):
        assert steps <= k // 2 if where == "early" else steps == k
    assert [len(data["times"][m]) for m in wd.METHODS] == [8, 8, 8]
    assert [data["times"][m][0]["median"] for m in wd.METHODS] == [105.0, 106.0, 107.0]
    assert data["versions"]["cuda_python"] == "13.0.3"
    json.dumps(data)  # a plain, JSON-able dict


def test_without_a_route_the_record_is_the_verdict(monkeypatch):
    none = {**SUPPORT, "routes": [], "route": None, "cuda_python": None,
            "missing": ["cuda-python is not importable"]}
    _stand_ins(monkeypatch, wd, none)
    monkeypatch.setattr(wd, "make_model", lambda *a, **kw: pytest.fail("nothing is built"))
    data = wd.measure_while_decode("test", max_seq=32, max_steps=[4])
    assert data["timed"] is False and data["route"] is None
    assert "2.11.0+cu130" in data["verdict"] and "cuda-python is not importable" in data["verdict"]
    assert data["times"] == {m: [] for m in wd.METHODS} and data["steps_run"] == []
    json.dumps(data)


def test_measure_while_decode_refuses_bad_arguments_first():
    with pytest.raises(ValueError, match="stops must list some of"):
        wd.measure_while_decode("test", stops=["late"])
    with pytest.raises(ValueError, match=r"max_steps\[0\] must be <= 16"):
        wd.measure_while_decode("test", max_seq=32, max_steps=[20])
    with pytest.raises(ValueError, match="batch_sizes must not be empty"):
        wd.measure_while_decode("test", batch_sizes=[])


def test_measure_while_decode_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        wd.measure_while_decode("test", max_seq=32, max_steps=[4])


# ---------------------------------------------------------------------------------- GPU

def _routes() -> list[str]:
    return while_support()["routes"] if torch.cuda.is_available() else []


@pytest.mark.gpu
def test_a_route_to_the_while_node_exists_on_the_gpu():
    support = while_support()
    assert support["route"] in wl.ROUTES, route_error(support)


@pytest.mark.gpu
@pytest.mark.parametrize("route", wl.ROUTES)
def test_while_graph_equals_the_plain_decode_token_for_token(route):
    if route not in _routes():
        pytest.skip(f"route {route!r} is not available here: {while_support()['missing']}")
    model = _model("cuda")
    t, p, s = _batch(model)
    fixed = single_steps(model, t, p, s, 8).cpu()
    stops = [fixed[r, r + 1].item() for r in range(3)]  # rows stop at steps <= 2, 3, 4
    g = capture_decode_while(model, 8, stops, batch_size=3, route=route)
    assert g.route == route
    plain = decode_until_stop(model, t, p, s, 8, stops)
    got = g.replay(t, p, s)
    assert got == plain and got.steps == plain.steps <= 4
    never = wd.place_stops(fixed, "never", model.cfg.vocab_size)
    got = g.replay(t, p, s, never)  # the same graph, a stop that never comes: all 8 steps
    assert got.steps == 8 and torch.equal(got.tokens, fixed)
    second = _batch(model, seed=1, length=7)  # new prompts in the same slots
    plain2 = decode_until_stop(model, *second, 8, stops)
    assert g.replay(*second, stops) == plain2
    assert g.replay(*second, stops) == plain2  # replayed again: the same
    g.release()
    with pytest.raises(RuntimeError, match="released"):
        g.launch()


@pytest.mark.gpu
def test_while_graph_of_the_small_preset_in_bfloat16_equals_the_plain_decode():
    if not _routes():
        pytest.skip(f"no route here: {while_support()['missing']}")
    model = build_model(preset("small", max_batch=8, dtype="bfloat16"), "cuda", seed=0)
    t, p, s = _batch(model, b=8, length=12)
    fixed = single_steps(model, t, p, s, 32).cpu()
    stop = wd.place_stops(fixed, "early", model.cfg.vocab_size)
    g = capture_decode_while(model, 32, stop, batch_size=8)
    got = g.replay(t, p, s)
    assert got == decode_until_stop(model, t, p, s, 32, stop) and got.steps <= 16


@pytest.mark.gpu
def test_measure_while_decode_on_the_gpu():
    data = wd.measure_while_decode("test", batch_sizes=(1, 2), max_steps=(4, 8),
                                   dtype="float32", max_seq=32, repeats=3, warmup=1)
    assert data["timed"] is True, data["verdict"]
    assert data["checks"] and all(data["checks"].values()), data["checks"]
    assert [len(data["times"][m]) for m in wd.METHODS] == [8, 8, 8]
    json.dumps(data)
