"""SYNTHETIC request-length traces: how long each request's prompt and output are.

The shipped traces in ``data/traces/`` hold decode batch sizes only; a KV cache's memory
depends on how many positions each request fills (prompt + output). :func:`request_lengths`
draws them from a seeded generator (lognormal prompt and output lengths, the heavy-tailed
shape of chat traffic), with Python's standard library only, so the numbers are the same on
every machine. They are labelled synthetic: they stand for no real service.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from labkit.checks import as_int


@dataclass(frozen=True)
class Request:
    """One synthetic request: ``prompt`` tokens in, ``output`` tokens generated."""

    prompt: int
    output: int

    @property
    def length(self) -> int:
        """Cache positions the request fills: prompt + output."""
        return self.prompt + self.output


def _lognormal(rng: random.Random, median: float, sigma: float, hi: int) -> int:
    return min(max(1, round(math.exp(rng.gauss(math.log(median), sigma)))), hi)


def request_lengths(n: int = 256, *, seed: int = 0, max_seq: int = 1024,
                    prompt_median: float = 120.0, prompt_sigma: float = 0.9,
                    output_median: float = 150.0, output_sigma: float = 0.8) -> list[Request]:
    """``n`` SYNTHETIC requests with lognormal prompt and output lengths (medians in tokens,
    ``sigma`` of the log), each clipped so that ``prompt + output <= max_seq``. Seeded:
    the same arguments give the same list everywhere."""
    n = as_int(n, "n", minimum=1, fix="ask for at least one request")
    max_seq = as_int(max_seq, "max_seq", minimum=2, fix="give max_seq >= 2 (prompt + output)")
    for name, v in (("prompt_median", prompt_median), ("output_median", output_median),
                    ("prompt_sigma", prompt_sigma), ("output_sigma", output_sigma)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 \
                or not math.isfinite(v):
            raise ValueError(f"{name} must be a positive number, got {v!r}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        p = _lognormal(rng, prompt_median, prompt_sigma, max_seq - 1)
        o = _lognormal(rng, output_median, output_sigma, max_seq - p)
        out.append(Request(p, o))
    return out
