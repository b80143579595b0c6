"""``labkit serve``: run a request trace through the continuous-batching engine in one step mode,
with a progress bar, and save a ``serve_<name>`` record into a fresh run folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from tqdm.auto import tqdm

from labkit.measure.results import new_run_dir, save_result
from labkit.measure.serve import check_serving, measure_serving
from labkit.traces import load_request_trace


def run_serve(*, trace: str, mode: str, preset_name: str, device: str | None, dtype: str,
              max_batch: int, kv_layout: str, num_blocks: int | None,
              capture_sizes: Sequence[int] | None, seed: int, clock: str, decode_ms: float,
              max_requests: int | None, window_s: float, breaker: dict | None, name: str | None,
              out_root: str | os.PathLike[str]) -> tuple[Path, dict]:
    """Serve ``trace`` and save the record; returns the record's path and data."""
    # bad settings or a bad trace fail here, before the progress bar or any folder
    check_serving(preset_name, mode, clock=clock, dtype=dtype, max_batch=max_batch,
                  kv_layout=kv_layout, num_blocks=num_blocks, breaker=breaker)
    reqs = load_request_trace(trace)
    total = min(len(reqs), max_requests or len(reqs))
    with tqdm(total=total, desc=f"labkit serve {mode}", unit="req") as bar:
        data = measure_serving(preset_name, reqs, mode, device=device, dtype=dtype,
                               max_batch=max_batch, kv_layout=kv_layout, num_blocks=num_blocks,
                               capture_sizes=capture_sizes, seed=seed, clock=clock,
                               decode_ms=decode_ms, max_requests=max_requests,
                               window_s=window_s, breaker=breaker, progress=bar.update)
    data["trace"] = str(trace)
    params = {"trace": str(trace), "mode": mode, "preset": preset_name, "dtype": dtype,
              "max_batch": max_batch, "kv_layout": kv_layout, "num_blocks": num_blocks,
              "capture_sizes": list(capture_sizes) if capture_sizes else None, "seed": seed,
              "clock": clock, "decode_ms": decode_ms, "max_requests": max_requests,
              "window_s": window_s, "breaker": breaker}
    record = f"serve_{name or mode}"
    run = new_run_dir(f"serve-{mode}", root=out_root)
    return save_result(record, data, params, run), data


def summary_line(m: dict) -> str:
    """One line of a run's headline metrics (the record's ``metrics``)."""
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    return (f"{m['completed']} requests, {m['total_output']} tokens in {m['duration_s']:.2f} s; "
            f"TTFT median {fmt(m['ttft_ms']['median'])} ms p99 {fmt(m['ttft_ms']['p99'])} ms; "
            f"TPOT median {fmt(m['tpot_ms']['median'])} ms; graph hit rate "
            f"{m['graph_hit_rate']:.0%}, padded waste {m['padded_waste']:.0%}")
