"""Measure what graphs do to a step's numbers (notebook 16): one request's logits at each padded
size, graph against eager, fused against readable, what a fixed size costs; decisions a capture
bakes in (a CPU-runnable demonstration and its fixes); the same step captured several times.

Why a row's logits depend on its batch in bf16: cuBLAS picks its GEMM kernel (tile, split-K)
by the problem's ``M``, so padding a request into 8 or 64 rows changes the reduction order of
its dot products. Greedy tokens flip only where the two largest logits are closer than that
noise (vLLM #55238). Why labkit's fused step may choose its attention kernel by batch size at
capture (:meth:`labkit.fused.FusedStep.attention_kernel`): the choice is a function of the
graph's batch size alone, and a graph of ``b`` rows always replays ``b`` rows (the dispatcher
pads a batch to a captured size, never runs a graph at another), so the decision made at
capture is the one run time would make. A decision by something that changes between replays
(a sequence length, a buffer's address) is not safe: :func:`baked_decision_demo`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from labkit.runner import PaddingDispatcher
from labkit.graphs import GraphSet, capture_decode_graphs, pool_reserved_bytes
from labkit.measure.bench import _free, _need_cuda, step_inputs
from labkit.measure.opcount import gpu_op_profile
from labkit.model import TinyGPT, build_model, preset
from labkit.timing import Stats, time_cuda_interleaved, time_host

Timer = Callable[..., dict[str, Stats]]
#: the rows of the padded batch other than the request: the static batch's pad rows
OTHER_ROWS = "pad rows (token 0, position 0, the scratch slot)"


def _host_timer(fns: Mapping[str, Callable[[], object]], *, warmup: int, repeats: int,
                inner: int) -> dict[str, Stats]:
    """The timer on a machine without CUDA: host time of each callable in turn."""
    return {n: time_host(f, warmup=warmup, repeats=repeats, inner=inner) for n, f in fns.items()}


def _decode_row0(d: PaddingDispatcher, mode: str, b: int, first: int, kv: torch.Tensor,
                 start: int, steps: int, forced: torch.Tensor | None = None,
                 others: int = 0) -> torch.Tensor:
    """Row 0 (slot 0, from position ``start``) decoded for ``steps`` steps through runner
    ``mode`` (``FULL``/``NONE``) of ``d`` at padded size ``b``, from the cache ``kv``: its
    float32 logits ``(steps, V)``. ``forced``: the tokens fed (else its own argmax);
    ``others``: rows 1..others hold seeded requests (else pad rows)."""
    model = d.model
    dev = model.device
    model.cache.kv.copy_(kv)
    out = torch.empty((steps, model.cfg.vocab_size), dtype=torch.float32, device=dev)
    g = torch.Generator().manual_seed(1)
    rest = torch.randint(0, model.cfg.vocab_size, (steps, others), generator=g).to(dev)
    slots = torch.arange(1 + others)
    runner = d.runner(mode)  # type: ignore[arg-type]
    tok = torch.tensor([first], device=dev)
    for k in range(steps):
        if forced is not None:
            tok = forced[k:k + 1]
        positions = torch.full((1 + others,), start + k, dtype=torch.long)
        d.load_inputs(torch.cat([tok, rest[k]]), positions, slots, check=False)
        row = runner.replay(b)[0]
        out[k].copy_(row)
        tok = row.argmax(-1, keepdim=True)
    return out


def _first_diff(a: torch.Tensor, b: torch.Tensor) -> int | None:
    """The first index where the token vectors ``a`` and ``b`` differ (``None``: nowhere)."""
    at = (a != b).nonzero()
    return int(at[0, 0]) if at.numel() else None


def _numerics_of(model: TinyGPT, sizes: list[int], steps: int, prompt_len: int, seed: int,
                 timer: Timer, repeats: int, inner: int) -> dict[str, Any]:
    """:func:`measure_numerics` for one model (one dtype)."""
    dev = model.device
    capture = dev.type == "cuda"
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, model.cfg.vocab_size, (1, prompt_len), generator=g).to(dev)
    model.reset_cache()
    first = int(model.prefill(prompt, torch.zeros(1, dtype=torch.long, device=dev)).argmax())
    kv = model.cache.kv.clone()
    run = partial(_decode_row0, first=first, kv=kv, start=prompt_len, steps=steps)
    fixed = sizes[-1]
    readable = PaddingDispatcher(model, sizes, capture=capture, progress=False)
    free = {b: run(readable, "FULL", b).argmax(-1) for b in sizes}  # greedy, as a user runs
    ref_tokens = free[1]
    forced = torch.cat([torch.tensor([first], device=dev), ref_tokens[:-1]])
    sweep = partial(run, forced=forced)
    graph = {b: sweep(readable, "FULL", b) for b in sizes}
    ref = graph[1]
    top2 = ref.topk(2, dim=-1).values
    out: dict[str, Any] = {
        "margins": (top2[:, 0] - top2[:, 1]).tolist(),
        "step_max_abs_diff": {b: (x - ref).abs().amax(-1).tolist() for b, x in graph.items()},
        "flipped": {b: (x.argmax(-1) != ref.argmax(-1)).tolist() for b, x in graph.items()},
        "first_divergence": {b: _first_diff(t, ref_tokens) for b, t in free.items()}}
    if capture:  # the same kernels run eagerly on the same static batch
        eager = {b: sweep(readable, "NONE", b) for b in sizes}
        out["graph_equals_eager"] = {b: bool(torch.equal(graph[b], eager[b])) for b in sizes}
        out["graph_eager_max_abs_diff"] = {b: float((graph[b] - eager[b]).abs().max())
                                           for b in sizes}
    alone = graph[fixed]
    out["fixed_size_invariant"] = bool(torch.equal(
        alone, sweep(readable, "FULL", fixed, others=min(fixed - 1, model.cfg.max_batch - 1))))
    full = readable.runner("FULL")
    times = timer({str(b): partial(full.replay, b) for b in sizes}, warmup=5, repeats=repeats,
                  inner=inner)
    out["replay"] = {b: times[str(b)].to_dict() for b in sizes}
    readable.release()
    fused = PaddingDispatcher(model, sizes, capture=capture, progress=False, step="fused")
    fz = {b: sweep(fused, "FULL", b) for b in sizes}
    fused.release()
    out["fused_max_abs_diff"] = {b: float((fz[b] - graph[b]).abs().max()) for b in sizes}
    out["fused_flips"] = {b: int((fz[b].argmax(-1) != graph[b].argmax(-1)).sum())
                          for b in sizes}
    if model.cfg.dtype == "bfloat16":
        out["reduced_precision_off"] = _reduced_precision_off(model, sizes, sweep)
    return out


def _reduced_precision_off(model: TinyGPT, sizes: list[int],
                           sweep: Callable[..., torch.Tensor]) -> dict[int, list[float]]:
    """Per size, each step's max |Δlogit| against size 1 with
    ``torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False`` (split-K
    partial sums kept in float32), graphs captured under the setting (a graph keeps the
    kernels chosen at capture)."""
    matmul = torch.backends.cuda.matmul
    old = matmul.allow_bf16_reduced_precision_reduction
    matmul.allow_bf16_reduced_precision_reduction = False
    try:
        d = PaddingDispatcher(model, sizes, capture=model.device.type == "cuda",
                              progress=False)
        got = {b: sweep(d, "FULL", b) for b in sizes}
        d.release()
    finally:
        matmul.allow_bf16_reduced_precision_reduction = old
    return {b: (x - got[1]).abs().amax(-1).tolist() for b, x in got.items()}


def measure_numerics(preset_name: str = "gpt2", sizes: Sequence[int] = (1, 8, 64),
                     dtypes: Sequence[str] = ("bfloat16", "float32"), steps: int = 128,
                     prompt_len: int = 16, seed: int = 0, repeats: int = 20, inner: int = 10,
                     *, device: str = "cuda", timer: Timer | None = None) -> dict[str, Any]:
    """Record ``numerics_<preset>`` (without ``recaptures``): one request (row 0, a seeded
    random prompt of ``prompt_len`` tokens) decoded in a batch padded to each size (the other
    rows: pad rows), per dtype. Every size is fed the tokens size 1 chose (teacher forcing), so
    each step compares logits of the same history: per step the largest |Δlogit| against size
    1, whether the argmax flipped, and size 1's top-2 margin; the first token where free-running
    greedy decoding at the size leaves size 1's; FULL graphs against eager at the same size
    (CUDA only: the same kernels, expected bit-equal); the fused step against the readable one;
    bf16 with reduced-precision reductions off; padding every step to the largest size (its
    logits do not depend on the other rows: ``fixed_size_invariant``) and its cost, the
    replay at each size (interleaved). On CPU everything runs eagerly."""
    if device == "cuda":
        _need_cuda("measure_numerics")
    sizes = sorted({int(b) for b in sizes})
    if sizes[0] != 1:
        raise ValueError(f"sizes must include 1, the size every other is compared with; got "
                         f"{sizes}")
    if steps < 2 or prompt_len < 1:
        raise ValueError(f"decode at least 2 steps after a prompt of at least 1 token; got "
                         f"steps={steps}, prompt_len={prompt_len}")
    timer = timer or (time_cuda_interleaved if device == "cuda" else _host_timer)
    per_dtype: dict[str, Any] = {}
    for dtype in dtypes:
        cfg = preset(preset_name, max_batch=sizes[-1], dtype=dtype)
        if prompt_len + steps > cfg.max_seq:
            raise ValueError(f"prompt_len + steps = {prompt_len + steps} positions, but "
                             f"{preset_name} holds max_seq={cfg.max_seq}; decode fewer steps")
        model = build_model(cfg, device, seed=seed)
        per_dtype[dtype] = _numerics_of(model, sizes, steps, prompt_len, seed, timer,
                                        repeats, inner)
        del model
        if device == "cuda":
            _free()
    return {"preset": preset_name, "device": device, "steps": steps, "prompt_len": prompt_len,
            "seed": seed, "sizes": sizes, "other_rows": OTHER_ROWS, "graphs": device == "cuda",
            "fixed_size": sizes[-1], "repeats": repeats, "inner": inner, "dtypes": per_dtype}


# --- decisions baked at capture ----------------------------------------------------------

#: the short attention path reads only the first ``SHORT_KEYS`` keys of the cache
SHORT_KEYS = 8
#: what :func:`baked_decision_demo` captures: a decision on the host, two fixes
BAKED_VARIANTS = ("baked", "in_graph", "per_decision")


def _masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      lens: torch.Tensor) -> torch.Tensor:
    """Each row's query ``(B, d)`` over its first ``lens[i]`` keys of ``k``, ``v``
    ``(B, n, d)``; ``lens`` a device tensor."""
    s = torch.einsum("bd,bnd->bn", q, k)
    pad = torch.arange(k.shape[1], device=k.device)[None, :] >= lens[:, None]
    return torch.einsum("bn,bnd->bd", s.masked_fill(pad, float("-inf")).softmax(-1), v)


def attend_baked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor,
                 host_len: int) -> torch.Tensor:
    """The bug: a host-side length bound picks the short path (only ``SHORT_KEYS`` keys read)
    when ``host_len`` fits; captured, the path of the capture's length replays for every
    length (vLLM PR #27114: an attention kernel chosen at capture, wrong past 128K tokens)."""
    n = SHORT_KEYS if host_len <= SHORT_KEYS else k.shape[1]
    return _masked_attention(q, k[:, :n], v[:, :n], lens)


def attend_in_graph(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor,
                    host_len: int) -> torch.Tensor:
    """Fix 1: no host decision; every key is read and the device tensor ``lens`` masks (the
    length is data the graph reads at replay, ``host_len`` is ignored)."""
    return _masked_attention(q, k, v, lens)


def _capture(api: Any, fn: Callable[[], torch.Tensor]) -> tuple[Any, torch.Tensor]:
    """``fn()`` run once (warm-up) and captured into a new graph of ``api``: graph, output."""
    fn()
    stream = api.Stream()
    stream.wait_stream(api.current_stream())
    graph = api.CUDAGraph()
    with api.graph(graph, stream=stream):
        out = fn()
    api.current_stream().wait_stream(stream)
    return graph, out


@torch.no_grad()
def baked_decision_demo(api: Any, variant: str = "baked", *, capture_len: int = 4,
                        run_lens: Sequence[int] = (4, 8, 12, 16), device: str = "cpu",
                        attend: Callable[..., torch.Tensor] | None = None) -> dict[str, Any]:
    """Capture an attention whose path a host-side length bound picks, at ``capture_len``,
    then replay it with each length of ``run_lens`` written into the static ``lens`` tensor
    and compare with the same call run eagerly at that length (the decision made again).
    ``api``: ``torch.cuda``, or the CPU stand-in ``labkit.teach.simulated.graph_api('cpu')``.
    ``variant``: ``baked`` (the bug), ``in_graph`` (fix 1: :func:`attend_in_graph`),
    ``per_decision`` (fix 2: one graph per path, the host picks the graph at replay, as the
    dispatcher picks a graph by batch size); ``attend``: a learner's function instead
    (captured as ``baked`` is). ``replays_right``: every length's replay equals eager."""
    if variant not in BAKED_VARIANTS:
        raise ValueError(f"variant must be one of {list(BAKED_VARIANTS)}, got {variant!r}")
    if attend is not None and not callable(attend):
        raise TypeError(f"attend must be callable (q, k, v, lens, host_len), got {attend!r}")
    n_keys = max(2 * SHORT_KEYS, *run_lens, capture_len)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=g).to(device)
               for shape in ((2, 8), (2, n_keys, 8), (2, n_keys, 8)))
    lens = torch.full((2,), capture_len, dtype=torch.long, device=device)
    fn = attend or (attend_in_graph if variant == "in_graph" else attend_baked)
    graphs: dict[bool, tuple[Any, torch.Tensor]] = {}
    if variant == "per_decision" and attend is None:  # one graph per side of the bound
        for length in (SHORT_KEYS, n_keys):
            lens.fill_(length)
            graphs[length <= SHORT_KEYS] = _capture(api, partial(fn, q, k, v, lens, length))
    else:
        graphs[capture_len <= SHORT_KEYS] = _capture(api, partial(fn, q, k, v, lens,
                                                                  capture_len))
    rows = []
    for n in run_lens:
        lens.fill_(int(n))
        graph, out = graphs.get(n <= SHORT_KEYS) or next(iter(graphs.values()))
        graph.replay()
        want = fn(q, k, v, lens, int(n))
        diff = float((out - want).abs().max())
        rows.append({"length": int(n), "max_abs_diff": diff, "right": diff <= 1e-5})
    return {"variant": variant if attend is None else "learner", "capture_len": capture_len,
            "short_keys": SHORT_KEYS, "graphs": len(graphs), "rows": rows,
            "replays_right": all(r["right"] for r in rows)}


# --- the same step captured several times -------------------------------------------------

#: operator names whose operands cuBLAS or the attention kernel take pointers of
_POINTER_OPS = ("mm", "addmm", "bmm", "baddbmm", "_addmm_activation",
                "_efficient_attention_forward", "_flash_attention_forward")


def _alignment(ptr: int) -> int:
    """The largest power of two up to 256 dividing ``ptr`` (cuBLASLt's alignment
    preference reads up to 256 bytes: ``_getAlignment``, ``aten/src/ATen/cuda/CUDABlas.cpp``)."""
    return min(256, ptr & -ptr) if ptr else 256


class _OperandLog(TorchDispatchMode):
    """for each GEMM and attention call, its operands' shapes and alignments."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func.overloadpacket.__name__ in _POINTER_OPS:
            outs = result if isinstance(result, (tuple, list)) else (result,)
            ts = [t for t in (*args, *kwargs.values(), *outs) if isinstance(t, torch.Tensor)]
            self.calls.append({"op": func.overloadpacket.__name__,
                               "shapes": [list(t.shape) for t in ts],
                               "alignment": [_alignment(t.data_ptr()) for t in ts],
                               "mod_1024": [t.data_ptr() % 1024 for t in ts]})
        return result


def _logged_step(model: TinyGPT, seen: dict[str, Any]) -> Callable[..., torch.Tensor]:
    """``model.decode_step`` that logs its operands (the last call's: the capture's) and the
    stream and cuBLAS handle it runs on into ``seen``."""
    def step(tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, *,
             check: bool | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
        log = _OperandLog()
        with log:
            logits = model.decode_step(tokens, positions, slots, check=check, out=out)
        seen.update(operands=log.calls, stream=torch.cuda.current_stream().cuda_stream,
                    blas_handle=int(torch.cuda.current_blas_handle()))
        return logits
    return step


def _pool_summary(gs: GraphSet) -> dict[str, Any]:
    """The graph's pool: reserved bytes, segment addresses modulo 2 MiB, block sizes."""
    pid = tuple(gs.graphs[1].pool)
    segs = [s for s in torch.cuda.memory_snapshot()
            if tuple(s.get("segment_pool_id", (0, 0))) == pid]
    return {"reserved_bytes": pool_reserved_bytes(pid),
            "segments_mod_2mib": [int(s["address"]) % (2 << 20) for s in segs],
            "block_sizes": [int(b["size"]) for s in segs for b in s.get("blocks", [])],
            "inputs_mod_1024": gs.batch.inputs.data_ptr() % 1024,
            "logits_mod_1024": 0 if gs.logits is None else gs.logits.data_ptr() % 1024}


def _replays(gs: GraphSet, n: int) -> None:
    """Replay graph 1 of ``gs`` ``n`` times."""
    for _ in range(n):
        gs.replay(1)


def _workspace() -> dict[str, Any]:
    """The cuBLAS workspace settings every capture saw (env and torch's accessors)."""
    out: dict[str, Any] = {v: os.environ.get(v) for v in ("CUBLAS_WORKSPACE_CONFIG",
                                                          "CUBLASLT_WORKSPACE_SIZE")}
    for name in ("_cuda_getCublasWorkspaceSize", "_cuda_getCublasLtWorkspaceSize"):
        fn = getattr(torch._C, name, None)
        out[name.removeprefix("_cuda_get")] = int(fn()) if fn is not None else None
    return out


def measure_recaptures(preset_name: str = "gpt2", captures: int = 3, dtype: str = "bfloat16",
                       repeats: int = 30, inner: int = 20, profile_replays: int = 20
                       ) -> dict[str, Any]:
    """The readable step at batch 1 captured ``captures`` times in one process (same weights,
    same inputs): outputs equal; the replays timed interleaved; per graph its kernels (name ->
    count and GPU µs per replay, from ``torch.profiler`` over ``profile_replays`` replays), the
    GEMM and attention operands' shapes and alignments at capture, the stream and cuBLAS
    handle the capture ran on, and its pool (segment addresses modulo 2 MiB, block sizes);
    the workspace settings. Needs CUDA."""
    _need_cuda("measure_recaptures")
    model = build_model(preset(preset_name, max_batch=1, dtype=dtype), "cuda", seed=0)
    inputs = step_inputs(model, 1)
    sets: list[GraphSet] = []
    seen: list[dict[str, Any]] = []
    for _ in range(captures):
        seen.append({})
        sets.append(capture_decode_graphs(model, [1], progress=False,
                                          step=_logged_step(model, seen[-1])))
        sets[-1].copy_inputs(*inputs)
    kv = model.cache.kv.clone()
    outs = []
    for gs in sets:
        model.cache.kv.copy_(kv)
        outs.append(gs.replay(1).clone())
    times = time_cuda_interleaved({str(i): partial(gs.replay, 1) for i, gs in enumerate(sets)},
                                  warmup=10, repeats=repeats, inner=inner)
    kernels = []
    for gs in sets:
        prof = gpu_op_profile(partial(_replays, gs, profile_replays))
        kernels.append({name: {"count": v["count"] / profile_replays,
                               "us": v["us"] / profile_replays} for name, v in prof.items()})
    pools = [_pool_summary(gs) for gs in sets]
    for gs in sets:
        gs.release()
    _free()
    return {"preset": preset_name, "dtype": dtype, "captures": captures, "repeats": repeats,
            "inner": inner, "outputs_equal": all(torch.equal(outs[0], o) for o in outs),
            "replay": [times[str(i)].to_dict() for i in range(captures)], "kernels": kernels,
            "operands": [s["operands"] for s in seen], "streams": [s["stream"] for s in seen],
            "blas_handles": [s["blas_handle"] for s in seen], "pools": pools,
            "workspace": _workspace()}


def measure_numerics_record(preset_name: str = "gpt2") -> dict[str, Any]:
    """Record ``numerics_<preset>`` in full: :func:`measure_numerics` and
    :func:`measure_recaptures` (``recaptures``) with their defaults."""
    out = measure_numerics(preset_name)
    out["recaptures"] = measure_recaptures(preset_name)
    return out
