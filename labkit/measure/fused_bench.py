"""Record ``fused_<preset>``: the readable and the fused decode step side by side on a GPU.

Correct before fast: float32 fused tokens equal readable ones, the bf16 agreement, graph
tokens equal eager ones; then the two replays sampled in turn per batch size, and each eager
step's GPU operations by kernel name with their summed GPU time (``kernel_us``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from labkit.checks import as_int, as_size_list
from labkit.runner import PaddingDispatcher
from labkit.fused import agreement, make_fused_step
from labkit.measure import records
from labkit.measure.bench import _free, _need_cuda, make_model, random_prompts, step_inputs
from labkit.measure.opcount import gpu_op_profile
from labkit.model import StepFn, TinyGPT, generate
from labkit.timing import time_cuda_interleaved

STEPS = records.FUSED_STEPS


def tokens_equal_readable(model: TinyGPT, step: StepFn, sizes: Sequence[int],
                          new_tokens: int) -> bool:
    """Greedy tokens of ``step`` equal the readable step's at every size."""
    return all(agreement(model, random_prompts(model, b, seed=b), new_tokens,
                         step=step).fraction == 1.0 for b in sizes)


def float32_tokens_equal(preset_name: str, batch_sizes: Sequence[int], new_tokens: int = 8
                         ) -> bool:
    """Fused greedy tokens equal readable ones for a float32 model of ``preset_name``."""
    model = make_model(preset_name, max_batch=max(batch_sizes), dtype="float32")
    try:
        return tokens_equal_readable(model, make_fused_step(model), batch_sizes, new_tokens)
    finally:
        model = None
        _free()


def same_tokens(model: TinyGPT, eager: StepFn, graphed: StepFn, bs: int,
                new_tokens: int) -> bool:
    """Greedy tokens of ``graphed`` (a graph's step) equal those of ``eager``."""
    prompts = random_prompts(model, bs, seed=bs)
    return (generate(model, prompts, new_tokens, step_fn=eager)
            == generate(model, prompts, new_tokens, step_fn=graphed))


def check_counts(batch_sizes: Sequence[int], repeats: int, inner: int,
                 new_tokens: int) -> tuple[list[int], int, int, int]:
    """The sorted distinct batch sizes and the checked counts of a step comparison."""
    return (sorted(set(as_size_list(batch_sizes, "batch_sizes",
                                    fix="give batch sizes such as [1, 8, 64]"))),
            as_int(repeats, "repeats", minimum=1, fix="time at least one sample"),
            as_int(inner, "inner", minimum=1, fix="replay at least once per sample"),
            as_int(new_tokens, "new_tokens", minimum=2, fix="decode at least 2 new tokens"))


def measure_fused(preset_name: str = "gpt2", batch_sizes: Sequence[int] = (1, 8, 64),
                  dtype: str = "bfloat16", repeats: int = 30, inner: int = 10,
                  new_tokens: int = 8) -> dict:
    """Record ``fused_<preset>`` (see the module docstring)."""
    batch_sizes, repeats, inner, new_tokens = check_counts(batch_sizes, repeats, inner,
                                                           new_tokens)
    _need_cuda("measure_fused")
    checks: dict[str, bool | float] = {
        "fused_tokens_equal_readable_float32": float32_tokens_equal(
            preset_name, sorted({batch_sizes[0], batch_sizes[-1]}), new_tokens)}
    model = make_model(preset_name, max_batch=max(batch_sizes), dtype=dtype)
    agree = agreement(model, random_prompts(model, max(batch_sizes)), new_tokens)
    checks["fused_token_agreement"] = agree.fraction
    times: dict[str, list] = {step: [] for step in STEPS}
    ops: dict[str, dict[str, int]] = {}
    totals: dict[str, list[int]] = {}
    op_us: dict[str, dict[str, float]] = {}
    kernel_us: dict[str, list[float]] = {}
    count_batch = batch_sizes[0]
    disps: dict[str, PaddingDispatcher] = {}
    try:
        for step in STEPS:
            fn = model.decode_step if step == "readable" else make_fused_step(model)
            prof = {}
            for b in batch_sizes:
                t, p, s = step_inputs(model, b)
                prof[b] = gpu_op_profile(lambda: fn(t, p, s, check=False))
            ops[step] = {k: int(v["count"]) for k, v in prof[count_batch].items()}
            op_us[step] = {k: round(v["us"], 3) for k, v in prof[count_batch].items()}
            totals[step] = [int(sum(v["count"] for v in prof[b].values())) for b in batch_sizes]
            kernel_us[step] = [round(sum(v["us"] for v in prof[b].values()), 3)
                               for b in batch_sizes]
            disps[step] = PaddingDispatcher(model, batch_sizes, cudagraph_mode="FULL", step=step,
                                            progress=False)
            checks[f"graph_tokens_equal_eager.{step}"] = all(
                same_tokens(model, fn, disps[step].step, b, new_tokens) for b in batch_sizes)
        for b in batch_sizes:
            inputs = step_inputs(model, b)
            for disp in disps.values():
                disp.load_inputs(*inputs)
            fns = {step: (lambda d=disp, b=b: d.graphs.replay(b)) for step, disp in disps.items()}
            got = time_cuda_interleaved(fns, warmup=5, repeats=repeats, inner=inner)
            for step in STEPS:
                times[step].append(got[step].to_dict())
    finally:
        for disp in disps.values():
            disp.release()
        disps.clear()
    checks["graph_tokens_equal_eager"] = all(checks[f"graph_tokens_equal_eager.{s}"]
                                             for s in STEPS)
    data = {"preset": preset_name, "dtype": dtype, "n_layer": model.cfg.n_layer,
            "batch_sizes": batch_sizes, "times": times, "interleaved": True,
            "count_batch": count_batch,
            "ops": ops, "ops_total": totals, "op_us": op_us, "kernel_us": kernel_us,
            "agreement": agree.to_dict(), "checks": checks,
            "device": torch.cuda.get_device_name()}
    view = records.view(data, records.Fused)
    data["tokens_per_s"] = {s: view.tokens_per_s(s) for s in STEPS}
    model = None
    _free()
    return data

