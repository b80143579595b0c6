"""Record ``past_launch_<preset>``: the Triton decode step's three schedules side by side on a
GPU (notebook 17): one kernel after another (``triton``), programmatic dependent launch
(``triton_pdl``) and one persistent launch per layer (``triton_persistent``), against the
floor.

Fidelity before speed (:mod:`labkit.measure.fidelity`): float32 tokens of every step equal the
readable step's (slot layout; paged for the Triton steps), then every step's agreement and KL
against a float32 reference in the timed dtype; a step that fails the gate is not timed.
Graph tokens equal eager ones; then each step's graph replayed in turn per batch size at
``context`` positions, interleaved (the persistent step also at each of ``programs_per_sm``),
and last (a profiler slows later launches) each step's GPU kernels: their count and summed
GPU time, so that ``replay - kernels`` is the time the GPU spent between them.
``python -m labkit.measure.recorder RUN_DIR past_launch_small past_launch_gpt2`` records it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from labkit.checks import as_int, as_size_list
from labkit.fused import make_fused_step
from labkit.graphs import GraphSet, capture_decode_graphs
from labkit.kernels.step import kernels_per_step, make_triton_step
from labkit.measure import records
from labkit.measure.bench import _free, _need_cuda, make_model, random_prompts, step_inputs
from labkit.measure.fidelity import step_fidelity
from labkit.measure.fused_bench import check_counts, same_tokens, tokens_equal_readable
from labkit.measure.opcount import gpu_op_profile
from labkit.measure.roofline import copy_bandwidth, graph_step
from labkit.measure.triton_bench import _need_compiled, _versions, time_replays
from labkit.model import TinyGPT
from labkit.roofline.stepcost import floor_us, step_bytes
from labkit.runner import triton_schedule

#: the timed steps, in the order they are replayed within each round
STEPS: tuple[str, ...] = records.PAST_LAUNCH_STEPS
#: the steps whose fidelity is reported
FIDELITY_STEPS: tuple[str, ...] = ("readable", "fused", *STEPS)


def _steps(model: TinyGPT, names: Sequence[str], programs: int | None = None,
           cooperative: bool = True) -> dict[str, Callable[..., torch.Tensor]]:
    out: dict[str, Callable[..., torch.Tensor]] = {}
    for name in names:
        if name == "readable":
            out[name] = model.decode_step
        elif name == "fused":
            out[name] = make_fused_step(model)
        else:
            schedule = triton_schedule(name)  # type: ignore[arg-type]
            if schedule == "persistent":
                out[name] = make_triton_step(model, schedule=schedule, programs=programs,
                                             cooperative=cooperative)
            else:
                out[name] = make_triton_step(model, schedule=schedule)
    return out


def float32_equal(preset_name: str, sizes: Sequence[int], new_tokens: int,
                  max_seq: int) -> dict[str, bool]:
    """Float32 greedy tokens of every step equal the readable step's: at the smallest and
    largest size in the slot layout, and (Triton steps) at the smallest in the paged one."""
    out: dict[str, bool] = {}
    at = sorted({sizes[0], sizes[-1]})
    for layout in ("slot", "paged"):
        model: TinyGPT | None = make_model(preset_name, max_batch=max(sizes), dtype="float32",
                                           max_seq=max_seq, kv_layout=layout)
        assert model is not None
        names = FIDELITY_STEPS[1:] if layout == "slot" else STEPS
        try:
            for name, step in _steps(model, names).items():
                ok = tokens_equal_readable(model, step, at if layout == "slot" else at[:1],
                                           new_tokens)
                out[name] = out.get(name, True) and ok
        finally:
            model = None
            _free()
    out["readable"] = True
    return out


def measure_past_launch(preset_name: str = "gpt2", batch_sizes: Sequence[int] = (1, 8, 64),
                        dtype: str = "bfloat16", context: int = 128, max_seq: int = 256,
                        repeats: int = 30, inner: int = 10, new_tokens: int = 8,
                        fidelity_tokens: int = 16,
                        programs_per_sm: Sequence[int] = (1, 2, 4),
                        cooperative: bool = True) -> dict:
    """Record ``past_launch_<preset>`` (see the module docstring)."""
    sizes, repeats, inner, new_tokens = check_counts(batch_sizes, repeats, inner, new_tokens)
    max_seq = as_int(max_seq, "max_seq", minimum=2, fix="give the cache's positions per slot")
    context = as_int(context, "context", minimum=1, maximum=max_seq,
                     fix=f"give the positions each row attends to, at most max_seq={max_seq}")
    fidelity_tokens = as_int(fidelity_tokens, "fidelity_tokens", minimum=2,
                             fix="decode at least 2 tokens for the fidelity gate")
    per_sm = as_size_list(programs_per_sm, "programs_per_sm",
                          fix="give programs per SM such as [1, 2, 4]")
    _need_cuda("measure_past_launch")
    _need_compiled()
    bandwidth = copy_bandwidth()
    checks: dict[str, bool] = {}
    f32 = float32_equal(preset_name, sizes, new_tokens, max_seq)
    model: TinyGPT | None = make_model(preset_name, max_batch=max(sizes), dtype=dtype,
                                       max_seq=max_seq)
    assert model is not None
    cfg = model.cfg
    sm = torch.cuda.get_device_properties(model.device).multi_processor_count
    cooperative_error = None
    if cooperative:  # can a graph hold a cooperative launch here? else launch plainly
        try:
            probe = _steps(model, ["triton_persistent"])["triton_persistent"]
            capture_decode_graphs(model, sizes[:1], step=probe, progress=False).release()
        except RuntimeError as exc:
            cooperative, cooperative_error = False, f"{type(exc).__name__}: {exc}"[:400]
    steps = _steps(model, FIDELITY_STEPS, cooperative=cooperative)
    fidelity = step_fidelity(model, steps, random_prompts(model, max(sizes)), fidelity_tokens,
                             float32_equal=f32)
    timed = [s for s in STEPS if fidelity[s]["passes"]]
    eager = {s: steps[s] for s in timed}
    variants = {f"triton_persistent@{k}": _steps(model, ["triton_persistent"], programs=k * sm,
                                                 cooperative=cooperative)["triton_persistent"]
                for k in per_sm} if "triton_persistent" in timed else {}
    graphs: dict[str, GraphSet] = {}
    refused: dict[str, str] = {}
    try:
        for name, step in {**eager, **variants}.items():
            try:
                graphs[name] = capture_decode_graphs(model, sizes, step=step, progress=False)
            except RuntimeError as exc:  # a grid the GPU cannot hold at once (cooperative)
                if name not in variants:
                    raise
                refused[name] = f"{type(exc).__name__}: {exc}"[:400]
                continue
            checks[f"graph_tokens_equal_eager.{name}"] = all(
                same_tokens(model, step, graph_step(graphs[name]), b, new_tokens)
                for b in sizes)
        times = time_replays(model, graphs, sizes, context, repeats, inner)
        kernels: dict[str, list[int]] = {s: [] for s in timed}
        kernel_us: dict[str, list[float]] = {s: [] for s in timed}
        for s in timed:
            for b in sizes:
                t, p, sl = step_inputs(model, b, context=context)
                step = eager[s]  # profiled in this iteration: the lambda needs no defaults
                prof = gpu_op_profile(lambda: step(t, p, sl, check=False))
                kernels[s].append(int(sum(v["count"] for v in prof.values())))
                kernel_us[s].append(round(sum(v["us"] for v in prof.values()), 3))
    finally:
        for gs in graphs.values():
            gs.release()
    for s in timed:
        expected = kernels_per_step(cfg.n_layer, triton_schedule(s))  # type: ignore[arg-type]
        checks[f"kernels_per_step_equal_plan.{s}"] = all(n == expected for n in kernels[s])
    checks["graph_tokens_equal_eager"] = all(v for k, v in checks.items()
                                             if k.startswith("graph_tokens_equal_eager."))
    checks["every_step_passes_the_gate"] = all(fidelity[s]["passes"] for s in FIDELITY_STEPS)
    nbytes = [step_bytes(cfg, b, context) for b in sizes]
    floors = [floor_us(sb.total, bandwidth["gbps"]) for sb in nbytes]
    launch = {s: [eager[s].launch_shape(b) for b in sizes] for s in timed}  # type: ignore
    data = {
        "preset": preset_name, "dtype": dtype, "config": cfg.to_dict(), "context": context,
        "batch_sizes": sizes, "steps": list(STEPS), "timed": timed, "interleaved": True,
        "repeats": repeats, "inner": inner, "times": times, "bandwidth": bandwidth,
        "step_bytes": [sb.to_dict() for sb in nbytes], "floor_us": floors,
        "sm_count": sm, "programs_per_sm": per_sm, "cooperative": cooperative,
        "cooperative_error": cooperative_error, "refused": refused,
        "kernels": kernels, "kernel_us": kernel_us, "launch": launch,
        "fidelity": fidelity, "fidelity_tokens": fidelity_tokens, "checks": checks,
        "device": torch.cuda.get_device_name(), "versions": _versions(),
    }
    model = None
    for held in (steps, eager, variants):
        held.clear()
    _free()
    return data
