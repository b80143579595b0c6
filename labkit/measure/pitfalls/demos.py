"""The six pitfalls, each broken on purpose on a CUDA device, recorded, fixed and checked."""

from __future__ import annotations

import gc
from typing import Any

import torch
from labkit.runner import PaddingDispatcher
from labkit.graphs import capture_callable
from labkit.measure.pitfalls.common import (_cleanup, _device_ok, _err_text, _require_cuda,
                                            _result, labkit_capture_error, raw_capture_error)
from labkit.model import build_model, preset


def pitfall_host_sync(device: str | torch.device = "cuda") -> dict:
    """``.item()`` inside the captured function: the capture is refused; fix: stay on device."""

    dev = _require_cuda(device)
    x = torch.arange(1.0, 9.0, device=dev)

    def bad(t: torch.Tensor) -> torch.Tensor:
        m = t.max().item()          # reads a value back to the CPU: a host sync
        return t / m

    def good(t: torch.Tensor) -> torch.Tensor:
        return t / t.max()          # the maximum stays a device tensor

    error, err_class = labkit_capture_error(bad, x)
    raw = raw_capture_error(bad, x)
    device_ok = _device_ok(dev)

    cg = capture_callable(good, x)
    new = torch.tensor([2.0, 4.0, 6.0, 8.0, 1.0, 3.0, 5.0, 7.0], device=dev)
    x.copy_(new)
    out = cg.replay()
    fixed_ok = bool(torch.allclose(out, new / new.max()))
    result = _result(
        "host_sync",
        "t.max().item() inside the captured function: .item() copies a value to the CPU and "
        "waits for the GPU, which a stream being captured cannot do",
        error,
        "keep the value on the device: t / t.max() instead of t / t.max().item(); decide "
        "anything host-side before capture",
        fixed_ok, labkit_error_class=err_class, raw_torch_error=raw,
        device_usable_after_failed_capture=device_ok, fixed_output=out.tolist())
    del cg
    _cleanup()
    return result


def pitfall_dynamic_shape(device: str | torch.device = "cuda") -> dict:
    """Boolean-mask indexing (``t[t > 0]``) has a data-dependent shape; fix: ``torch.where``."""

    dev = _require_cuda(device)
    x = torch.tensor([1.0, -2.0, 3.0, -4.0, 5.0, -6.0, 7.0, -8.0], device=dev)

    def bad(t: torch.Tensor) -> torch.Tensor:
        return t[t > 0].sum()       # how many elements survive depends on the data

    def good(t: torch.Tensor) -> torch.Tensor:
        return torch.where(t > 0, t, torch.zeros_like(t)).sum()   # shape fixed at 8

    error, err_class = labkit_capture_error(bad, x)
    nonzero_raw = raw_capture_error(lambda t: torch.nonzero(t > 0), x)
    device_ok = _device_ok(dev)

    cg = capture_callable(good, x)
    checks = []
    for vals in ([1.0] * 8, [-1.0] * 8, [0.5, -1, 2, -3, 4, -5, 6, -7]):
        new = torch.tensor(vals, device=dev)
        x.copy_(new)
        checks.append(bool(torch.allclose(cg.replay(), new[new > 0].sum())))
    result = _result(
        "dynamic_shape",
        "t[t > 0].sum() inside the captured function: boolean-mask indexing (like nonzero, "
        "unique, masked_select) makes an output whose size depends on the data, so PyTorch "
        "must read the count back to the CPU, and a graph cannot change shape at replay",
        error,
        "compute on the full, fixed shape and mask: torch.where(t > 0, t, 0).sum(); pad "
        "batches to a captured size instead of slicing by data",
        all(checks), labkit_error_class=err_class, raw_torch_error_nonzero=nonzero_raw,
        device_usable_after_failed_capture=device_ok, fixed_checks=checks)
    del cg
    _cleanup()
    return result


def pitfall_output_overwritten(device: str | torch.device = "cuda") -> dict:
    """A held graph output changes at the next replay; in a shared pool, another graph's
    replay can overwrite it too. Fix: ``.clone()`` (or consume it) before the next replay."""

    dev = _require_cuda(device)
    # (a) one graph: the output tensor you hold is the graph's static buffer
    x = torch.zeros(4, device=dev)
    cg = capture_callable(lambda t: t * 2, x)
    x.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0], device=dev))
    held = cg.replay()                       # "the result of step 1"
    held_before = held.tolist()
    x.copy_(torch.tensor([10.0, 20.0, 30.0, 40.0], device=dev))
    second = cg.replay()                     # step 2
    held_after = held.tolist()
    same_buffer = held.data_ptr() == second.data_ptr()
    # fix: clone before the next replay
    x.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0], device=dev))
    kept = cg.replay().clone()
    x.copy_(torch.tensor([10.0, 20.0, 30.0, 40.0], device=dev))
    cg.replay()
    clone_ok = kept.tolist() == held_before
    del cg, held, second, kept
    _cleanup()

    shared = _shared_pool_overwrite(dev)
    disp = _dispatcher_copy_outputs(dev)
    changed = held_after != held_before
    error = (f"observed wrong value: held output of step 1 was {held_before}, after the next "
             f"replay the same tensor reads {held_after}")
    if shared.get("reused_address"):
        error += (f"; shared pool: graph B's output reads {shared['b_output_after_replay_a']} "
                  f"after graph A replayed (it was {shared['b_output_after_replay_b']})")
    result = _result(
        "output_overwritten",
        "keeping a reference to a graph's output across replays: replay() returns the same "
        "static buffer every time, so the next replay (of this graph, or of another graph "
        "whose memory in a shared pool overlaps it) overwrites what you hold",
        error if changed else "no change observed (unexpected)",
        "consume or copy the output before the next replay: out = graph.replay().clone(); "
        "PaddingDispatcher(copy_outputs=True) does this for you",
        bool(changed and clone_ok and disp.get("copy_outputs_true_kept", False)),
        held_before=held_before, held_after=held_after, same_buffer=same_buffer,
        clone_kept_value=clone_ok, shared_pool=shared, dispatcher=disp)
    _cleanup()
    return result


def _shared_pool_overwrite(dev: torch.device) -> dict:
    """A's output dropped after capture (vLLM keeps weak references): B, captured next into
    the pool, reuses that block, so A's replay writes into B's output."""

    pool = torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream()          # blocks are reused only on the stream they came from
    n = 1024
    xa = torch.full((n,), 1.0, device=dev)
    xb = torch.full((n,), 5.0, device=dev)
    ga = capture_callable(lambda t: t * 2, xa, pool=pool, stream=stream, label="A")
    addr_a = ga.output.data_ptr()
    ga.output = None                      # drop A's output: its block goes back to the pool
    gc.collect()
    gb = capture_callable(lambda t: t + 100, xb, pool=pool, stream=stream, label="B")
    out_b = gb.output
    addr_b = out_b.data_ptr()
    gb.replay()
    b_after_b = float(out_b[0])
    ga.replay()                            # writes 2.0 at addr_a == addr_b
    b_after_a = float(out_b[0])
    info = {"pool_id": list(pool) if isinstance(pool, tuple) else str(pool),
            "a_output_ptr": addr_a, "b_output_ptr": addr_b,
            "reused_address": addr_a == addr_b,
            "b_output_after_replay_b": b_after_b, "b_output_after_replay_a": b_after_a,
            "b_overwritten_by_a": b_after_a != b_after_b}
    # fix: consume B's output before replaying A
    gb.replay()
    kept = out_b.clone()
    ga.replay()
    info["clone_kept_value"] = float(kept[0]) == b_after_b
    del ga, gb, out_b, kept
    _cleanup()
    return info


def _dispatcher_copy_outputs(dev: torch.device) -> dict:
    """PaddingDispatcher on a tiny model: copy_outputs=False hands out the static logits."""

    model = build_model(preset("test", max_batch=4), device=dev, seed=0)
    out: dict[str, Any] = {}
    for copy in (False, True):
        disp = PaddingDispatcher(model, (1, 2, 4), capture=True, copy_outputs=copy,
                                 progress=False)
        pos = torch.zeros(2, dtype=torch.long, device=dev)
        slots = torch.arange(2, device=dev)
        first = disp.step(torch.tensor([3, 5], device=dev), pos, slots)
        first_snapshot = first.clone()
        disp.step(torch.tensor([7, 11], device=dev), pos, slots)
        kept = bool(torch.equal(first, first_snapshot))
        out[f"copy_outputs_{str(copy).lower()}_kept"] = kept
        disp.release()
        del disp, first, first_snapshot
    del model
    _cleanup()
    return out


def pitfall_input_rebound(device: str | torch.device = "cuda") -> dict:
    """``static_x = new`` rebinds a Python name; the graph still reads the old tensor."""

    dev = _require_cuda(device)
    static_x = torch.zeros(4, device=dev)
    cg = capture_callable(lambda t: t * 2, static_x)
    static_x.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0], device=dev))
    step1 = cg.replay().clone()

    new = torch.tensor([10.0, 20.0, 30.0, 40.0], device=dev)
    captured_ptr = static_x.data_ptr()
    static_x = new                        # BUG: rebinding, the graph never sees this tensor
    stale = cg.replay().clone()
    expected = (new * 2).tolist()
    rebound_ptr = static_x.data_ptr()

    cg.inputs[0].copy_(new)               # FIX: copy into the captured input
    fixed = cg.replay().clone()
    result = _result(
        "input_rebound",
        "static_x = new_batch after capture: Python now names a new tensor at another "
        "address, but the graph reads the address it captured, so replay recomputes the old "
        "input",
        f"observed wrong value: expected {expected}, replay returned {stale.tolist()} "
        f"(= the previous step's result {step1.tolist()})",
        "copy into the captured tensor: static_x.copy_(new_batch) (the dispatcher and vLLM copy "
        "ids/positions/slots into persistent buffers every step)",
        fixed.tolist() == expected,
        expected=expected, stale=stale.tolist(), previous_step=step1.tolist(),
        fixed=fixed.tolist(), captured_input_ptr=captured_ptr, rebound_ptr=rebound_ptr)
    del cg
    _cleanup()
    return result


def pitfall_rng(device: str | torch.device = "cuda", replays: int = 3) -> dict:
    """Device RNG inside a graph is redrawn at every replay (PyTorch registers the generator
    and advances its offset); host randomness drawn during capture is baked in as a constant."""

    dev = _require_cuda(device)
    x = torch.zeros(4, device=dev)
    # graph-safe: torch.rand on the GPU inside the graph
    g_dev = capture_callable(lambda t: t + torch.rand(t.shape, device=t.device), x)
    dev_draws = [g_dev.replay().tolist() for _ in range(replays)]
    torch.cuda.manual_seed(1234)
    a = g_dev.replay().clone()
    torch.cuda.manual_seed(1234)
    b = g_dev.replay().clone()
    reseed_repeats = bool(torch.equal(a, b))
    del g_dev
    # baked: a CPU random scalar, evaluated once at capture, becomes a kernel argument
    g_host = capture_callable(lambda t: t + torch.rand(()), x)   # torch.rand(()) is on the CPU
    host_draws = [g_host.replay().tolist() for _ in range(replays)]
    del g_host
    _cleanup()
    dev_fresh = len({tuple(d) for d in dev_draws}) == len(dev_draws)
    host_frozen = len({tuple(d) for d in host_draws}) == 1
    return _result(
        "rng",
        "randomness inside a captured function: torch.rand(..., device='cuda') is part of the "
        "graph and draws new numbers each replay; a random number made on the host (a CPU "
        "tensor, random.random(), numpy) is computed once during capture and replayed forever",
        f"observed: host-side random value baked in, the same numbers at every replay "
        f"{host_draws[0]} (x{replays}); device RNG gave {replays} different draws",
        "draw random numbers on the device inside the graph (torch.rand/rand_like/dropout/"
        "multinomial on CUDA, default generator, or register your own generator with "
        "graph.register_generator_state); torch.cuda.manual_seed before replay makes the "
        "draws repeatable; never draw on the host inside the captured code",
        dev_fresh and host_frozen,
        device_rng_draws=dev_draws, host_rng_draws=host_draws, device_draws_differ=dev_fresh,
        host_draws_identical=host_frozen, reseed_repeats_draw=reseed_repeats)


def _autocast_run(lin: torch.nn.Linear, x: torch.Tensor, cache: bool) -> dict:
    """Capture ``lin(x)`` in ONE bf16 autocast region (weight cache on or off), update the
    float32 weight in place and replay, still inside the region."""
    w0 = lin.weight.detach().clone()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=cache):
        cg = capture_callable(lin, x)            # warm-up (casts, caches) then capture
        before = cg.replay().float().clone()
        lin.weight.mul_(-1.0)                    # the update: every output flips its sign
        after = cg.replay().float().clone()
        del cg
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        expected = lin(x).float()                # what the updated weights give
    with torch.no_grad():
        lin.weight.copy_(w0)
    return {"before_update": before, "after_update": after, "expected": expected,
            "stale": bool(torch.equal(after, before)),
            "max_abs_diff_to_expected": float((after - expected).abs().max()),
            "correct": bool(torch.allclose(after, expected, rtol=1e-2, atol=1e-2))}


def pitfall_autocast(device: str | torch.device = "cuda") -> dict:
    """Autocast's weight cache (on by default) bakes the warm-up's bf16 copy into the graph;
    fix: ``cache_enabled=False``, or cast the model once and capture without autocast."""
    dev = _require_cuda(device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    lin = torch.nn.Linear(64, 64).to(dev)         # float32 weights (requires_grad: cached)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(64, 64, generator=gen) * 0.1)
        lin.bias.zero_()
    x = torch.randn(8, 64, generator=gen).to(dev)
    cached = _autocast_run(lin, x, cache=True)
    fixed = _autocast_run(lin, x, cache=False)
    refusal = None
    with torch.autocast("cuda", dtype=torch.bfloat16):
        try:
            torch.cuda.make_graphed_callables(lin, (x,))
        except RuntimeError as exc:
            refusal = _err_text(exc)
    _cleanup()
    row = 0
    error = (f"observed stale output: after the weight update (w -> -w) the replay returned "
             f"{cached['after_update'][row, :3].tolist()} ... (the values from before the "
             f"update: {cached['stale']}), expected {cached['expected'][row, :3].tolist()} ... "
             f"(max |replay - expected| = {cached['max_abs_diff_to_expected']:.3g})")
    result = _result(
        "autocast",
        "warm-up and capture inside one torch.autocast region with the weight cache on (the "
        "default): the warm-up casts each float32 weight to bf16 once and caches the copy, "
        "the capture finds it and records no cast, so the graph reads that copy forever; an "
        "update of the float32 weights is never seen (and when the region exits, the cache "
        "is dropped while the graph still reads its memory)",
        error,
        "torch.autocast(..., cache_enabled=False) around capture: the cast is then a kernel "
        "of the graph and reads the current weights at every replay; better, cast the model "
        "once (model.to(torch.bfloat16)) and capture without autocast, as labkit does",
        cached["stale"] and fixed["correct"],
        cache_on_stale=cached["stale"], cache_on_correct=cached["correct"],
        cache_on_max_abs_diff=cached["max_abs_diff_to_expected"],
        cache_off_stale=fixed["stale"], cache_off_correct=fixed["correct"],
        cache_off_max_abs_diff=fixed["max_abs_diff_to_expected"],
        row0_before=cached["before_update"][row, :4].tolist(),
        row0_replay_cache_on=cached["after_update"][row, :4].tolist(),
        row0_replay_cache_off=fixed["after_update"][row, :4].tolist(),
        row0_expected=cached["expected"][row, :4].tolist(),
        make_graphed_callables_error=refusal)
    del lin, x
    _cleanup()
    return result
