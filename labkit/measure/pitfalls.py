"""The classic CUDA-graph pitfalls, each demonstrated live on a CUDA device with its fix.

Every ``pitfall_*`` function breaks one rule on purpose, records what really happened (the
error text PyTorch or :mod:`labkit.graphs` raised, or the wrong value that came back), then
applies the fix and checks it. Each returns a JSON-ready dict::

    {"name": str, "what": str, "error": str, "fix": str, "fixed_ok": bool,
     "rule": str, "details": {...}}

``error`` is the real error text or a sentence stating the observed wrong value (with the
numbers in ``details``); ``fixed_ok`` is True when the fixed version gave the right result.

:func:`run_all_pitfalls` runs them all plus :func:`address_demo` (the data pointers a graph
writes to) and is recorded as the result ``"pitfalls"``.

Without CUDA nothing here can run live. Reading a record (tables, plain-text reports) and the
notebook's quiz are in :mod:`labkit.teach.lessons.pitfalls`; a CPU stand-in for a captured graph
is :class:`labkit.teach.simulated.SimulatedGraph`.
"""

from __future__ import annotations

import gc
import re
import traceback
from typing import Any, Callable, Sequence

import torch
from labkit.dispatch import PaddingDispatcher
from labkit.graphs import CaptureError, capture_callable
from labkit.model import build_model, preset

# the rules the pitfalls break, by key; the quiz in labkit.teach.lessons.pitfalls uses the keys
RULES: dict[str, str] = {
    "host_sync": "no host synchronisation inside the captured code",
    "dynamic_shape": "every shape is fixed at capture; no data-dependent shapes",
    "output_overwritten": "a graph's output is a static buffer: the next replay overwrites it",
    "input_rebound": "new inputs are copied INTO the captured input tensors, never rebound",
    "rng": "only device-side randomness is redrawn at replay; host randomness is baked in",
    "autocast": "a cast made before capture is not redone at replay: autocast's weight cache "
                "bakes the warm-up's copy into the graph",
}

PITFALL_NAMES = ("host_sync", "dynamic_shape", "output_overwritten", "input_rebound", "rng",
                 "autocast")


def _require_cuda(device: str | torch.device) -> torch.device:
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(
            "this pitfall is shown live on a CUDA GPU (torch.cuda.is_available() is "
            f"{torch.cuda.is_available()}, device {device}); on CPU load the recorded "
            "'pitfalls' reference instead (labkit.teach.notebook.measure_or_reference)")
    return device


def _err_text(exc: BaseException, limit: int = 1200) -> str:
    """``Type: message`` of an exception and of the exceptions it was raised during (C++ stack
    traces cut), innermost first."""
    chain, seen, e = [], set(), exc
    while e is not None and id(e) not in seen:
        chain.append(e)
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    text = "\n  then: ".join(f"{type(e).__name__}: {e}" for e in reversed(chain))
    boilerplate = ("frame #", "Exception raised from", "Search for `cuda", "CUDA kernel errors "
                   "might", "For debugging consider", "Compile with `TORCH_USE_CUDA_DSA`")
    lines = [ln for ln in text.splitlines() if ln.strip()
             and not ln.lstrip().startswith(boilerplate)]
    text = _strip_paths("\n".join(lines).strip())
    return text if len(text) <= limit else text[:limit] + " ..."


_PATH_RE = re.compile(r"(?:[A-Za-z]:)?(?:[/\\][\w.\-]+)+[/\\]([\w.\-]+\.pyi?)")


def _strip_paths(text: str) -> str:
    """Replace absolute file paths in error texts and tracebacks by the file's name, so a
    record says ``pitfalls.py`` and not where the package happened to be installed."""
    return _PATH_RE.sub(r"\1", text)


def _cleanup() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _device_ok(device: torch.device) -> bool:
    """True when the device still runs work after a failed capture."""
    try:
        t = torch.ones(4, device=device)
        return float((t + 1).sum().item()) == 8.0
    except Exception:  # noqa: BLE001 - a broken context is exactly what we report
        return False


def raw_capture_error(fn: Callable[..., Any], *inputs: torch.Tensor) -> str | None:
    """Capture ``fn(*inputs)`` with plain ``torch.cuda.graph`` (no labkit checks) and return the
    error text PyTorch/CUDA give, or ``None`` when the capture went through."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # eager warm-up outside capture, as the docs say
        fn(*inputs)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    err = None
    try:
        with torch.cuda.graph(graph, stream=stream):
            fn(*inputs)
    except Exception as exc:  # noqa: BLE001 - the point is to show it
        err = _err_text(exc)
    del graph
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        err = (err or "") + f"\n(after the failed capture: {_err_text(exc)})"
    _cleanup()
    return err


def _result(name: str, what: str, error: str, fix: str, fixed_ok: bool, **details: Any) -> dict:
    return {"name": name, "rule": RULES[name], "what": what, "error": error, "fix": fix,
            "fixed_ok": bool(fixed_ok), "details": details}


# ---------------------------------------------------------------------------- 1. host sync


def pitfall_host_sync(device: str | torch.device = "cuda") -> dict:
    """``.item()`` inside the captured function: the capture is refused; fix: stay on device."""

    dev = _require_cuda(device)
    x = torch.arange(1.0, 9.0, device=dev)

    def bad(t: torch.Tensor) -> torch.Tensor:
        m = t.max().item()          # reads a value back to the CPU: a host sync
        return t / m

    def good(t: torch.Tensor) -> torch.Tensor:
        return t / t.max()          # the maximum stays a device tensor

    try:
        capture_callable(bad, x)
        error, err_class = "no error (unexpected: the capture went through)", None
    except CaptureError as exc:
        error, err_class = str(exc), type(exc).__name__
    _cleanup()
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


# ---------------------------------------------------------------------------- 2. dynamic shapes


def pitfall_dynamic_shape(device: str | torch.device = "cuda") -> dict:
    """Boolean-mask indexing (``t[t > 0]``) has a data-dependent shape; fix: ``torch.where``."""

    dev = _require_cuda(device)
    x = torch.tensor([1.0, -2.0, 3.0, -4.0, 5.0, -6.0, 7.0, -8.0], device=dev)

    def bad(t: torch.Tensor) -> torch.Tensor:
        return t[t > 0].sum()       # how many elements survive depends on the data

    def good(t: torch.Tensor) -> torch.Tensor:
        return torch.where(t > 0, t, torch.zeros_like(t)).sum()   # shape fixed at 8

    try:
        capture_callable(bad, x)
        error, err_class = "no error (unexpected: the capture went through)", None
    except CaptureError as exc:
        error, err_class = str(exc), type(exc).__name__
    _cleanup()
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


# ---------------------------------------------------------------------------- 3. overwritten


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
    """Two graphs in one pool: A's output reference dropped after capture (as vLLM does with
    weak references), B captured next reuses that block, so A's replay writes into B's output."""

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
        disp = PaddingDispatcher(model, (1, 2, 4), mode="graph", copy_outputs=copy,
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


# ---------------------------------------------------------------------------- 4. rebound inputs


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


# ---------------------------------------------------------------------------- 5. RNG


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


# ---------------------------------------------------------------------------- 6. autocast


def _autocast_run(lin: torch.nn.Linear, x: torch.Tensor, cache: bool) -> dict:
    """Warm up and capture ``lin(x)`` inside ONE bf16 autocast region with the weight cache
    on or off, then change the float32 weight in place (a weight update) and replay, still
    inside the region (outside it the cached copy would already be freed)."""
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
    """Autocast with its weight cache on (the default) around warm-up and capture: the graph
    reads the bf16 copy cached at warm-up, so a weight update is not seen at replay. Fix:
    ``cache_enabled=False`` (the cast becomes a kernel of the graph), or cast the model once
    and capture without autocast (what labkit does). ``torch.cuda.make_graphed_callables``
    refuses the cached case."""
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


# ---------------------------------------------------------------------------- torch.compile


def compiled_output_overwritten(device: str | torch.device = "cuda") -> dict:
    """CUDA Graph Trees (``torch.compile(mode="reduce-overhead")``) and the same pitfall as
    :func:`pitfall_output_overwritten`: reading an output after a later run of the compiled
    function. Tried twice: straight after compiling (the trees' liveness check raises) and
    after a few warm-up calls (recorded: whether it raised, or what the old output read)."""
    dev = _require_cuda(device)
    import torch._dynamo

    def f(t: torch.Tensor) -> torch.Tensor:
        return t * 2 + 1

    x = torch.arange(4.0, device=dev)
    expected = (x * 2 + 1).tolist()

    def attempt(warm_calls: int) -> tuple[str | None, list | None]:
        torch._dynamo.reset()
        cf = torch.compile(f, mode="reduce-overhead")
        for _ in range(warm_calls):
            cf(x)
        first = cf(x)
        cf(x + 10)                          # a later run reuses the pool's output memory
        try:
            return None, first.tolist()     # reading the first output now
        except Exception as exc:  # noqa: BLE001 - the point is to show it
            return _err_text(exc), None

    err_early, val_early = attempt(0)
    err_warm, val_warm = attempt(3)
    # fix 1: clone outside the compiled function
    torch._dynamo.reset()
    cf = torch.compile(f, mode="reduce-overhead")
    for _ in range(3):
        cf(x)
    kept = cf(x).clone()
    cf(x + 10)
    clone_ok = kept.tolist() == expected
    # fix 2 (PyTorch's message): mark each step; consume outputs inside their step
    mark = getattr(torch.compiler, "cudagraph_mark_step_begin", None)
    mark_ok = None
    if mark is not None:
        mark()
        a_vals = cf(x).tolist()
        mark()
        cf(x + 10)
        mark_ok = a_vals == expected
    del cf
    torch._dynamo.reset()
    _cleanup()
    if err_early is not None:
        error = err_early
    else:
        error = f"no error; the old output read {val_early} (expected {expected})"
    return {"name": "compiled_output_overwritten",
            "rule": RULES["output_overwritten"],
            "what": "torch.compile(mode='reduce-overhead') replays CUDA graphs from one memory "
                    "pool per device; an output of one call read after the next call",
            "error": error,
            "fix": "clone the output outside the compiled function (out = f(x).clone()) or "
                   "consume it before the next call; torch.compiler.cudagraph_mark_step_begin() "
                   "marks where a new step (and the overwriting) begins",
            "fixed_ok": bool(clone_ok),
            "details": {"expected": expected,
                        "raised_right_after_compile": err_early is not None,
                        "raised_after_warmup": err_warm is not None,
                        "error_after_warmup": err_warm,
                        "old_output_after_warmup_read": val_warm,
                        "clone_kept_value": clone_ok, "mark_step_begin_ok": mark_ok}}


# ---------------------------------------------------------------------------- addresses


def _segment_of(ptr: int) -> dict | None:
    for seg in torch.cuda.memory_snapshot():
        base, size = int(seg["address"]), int(seg["total_size"])
        if base <= ptr < base + size:
            return {"segment_base": base, "segment_size": size,
                    "offset_in_segment": ptr - base,
                    "segment_pool_id": list(seg.get("segment_pool_id", (0, 0)))}
    return None


def kernel_pointer_args(graph: "torch.cuda.CUDAGraph", ptrs: Sequence[int]) -> dict | None:
    """Read the argument bytes of every kernel node of ``graph`` (captured with
    ``keep_graph=True``) through the CUDA driver API and report which of ``ptrs`` appear there
    as 8-byte values: the addresses the graph has baked in.

    Needs the ``cuda-python`` bindings (``cuda.bindings.driver``) and a driver with
    ``cuFuncGetParamInfo`` (CUDA 12.4+); returns ``None`` when they are missing.
    """
    try:
        import ctypes

        from cuda.bindings import driver as cu  # type: ignore
    except ImportError:
        return None
    ok = cu.CUresult.CUDA_SUCCESS
    hgraph = cu.CUgraph(graph.raw_cuda_graph())
    err, _, count = cu.cuGraphGetNodes(hgraph, 0)
    err, nodes, count = cu.cuGraphGetNodes(hgraph, count)
    if err != ok:
        return None
    wanted = {int(p) for p in ptrs}
    kernels = []
    for node in nodes:
        err, kind = cu.cuGraphNodeGetType(node)
        if err != ok or kind != cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
            continue
        err, prm = cu.cuGraphKernelNodeGetParams(node)
        base = int(prm.kernelParams) if err == ok else 0
        if not base:
            continue
        words, n_params = [], 0
        for i in range(256):
            res = cu.cuFuncGetParamInfo(prm.func, i)
            if res[0] != ok:
                break
            size = int(res[2])
            arg = ctypes.c_void_p.from_address(base + 8 * i).value
            data = ctypes.string_at(arg, size)
            words += [int.from_bytes(data[j:j + 8], "little") for j in range(0, size - 7, 8)]
            n_params += 1
        try:
            name = cu.cuFuncGetName(prm.func)[1]
            name = name.decode() if isinstance(name, bytes) else str(name)
        except Exception:  # noqa: BLE001 - the name is a nicety
            name = ""
        kernels.append({"kernel": name[:120], "n_params": n_params,
                        "pointers_found": [hex(w) for w in words if w in wanted]})
    found = {hex(p): any(hex(p) in k["pointers_found"] for k in kernels) for p in wanted}
    return {"n_nodes": int(count), "kernels": kernels, "found": found}


def address_demo(device: str | torch.device = "cuda", replays: int = 5) -> dict:
    """Where a captured graph reads and writes: absolute device virtual addresses.

    Captures graph A and graph B into one shared pool, replays A several times with new
    inputs copied in, and records ``data_ptr()`` of its static output each time (identical),
    the allocator segment each pointer lies in (``data_ptr = segment base + offset``: a full
    virtual address, not an offset into the pool), and, where the CUDA driver bindings are
    installed, whether those exact 8-byte addresses sit in a graph's kernel arguments
    (:func:`kernel_pointer_args`): the address is baked into the graph.
    """

    dev = _require_cuda(device)
    pool = torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream()
    n = 4096
    xa = torch.randn(n, device=dev)
    xb = torch.randn(n, device=dev)
    ga = capture_callable(lambda t: t * 2, xa, pool=pool, stream=stream, label="A")
    gb = capture_callable(lambda t: torch.tanh(t) + 1, xb, pool=pool, stream=stream, label="B")
    ptrs = []
    for _ in range(replays):
        xa.copy_(torch.randn(n, device=dev))
        ptrs.append(ga.replay().data_ptr())
    outside = torch.empty(n, device=dev)      # an ordinary tensor, for comparison
    graphs = []
    for label, g, inp in (("A", ga, xa), ("B", gb, xb)):
        graphs.append({"graph": label, "input_ptr": inp.data_ptr(),
                       "output_ptr": g.output.data_ptr(),
                       "input_segment": _segment_of(inp.data_ptr()),
                       "output_segment": _segment_of(g.output.data_ptr()),
                       "pool_id": list(g.pool)})
    # a third graph, kept as a CUDA graph object: read its kernels' arguments
    kernel_args: dict | None
    try:
        xc = torch.randn(n, device=dev)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            _ = xc * 3                          # warm-up
        torch.cuda.current_stream().wait_stream(stream)
        gc_graph = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(gc_graph, pool=pool, stream=stream):
            yc = xc * 3
        torch.cuda.synchronize()
        kernel_args = kernel_pointer_args(gc_graph, [xc.data_ptr(), yc.data_ptr()])
        if kernel_args is not None:
            kernel_args.update(input_ptr=xc.data_ptr(), output_ptr=yc.data_ptr(),
                               input_ptr_found=kernel_args["found"][hex(xc.data_ptr())],
                               output_ptr_found=kernel_args["found"][hex(yc.data_ptr())])
        del gc_graph, xc, yc
    except Exception as exc:  # noqa: BLE001 - optional evidence (needs cuda-python)
        kernel_args = {"error": _err_text(exc)}
    seg = graphs[0]["output_segment"] or {}
    result = {
        "replay_output_ptrs": ptrs,
        "replay_output_ptrs_hex": [hex(p) for p in ptrs],
        "identical_across_replays": len(set(ptrs)) == 1,
        "graphs": graphs,
        "same_pool": graphs[0]["pool_id"] == graphs[1]["pool_id"],
        "ordinary_tensor_ptr": outside.data_ptr(),
        "absolute": bool(seg) and seg.get("segment_base", 0) > 0
        and ptrs[0] == seg["segment_base"] + seg["offset_in_segment"],
        "kernel_args": kernel_args,
        "note": "data_ptr() is a device virtual address in the process's one address space; "
                "the pool's segments sit at such addresses and a graph's kernels carry them "
                "as arguments",
    }
    del ga, gb, outside
    _cleanup()
    return result


# ---------------------------------------------------------------------------- all of them


PITFALLS: dict[str, Callable[..., dict]] = {
    "host_sync": pitfall_host_sync,
    "dynamic_shape": pitfall_dynamic_shape,
    "output_overwritten": pitfall_output_overwritten,
    "input_rebound": pitfall_input_rebound,
    "rng": pitfall_rng,
    "autocast": pitfall_autocast,
}


def _guarded(name: str, fn: Callable[..., dict], device: str | torch.device) -> dict:
    try:
        return fn(device)
    except Exception as exc:  # noqa: BLE001 - one failing demo must not hide the others
        _cleanup()
        return {"name": name, "rule": RULES.get(name, ""), "what": "the demonstration itself "
                "failed", "error": _err_text(exc), "fix": "", "fixed_ok": False,
                "details": {"traceback": _strip_paths(traceback.format_exc(limit=4))[-2000:]}}


def run_all_pitfalls(device: str | torch.device = "cuda", *, include_compile: bool = True) -> dict:
    """All pitfalls, the address demonstration and (optionally) the torch.compile pitfall.

    Returns ``{"device", "torch", "pitfalls": [dict per pitfall], "address_demo": {...},
    "compiled": dict | None}`` (recorded as result ``"pitfalls"``).
    """
    dev = _require_cuda(device)
    out = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "pitfalls": [_guarded(n, PITFALLS[n], dev) for n in PITFALL_NAMES]}
    try:
        out["address_demo"] = address_demo(dev)
    except Exception as exc:  # noqa: BLE001
        out["address_demo"] = {"error": _err_text(exc)}
    out["compiled"] = (_guarded("output_overwritten", compiled_output_overwritten, dev)
                       if include_compile else None)
    return out
