"""Record kinds of serving a request trace: ``serve_<name>`` and ``serving_load_<preset>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from labkit.measure.records.fields import Kind, _Fail, parse_kind, parse_value, src
from labkit.serving.runs import RequestResult, StepRecord


def _requests(v: Any, where: str) -> list[RequestResult]:
    """A record's requests as the loop's :class:`RequestResult` (``index``: place in the list)."""
    return [parse_kind(RequestResult, r, f"{where}[{i}]", index=i)
            for i, r in enumerate(parse_value(list, v, where))]


def _steps(v: Any, where: str) -> list[StepRecord]:
    """A record's steps as the loop's :class:`StepRecord`; a step of a record made before
    chunked prefill (no ``tokens``) was a decode step: one token a row, no admission counted,
    no prompt token."""
    out = []
    for i, s in enumerate(parse_value(list, v, where)):
        d = parse_value(dict, s, f"{where}[{i}]")
        if "tokens" not in d:
            d = {"admitted": 0, "tokens": d.get("batch"), "prefill_tokens": 0, **d}
        out.append(parse_kind(StepRecord, d, f"{where}[{i}]"))
    return out


@dataclass(frozen=True, kw_only=True)
class ServeArm(Kind):
    """One arm of an interleaved ``serve_<name>_ab`` record, measured alternately with the
    others (``breaker``: ``None`` for none)."""
    mode: str
    breaker: dict | None = None
    metrics: dict
    repeats: list[dict]
    windows: list[dict] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Serve(Kind):
    """``serve_<name>``: a continuous-batching run of a request trace (:mod:`labkit.serving.loop`)
    in one step ``mode``: every request's token times, every decode step, and the metrics of
    :func:`labkit.measure.serving_metrics.run_metrics` (TTFT/TPOT/ITL/E2EL in ms, ...; on
    CUDA since the GPU busy time was added, also ``gpu_busy_s`` and ``gpu_busy_share``)."""
    RECORD = "serve_<name>"
    mode: str
    trace: str = ""
    clock: str = ""
    #: the loop's own classes (:mod:`labkit.serving.runs`), read back
    requests: list[RequestResult] = src(parse=_requests)
    steps: list[StepRecord] = src(parse=_steps)
    metrics: dict
    #: every recorded run's metrics (``measure_serving(repeats=...)``); [] in older records
    repeats: list[dict] = field(default_factory=list)
    #: whole runs served and discarded before the recorded ones (0 in older records)
    warmup_runs: int = 0
    #: True when the record's arms were measured alternately in one process
    #: (:func:`labkit.measure.serve.measure_interleaved`); False in every other record
    interleaved: bool = False
    #: the arms of an interleaved record, by label ({} otherwise)
    arms: dict[str, ServeArm] = field(default_factory=dict)

    def validate(self, data: Mapping, where: str) -> None:
        problems = [(f"requests[{i}]", r.problem()) for i, r in enumerate(self.requests)]
        problems += [(f"steps[{i}]", s.problem()) for i, s in enumerate(self.steps)]
        for at, problem in problems:
            if problem:
                raise _Fail(f"{where}.{at}.{problem[0]}", problem[1])
        if self.interleaved and len(self.arms) < 2:
            raise _Fail(f"{where}.arms", f"an interleaved record needs two arms or more, got "
                        f"{list(self.arms)}")


@dataclass(frozen=True, kw_only=True)
class ServeLoadPoint(Kind):
    """One point of a latency–load curve (``rate`` in req/s)."""
    mode: str
    rate: float
    metrics: dict


@dataclass(frozen=True, kw_only=True)
class ServeLoad(Kind):
    """``serving_load_<preset>``: the latency–load curve (:mod:`labkit.measure.serve_load`):
    one :class:`ServeLoadPoint` per step mode and request rate."""
    RECORD = "serving_load_<preset>"
    modes: list[str]
    rates: list[float]
    points: list[ServeLoadPoint]
    #: whole runs each mode served and discarded before its first point (0 in older records)
    warmup_runs: int = 0

    def validate(self, data: Mapping, where: str) -> None:
        for i, p in enumerate(self.points):
            if p.mode not in self.modes or p.rate not in self.rates:
                raise _Fail(f"{where}.points[{i}]", f"has mode {p.mode!r} at rate {p.rate} "
                            f"outside modes {self.modes} / rates {self.rates}")

    def series(self, mode: str, key: str) -> list[float | None]:
        """Metric ``key`` (dotted, e.g. ``'ttft_ms.p99'``) of ``mode`` at each rate."""
        by_rate = {p.rate: p.metrics for p in self.points if p.mode == mode}
        out: list[float | None] = []
        for r in self.rates:
            v: Any = by_rate.get(r)
            for part in key.split("."):
                v = v.get(part) if isinstance(v, Mapping) else None
            out.append(v)
        return out
