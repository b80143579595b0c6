"""Record ``memory_budget_<preset>``: the paged KV cache sized as an engine sizes it after
profiling, with the graphs' memory measured, estimated as vLLM estimates it, or ignored, and
what each capture list costs at start-up (notebook 16).

vLLM (``Worker.determine_available_memory``, vllm/v1/worker/gpu_worker.py): ``profile_run``
runs one dummy forward pass at ``max_num_batched_tokens`` and counts the torch peak over the
weights as activations; since PR #30515 ``GPUModelRunner.profile_cudagraph_memory``
(vllm/v1/worker/gpu_model_runner.py) captures the two largest sizes into one temporary pool,
reads what each took from ``torch.cuda.mem_get_info`` and extrapolates
(:func:`labkit.sizes.engines.vllm_graph_estimate`); the KV cache gets ``total *
gpu_memory_utilization`` less the weights, that peak and that estimate. Here every capture's
bytes are the allocator's per-pool accounting, for the two samples as for the whole list, so
the estimate's error is the extrapolation's alone.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from labkit.checks import as_int, as_int_list, as_number
from labkit.graphs import (POOL_MODES, CapturedGraph, CaptureOOMError, PoolMode,
                           capture_decode_graphs, pool_reserved_bytes)
from labkit.measure.bench import (
    _free, _need_cuda, _pool_segments, step_inputs,
)
from labkit.runner import PaddingDispatcher
from labkit.measure.serving_metrics import run_metrics
from labkit.model import TinyGPT, build_model, preset
from labkit.serving.loop import RealClock, ServingEngine
from labkit.serving.traces import load_request_trace
from labkit.sizes.engines import (from_sglang, from_vllm, kv_plan, vllm_graph_estimate,
                                  vllm_sample_sizes)
from labkit.step_checks import check_capture_sizes, check_choice

#: the capture lists measured by default: labkit's, vLLM 0.13.0's for ``max_num_seqs=256`` (51
#: sizes to 512 tokens) and SGLang 0.5.6's on an H200 (36 sizes to 256 requests)
SIZE_LISTS: dict[str, list[int]] = {
    "labkit": [1, 2, 4, 8, 16, 32, 64, 128],
    "vllm": list(from_vllm(max_num_seqs=256).capture_sizes),
    "sglang": list(from_sglang().capture_sizes),
}


def _paged_model(preset_name: str, max_batch: int, max_seq: int, dtype: str,
                 block_size: int) -> TinyGPT:
    """The model on the paged cache with two blocks: graph memory does not depend on the
    number of blocks (the step gathers ``max_seq`` positions per row through the table)."""
    cfg = preset(preset_name, max_batch=max_batch, max_seq=max_seq, dtype=dtype,
                 kv_layout="paged", block_size=block_size, num_blocks=2)
    return build_model(cfg, "cuda", seed=0)


def _peak_activation_bytes(model: TinyGPT, batch: int) -> int:
    """The allocator's peak over what is allocated, during one eager dummy step of ``batch``
    rows (after one warm-up step), as vLLM's ``profile_run`` reads it."""
    t, p, s = step_inputs(model, batch)
    model.decode(t, p, s)
    _free()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    model.decode(t, p, s)
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - before)


def _capture_all(model: TinyGPT, sizes: list[int], pool: PoolMode) -> dict[str, Any]:
    """Every size captured (largest first) into ``pool``-mode pools: their bytes, the drop in
    free device memory (static buffers and the driver's graph objects too), the seconds per
    size and the wall-clock start-up; out of memory: the error's text under ``oom``."""
    _free()
    free_before = torch.cuda.mem_get_info()[0]
    t0 = time.perf_counter()
    try:
        gs = capture_decode_graphs(model, sizes, pool=pool, progress=False)
    except CaptureOOMError as exc:
        _free()
        return {"oom": str(exc)}
    startup = time.perf_counter() - t0
    device = free_before - torch.cuda.mem_get_info()[0]
    segments = _pool_segments()
    out = {"measured_bytes": sum(segments.get(tuple(pid), 0) for pid in gs.pools()),
           "device_bytes": int(device), "startup_s": startup,
           "capture_s": {b: g.capture_s for b, g in gs.graphs.items()},
           "warmup_s": {b: g.warmup_s for b, g in gs.graphs.items()}}
    gs.release()
    del gs
    _free()
    return out


def _capture_samples(model: TinyGPT, sizes: list[int], pool: PoolMode) -> dict[str, Any]:
    """vLLM's two sampled captures (:func:`vllm_sample_sizes`, largest first) in ``pool``
    mode: the bytes each capture added (one shared pool: its growth; private: each pool), and
    the drop in free device memory over the second capture (``second_device_bytes``: what
    vLLM's ``mem_get_info`` reads for it, the driver's graph objects included)."""
    sample = vllm_sample_sizes(sizes)
    after: dict[int, tuple[int, int]] = {}

    def read(b: int, g: CapturedGraph) -> None:
        after[b] = (pool_reserved_bytes(g.pool), torch.cuda.mem_get_info()[0])

    _free()
    try:
        gs = capture_decode_graphs(model, sample, pool=pool, progress=False, on_captured=read)
    except CaptureOOMError as exc:
        _free()
        return {"sample_sizes": sample, "sample_oom": str(exc)}
    got = [after[b][0] for b in sample]
    if pool == "shared":  # cumulative bytes of one pool -> what each capture added
        got = [got[0], *(b - a for a, b in itertools.pairwise(got))]
    out: dict[str, Any] = {"sample_sizes": sample, "sample_bytes": got}
    if len(sample) == 2:
        out["second_device_bytes"] = after[sample[0]][1] - after[sample[1]][1]
    gs.release()
    del gs
    _free()
    return out


def measure_captures(preset_name: str, size_lists: Mapping[str, list[int]],
                     max_seqs: Sequence[int], pools: Sequence[PoolMode], dtype: str,
                     block_size: int) -> dict[str, Any]:
    """The GPU part of :func:`measure_memory_budget`: the device's total bytes; per ``max_seq``
    the weights (the position table grows with it) and the peak of one eager dummy step at the
    largest size; per capture list, ``max_seq`` and pool mode the full capture and vLLM's two
    samples."""
    largest = max(max(s) for s in size_lists.values())
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(),
                           "total_bytes": int(torch.cuda.mem_get_info()[1]),
                           "activation_batch": largest, "weights_bytes": {},
                           "activation_bytes": {}, "captures": []}
    for max_seq in max_seqs:
        model = _paged_model(preset_name, largest, max_seq, dtype, block_size)
        out["weights_bytes"][max_seq] = sum(p.numel() * p.element_size()
                                            for p in model.parameters())
        out["activation_bytes"][max_seq] = _peak_activation_bytes(model, largest)
        for name, sizes in size_lists.items():
            for pool in pools:
                out["captures"].append({"size_list": name, "max_seq": max_seq, "pool": pool,
                                        **_capture_all(model, sizes, pool),
                                        **_capture_samples(model, sizes, pool)})
        del model
        _free()
    return out


def budget_record(raw: Mapping[str, Any], preset_name: str,
                  size_lists: Mapping[str, list[int]], max_seqs: list[int], pools: Sequence[str],
                  utilization: float, context: int | None, dtype: str,
                  block_size: int) -> dict[str, Any]:
    """The ``memory_budget_<preset>`` record from the measured numbers of
    :func:`measure_captures` (``raw``): per capture, vLLM's estimate from its samples and the
    KV cache each way of counting graphs leaves (:func:`labkit.sizes.engines.kv_plan`) at
    ``context`` tokens per request (``None``: the point's ``max_seq``, as vLLM counts at
    ``max_model_len``)."""
    cfg = preset(preset_name, dtype=dtype)
    dims = {"n_layer": cfg.n_layer, "n_head": cfg.n_head, "head_dim": cfg.head_dim,
            "block_size": block_size, "dtype_bytes": torch.finfo(cfg.torch_dtype).bits // 8}
    total = int(raw["total_bytes"])
    points = []
    for c in raw["captures"]:
        sizes = list(size_lists[c["size_list"]])
        ctx = context or int(c["max_seq"])
        estimate = (vllm_graph_estimate(c["sample_bytes"], len(sizes))
                    if "sample_bytes" in c else None)
        other = int(raw["weights_bytes"][c["max_seq"]] + raw["activation_bytes"][c["max_seq"]])
        measured = c.get("measured_bytes")
        ways = {way: kv_plan(total, utilization, other, reserved, measured, **dims, context=ctx)
                for way, reserved in (("measured", measured), ("estimate", estimate),
                                      ("ignored", 0)) if reserved is not None}
        points.append({**c, "context": ctx, "sizes": sizes, "estimate_bytes": estimate,
                       "ways": ways})
    block_bytes = 2 * cfg.n_layer * cfg.n_head * cfg.head_dim * block_size * dims["dtype_bytes"]
    return {"preset": preset_name, "dtype": dtype, "device": raw.get("device", ""),
            "total_bytes": total, "utilization": utilization, "block_size": block_size,
            "kv_block_bytes": block_bytes, "weights_bytes": dict(raw["weights_bytes"]),
            "activation_batch": int(raw["activation_batch"]),
            "activation_bytes": dict(raw["activation_bytes"]),
            "size_lists": {k: list(v) for k, v in size_lists.items()}, "max_seqs": max_seqs,
            "pools": list(pools), "points": points}


def graph_update_verdict() -> dict[str, Any]:
    """What this torch offers for updating a captured graph in place instead of capturing it
    again: ``torch.cuda.CUDAGraph``'s public methods, whether it hands out the raw
    ``cudaGraph_t`` / ``cudaGraphExec_t`` (``raw_cuda_graph``, ``raw_cuda_graph_exec``),
    whether a capture can keep its ``cudaGraph_t`` uninstantiated (``CUDAGraph(keep_graph=
    True)``) and whether cuda-python's ``cuda.bindings`` imports with ``cudaGraphExecUpdate``;
    an update path (capture the new graph, update the old executable with it) needs all three
    (``update_possible``). No update path is built."""
    methods = sorted(n for n in dir(torch.cuda.CUDAGraph) if not n.startswith("_"))
    raw = all(n in methods for n in ("raw_cuda_graph", "raw_cuda_graph_exec"))
    try:
        keep = "keep_graph" in inspect.signature(torch.cuda.CUDAGraph).parameters
    except (TypeError, ValueError):  # a C type without a signature
        keep = False
    try:
        bindings: Any = importlib.import_module("cuda.bindings")
        runtime = importlib.import_module("cuda.bindings.runtime")
        version: str | None = str(getattr(bindings, "__version__", "unknown"))
        exec_update = hasattr(runtime, "cudaGraphExecUpdate")
    except (ImportError, OSError, RuntimeError):  # not installed, or not for this driver
        version, exec_update = None, False
    return {"torch": torch.__version__, "cuda_graph_methods": methods,
            "update_method": [n for n in methods if "update" in n.lower()],
            "raw_handles": raw, "keep_graph": keep, "cuda_bindings": version,
            "bindings_exec_update": exec_update,
            "update_possible": raw and keep and exec_update}


def measure_memory_budget(preset_name: str, size_lists: Mapping[str, Sequence[int]] | None = None,
                          max_seqs: Sequence[int] = (256, 1024),
                          pools: Sequence[PoolMode] = POOL_MODES, utilization: float = 0.9,
                          context: int | None = None, dtype: str = "bfloat16",
                          block_size: int = 16) -> dict[str, Any]:
    """Record ``memory_budget_<preset>``: per capture list (default :data:`SIZE_LISTS`),
    ``max_seq`` and pool mode, the graphs' memory measured (every size captured), vLLM's
    estimate (its two samples, extrapolated) and ignored, the KV bytes, blocks and requests
    of ``context`` tokens each leaves of ``total * utilization`` less the weights and the
    peak of one eager dummy step at the largest size, and the capture seconds per size
    (what a lazy capture adds to a size's first request); with :func:`graph_update_verdict`.
    The dummy step runs at the largest capture size: vLLM's ``profile_run`` runs one at
    ``max_num_batched_tokens`` (8192 tokens on an H200), a mixed batch labkit's decode step
    cannot hold. An out-of-memory capture is reported under ``oom``; the others go on."""
    preset(preset_name, dtype=dtype)  # the preset and dtype checked before anything runs
    lists = {str(k): check_capture_sizes(v) for k, v in (size_lists or SIZE_LISTS).items()}
    seqs = sorted(set(as_int_list(max_seqs, "max_seqs", minimum=1)))
    modes = [check_choice(p, "pools", POOL_MODES) for p in pools]
    u = as_number(utilization, "utilization", minimum=0, fix="give a fraction in (0, 1]")
    if not 0 < u <= 1:
        raise ValueError(f"utilization must be in (0, 1], got {utilization!r}")
    ctx = None if context is None else as_int(context, "context", minimum=1)
    block_size = as_int(block_size, "block_size", minimum=1)
    if not lists or not modes or any(m % block_size for m in seqs):
        raise ValueError(f"give at least one size list and pool mode, and max_seqs {seqs} "
                         f"that are multiples of block_size={block_size}")
    _need_cuda("measure_memory_budget")
    raw = measure_captures(preset_name, lists, seqs, modes, dtype, block_size)
    return {**budget_record(raw, preset_name, lists, seqs, modes, u, ctx, dtype, block_size),
            "graph_update": graph_update_verdict()}


def measure_lazy(preset_name: str = "small", trace: str = "synthetic_requests_poisson",
                 sizes: Sequence[int] = (1, 2, 4, 8, 16, 32), max_requests: int = 120,
                 dtype: str = "bfloat16") -> dict[str, Any]:
    """Record ``lazy_<preset>``: ``trace`` served in real time with FULL graphs captured at
    start-up, then with a fresh model whose dispatcher captures each size on first use
    (``PaddingDispatcher(lazy=True)``): the start-up capture's seconds, each lazily captured
    size's wait, the steps that waited against the run's median step, and both runs' TTFT
    and ITL percentiles. One run each: a cost described, not a verdict."""
    _need_cuda("measure_lazy")
    reqs = load_request_trace(trace)[:max_requests]
    out: dict[str, Any] = {"preset": preset_name, "dtype": dtype, "trace": trace,
                           "sizes": list(sizes), "requests": len(reqs), "runs": {}}
    for arm in ("startup", "lazy"):
        model = build_model(preset(preset_name, max_batch=max(sizes), dtype=dtype), "cuda")
        t0 = time.perf_counter()
        disp = PaddingDispatcher(model, sizes, progress=False, lazy=arm == "lazy")
        torch.cuda.synchronize()
        built_s = time.perf_counter() - t0
        run = ServingEngine(model, disp.step, clock=RealClock("cuda")).run(reqs)
        data = run.to_data()
        m = run_metrics(data["requests"], data["steps"])
        steps = [s["end_s"] - s["start_s"] for s in data["steps"]]
        ordered = sorted(steps)
        out["runs"][arm] = {
            "built_s": built_s, "lazy_capture_s": {str(b): v for b, v in
                                                   sorted(disp.lazy_capture_s.items())},
            "median_step_s": ordered[len(ordered) // 2], "longest_steps_s": ordered[-8:][::-1],
            "ttft_ms": {k: m["ttft_ms"][k] for k in ("median", "p90", "p99")},
            "itl_ms": {k: m["itl_ms"][k] for k in ("median", "p90", "p99")}}
        disp.release()
        del model, disp, run
        _free()
    return out
