"""``labkit serve``: run a request trace through the continuous-batching engine in one step mode,
with a progress bar, and save a ``serve_<name>`` record into a fresh run folder;
``labkit serve --record``: measure every serving reference record with its default parameters
(:data:`labkit.measure.records.SERVE_RECORDS`)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from collections.abc import Callable, Sequence

from tqdm.auto import tqdm

from labkit.measure import records
from labkit.measure.results import new_run_dir, save_result
from labkit.measure.serve import check_serving, measure_serving
from labkit.measure import recorder
from labkit.serving.loop import StepMode
from labkit.serving.traces import load_request_trace


def run_serve(*, trace: str, mode: StepMode, preset_name: str, device: str | None, dtype: str,
              max_batch: int, kv_layout: str, num_blocks: int | None,
              capture_sizes: Sequence[int] | None, seed: int, clock: str, decode_ms: float,
              max_requests: int | None, window_s: float, breaker: dict | None, name: str | None,
              out_root: str | os.PathLike[str], keep_timeline: bool = True,
              max_num_batched_tokens: int | None = None) -> tuple[Path, dict]:
    """Serve ``trace`` and save the record; returns its path and data. ``keep_timeline=False``
    leaves each token's and step's time out of the file (metrics and windows stay)."""
    # bad settings or a bad trace fail here, before the progress bar or any folder
    check_serving(preset_name, mode, clock=clock, dtype=dtype, max_batch=max_batch,
                  kv_layout=kv_layout, num_blocks=num_blocks, breaker=breaker)
    reqs = load_request_trace(trace)
    total = min(len(reqs), max_requests or len(reqs))
    # a bar only on a terminal: a log file gets no carriage returns
    with tqdm(total=total, desc=f"labkit serve {mode}", unit="req", file=sys.stderr,
              disable=not sys.stderr.isatty()) as bar:
        data = measure_serving(preset_name, reqs, mode, device=device, dtype=dtype,
                               max_batch=max_batch, kv_layout=kv_layout, num_blocks=num_blocks,
                               capture_sizes=capture_sizes, seed=seed, clock=clock,
                               decode_ms=decode_ms, max_requests=max_requests,
                               window_s=window_s, breaker=breaker, keep_timeline=keep_timeline,
                               max_num_batched_tokens=max_num_batched_tokens,
                               progress=bar.update)
    data["trace"] = str(trace)
    params = {"trace": str(trace), "mode": mode, "preset": preset_name, "dtype": dtype,
              "max_batch": max_batch, "kv_layout": kv_layout, "num_blocks": num_blocks,
              "capture_sizes": list(capture_sizes) if capture_sizes else None, "seed": seed,
              "clock": clock, "decode_ms": decode_ms, "max_requests": max_requests,
              "window_s": window_s, "breaker": breaker}
    if max_num_batched_tokens is not None:
        params["max_num_batched_tokens"] = max_num_batched_tokens
    if not keep_timeline:
        params["keep_timeline"] = False
    record = f"serve_{name or mode}"
    run = new_run_dir(f"serve-{mode}", root=out_root)
    return save_result(record, data, params, run), data


def summary_line(m: dict, *, device: str | None = None, mode: str | None = None) -> str:
    """One line of a run's headline metrics; on a CPU (no CUDA graph) the hit rate is called
    the bucket hit rate and the times CPU times."""
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    cpu = device is not None and not str(device).startswith("cuda")
    hit = ("bucket hit rate (CPU: eager bucketing, no CUDA graph)" if cpu and mode != "eager"
           else "graph hit rate")
    return (f"{m['completed']} requests, {m['total_output']} tokens in {m['duration_s']:.2f} s"
            + (" on the CPU" if cpu else "") + "; "
            f"TTFT median {fmt(m['ttft_ms']['median'])} ms p99 {fmt(m['ttft_ms']['p99'])} ms; "
            f"TPOT median {fmt(m['tpot_ms']['median'])} ms; {hit} "
            f"{m['graph_hit_rate']:.0%}, padded waste {m['padded_waste']:.0%}")


def check_record_names(names: Sequence[str] | None) -> list[str]:
    """The serving records to measure (default all); an unknown name raises, listing them."""
    names = list(records.SERVE_RECORDS) if not names else list(names)
    bad = [n for n in names if n not in records.SERVE_RECORDS]
    if bad:
        raise ValueError(f"--only {','.join(bad)}: not a serving record; choose from "
                         f"{','.join(records.SERVE_RECORDS)}")
    return names


def record_serving(out_root: str | os.PathLike[str], names: Sequence[str] | None = None, *,
                   echo: Callable[[str], None] = print) -> tuple[Path, list[str]]:
    """Measure each serving record of ``names`` with its defaults into one fresh run folder;
    one that fails is reported and the others still run. Returns the folder and the failed."""
    names = check_record_names(names)
    run = new_run_dir("serve-record", root=out_root)
    failed = []
    for name in names:
        start = time.perf_counter()
        try:
            data, params = recorder.measure(name)
            save_result(name, data, params, run)
        except Exception as exc:
            failed.append(name)
            echo(f"{name}: FAILED after {time.perf_counter() - start:.1f} s: "
                 f"{type(exc).__name__}: {exc}")
            continue
        line = (summary_line(data["metrics"], device=data.get("device"), mode=data.get("mode"))
                if "metrics" in data else f"{len(data['points'])} points")
        echo(f"{name}: {time.perf_counter() - start:.1f} s: {line}")
    return run, failed
