"""Record ``fused_<preset>``: the readable and the fused decode step side by side on a GPU.

Correct before fast, in this order, per preset:

1. float32 on the GPU: greedy tokens of the fused step equal the readable step's (prompts of
   different lengths, at the smallest and the largest batch size: batch 1 runs as two rows),
   check ``fused_tokens_equal_readable_float32``;
2. bf16: the agreement of the fused step with the readable one (share of equal greedy tokens,
   largest logit difference of one step: :func:`labkit.fused.agreement`);
3. bf16, one padding dispatcher per step in FULL mode (one graph per batch size): graph
   tokens equal eager tokens of the same step; then, per batch size, the two steps' replays
   sampled in turn (:func:`labkit.timing.time_cuda_interleaved`, so a change of GPU clock
   reaches both alike; the record says ``interleaved: True``, records made before that
   field timed one step after the other);
4. the GPU operations of one eager step by kernel name, with their summed GPU time
   (:func:`labkit.measure.opcount.gpu_op_profile`), per batch size: ``kernel_us`` (the GPU
   busy time of a step) next to the replay time says how much of a step is gaps between
   kernels.

:func:`record_fused` writes the records of both presets (``fused_small``, ``fused_gpt2``)
with provenance into a run folder: the GPU entry point.
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence

import torch

from labkit.checks import as_int, as_size_list
from labkit.dispatch import PaddingDispatcher
from labkit.fused import agreement, make_fused_step
from labkit.measure import records
from labkit.measure.bench import _free, _need_cuda, _stats, make_model, random_prompts, \
    step_inputs
from labkit.measure.opcount import gpu_op_profile
from labkit.measure.results import save_result
from labkit.model import TinyGPT, generate
from labkit.timing import time_cuda_interleaved

STEPS = records.FUSED_STEPS


def _step_fn(model: TinyGPT, step: str):
    return model.decode_step if step == "readable" else make_fused_step(model)


def float32_tokens_equal(preset_name: str, batch_sizes: Sequence[int], new_tokens: int = 8
                         ) -> bool:
    """Fused greedy tokens equal readable ones for a float32 model of ``preset_name`` on the
    GPU, at every batch size (prompts of different lengths, each row its own position)."""
    model = make_model(preset_name, max_batch=max(batch_sizes), dtype="float32")
    try:
        fused = make_fused_step(model)
        return all(agreement(model, random_prompts(model, b, seed=b), new_tokens,
                             step=fused).fraction == 1.0 for b in batch_sizes)
    finally:
        model = fused = None
        _free()


def _same_tokens(model: TinyGPT, eager, graphed, bs: int, new_tokens: int) -> bool:
    """Greedy tokens of ``graphed`` (a dispatcher's step) equal those of ``eager``."""
    prompts = random_prompts(model, bs, seed=bs)
    return (generate(model, prompts, new_tokens, step_fn=eager)
            == generate(model, prompts, new_tokens, step_fn=graphed))


def measure_fused(preset_name: str = "gpt2", batch_sizes: Sequence[int] = (1, 8, 64),
                  dtype: str = "bfloat16", repeats: int = 30, inner: int = 10,
                  new_tokens: int = 8) -> dict:
    """Record ``fused_<preset>`` (see the module docstring): times per step and batch size,
    kernel counts, bf16 agreement, checks."""
    batch_sizes = sorted(set(as_size_list(batch_sizes, "batch_sizes",
                                          fix="give batch sizes such as [1, 8, 64]")))
    repeats = as_int(repeats, "repeats", minimum=1, fix="time at least one sample")
    inner = as_int(inner, "inner", minimum=1, fix="replay at least once per sample")
    new_tokens = as_int(new_tokens, "new_tokens", minimum=2,
                        fix="decode at least 2 new tokens")
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
            fn = _step_fn(model, step)
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
                _same_tokens(model, fn, disps[step].step, b, new_tokens) for b in batch_sizes)
        for b in batch_sizes:
            inputs = step_inputs(model, b)
            for disp in disps.values():
                disp.load_inputs(*inputs)
            fns = {step: (lambda d=disp, b=b: d.graphs.replay(b)) for step, disp in disps.items()}
            got = time_cuda_interleaved(fns, warmup=5, repeats=repeats, inner=inner)
            for step in STEPS:
                times[step].append(_stats(got[step]))
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


def record_fused(run_dir: str | Path, presets: Sequence[str] = ("small", "gpt2")) -> list[Path]:
    """Measure ``fused_<preset>`` for each preset with the default parameters of
    ``fused_gpt2`` (the reference notebook 08 records), the preset changed, and save them
    (with the environment) under ``run_dir/results``; returns the files."""
    _need_cuda("record_fused")
    paths = []
    for name in presets:
        params = {**records.default_params("fused_gpt2"), "preset": name}
        data = measure_fused(**records.measure_kwargs(params))
        paths.append(save_result(f"fused_{name}", data, params, run_dir))
    return paths
