"""Why is one graph of 8 decode steps slower per step than 8 replays of a one-step graph?

Times, interleaved, per step: the one-step graph replayed 8 times (tokens fed back on the
device), the 8-step graph, and variants that each remove one difference between the two; then
profiles the GPU kernels of both graphs (torch.profiler) and sums their time by kernel name.
Writes JSON to the folder given as the first argument.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import torch

from labkit.graphs import capture_callable
from labkit.measure.roofline import _prefilled, make_model
from labkit.roofline.multistep import capture_multistep, multistep_decode
from labkit.timing import time_cuda_interleaved


def fixed_position_steps(model, t, p, s, n_steps, out):
    """As multistep_decode, but every step at the same positions (no ``p + 1``)."""
    for i in range(n_steps):
        t = model.decode(t, p, s).argmax(-1)
        out[:, i].copy_(t)
    return out


def kernels(fn, reps: int) -> tuple[dict[str, list[float]], float]:
    """GPU kernel time by name (µs summed per call) over ``reps`` calls; and the mean span."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    by: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    evs = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    for e in evs:
        by[e.name][0] += e.device_time / reps
        by[e.name][1] += 1 / reps
    starts = sorted((e.time_range.start, e.time_range.end) for e in evs)
    span = (starts[-1][1] - starts[0][0]) / reps if starts else 0.0
    return {k: [round(v[0], 3), round(v[1], 2)] for k, v in by.items()}, span


def probe(preset: str, b: int, n_steps: int = 8, repeats: int = 30) -> dict:
    model = make_model(preset, max_batch=max(b, 1), dtype="bfloat16", max_seq=256)
    pool = torch.cuda.graph_pool_handle()
    one = capture_multistep(model, b, 1, pool=pool)
    many = capture_multistep(model, b, n_steps, pool=pool)
    one_b = capture_multistep(model, b, 1, pool=pool)        # a second capture of one step
    t, p, s = _prefilled(model, b)
    ref = multistep_decode(model, t, p, s, n_steps).clone()
    many.load(t, p, s)
    equal = bool(torch.equal(many.replay(), ref))
    for g in (one, many, one_b):
        g.load(t, p, s)
    # the 8-step graph with the positions held still
    ft, fp, fs = t.clone(), p.clone(), s.clone()
    fout = torch.zeros((b, n_steps), dtype=torch.long, device=model.device)
    fixed = capture_callable(lambda a, c, d, o: fixed_position_steps(model, a, c, d, n_steps, o),
                             ft, fp, fs, fout, pool=pool, warmup=2, label=("fixed", b))
    # 8 one-step graphs captured one after another (8 captures, one pool)
    singles = [capture_multistep(model, b, 1, pool=pool) for _ in range(n_steps)]
    for g in singles:
        g.load(t, p, s)
    # the 8-step graph again, alone in a pool of its own (captured before anything else there)
    alone = capture_multistep(model, b, n_steps, pool=torch.cuda.graph_pool_handle())
    alone.load(t, p, s)

    def one_step() -> None:
        for _ in range(n_steps):
            one.replay()
            one.feed_back()

    def one_step_b() -> None:
        for _ in range(n_steps):
            one_b.replay()
            one_b.feed_back()

    def multi() -> None:
        many.replay()
        many.feed_back()

    def multi_alone() -> None:
        alone.replay()
        alone.feed_back()

    def multi_fixed() -> None:
        fixed.graph.replay()
        ft.copy_(fout[:, -1])

    def eight_graphs() -> None:
        for g in singles:
            g.replay()
            g.feed_back()

    fns = {"one_step_graphs": one_step, "one_step_graphs_b": one_step_b, "multistep": multi,
           "multistep_fixed_positions": multi_fixed, "eight_captures": eight_graphs,
           "multistep_own_pool": multi_alone}
    stats = time_cuda_interleaved(fns, warmup=3, repeats=repeats, inner=1)
    per_step = {k: st.per(n_steps).to_dict() for k, st in stats.items()}
    prof = {}
    for name in ("one_step_graphs", "multistep", "multistep_fixed_positions", "multistep_own_pool"):
        by, span = kernels(fns[name], 5)
        prof[name] = {"kernels_per_call": by, "span_us_per_call": span,
                      "kernel_us_per_call": sum(v[0] for v in by.values())}
    # per step inside the 8-step graph: kernel time of each step's share, in order
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as pr:
        multi()
        torch.cuda.synchronize()
    evs = sorted((e.time_range.start, e.time_range.end, e.name) for e in pr.events()
                 if e.device_type == torch.autograd.DeviceType.CUDA)
    with profile(activities=[ProfilerActivity.CUDA]) as pr1:
        one.replay()
        torch.cuda.synchronize()
    evs1 = sorted((e.time_range.start, e.time_range.end, e.name) for e in pr1.events()
                  if e.device_type == torch.autograd.DeviceType.CUDA)
    return {"preset": preset, "batch": b, "n_steps": n_steps, "tokens_equal": equal,
            "per_step_us": per_step, "profile": prof,
            "multistep_kernel_sequence": [(round(a, 1), round(z - a, 2), n) for a, z, n in evs],
            "one_step_kernel_sequence": [(round(a, 1), round(z - a, 2), n) for a, z, n in evs1],
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for preset, b in (("gpt2", 1), ("gpt2", 64), ("small", 1)):
        r = probe(preset, b)
        results.append(r)
        ps = r["per_step_us"]
        print(preset, b, "equal" if r["tokens_equal"] else "NOT EQUAL",
              {k: round(v["median"], 1) for k, v in ps.items()},
              {k: (round(v["kernel_us_per_call"], 1), round(v["span_us_per_call"], 1))
               for k, v in r["profile"].items()}, flush=True)
        torch.cuda.empty_cache()
    (out / "multistep_probe.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
