"""Where the persistent Triton step leaves the readable step's float32 tokens (GPU only).

The past_launch records of 2026-12-06 (H100) show the persistent schedule failing the fidelity
gate (float32 greedy tokens differ from the readable step's) at the presets' shapes, while the
GPU tests at the test preset (max_batch 8) pass. This script narrows it down: per preset, KV
layout, max_batch and batch size, the share of greedy tokens equal to the readable step's for
the plain kernels, PDL, the persistent step (one program per SM, one program, no cooperative
launch), and the largest logit difference of one step from the same cache. A step that equals
the readable one with one program but not with one per SM points at the barriers.

    python scripts/persistent_fidelity.py OUT.json
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


def rows(preset: str, layout: str, max_batch: int) -> list[dict]:
    m = make_model(preset, max_batch=max_batch, dtype="float32", max_seq=256, kv_layout=layout)
    assert m is not None
    steps = {name: make_triton_step(m, **kw) for name, kw in VARIANTS.items()}
    out = []
    for bs in sorted({1, 8, max_batch}):
        prompts = random_prompts(m, bs, seed=bs)
        ref = generate(m, prompts, 8)
        row: dict = {"preset": preset, "layout": layout, "max_batch": max_batch, "batch": bs}
        for name, step in steps.items():
            got = generate(m, prompts, 8, step_fn=step)
            row[name] = sum(a == b for r, g in zip(ref, got) for a, b in zip(r, g)) / (8 * bs)
        t = torch.randint(0, m.cfg.vocab_size, (bs,), device="cuda")
        p = torch.full((bs,), 20, device="cuda")
        s = torch.arange(bs, device="cuda")
        for i in range(bs):
            m.cache.reserve(i, 21)
        want = m.decode(t, p, s).clone()
        for name in ("kernels", "persistent", "persistent_p1"):
            row[f"max_logit_diff_{name}"] = float((steps[name](t, p, s) - want).abs().max())
        for i in range(bs):
            m.cache.release(i)
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def main(path: str) -> None:
    if not torch.cuda.is_available():
        sys.exit("persistent_fidelity.py needs a CUDA GPU")
    found = [r for preset in ("small", "gpt2") for layout in ("slot", "paged")
             for mb in (8, 64) for r in rows(preset, layout, mb)]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(found, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "persistent_fidelity.json")
