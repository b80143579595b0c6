"""SYNTHETIC request traces: prompt and output lengths, and arrival times for the serving engine.

:func:`request_lengths` draws prompt and output lengths (lognormal, the heavy-tailed shape of
chat traffic) from a seeded standard-library generator, the same on every machine; they stand
for no real service. Request traces load from and save to CSV.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterable

from labkit.checks import as_int, as_number
from labkit.support.paths import shipped_file


@dataclass(frozen=True)
class Request:
    """One synthetic request: ``prompt`` tokens in, ``output`` tokens generated."""

    prompt: int
    output: int

    @property
    def length(self) -> int:
        """Cache positions the request fills: prompt + output."""
        return self.prompt + self.output


def _positive(name: str, v: object) -> float:
    x = as_number(v, name)
    if x <= 0:
        raise ValueError(f"{name} must be a positive number, got {v!r}")
    return x


def _lognormal(rng: random.Random, median: float, sigma: float, hi: int) -> int:
    return min(max(1, round(math.exp(rng.gauss(math.log(median), sigma)))), hi)


def request_lengths(n: int = 256, *, seed: int = 0, max_seq: int = 1024,
                    prompt_median: float = 120.0, prompt_sigma: float = 0.9,
                    output_median: float = 150.0, output_sigma: float = 0.8,
                    long_share: float = 0.0,
                    long_prompt: tuple[int, int] = (100, 200)) -> list[Request]:
    """``n`` SYNTHETIC seeded requests, lognormal lengths clipped to ``max_seq`` positions;
    a ``long_share`` of them (drawn from a second seeded generator, so ``0`` leaves the others
    as they were) get a prompt uniform in ``long_prompt`` (inclusive) instead."""
    n = as_int(n, "n", minimum=1, fix="ask for at least one request")
    max_seq = as_int(max_seq, "max_seq", minimum=2, fix="give max_seq >= 2 (prompt + output)")
    for name, v in (("prompt_median", prompt_median), ("output_median", output_median),
                    ("prompt_sigma", prompt_sigma), ("output_sigma", output_sigma)):
        _positive(name, v)
    share = as_number(long_share, "long_share", minimum=0, fix="give a share in [0, 1]")
    if share > 1:
        raise ValueError(f"long_share must be a share in [0, 1], got {long_share!r}")
    lo, hi = 1, 1
    if share:  # checked only where used: long_prompt's default needs max_seq > 200
        lo, hi = (as_int(v, "long_prompt", minimum=1, maximum=max_seq - 1,
                         fix=f"give (shortest, longest) prompt tokens within 1..{max_seq - 1}")
                  for v in long_prompt)
        if lo > hi:
            raise ValueError(f"long_prompt {long_prompt!r}: the shortest is above the longest; "
                             "give (shortest, longest)")
    rng, long_rng = random.Random(seed), random.Random(f"labkit-long:{seed}")
    out = []
    for _ in range(n):
        p = _lognormal(rng, prompt_median, prompt_sigma, max_seq - 1)
        if share and long_rng.random() < share:
            p = long_rng.randint(lo, hi)
        o = _lognormal(rng, output_median, output_sigma, max_seq - p)
        out.append(Request(p, o))
    return out


@dataclass(frozen=True)
class TraceRequest:
    """One request of a serving trace: arrival time (s), prompt and output lengths."""

    arrival_s: float
    prompt_len: int
    output_len: int


ARRIVALS: tuple[str, ...] = ("poisson", "bursty")
COLUMNS: tuple[str, ...] = ("arrival_s", "prompt_len", "output_len")


def arrival_times(n: int, *, rate: float, arrivals: str = "poisson", seed: int = 0,
                  busy_rate: float | None = None, quiet_mean_s: float = 2.0,
                  busy_mean_s: float = 1.0) -> list[float]:
    """``n`` SYNTHETIC arrival times (seconds, increasing, seeded). ``poisson``: exponential
    gaps at ``rate`` requests/s. ``bursty``: a two-state Markov-modulated Poisson process,
    ``rate`` while quiet and ``busy_rate`` (default 8 x rate) while busy, for exponential
    periods of mean ``quiet_mean_s`` / ``busy_mean_s``."""
    n = as_int(n, "n", minimum=1, fix="ask for at least one request")
    if arrivals not in ARRIVALS:
        raise ValueError(f"arrivals {arrivals!r} is not known; use one of {list(ARRIVALS)}")
    rate = _positive("rate", rate)
    rng = random.Random(f"labkit-arrivals:{seed}")
    if arrivals == "poisson":
        t, out = 0.0, []
        for _ in range(n):
            t += rng.expovariate(rate)
            out.append(t)
        return out
    busy_rate = _positive("busy_rate", 8.0 * rate if busy_rate is None else busy_rate)
    quiet, busy_mean = _positive("quiet_mean_s", quiet_mean_s), _positive("busy_mean_s",
                                                                          busy_mean_s)
    peak = max(rate, busy_rate)
    busy, switch_at = False, rng.expovariate(1.0 / quiet)
    t, out = 0.0, []
    while len(out) < n:  # thinning at the peak rate
        t += rng.expovariate(peak)
        while switch_at <= t:
            busy = not busy
            switch_at += rng.expovariate(1.0 / (busy_mean if busy else quiet))
        if rng.random() * peak < (busy_rate if busy else rate):
            out.append(t)
    return out


def request_trace(n: int = 64, *, rate: float = 4.0, arrivals: str = "poisson", seed: int = 0,
                  max_seq: int = 1024, **kwargs: Any) -> list[TraceRequest]:
    """A SYNTHETIC serving trace: :func:`arrival_times` with :func:`request_lengths`."""
    akeys = {"busy_rate", "quiet_mean_s", "busy_mean_s"}
    times = arrival_times(n, rate=rate, arrivals=arrivals, seed=seed,
                          **{k: v for k, v in kwargs.items() if k in akeys})
    lengths = request_lengths(n, seed=seed, max_seq=max_seq,
                              **{k: v for k, v in kwargs.items() if k not in akeys})
    return [TraceRequest(round(t, 6), r.prompt, r.output) for t, r in zip(times, lengths)]


class TraceFormatError(ValueError):
    """A request-trace CSV has a missing column or a bad value (named with file and line)."""


def _cell(path: os.PathLike[str] | str, line: int, col: str, text: str, kind: type) -> float:
    where = f"{path}, line {line}, column {col!r}"
    try:
        v = float(text) if kind is float else int(text)
    except ValueError:
        want = "a number of seconds" if kind is float else "a whole number"
        raise TraceFormatError(f"{where}: {text!r} is not {want}; fix or delete that row") \
            from None
    if kind is float and not (math.isfinite(v) and v >= 0):
        raise TraceFormatError(f"{where}: {text!r} must be a finite time >= 0 seconds")
    if kind is int and v < 1:
        raise TraceFormatError(f"{where}: {text!r} must be at least 1 token")
    return v


def load_request_trace(name_or_path: str | os.PathLike[str]) -> list[TraceRequest]:
    """A serving trace from a CSV (a shipped name in ``data/traces/`` or any file) with columns
    ``arrival_s,prompt_len,output_len`` (others ignored, ``#`` lines comments); a bad row
    raises :class:`TraceFormatError`."""
    path = shipped_file("traces", name_or_path, ".csv")
    with open(path, newline="", encoding="utf-8") as f:
        lines = [(i, ln) for i, ln in enumerate(f.read().splitlines(), 1)
                 if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise TraceFormatError(f"{path}: no header and no requests; give a CSV with columns "
                               f"{','.join(COLUMNS)}")
    rows = list(csv.reader(ln for _, ln in lines))
    header = [h.strip() for h in rows[0]]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise TraceFormatError(f"{path}, line {lines[0][0]}: missing column(s) {missing} "
                               f"(header: {header}); name the columns {','.join(COLUMNS)}")
    idx = {c: header.index(c) for c in COLUMNS}
    out = []
    for (line, _), row in zip(lines[1:], rows[1:]):
        if len(row) < len(header):
            raise TraceFormatError(f"{path}, line {line}: {len(row)} value(s) for "
                                   f"{len(header)} columns {header}; fill every column")
        cells = {c: row[i].strip() for c, i in idx.items()}
        out.append(TraceRequest(_cell(path, line, "arrival_s", cells["arrival_s"], float),
                                int(_cell(path, line, "prompt_len", cells["prompt_len"], int)),
                                int(_cell(path, line, "output_len", cells["output_len"], int))))
    if not out:
        raise TraceFormatError(f"{path}: a header but no requests; add rows")
    return out


def trace_csv(trace: list[TraceRequest], comment: str = "") -> str:
    """The CSV text of a serving trace (``comment`` lines first, each prefixed ``# ``)."""
    head = "".join(f"# {ln}\n" for ln in comment.splitlines())
    body = "".join(f"{r.arrival_s:.6f},{r.prompt_len},{r.output_len}\n" for r in trace)
    return head + ",".join(COLUMNS) + "\n" + body


#: one generated file: its name, its text, and what to print after writing it
TraceFile = tuple[str, str, str]


def write_or_check(out: Path, files: Iterable[TraceFile], *, check: bool) -> int:
    """Write each file into ``out``, or with ``check`` compare each; 0 when all match."""
    status = 0
    for name, text, note in files:
        path = out / name
        if check:
            same = path.is_file() and path.read_text(encoding="utf-8") == text
            print(f"{'ok  ' if same else 'DIFF'} {name}")
            status |= 0 if same else 1
        else:
            out.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
            print(note)
    return status


def regenerate_main(description: str, default_out: Path,
                    files: Callable[[], Iterable[TraceFile]],
                    argv: list[str] | None = None) -> int:
    """The command line (``--out DIR``, ``--check``) of the trace scripts in ``scripts/``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", type=Path, default=default_out)
    ap.add_argument("--check", action="store_true",
                    help="regenerate in memory and compare with the files; write nothing")
    args = ap.parse_args(argv)
    return write_or_check(args.out, files(), check=args.check)
