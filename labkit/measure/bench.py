"""GPU measurements behind the notebooks and ``labkit bench``; each returns a JSON-able dict.

Each checks graph (or dispatcher, or compiled) tokens against eager tokens before timing
(``checks``); the methods of a record are sampled in turn (:func:`time_sizes`).
"""

from __future__ import annotations

import gc
import time
from typing import Any
from collections.abc import Callable, Mapping, Sequence

import torch

from labkit.runner import PaddingDispatcher
from labkit.measure import records
from labkit.measure.opcount import op_counts, profiled_events
from labkit.graphs import capture_decode_graphs, pool_reserved_bytes
from labkit.kvcache import SlotKVCache
from labkit.model import StepFn, TinyGPT, build_model, generate, preset
from labkit.timing import Stats, launch_bound_sweep, launch_overhead, time_cuda_interleaved


def _need_cuda(what: str) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(f"{what} measures on a CUDA GPU and this machine has none "
                           "(torch.cuda.is_available() is False); load the recorded reference "
                           "with labkit.measure.results.load_reference instead")


def _free() -> None:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def make_model(name: str, *, max_batch: int, dtype: str = "bfloat16", seed: int = 0,
               **overrides) -> TinyGPT:
    """A random-weight model of preset ``name`` on the GPU (``overrides``: GPTConfig fields)."""
    return build_model(preset(name, max_batch=max_batch, dtype=dtype, **overrides), "cuda",
                       seed=seed)


def step_inputs(model: TinyGPT, bs: int, seed: int = 0,
                context: int | None = None) -> tuple[torch.Tensor, ...]:
    """Device tensors for one decode step: random tokens, each row at its own random position
    (``context``: every row at position ``context - 1``), rows in slots ``0..bs-1``."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.cfg
    tokens = torch.randint(0, cfg.vocab_size, (bs,), generator=g)
    if context is None:
        positions = torch.randint(cfg.max_seq // 4, cfg.max_seq // 2, (bs,), generator=g)
    else:
        positions = torch.full((bs,), context - 1, dtype=torch.long)
    slots = torch.arange(bs)
    return tuple(t.to(model.device) for t in (tokens, positions, slots))


def random_prompts(model: TinyGPT, n: int, seed: int = 0) -> list:
    """``n`` seeded random prompts of 4 to 23 tokens."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(4, 24, (n,), generator=g).tolist()
    return [torch.randint(0, model.cfg.vocab_size, (k,), generator=g).tolist() for k in lens]


def token_agreement(model: TinyGPT, step_fn: StepFn, bs: int, new_tokens: int = 8,
                    seed: int = 0) -> float:
    """Share of greedy tokens from ``step_fn`` equal to eager tokens (1.0 = identical)."""
    prompts = random_prompts(model, bs, seed)
    ref = generate(model, prompts, new_tokens)
    got = generate(model, prompts, new_tokens, step_fn=step_fn)
    pairs = [(a, b) for r, g in zip(ref, got) for a, b in zip(r, g)]
    return sum(a == b for a, b in pairs) / len(pairs)


def tokens_match(model: TinyGPT, step_fn: StepFn, bs: int, new_tokens: int = 8,
                 seed: int = 0) -> bool:
    """Greedy tokens with ``step_fn`` equal eager ``decode_step`` tokens for ``bs`` prompts."""
    return token_agreement(model, step_fn, bs, new_tokens, seed) == 1.0


def count_gpu_ops(fn: Callable[[], object]) -> int:
    """GPU operations (kernels, copies, fills) one call of ``fn`` launches (its input copies
    included)."""
    return sum(op_counts(fn, device="cuda").values())


def count_step_ops(model: TinyGPT) -> int:
    """GPU operations of one eager decode step at batch 1, its inputs made on the GPU before
    counting (:data:`labkit.measure.records.GPU_OPS_COUNTED`)."""
    t, p, s = step_inputs(model, 1)
    return count_gpu_ops(lambda: model.decode_step(t, p, s))


def time_sizes(sizes: Sequence[int], fns_at: Callable[[int], Mapping[str, Callable[[], object]]],
               names: Sequence[str], *, repeats: int, inner: int, warmup: int = 5,
               timer: Callable[..., dict[str, Stats]] | None = None) -> dict[str, list]:
    """Per batch size ``b``, the calls ``fns_at(b)`` sampled in turn (``timer``, default
    :func:`labkit.timing.time_cuda_interleaved`): name -> one Stats dict (or ``None``) a size."""
    times: dict[str, list] = {n: [] for n in names}
    for b in sizes:
        got = (timer or time_cuda_interleaved)(fns_at(b), warmup=warmup, repeats=repeats,
                                                inner=inner)
        for n in names:
            times[n].append(got[n].to_dict() if n in got else None)
    return times


def tokens_per_s_of(sizes: Sequence[int], times: dict[str, list]) -> dict[str, list]:
    """Tokens per second of every timed median (``None`` where not timed)."""
    return {m: [None if t is None else records.tokens_per_s(b, t["median"])
                for b, t in zip(sizes, ts)] for m, ts in times.items()}


def measure_launch_overhead(numels: Sequence[int] = (1, 2**10, 2**14, 2**16, 2**18, 2**20,
                                                    2**22, 2**24),
                            n_kernels: int = 200, repeats: int = 50) -> dict:
    """Record ``launch_overhead``: launch costs and the work-per-kernel sweep."""
    _need_cuda("measure_launch_overhead")
    lo = launch_overhead("cuda", n_kernels=n_kernels, repeats=repeats)
    sweep = launch_bound_sweep(numels, "cuda", n_kernels=50, repeats=max(5, repeats // 3))
    d = lo.to_dict()
    d["sweep"] = [{"numel": p.numel, "eager": p.eager.to_dict(),
                   "graph": p.graph.to_dict() if p.graph else None} for p in sweep]
    return d


def measure_decode(preset_name: str, batch_sizes: Sequence[int] = (1, 8, 64),
                   methods: Sequence[str] = ("eager", "graph"), dtype: str = "bfloat16",
                   repeats: int = 30, inner: int = 10) -> dict:
    """Record ``decode_<preset>``: decode step time per method and batch size."""
    _need_cuda("measure_decode")
    batch_sizes = sorted({int(b) for b in batch_sizes})
    unknown = set(methods) - {"eager", "graph", "dispatcher", "compile"}
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; use eager, graph, dispatcher, "
                         "compile")
    model = make_model(preset_name, max_batch=max(batch_sizes), dtype=dtype)
    checks: dict[str, bool] = {}
    disp = graphs = None
    if {"graph", "dispatcher"} & set(methods):
        disp = PaddingDispatcher(model, batch_sizes, progress=False, copy_outputs=False)
        graphs = disp.graphs
        checks["graph_tokens_equal_eager"] = all(tokens_match(model, disp.step, b)
                                                 for b in batch_sizes)
    compiled = None
    compile_s = None
    if "compile" in methods:
        compiled, compile_s, agree = _compiled_step(model, batch_sizes)
        checks["compile_tokens_equal_eager"] = agree == 1.0
        checks["compile_token_agreement"] = agree

    def fns_at(b: int) -> Mapping[str, Callable[[], object]]:
        t, p, s = step_inputs(model, b)
        host = tuple(x.cpu() for x in (t, p, s))  # the dispatcher's inputs come from the host
        if disp is not None:
            disp.load_inputs(t, p, s)
        fns = {"eager": lambda: model.decode_step(t, p, s),
               "graph": lambda: graphs.replay(b),
               "dispatcher": lambda: disp.step(*host),
               "compile": lambda: compiled(t, p, s)}
        return {m: fns[m] for m in methods}

    times = time_sizes(batch_sizes, fns_at, methods, repeats=repeats, inner=inner)
    kernels = count_step_ops(model)
    eager = [t["median"] for t in times.get("eager", [])]
    out = {
        "preset": preset_name,
        "config": model.cfg.to_dict(),
        "dtype": dtype,
        "batch_sizes": batch_sizes,
        "kernels_per_step": kernels,
        "gpu_ops_counted": records.GPU_OPS_SCOPE,
        "times": times,
        "tokens_per_s": tokens_per_s_of(batch_sizes, times),
        "speedup_vs_eager": ({m: [records.speedup(e, t["median"]) for e, t in zip(eager, ts)]
                              for m, ts in times.items()} if eager else {}),
        "checks": checks,
    }
    if compile_s is not None:
        out["compile_s"] = compile_s
        out["cudagraph_skips"] = _cudagraph_skips()
    if disp is not None:
        disp.release()
    model = disp = graphs = compiled = None  # drop references before freeing
    _free()
    return out


def _compiled_step(model: TinyGPT, batch_sizes: Sequence[int]):
    """``torch.compile(mode='reduce-overhead')`` of the decode step: (step, compile seconds,
    share of greedy tokens equal to eager's: bf16 fusion may round differently at near-ties)."""
    import torch._dynamo

    torch._dynamo.reset()
    compiled_fn = torch.compile(model.decode_step, mode="reduce-overhead")

    def step(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        torch.compiler.cudagraph_mark_step_begin()
        return compiled_fn(t, p, s)

    def safe_step(t, p, s):  # clone: the next replay overwrites cudagraph-tree outputs
        return step(t, p, s).clone()

    t0 = time.perf_counter()
    for b in batch_sizes:  # compile + record one graph per size (3 calls: warm-up, record)
        args = step_inputs(model, b)
        for _ in range(3):
            step(*args)
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    agreement = min(token_agreement(model, safe_step, b) for b in batch_sizes)
    return step, compile_s, agreement


def measure_timeline(preset_name: str, batch_size: int = 1, steps: int = 3,
                     dtype: str = "bfloat16") -> dict:
    """Record ``timeline_<preset>``: CPU launches and GPU kernels of a few eager and replayed
    steps, from a profiler trace."""
    _need_cuda("measure_timeline")
    model = make_model(preset_name, max_batch=batch_size, dtype=dtype)
    disp = PaddingDispatcher(model, [batch_size], progress=False, copy_outputs=False)
    t, p, s = step_inputs(model, batch_size)
    out = {}
    for name, fn in (("eager", lambda: model.decode_step(t, p, s)),
                     ("graph", lambda: disp.graphs.replay(batch_size))):
        for _ in range(5):
            fn()
        events = []
        for e in profiled_events(lambda: [fn() for _ in range(steps)], warmup=0):
            is_gpu = e.device_type == torch.autograd.DeviceType.CUDA
            launch = e.name in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC",
                                "cuLaunchKernelEx", "cudaGraphLaunch", "cudaMemcpyAsync",
                                "cudaMemsetAsync")
            if is_gpu or launch:
                events.append({"lane": "GPU" if is_gpu else "CPU", "name": e.name,
                               "start_us": float(e.time_range.start),
                               "dur_us": float(e.time_range.elapsed_us())})
        t0 = min(ev["start_us"] for ev in events) if events else 0.0
        for ev in events:
            ev["start_us"] -= t0
        events.sort(key=lambda ev: ev["start_us"])
        end = max((ev["start_us"] + ev["dur_us"] for ev in events), default=0.0)
        out[name] = {"events": events, "step_us": end / steps}
    disp.release()
    model = disp = None  # drop references before freeing
    _free()
    return out


def measure_pool_memory(preset_name: str,
                        sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
                        dtype: str = "bfloat16", max_seqs: Sequence[int] = (256, 1024),
                        gather_max_seq: int | None = 256) -> dict:
    """Record ``pool_memory_<preset>``: private pools vs one shared pool (both orders), the
    static ``logits_bytes``, ``by_max_seq`` (pool and KV cache bytes per ``max_seqs``) and
    ``gather`` (the gathering cache read at ``gather_max_seq``; ``None`` skips it)."""
    _need_cuda("measure_pool_memory")
    sizes = sorted({int(b) for b in sizes})
    max_seqs = sorted({int(m) for m in max_seqs})
    model = make_model(preset_name, max_batch=max(sizes), dtype=dtype)
    out: dict = {"preset": preset_name, "sizes": sizes, "dtype": dtype,
                 "max_seq": model.cfg.max_seq}

    gs = capture_decode_graphs(model, sizes, pool="private", order="largest_first",
                               progress=False)
    per = {str(b): pool_reserved_bytes(g.pool) for b, g in gs.graphs.items()}
    out["private"] = {"per_size_bytes": per, "total_bytes": sum(per.values()),
                      "capture_s": {str(b): g.capture_s for b, g in gs.graphs.items()}}
    out["largest_private_bytes"] = max(per.values())
    out["logits_bytes"] = int(gs.logits.numel() * gs.logits.element_size())
    gs.release()
    gs = None  # drop references before freeing
    _free()
    for order in ("largest_first", "smallest_first"):
        growth: dict[str, int] = {}
        gs = capture_decode_graphs(
            model, sizes, pool="shared", order=order, progress=False,
            on_captured=lambda b, g: growth.__setitem__(str(b), pool_reserved_bytes(g.pool)))
        pool_id = next(iter(gs.graphs.values())).pool
        out[f"shared_{order}"] = {
            "total_bytes": pool_reserved_bytes(pool_id),
            "capture_s": {str(b): g.capture_s for b, g in gs.graphs.items()},
            "growth_bytes": growth,
        }
        gs.release()
        del gs
        _free()
    model = None  # drop references before freeing
    _free()
    out["by_max_seq"] = {str(m): _shared_pool_at(preset_name, sizes, dtype, m, in_place=True)
                         for m in max_seqs}
    if gather_max_seq is not None:
        out["gather"] = {"max_seq": int(gather_max_seq),
                         **_shared_pool_at(preset_name, sizes, dtype, int(gather_max_seq),
                                           in_place=False)}
    return out


def _shared_pool_at(preset_name: str, sizes: list[int], dtype: str, max_seq: int, *,
                    in_place: bool) -> dict:
    """One shared pool captured largest-first at ``max_seq``: its bytes and the cache's."""
    model = make_model(preset_name, max_batch=max(sizes), dtype=dtype, max_seq=max_seq)
    assert isinstance(model.cache, SlotKVCache)  # make_model's default layout
    model.cache.in_place = in_place
    cache_bytes = sum(int(t.numel() * t.element_size()) for t in (model.k_cache, model.v_cache))
    gs = capture_decode_graphs(model, sizes, pool="shared", order="largest_first",
                               progress=False)
    total = pool_reserved_bytes(next(iter(gs.graphs.values())).pool)
    gs.release()
    gs = model = None  # drop references before freeing
    _free()
    return {"shared_largest_first_bytes": total, "kv_cache_bytes": cache_bytes}


def measure_dispatcher(preset_name: str,
                       capture_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128),
                       batch_sizes: Sequence[int] = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48,
                                                     64, 96, 128, 129, 160),
                       dtype: str = "bfloat16", repeats: int = 20, inner: int = 10) -> dict:
    """Record ``dispatcher_<preset>``: eager vs exact graph vs padded dispatch per batch size,
    the dispatcher called as a server calls it (host metadata, ``copy_outputs=False``)."""
    _need_cuda("measure_dispatcher")
    capture_sizes = sorted({int(b) for b in capture_sizes})
    batch_sizes = sorted({int(b) for b in batch_sizes})
    model = make_model(preset_name, max_batch=max(batch_sizes + capture_sizes), dtype=dtype)
    disp = PaddingDispatcher(model, capture_sizes, progress=False, copy_outputs=False)
    exact_sizes = [b for b in batch_sizes if b <= capture_sizes[-1]]
    exact = capture_decode_graphs(model, exact_sizes, pool="shared", progress=False)
    checks = {"dispatcher_tokens_equal_eager": all(tokens_match(model, disp.step, b)
                                                   for b in batch_sizes)}
    disp.reset_counters()

    def fns_at(b: int) -> Mapping[str, Callable[[], object]]:
        t, p, s = step_inputs(model, b)
        host = tuple(x.cpu() for x in (t, p, s))
        fns = {"eager": lambda: model.decode_step(t, p, s),
               "dispatcher": lambda: disp.step(*host)}
        if b in exact.graphs:
            exact.copy_inputs(t, p, s)
            fns["graph_exact"] = lambda: exact.replay(b)
        return fns

    times = time_sizes(batch_sizes, fns_at, ("eager", "graph_exact", "dispatcher"),
                       repeats=repeats, inner=inner)
    out = {
        "preset": preset_name,
        "dtype": dtype,
        "capture_sizes": capture_sizes,
        "batch_sizes": batch_sizes,
        "padded_to": [disp.padded_size(b) for b in batch_sizes],
        "times": times,
        "tokens_per_s": tokens_per_s_of(batch_sizes, times),
        "counters": disp.counters.to_dict(),
        "checks": checks,
    }
    disp.release()
    exact.release()
    model = disp = exact = None  # drop references before freeing
    _free()
    return out


def measure_compile(preset_name: str, batch_sizes: Sequence[int] = (1, 8),
                    dtype: str = "bfloat16", repeats: int = 30, inner: int = 10) -> dict:
    """Record ``compile_<preset>``: manual graphs vs ``torch.compile(mode='reduce-overhead')``:
    ``eager``, ``graph`` (a bare replay), ``dispatcher`` (inputs in, replay, logits out) and
    ``compile`` sampled in turn (``interleaved: True``)."""
    _need_cuda("measure_compile")
    batch_sizes = sorted({int(b) for b in batch_sizes})
    model = make_model(preset_name, max_batch=max(batch_sizes), dtype=dtype)
    t0 = time.perf_counter()
    disp = PaddingDispatcher(model, batch_sizes, progress=False)
    capture_s = time.perf_counter() - t0
    graph_pool = pool_reserved_bytes(next(iter(disp.graphs.graphs.values())).pool)
    before = _pool_segments()
    compiled, compile_s, agree = _compiled_step(model, batch_sizes)
    compile_pool = sum(v for k, v in _pool_segments().items() if k not in before) or None

    def fns_at(b: int) -> Mapping[str, Callable[[], object]]:
        t, p, s = step_inputs(model, b)
        disp.load_inputs(t, p, s)
        return {"eager": lambda: model.decode_step(t, p, s),
                "graph": lambda: disp.graphs.replay(b),
                "dispatcher": lambda: disp.step(t, p, s, check=False),
                "compile": lambda: compiled(t, p, s)}

    times = time_sizes(batch_sizes, fns_at, ("eager", "graph", "dispatcher", "compile"),
                       repeats=repeats, inner=inner)
    t, p, s = step_inputs(model, 1)
    kernels = {"eager": count_step_ops(model),
               "compile": _count_compiled_kernels(model, t, p, s)}
    out = {
        "preset": preset_name,
        "dtype": dtype,
        "batch_sizes": batch_sizes,
        "times": times,
        "interleaved": True,
        "compile_s": compile_s,
        "capture_s": capture_s,
        "memory": {"graph_pool_bytes": graph_pool, "compile_pool_bytes": compile_pool},
        "kernels_per_step": kernels,
        "gpu_ops_counted": records.GPU_OPS_SCOPE,
        "cudagraph_skips": _cudagraph_skips(),
        "checks": {"compile_tokens_equal_eager": agree == 1.0,
                   "compile_token_agreement": agree,
                   "graph_tokens_equal_eager": all(tokens_match(model, disp.step, b)
                                                   for b in batch_sizes)},
    }
    disp.release()
    model = disp = compiled = None  # drop references before freeing
    torch._dynamo.reset()
    _free()
    return out


def _pool_segments() -> dict:
    """Reserved bytes per non-default pool id, from the allocator snapshot."""
    out: dict = {}
    for seg in torch.cuda.memory_snapshot():
        pid = tuple(seg.get("segment_pool_id", (0, 0)))
        if pid != (0, 0):
            out[pid] = out.get(pid, 0) + int(seg["total_size"])
    return out


def _count_compiled_kernels(model: TinyGPT, t, p, s) -> int:
    """GPU ops of the decode step compiled without CUDA graphs: what fusion leaves."""
    import torch._dynamo

    try:
        torch._dynamo.reset()
        fn = torch.compile(model.decode_step, mode="default")
        return count_gpu_ops(lambda: fn(t, p, s))  # inputs made outside: the step alone
    except Exception:
        return -1


def _cudagraph_skips() -> list[str]:
    try:
        from torch._dynamo.utils import counters

        return sorted(str(k) for k in counters.get("inductor", {}) if "skip" in str(k))
    except Exception:
        return []


def measure_dispatcher_overhead(presets: Sequence[str] = ("small", "gpt2"),
                                batch_sizes: Sequence[int] = (1, 8, 64),
                                dtype: str = "bfloat16", repeats: int = 15, inner: int = 50, *,
                                device: str = "cuda",
                                timer: Callable[..., dict[str, Stats]] | None = None) -> dict:
    """Record ``dispatcher_overhead``: where a dispatcher's step time over a bare replay of its
    own graph goes, per model and size, the ways of :func:`_overhead_fns`
    (:data:`labkit.measure.records.OVERHEAD_METHODS`) sampled in turn, tokens and every way's
    logits checked first. ``device``/``timer`` let a CPU test run it."""
    if device == "cuda":
        _need_cuda("measure_dispatcher_overhead")
    sizes = sorted({int(b) for b in batch_sizes})
    runs = []
    for name in presets:
        model = build_model(preset(name, max_batch=max(sizes), dtype=dtype), device, seed=0)
        disp = PaddingDispatcher(model, sizes, progress=False, copy_outputs=False)
        graph = disp.runner("FULL")
        checks: dict[str, bool] = {"dispatcher_tokens_equal_eager": all(
            tokens_match(model, disp.step, b) for b in sizes), "same_logits_every_method": True}

        def fns_at(b: int) -> Mapping[str, Callable[[], object]]:
            t, p, s = step_inputs(model, b)
            fns = _overhead_fns(disp, graph, b, (t, p, s), tuple(x.cpu() for x in (t, p, s)))
            disp.batch.load(t, p, s)
            want = graph.replay(b)[:b].clone()  # every way computes these rows, same inputs
            for fn in fns.values():
                checks["same_logits_every_method"] &= bool(torch.equal(fn()[:b], want))
            return fns

        times = time_sizes(sizes, fns_at, records.OVERHEAD_METHODS, repeats=repeats,
                           inner=inner, timer=timer)
        runs.append({"preset": name, "batch_sizes": sizes, "times": times, "checks": checks})
        disp.release()
        model = disp = graph = None  # drop references before freeing
        if device == "cuda":
            _free()
    return {"dtype": dtype, "repeats": repeats, "inner": inner, "runs": runs}


def _overhead_fns(disp: PaddingDispatcher, graph: Any, b: int,
                  device: tuple[torch.Tensor, ...], host: tuple[torch.Tensor, ...]
                  ) -> dict[str, Callable[[], torch.Tensor]]:
    """The ways :func:`measure_dispatcher_overhead` runs one step of ``b`` rows: ``replay``,
    ``copy_replay`` (device inputs copied in), ``stage_replay`` (host inputs staged),
    ``step_device``, ``step_host`` (as servers call it), ``step_host_copy`` (logits copied)."""

    def copy_replay(inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        disp.batch.load(*inputs)
        return graph.replay(b)  # type: ignore[no-any-return]

    return {"replay": lambda: graph.replay(b),
            "copy_replay": lambda: copy_replay(device),
            "stage_replay": lambda: copy_replay(host),
            "step_device": lambda: disp.step(*device, check=False),
            "step_host": lambda: disp.step(*host),
            "step_host_copy": lambda: disp.step(*host).clone()}
