"""Record ``triton_<preset>``: the Triton decode step beside the readable FULL graph and the
PyTorch fused step's graph, on a GPU (notebook 12's Triton column).

Correct before fast: float32 Triton tokens equal readable ones (slot and paged), the bf16
agreement, graph tokens equal eager ones; then the three graphs replayed in turn per batch size
at ``context`` positions (against the floor: :mod:`labkit.roofline.stepcost` at the copy
bandwidth), and last (a profiler slows later launches) each step's GPU operations, the Triton
count checked against its plan.
``python -m labkit.measure.recorder RUN_DIR triton_small triton_gpt2`` records it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

import torch

from labkit import kernels
from labkit.checks import as_int
from labkit.fused import agreement, make_fused_step
from labkit.graphs import GraphSet, capture_decode_graphs
from labkit.roofline.kernel_plan import kernel_plan, kernels_per_step, plan_totals
from labkit.measure.bench import (
    _free, _need_cuda, make_model, random_prompts, step_inputs, time_sizes,
)
from labkit.measure.fused_bench import check_counts, same_tokens, tokens_equal_readable
from labkit.measure.opcount import gpu_op_profile, profile_call
from labkit.measure.roofline import copy_bandwidth, graph_step
from labkit.roofline.stepcost import floor_us, step_bytes
from labkit.timing import time_cuda_interleaved
from labkit.kernels.step import make_triton_step
from labkit.model import TinyGPT

#: the steps of the record, in the order they are timed within each round
STEPS: tuple[str, ...] = ("readable", "fused", "triton")
def derived(times: Mapping[str, Sequence[Mapping]], floors: Sequence[float]) -> dict:
    """Ratios of the medians: ``x_floor`` (median / floor), ``speedup_vs_fused`` and
    ``speedup_vs_readable`` (above 1: the Triton graph is the faster)."""
    med = {s: [float(t["median"]) for t in ts] for s, ts in times.items()}
    return {"x_floor": {s: [round(m / f, 3) for m, f in zip(ms, floors)]
                        for s, ms in med.items()},
            "speedup_vs_fused": [f / t for f, t in zip(med["fused"], med["triton"])],
            "speedup_vs_readable": [r / t for r, t in zip(med["readable"], med["triton"])]}


def time_replays(model: TinyGPT, graphs: Mapping[str, GraphSet], sizes: Sequence[int],
                 context: int, repeats: int, inner: int) -> dict[str, list[dict]]:
    """Per graph set, per batch size: the replay's timing (:meth:`Stats.to_dict`), every set
    replayed in turn round after round on the same inputs at ``context`` positions."""
    def fns_at(b: int) -> dict[str, Callable[[], object]]:
        inputs = step_inputs(model, b, context=context)
        for gs in graphs.values():
            gs.copy_inputs(*inputs)
        return {name: partial(gs.replay, b) for name, gs in graphs.items()}

    return time_sizes(sizes, fns_at, list(graphs), repeats=repeats, inner=inner,
                      timer=time_cuda_interleaved)


def uncompiled_reason() -> str | None:
    """Why the Triton step cannot be timed here (``None``: its kernels compile for the GPU)."""
    reason = kernels.unavailable_reason()
    if reason is not None:
        return f"measure_triton needs Triton: {reason}"
    if kernels.interpreted():
        return ("the Triton kernels were loaded for the interpreter (TRITON_INTERPRET=1): a "
                "timing of the interpreter measures the host; run in a process without "
                "TRITON_INTERPRET")
    return None


def _need_compiled() -> None:
    reason = uncompiled_reason()
    if reason is not None:
        raise RuntimeError(reason)


def float32_checks(preset_name: str, batch_sizes: Sequence[int], new_tokens: int,
                   max_seq: int) -> dict[str, bool]:
    """Float32: Triton greedy tokens equal readable ones (slot layout, and paged)."""
    sizes = sorted({batch_sizes[0], batch_sizes[-1]})
    out = {}
    for layout, key, at in (("slot", "triton_tokens_equal_readable_float32", sizes),
                            ("paged", "triton_tokens_equal_readable_float32_paged",
                             sizes[:1])):
        model = make_model(preset_name, max_batch=max(batch_sizes), dtype="float32",
                           max_seq=max_seq, kv_layout=layout)
        try:
            out[key] = tokens_equal_readable(model, make_triton_step(model), at, new_tokens)
        finally:
            model = None
            _free()
    return out


def measure_triton(preset_name: str = "gpt2", batch_sizes: Sequence[int] = (1, 8, 64),
                   dtype: str = "bfloat16", context: int = 128, max_seq: int = 256,
                   repeats: int = 30, inner: int = 10, new_tokens: int = 8,
                   kv_layout: str = "slot") -> dict:
    """Record ``triton_<preset>`` (see the module docstring); ``kv_layout="paged"`` times the
    three steps over the paged cache (``triton_<preset>_paged``)."""
    sizes, repeats, inner, new_tokens = check_counts(batch_sizes, repeats, inner, new_tokens)
    max_seq = as_int(max_seq, "max_seq", minimum=2, fix="give the cache's positions per slot")
    context = as_int(context, "context", minimum=1, maximum=max_seq,
                     fix=f"give the positions each row attends to, at most max_seq={max_seq}")
    _need_cuda("measure_triton")
    _need_compiled()
    bandwidth = copy_bandwidth()
    checks: dict[str, bool | float] = {**float32_checks(preset_name, sizes, new_tokens, max_seq)}
    model = make_model(preset_name, max_batch=max(sizes), dtype=dtype, max_seq=max_seq,
                       kv_layout=kv_layout)
    cfg = model.cfg
    triton_step = make_triton_step(model)
    agree = agreement(model, random_prompts(model, max(sizes)), new_tokens, step=triton_step)
    checks["triton_token_agreement"] = agree.fraction
    eager: dict[str, Callable[..., torch.Tensor]] = {
        "readable": model.decode_step, "fused": make_fused_step(model), "triton": triton_step}
    graphs: dict[str, GraphSet] = {}
    try:
        for name in STEPS:
            graphs[name] = capture_decode_graphs(model, sizes, step=eager[name],
                                                 progress=False)
            checks[f"graph_tokens_equal_eager.{name}"] = all(
                same_tokens(model, eager[name], graph_step(graphs[name]), b, new_tokens)
                for b in sizes)
        checks["graph_tokens_equal_eager"] = all(checks[f"graph_tokens_equal_eager.{s}"]
                                                 for s in STEPS)
        if kv_layout == "paged":  # blocks for the positions read (else the pad block)
            for i in range(max(sizes)):
                model.cache.reserve(i, context)
        times = time_replays(model, graphs, sizes, context, repeats, inner)
        count_batch = sizes[0]
        ops, op_us = {}, {}
        ops_total: dict[str, list[int]] = {s: [] for s in STEPS}
        kernel_us: dict[str, list[float]] = {s: [] for s in STEPS}
        graph_ops: dict[str, list[int]] = {s: [] for s in STEPS}
        for s in STEPS:
            for b in sizes:
                t, p, sl = step_inputs(model, b, context=context)
                step = eager[s]  # profiled in this iteration: the lambda needs no defaults
                prof = gpu_op_profile(lambda: step(t, p, sl, check=False))
                if b == count_batch:
                    ops[s] = {k: int(v["count"]) for k, v in prof.items()}
                    op_us[s] = {k: round(v["us"], 3) for k, v in prof.items()}
                ops_total[s].append(int(sum(v["count"] for v in prof.values())))
                kernel_us[s].append(round(sum(v["us"] for v in prof.values()), 3))
                graphs[s].copy_inputs(t, p, sl)
                gs = graphs[s]
                graph_ops[s].append(int(profile_call(lambda: gs.replay(b))["gpu_ops"]))
    finally:
        for gs in graphs.values():
            gs.release()
    expected = kernels_per_step(cfg.n_layer)
    checks["triton_kernels_per_step_equal_plan"] = all(n == expected
                                                      for n in ops_total["triton"])
    checks["triton_graph_ops_equal_plan"] = all(n == expected for n in graph_ops["triton"])
    launch = [triton_step.launch_shape(b) for b in sizes]
    plans = [kernel_plan(cfg, b, context, splits=ls["splits"]) for b, ls in zip(sizes, launch)]
    nbytes = [step_bytes(cfg, b, context) for b in sizes]
    floors = [floor_us(sb.total, bandwidth["gbps"]) for sb in nbytes]
    data = {
        "preset": preset_name, "dtype": dtype, "config": cfg.to_dict(), "context": context,
        "kv_layout": kv_layout, "batch_sizes": sizes, "steps": list(STEPS), "interleaved": True,
        "repeats": repeats, "inner": inner, "times": times, "bandwidth": bandwidth,
        "step_bytes": [sb.to_dict() for sb in nbytes], "floor_us": floors,
        **derived(times, floors),
        "count_batch": count_batch, "ops": ops, "op_us": op_us, "ops_total": ops_total,
        "kernel_us": kernel_us, "graph_ops": graph_ops,
        "triton_kernels_per_step": expected, "triton_launch": launch,
        "plan": plans[0], "plan_totals": [plan_totals(p) for p in plans],
        "agreement": agree.to_dict(), "checks": checks,
        "device": torch.cuda.get_device_name(), "versions": _versions(),
    }
    model = triton_step = eager = None
    _free()
    return data


def _versions() -> dict:
    import triton

    return {"torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda}
