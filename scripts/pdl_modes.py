"""How a PDL kernel should overlap the one before (GPU only): the Triton step's graphs with no
PDL and with each of ``PDL_MODES`` (overlap: first weights, wait, release the next kernel;
release_at_end; wait_first: wait before any load), replayed in turn per batch size (bf16,
128 positions, both presets). Tokens of every graph equal the eager kernels' first.

    python scripts/pdl_modes.py OUT.json
"""

from __future__ import annotations

import json
import sys

import torch

from labkit.graphs import capture_decode_graphs
from labkit.kernels.step import PDL_MODES, make_triton_step
from labkit.measure.bench import make_model
from labkit.measure.fused_bench import same_tokens
from labkit.measure.roofline import graph_step
from labkit.measure.triton_bench import time_replays

VARIANTS = {"kernels": {}, **{f"pdl_{mode}": {"schedule": "pdl", "pdl": mode}
                              for mode in PDL_MODES}}
SIZES = (1, 2, 4, 8, 16, 64)


def main(path: str) -> None:
    if not torch.cuda.is_available():
        sys.exit("pdl_modes.py needs a CUDA GPU")
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sizes": SIZES}
    for preset in ("small", "gpt2"):
        m = make_model(preset, max_batch=max(SIZES), max_seq=256)
        steps = {n: make_triton_step(m, **kw) for n, kw in VARIANTS.items()}
        graphs = {n: capture_decode_graphs(m, SIZES, step=s, progress=False)
                  for n, s in steps.items()}
        equal = {n: all(same_tokens(m, steps["kernels"], graph_step(g), b, 8) for b in SIZES)
                 for n, g in graphs.items()}
        times = time_replays(m, graphs, SIZES, 128, 30, 10)
        out[preset] = {"tokens_equal_kernels": equal,
                       "median_us": {n: [t["median"] for t in ts] for n, ts in times.items()},
                       "times": times}
        print(preset, json.dumps(out[preset]["median_us"]), equal, flush=True)
        for g in graphs.values():
            g.release()
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "pdl_modes.json")
