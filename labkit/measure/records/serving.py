"""Record kinds of serving a request trace: ``serve_<name>`` and ``serving_load_<preset>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from labkit.measure.records.fields import (
    _bool, _dict, _Fail, _int, _list, _num, _nums, _opt, _req, _str, _strs,
)


# ----------------------------------------------------------------------------- serving


@dataclass(frozen=True)
class ServeRequest:
    """One request of a ``serve_<name>`` run: arrival, lengths and the time (s from the start)
    of each generated token."""

    arrival_s: float
    prompt_len: int
    output_len: int
    token_times_s: list[float]

    @classmethod
    def from_data(cls, v: Any, where: str) -> "ServeRequest":
        d = _dict(v, where)
        out = cls(arrival_s=_req(d, "arrival_s", where, _num),
                  prompt_len=_req(d, "prompt_len", where, _int),
                  output_len=_req(d, "output_len", where, _int),
                  token_times_s=_req(d, "token_times_s", where, _nums))
        if len(out.token_times_s) > out.output_len:
            raise _Fail(f"{where}.token_times_s", f"has {len(out.token_times_s)} times for "
                        f"output_len={out.output_len}")
        return out


@dataclass(frozen=True)
class ServeStep:
    """One decode step of a ``serve_<name>`` run: start/end (s), rows, rows computed,
    runtime mode and whether a graph served it."""

    start_s: float
    end_s: float
    batch: int
    padded: int
    runtime: str
    graph: bool

    @classmethod
    def from_data(cls, v: Any, where: str) -> "ServeStep":
        d = _dict(v, where)
        out = cls(start_s=_req(d, "start_s", where, _num), end_s=_req(d, "end_s", where, _num),
                  batch=_req(d, "batch", where, _int), padded=_req(d, "padded", where, _int),
                  runtime=_req(d, "runtime", where, _str), graph=_req(d, "graph", where, _bool))
        if out.padded < out.batch:
            raise _Fail(f"{where}.padded", f"({out.padded}) is below batch ({out.batch})")
        return out


@dataclass(frozen=True)
class ServeArm:
    """One arm of an interleaved ``serve_<name>_ab`` record: its step ``mode``, ``breaker``
    settings (``None``: none), the metrics of its first recorded run and of every run
    (``repeats``), measured alternately with the other arms."""

    mode: str
    breaker: dict | None
    metrics: dict
    repeats: list[dict]
    windows: list[dict] = field(default_factory=list)

    @classmethod
    def from_data(cls, v: Any, where: str) -> "ServeArm":
        d = _dict(v, where)
        brk = d.get("breaker")
        return cls(mode=_req(d, "mode", where, _str),
                   breaker=None if brk is None else _dict(brk, f"{where}.breaker"),
                   metrics=_req(d, "metrics", where, _dict),
                   repeats=[_dict(m, f"{where}.repeats[{i}]") for i, m in
                            enumerate(_req(d, "repeats", where, _list))],
                   windows=_opt(d, "windows", where, _list, []))


@dataclass(frozen=True)
class Serve:
    """``serve_<name>``: a continuous-batching run of a request trace (:mod:`labkit.serving`)
    in one step ``mode``: every request's token times, every decode step, and the metrics of
    :func:`labkit.measure.serving_metrics.run_metrics` (TTFT/TPOT/ITL/E2EL in ms, ...; on
    CUDA since the GPU busy time was added, also ``gpu_busy_s`` and ``gpu_busy_share``)."""

    RECORD = "serve_<name>"  # the record name(s) of this kind

    mode: str
    trace: str
    clock: str
    requests: list[ServeRequest]
    steps: list[ServeStep]
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

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Serve":
        out = cls(mode=_req(d, "mode", where, _str), trace=_opt(d, "trace", where, _str, ""),
                  clock=_opt(d, "clock", where, _str, ""),
                  requests=[ServeRequest.from_data(r, f"{where}.requests[{i}]")
                            for i, r in enumerate(_req(d, "requests", where, _list))],
                  steps=[ServeStep.from_data(s, f"{where}.steps[{i}]")
                         for i, s in enumerate(_req(d, "steps", where, _list))],
                  metrics=_req(d, "metrics", where, _dict),
                  repeats=[_dict(m, f"{where}.repeats[{i}]") for i, m in
                           enumerate(_opt(d, "repeats", where, _list, []))],
                  warmup_runs=_opt(d, "warmup_runs", where, _int, 0),
                  interleaved=_opt(d, "interleaved", where, _bool, False),
                  arms={str(k): ServeArm.from_data(v, f"{where}.arms[{k!r}]") for k, v in
                        _opt(d, "arms", where, _dict, {}).items()})
        if out.interleaved and len(out.arms) < 2:
            raise _Fail(f"{where}.arms", f"an interleaved record needs two arms or more, got "
                        f"{list(out.arms)}")
        return out


@dataclass(frozen=True)
class ServeLoadPoint:
    """One point of a latency–load curve: step ``mode``, request ``rate`` (req/s) and the
    run's metrics (:func:`labkit.measure.serving_metrics.run_metrics`)."""

    mode: str
    rate: float
    metrics: dict

    @classmethod
    def from_data(cls, v: Any, where: str) -> "ServeLoadPoint":
        d = _dict(v, where)
        return cls(mode=_req(d, "mode", where, _str), rate=_req(d, "rate", where, _num),
                   metrics=_req(d, "metrics", where, _dict))


@dataclass(frozen=True)
class ServeLoad:
    """``serving_load_<preset>``: the latency–load curve (:mod:`labkit.measure.serve_load`):
    one :class:`ServeLoadPoint` per step mode and request rate."""

    RECORD = "serving_load_<preset>"  # the record name(s) of this kind

    modes: list[str]
    rates: list[float]
    points: list[ServeLoadPoint]
    #: whole runs each mode served and discarded before its first point (0 in older records)
    warmup_runs: int = 0

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "ServeLoad":
        out = cls(modes=_req(d, "modes", where, _strs), rates=_req(d, "rates", where, _nums),
                  points=[ServeLoadPoint.from_data(p, f"{where}.points[{i}]")
                          for i, p in enumerate(_req(d, "points", where, _list))],
                  warmup_runs=_opt(d, "warmup_runs", where, _int, 0))
        for i, p in enumerate(out.points):
            if p.mode not in out.modes or p.rate not in out.rates:
                raise _Fail(f"{where}.points[{i}]", f"has mode {p.mode!r} at rate {p.rate} "
                            f"outside modes {out.modes} / rates {out.rates}")
        return out

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
