"""Where the persistent Triton step leaves the readable step's float32 tokens (GPU only).

The past_launch records of 2026-12-06 (H100) show the persistent schedule failing the fidelity
gate (float32 greedy tokens differ from the readable step's) at the presets' shapes, while the
GPU tests at the test preset (max_batch 8) pass. This script narrows it down: per preset, KV
layout, max_batch and batch size, the share of greedy tokens equal to the readable step's for
the plain kernels, PDL, the persistent step (one program per SM, one program, no cooperative
launch), the largest logit difference of one step from the same cache (against the readable
step and against the kernels), whether the persistent step repeats itself exactly, and layer 0
alone: each buffer between its stages against the kernels'. A step that equals the readable
one with one program but not with one per SM points at the barriers.

    python scripts/persistent_fidelity.py OUT.json [PRESETS [LAYOUTS [MAX_BATCHES]]]

(comma-separated; default ``small,gpt2 slot,paged 8,64``).
"""

from __future__ import annotations

import json
import sys

import torch

from labkit.kernels.step import make_triton_step
from labkit.measure.bench import make_model, random_prompts
from labkit.model import generate

VARIANTS = {"kernels": {}, "pdl": {"schedule": "pdl"}, "persistent": {"schedule": "persistent"},
            "persistent_p1": {"schedule": "persistent", "programs": 1},
            "persistent_plain_launch": {"schedule": "persistent", "cooperative": False}}
#: the workspace buffers compared after layer 0 alone (kernels against persistent)
BUFFERS = ("q", "y", "hidden", "x")


def _inputs(m, bs: int) -> tuple[torch.Tensor, ...]:
    t = torch.randint(0, m.cfg.vocab_size, (bs,), device="cuda",
                      generator=torch.Generator("cuda").manual_seed(bs))
    p = torch.full((bs,), 20, device="cuda")
    s = torch.arange(bs, device="cuda")
    return t, p, s


def layer0(m, steps: dict, bs: int) -> dict:
    """Layer 0 alone from the same inputs: the largest difference of each workspace buffer and
    of layer 0's cache between the kernels and each persistent variant (stages 1, 2, 3-5)."""
    t, p, s = _inputs(m, bs)
    logits = torch.empty((bs, m.cfg.vocab_size), dtype=m.cfg.torch_dtype, device="cuda")
    got = {}
    for name in ("kernels", "persistent", "persistent_p1"):
        step = steps[name]
        first = 5 if name == "kernels" else 1
        for launch in step.launches(t, p, s, logits)[:first]:
            launch.run()
        torch.cuda.synchronize()
        ws = step._workspace(bs)
        got[name] = {b: getattr(ws, b).float().clone() for b in BUFFERS}
        got[name]["cache"] = m.cache.kv[:, 0].float().clone()
    return {f"{name}.{b}": float((got[name][b] - got["kernels"][b]).abs().max())
            for name in ("persistent", "persistent_p1") for b in (*BUFFERS, "cache")}


def rows(preset: str, layout: str, max_batch: int) -> list[dict]:
    m = make_model(preset, max_batch=max_batch, dtype="float32", max_seq=256, kv_layout=layout)
    assert m is not None
    steps = {name: make_triton_step(m, **kw) for name, kw in VARIANTS.items()}
    out = []
    for bs in sorted({1, 8, max_batch}):
        prompts = random_prompts(m, bs, seed=bs)
        ref = generate(m, prompts, 8)
        row: dict = {"preset": preset, "layout": layout, "max_batch": max_batch, "batch": bs,
                     "blocks": steps["persistent"].launch_shape(bs)}
        for name, step in steps.items():
            got = generate(m, prompts, 8, step_fn=step)
            row[name] = sum(a == b for r, g in zip(ref, got) for a, b in zip(r, g)) / (8 * bs)
        t, p, s = _inputs(m, bs)
        for i in range(bs):
            m.cache.reserve(i, 21)
        want = m.decode(t, p, s).clone()
        kern = steps["kernels"](t, p, s).clone()
        for name in VARIANTS:
            got1 = steps[name](t, p, s).clone()
            row[f"max_logit_diff_{name}"] = float((got1 - want).abs().max())
            row[f"max_diff_to_kernels_{name}"] = float((got1 - kern).abs().max())
        # run to run: the same step from the same state, three times
        again = [steps["persistent"](t, p, s).clone() for _ in range(3)]
        row["persistent_repeatable"] = all(torch.equal(again[0], a) for a in again[1:])
        row["layer0"] = layer0(m, steps, bs)
        for i in range(bs):
            m.cache.release(i)
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def main(path: str, presets: str = "small,gpt2", layouts: str = "slot,paged",
         max_batches: str = "8,64") -> None:
    if not torch.cuda.is_available():
        sys.exit("persistent_fidelity.py needs a CUDA GPU")
    found = []
    for preset in presets.split(","):
        for layout in layouts.split(","):
            for mb in (int(x) for x in max_batches.split(",")):
                found += rows(preset, layout, mb)
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(found, f, indent=1)


if __name__ == "__main__":
    main(*(sys.argv[1:] or ["persistent_fidelity.json"]))
