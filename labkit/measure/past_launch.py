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

import statistics
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from typing import Any

import torch

from labkit.checks import as_int, as_size_list
from labkit.fused import make_fused_step
from labkit.graphs import GraphSet, capture_decode_graphs
from labkit.kernels.step import kernels_per_step, make_triton_step
from labkit.measure import records
from labkit.measure.bench import _free, _need_cuda, make_model, random_prompts, step_inputs
from labkit.measure.fidelity import step_fidelity
from labkit.measure.fused_bench import check_counts, same_tokens, tokens_equal_readable
from labkit.measure.opcount import gpu_op_profile, profiled_events
from labkit.measure.roofline import copy_bandwidth, graph_step
from labkit.measure.triton_bench import _need_compiled, _versions, time_replays
from labkit.model import TinyGPT
from labkit.roofline.stepcost import floor_us, step_bytes
from labkit.runner import triton_schedule
from labkit.timing import Stats

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


def _checked(batch_sizes: Sequence[int], repeats: int, inner: int, new_tokens: int,
             max_seq: int, context: int) -> tuple[list[int], int, int, int, int, int]:
    """The checked counts of a measurement (:func:`check_counts`), ``max_seq`` and ``context``."""
    sizes, repeats, inner, new_tokens = check_counts(batch_sizes, repeats, inner, new_tokens)
    max_seq = as_int(max_seq, "max_seq", minimum=2, fix="give the cache's positions per slot")
    context = as_int(context, "context", minimum=1, maximum=max_seq,
                     fix=f"give the positions each row attends to, at most max_seq={max_seq}")
    return sizes, repeats, inner, new_tokens, max_seq, context


def _cooperative_in_graphs(model: TinyGPT, sizes: Sequence[int],
                           cooperative: bool) -> tuple[bool, str | None]:
    """Whether a graph here holds the persistent step's cooperative launch (asked for with
    ``cooperative``), and if not why: the error of capturing one (then it launches plainly)."""
    if not cooperative:
        return False, None
    try:
        probe = _steps(model, ["triton_persistent"])["triton_persistent"]
        capture_decode_graphs(model, sizes[:1], step=probe, progress=False).release()
    except RuntimeError as exc:
        return False, f"{type(exc).__name__}: {exc}"[:400]
    return True, None


def measure_past_launch(preset_name: str = "gpt2", batch_sizes: Sequence[int] = (1, 8, 64),
                        dtype: str = "bfloat16", context: int = 128, max_seq: int = 256,
                        repeats: int = 30, inner: int = 10, new_tokens: int = 8,
                        fidelity_tokens: int = 16,
                        programs_per_sm: Sequence[int] = (1, 2, 4),
                        cooperative: bool = True) -> dict:
    """Record ``past_launch_<preset>`` (see the module docstring)."""
    sizes, repeats, inner, new_tokens, max_seq, context = _checked(
        batch_sizes, repeats, inner, new_tokens, max_seq, context)
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
    cooperative, cooperative_error = _cooperative_in_graphs(model, sizes, cooperative)
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


# ------------------------------------------------------------- the persistent step's stages

#: the five stages of a persistent layer launch, as the plain step's kernels name their work
STAGES: tuple[str, ...] = ("LN1 + QKV", "attention", "out-projection", "LN2 + up-projection",
                           "down-projection")


def stage_split(stamps: Sequence[Sequence[Sequence[int]]]) -> dict:
    """One step's clock stamps, ``layers x programs x 6`` ns (each program's start, its four
    arrivals and its end: :meth:`labkit.kernels.step.TritonStep.stamps_at`), as µs per layer:

    - ``stages``: the five stages' spans on the critical path: stage 1 from the first
      program's start to the last arrival at barrier 1, stage ``k`` from the last arrival at
      barrier ``k - 1`` to the last at ``k`` (the waiters' spin and acquire included), stage 5
      to the last program's end;
    - ``late``: per barrier, the last arrival minus the median one: how long half the
      programs at least wait for the slowest;
    - ``ramp``: the last program's start minus the first's;
    - ``gaps``: between layer launches, the next launch's first start minus this one's last end.
    """
    if not stamps or any(not layer or any(len(p) != 6 for p in layer) for layer in stamps):
        raise ValueError("stamps must be layers x programs x 6 clock readings (start, four "
                         "arrivals, end): read them with TritonStep.stamps_at(batch)")
    out: dict[str, list] = {"stages": [], "late": [], "ramp": [], "gaps": []}
    for layer in stamps:
        cols = list(zip(*layer))  # 6 columns over programs
        first, last = min(cols[0]), [max(c) for c in cols]
        edges = [first, *last[1:]]
        out["stages"].append([(b - a) / 1e3 for a, b in pairwise(edges)])
        out["late"].append([(max(c) - statistics.median(c)) / 1e3 for c in cols[1:5]])
        out["ramp"].append((last[0] - first) / 1e3)
    for this, nxt in pairwise(stamps):
        out["gaps"].append((min(p[0] for p in nxt) - max(p[5] for p in this)) / 1e3)
    return out


def stage_rows(splits: Sequence[Mapping], kernel_us: Sequence[Sequence[float]] | None = None
               ) -> list[dict]:
    """Per stage, over every layer of every stamped step in ``splits`` (:func:`stage_split`):
    the persistent stage's span (``persistent_us`` median, ``persistent_p10``,
    ``persistent_p90``) and the lateness at its barrier (``late_us``, median; stage 5 has no
    barrier), and (``kernel_us``: per layer, the plain step's five kernels in µs under the
    profiler) the plain kernel that does the same work (median, p10, p90 over layers, as
    :class:`labkit.timing.Stats` takes them)."""
    if not splits:
        raise ValueError("give the stage splits of at least one stamped step")
    rows = []
    for k, name in enumerate(STAGES):
        span = Stats.from_samples([layer[k] for s in splits for layer in s["stages"]])
        row: dict[str, Any] = {
            "stage": name, "persistent_us": span.median, "persistent_p10": span.p10,
            "persistent_p90": span.p90,
            "late_us": (statistics.median(layer[k] for s in splits for layer in s["late"])
                        if k < 4 else None)}
        if kernel_us is not None:
            kern = Stats.from_samples([layer[k] for layer in kernel_us])
            row.update(kernel_us=kern.median, kernel_p10=kern.p10, kernel_p90=kern.p90)
        rows.append(row)
    return rows


def stamped_replays(graphs: GraphSet, step: Any, batch: int, n: int) -> list[list]:
    """``n`` replays of a stamped persistent step's graph (``step``: its
    ``TritonStep(stamps=True)``) at ``batch`` rows, each one's clock stamps as read after it
    (:meth:`labkit.kernels.step.TritonStep.stamps_at`: layers x programs x 6 ns)."""
    out = []
    for _ in range(n):
        graphs.replay(batch)
        torch.cuda.synchronize()
        out.append(step.stamps_at(batch).tolist())
    return out


def _clock_step(stamps: Sequence[Sequence[Sequence[int]]]) -> int | None:
    """The smallest positive difference between two stamps of one step (ns): the clock's
    resolution as seen (``None``: every stamp equal)."""
    values = sorted({v for layer in stamps for p in layer for v in p})
    steps = [b - a for a, b in pairwise(values)]
    return min(steps) if steps else None


def plain_kernel_us(step: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor],
                    n_layer: int) -> tuple[list[list[float]], float]:
    """The plain Triton step's kernels under the profiler, one eager step: per layer its five
    kernels' µs (in launch order, the stages' order) and the LM head's µs."""
    events = [e for e in profiled_events(lambda: step(*inputs, check=False))
              if e.device_type == torch.autograd.DeviceType.CUDA]
    events.sort(key=lambda e: e.time_range.start)
    us = [float(e.time_range.elapsed_us()) for e in events]
    if len(us) != 5 * n_layer + 1:
        raise RuntimeError(f"the plain Triton step ran {len(us)} kernels under the profiler, "
                           f"not 5 L + 1 = {5 * n_layer + 1}: something else ran on the GPU")
    return [us[5 * i:5 * i + 5] for i in range(n_layer)], us[-1]


def measure_persistent_stages(preset_name: str = "gpt2",
                              batch_sizes: Sequence[int] = (1, 8, 64),
                              dtype: str = "bfloat16", context: int = 128, max_seq: int = 256,
                              repeats: int = 30, inner: int = 10, stamped_steps: int = 20,
                              new_tokens: int = 8, cooperative: bool = True) -> dict:
    """Record ``persistent_stages_<preset>``: where the persistent step's time goes, stage by
    stage. The persistent step is built twice, plain and with clock stamps
    (``TritonStep(stamps=True)``); graph tokens equal eager ones for both; the plain kernels,
    the persistent step and the stamped one are replayed in turn (the stamps' own cost); then
    ``stamped_steps`` replays of the stamped graph per batch size give each stage's span and
    each barrier's lateness (:func:`stage_split`, :func:`stage_rows`, medians over layers and
    replays), beside the plain step's kernel for the same work under the profiler."""
    sizes, repeats, inner, new_tokens, max_seq, context = _checked(
        batch_sizes, repeats, inner, new_tokens, max_seq, context)
    stamped_steps = as_int(stamped_steps, "stamped_steps", minimum=1,
                           fix="read the stamps of at least one replay")
    _need_cuda("measure_persistent_stages")
    _need_compiled()
    model: TinyGPT | None = make_model(preset_name, max_batch=max(sizes), dtype=dtype,
                                       max_seq=max_seq)
    assert model is not None
    cfg = model.cfg
    names = records.PERSISTENT_STAGE_STEPS
    cooperative, cooperative_error = _cooperative_in_graphs(model, sizes, cooperative)
    steps: dict[str, Any] = {
        "triton": make_triton_step(model, schedule="kernels"),
        "triton_persistent": make_triton_step(model, schedule="persistent",
                                              cooperative=cooperative),
        "triton_persistent_stamped": make_triton_step(model, schedule="persistent",
                                                      cooperative=cooperative, stamps=True)}
    graphs: dict[str, GraphSet] = {}
    checks: dict[str, bool] = {}
    try:
        for name in names:
            graphs[name] = capture_decode_graphs(model, sizes, step=steps[name], progress=False)
            checks[f"graph_tokens_equal_eager.{name}"] = all(
                same_tokens(model, steps[name], graph_step(graphs[name]), b, new_tokens)
                for b in sizes)
        times = time_replays(model, graphs, sizes, context, repeats, inner)
        stamped = steps["triton_persistent_stamped"]
        stages, gaps, ramps, clock, kernels_us, head_us = [], [], [], [], [], []
        for b in sizes:
            inputs = step_inputs(model, b, context=context)
            gs = graphs["triton_persistent_stamped"]
            gs.copy_inputs(*inputs)
            splits = []
            for raw in stamped_replays(gs, stamped, b, stamped_steps):
                splits.append(stage_split(raw))
                step_clock = _clock_step(raw)
                if step_clock is not None:
                    clock.append(step_clock)
            per_layer, head = plain_kernel_us(steps["triton"], inputs, cfg.n_layer)
            rows = stage_rows(splits, per_layer)
            stages.append(rows)
            gaps.append(statistics.median(g for s in splits for g in s["gaps"]))
            ramps.append(statistics.median(r for s in splits for r in s["ramp"]))
            kernels_us.append(sum(sum(layer) for layer in per_layer) + head)
            head_us.append(head)
    finally:
        for gs in graphs.values():
            gs.release()
    checks["graph_tokens_equal_eager"] = all(checks.values())
    data = {
        "preset": preset_name, "dtype": dtype, "config": cfg.to_dict(), "context": context,
        "batch_sizes": sizes, "steps": list(names), "interleaved": True, "repeats": repeats,
        "inner": inner, "times": times, "stamped_steps": stamped_steps,
        "stages": stages, "gaps_us": gaps, "ramp_us": ramps, "head_us": head_us,
        "plain_kernels_us": kernels_us,
        "clock_ns": min(clock) if clock else None,
        "programs": stamped.programs, "waits": stamped.waits, "cooperative": cooperative,
        "cooperative_error": cooperative_error, "checks": checks,
        "device": torch.cuda.get_device_name(), "versions": _versions(),
    }
    model = None
    steps.clear()
    _free()
    return data
