#!/usr/bin/env python3
"""Generate the SYNTHETIC decode batch-size traces in data/traces/ (seeded, reproducible).

A small discrete-event simulation of a continuous-batching LLM server:

* requests arrive as a Poisson process whose rate changes over time (``chat``: a slow
  sinusoidal swing around the mean rate, like daily traffic compressed into minutes;
  ``bursty``: a two-state Markov-modulated process that switches between a quiet and a busy
  rate after exponentially distributed periods); arrivals are drawn by thinning a Poisson
  process at the peak rate;
* each request wants a number of output tokens drawn from a lognormal distribution (heavy
  tail), rounded and clipped to ``[1, max_new_tokens]``;
* at every decode step the server admits waiting requests (first come, first served) up to
  ``max_batch`` running requests, runs one decode step for all of them (one token each), and
  retires the requests that are done. Prefill is not modelled: a request joins at the next step;
* a decode step takes ``step_base_ms + step_per_row_ms * batch`` of simulated time, so a
  busier server runs slower steps and arrivals pile up, as in a real one;
* when nothing is running or waiting the server idles until the next arrival (no step is
  recorded); the first ``warmup_steps`` steps are dropped so the trace starts in steady state.

It records the batch size of each decode step and writes ``step,batch_size`` CSV files.
Only Python's standard library is used (``random.Random(seed)``), so the output is the same
on any machine. Run from the repository root::

    python scripts/make_trace.py            # rewrites data/traces/*.csv
    python scripts/make_trace.py --check    # regenerates in memory and compares
"""

from __future__ import annotations

import io
import math
import random
import sys
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from labkit.serving.traces import TraceFile, regenerate_main  # noqa: E402


@dataclass(frozen=True)
class TraceSpec:
    """Parameters of one synthetic trace (times in seconds unless named *_ms)."""

    name: str
    seed: int
    steps: int                     # decode steps recorded (after warm-up)
    warmup_steps: int
    max_batch: int                 # most requests decoded together
    rate: float                    # arrivals per second (the quiet rate when bursty)
    rate_amp: float = 0.0          # chat: relative swing of the rate, 0 <= amp < 1 ...
    rate_period_s: float = 1.0     # ... over this period
    busy_rate: float = 0.0         # bursty only: arrivals per second while busy
    quiet_mean_s: float = 0.0      # bursty only: mean length of a quiet period
    busy_mean_s: float = 0.0       # bursty only: mean length of a busy period
    out_median: float = 180.0      # lognormal output length: median tokens ...
    out_sigma: float = 0.8         # ... and sigma of log(length)
    max_new_tokens: int = 2048
    step_base_ms: float = 12.0
    step_per_row_ms: float = 0.06


SPECS = [
    TraceSpec(name="synthetic_chat", seed=20240601, steps=20_000, warmup_steps=3_000,
              max_batch=256, rate=16.0, rate_amp=0.75, rate_period_s=150.0,
              out_median=180.0, out_sigma=0.8),
    TraceSpec(name="synthetic_bursty", seed=20240602, steps=20_000, warmup_steps=3_000,
              max_batch=128, rate=2.0, busy_rate=34.0, quiet_mean_s=40.0, busy_mean_s=15.0,
              out_median=120.0, out_sigma=1.0),
]


def simulate(spec: TraceSpec) -> list[int]:
    """Batch size of each recorded decode step."""
    rng = random.Random(spec.seed)
    bursty = spec.busy_rate > 0

    def out_len() -> int:
        n = round(rng.lognormvariate(math.log(spec.out_median), spec.out_sigma))
        return max(1, min(spec.max_new_tokens, n))

    def rate_at(now: float) -> float:
        base = spec.busy_rate if busy else spec.rate
        return base * (1.0 + spec.rate_amp * math.sin(2.0 * math.pi * now / spec.rate_period_s))

    peak = max(spec.rate, spec.busy_rate) * (1.0 + spec.rate_amp)
    t = 0.0
    busy = False
    switch_at = rng.expovariate(1.0 / spec.quiet_mean_s) if bursty else math.inf
    next_arrival = rng.expovariate(peak)      # next candidate arrival (before thinning)

    def advance_arrivals(until: float, waiting: deque[int]) -> None:
        """Queue every arrival up to time ``until``."""
        nonlocal busy, switch_at, next_arrival
        while next_arrival <= until:
            while switch_at <= next_arrival:  # quiet <-> busy switches before this candidate
                busy = not busy
                mean = spec.busy_mean_s if busy else spec.quiet_mean_s
                switch_at += rng.expovariate(1.0 / mean)
            if rng.random() * peak < rate_at(next_arrival):
                waiting.append(out_len())
            next_arrival += rng.expovariate(peak)

    waiting: deque[int] = deque()
    running: list[int] = []           # tokens still to generate, per running request
    sizes: list[int] = []
    total = spec.warmup_steps + spec.steps
    while len(sizes) < total:
        advance_arrivals(t, waiting)
        while waiting and len(running) < spec.max_batch:
            running.append(waiting.popleft())
        if not running:               # idle: jump to the next candidate arrival
            t = max(t, next_arrival)
            continue
        b = len(running)
        sizes.append(b)
        t += (spec.step_base_ms + spec.step_per_row_ms * b) / 1000.0
        running = [r - 1 for r in running if r > 1]
    return sizes[spec.warmup_steps:]


def to_csv(sizes: list[int]) -> str:
    buf = io.StringIO()
    buf.write("step,batch_size\n")
    for i, b in enumerate(sizes):
        buf.write(f"{i},{b}\n")
    return buf.getvalue()


def summary(spec: TraceSpec, sizes: list[int]) -> str:
    s = sorted(sizes)
    q = lambda f: s[min(len(s) - 1, int(f * len(s)))]  # noqa: E731
    return (f"{spec.name}: {len(sizes)} steps, mean {sum(sizes) / len(sizes):.1f}, "
            f"p50 {q(0.5)}, p90 {q(0.9)}, p99 {q(0.99)}, max {s[-1]}, "
            f"distinct sizes {len(set(sizes))}, at max_batch {sizes.count(spec.max_batch)}")


def files() -> Iterator[TraceFile]:
    """(file name, CSV text, summary) of every trace in :data:`SPECS`, made one at a time."""
    for spec in SPECS:
        sizes = simulate(spec)
        yield f"{spec.name}.csv", to_csv(sizes), f"{summary(spec, sizes)}\n   {asdict(spec)}"


def main(argv: list[str] | None = None) -> int:
    return regenerate_main(__doc__.splitlines()[0], ROOT / "data" / "traces", files, argv)


if __name__ == "__main__":
    sys.exit(main())
