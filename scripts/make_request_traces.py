#!/usr/bin/env python3
"""Generate the SYNTHETIC serving (request-level) traces in data/traces/ (seeded, reproducible).

Each file lists requests as ``arrival_s,prompt_len,output_len`` (seconds from the start,
tokens), after comment lines (``#``) that say the trace is synthetic and how it was drawn:

* arrivals: ``poisson`` (exponential gaps at a fixed rate) or ``bursty`` (a two-state
  Markov-modulated Poisson process: a quiet and a busy rate, exponential periods of each);
* prompt and output lengths: lognormal (``labkit.serving.traces.request_lengths``), clipped so that
  prompt + output fits ``max_seq`` (256: the ``char``, ``small`` and ``gpt2`` presets); in
  ``long_prompts`` a quarter of the prompts are instead 100-200 tokens (``long_share``).

Uses ``labkit.serving.traces.request_trace`` (standard library random numbers only), so the output is
the same on any machine. Run from the repository root::

    python scripts/make_request_traces.py            # rewrites the files
    python scripts/make_request_traces.py --check    # regenerates in memory and compares
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from labkit.serving.traces import TraceFile, regenerate_main, request_trace, trace_csv  # noqa: E402

LENGTHS = dict(max_seq=256, prompt_median=64.0, prompt_sigma=0.8, output_median=64.0,
               output_sigma=0.8)
SPECS: dict[str, dict] = {
    "synthetic_requests_poisson": dict(n=400, rate=20.0, arrivals="poisson", seed=20261130,
                                       **LENGTHS),
    "synthetic_requests_bursty": dict(n=400, rate=4.0, arrivals="bursty", seed=20261131,
                                      busy_rate=60.0, quiet_mean_s=3.0, busy_mean_s=1.0,
                                      **LENGTHS),
    # two minutes of arrivals at the Poisson trace's rate: issue 12's "a two-minute trace in
    # under three minutes in every mode" (``labkit serve --trace synthetic_requests_2min``)
    "synthetic_requests_2min": dict(n=2400, rate=20.0, arrivals="poisson", seed=20261201,
                                    **LENGTHS),
    # chunked prefill's trade: a quarter of the prompts 100-200 tokens long among short ones
    "long_prompts": dict(n=300, rate=30.0, arrivals="poisson", seed=20261202, max_seq=256,
                         prompt_median=16.0, prompt_sigma=0.6, output_median=48.0,
                         output_sigma=0.6, long_share=0.25, long_prompt=(100, 200)),
}


def render(name: str, spec: dict) -> str:
    """The CSV text of trace ``name``."""
    args = ", ".join(f"{k}={v!r}" for k, v in spec.items())
    comment = (f"SYNTHETIC serving trace {name}: stands for no real service.\n"
               f"made by scripts/make_request_traces.py: labkit.serving.traces.request_trace({args})")
    return trace_csv(request_trace(**spec), comment)


def files() -> Iterator[TraceFile]:
    """(file name, CSV text, note) of every trace in :data:`SPECS`, made one at a time."""
    for name, spec in SPECS.items():
        text = render(name, spec)
        yield f"{name}.csv", text, f"wrote {name}.csv: {text.count(chr(10)) - 3} requests"


def main(argv: list[str] | None = None) -> int:
    return regenerate_main(__doc__.splitlines()[0], ROOT / "data" / "traces", files, argv)


if __name__ == "__main__":
    sys.exit(main())
