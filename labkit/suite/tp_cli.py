"""``labkit tp``: tensor-parallel decode on ``N`` ranks (NCCL on GPUs, gloo on CPU); saves the
records ``tp_allreduce`` and ``tp_decode_<preset>`` with provenance into a fresh run folder,
even when some parts failed (their reasons are in each record's ``errors``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from labkit.measure.records import TPAllReduce, TPDecode, view
from labkit.measure.results import new_run_dir, save_result
from labkit.measure.tp import measure_tp
from labkit.measure.tp.parent import check_launch

#: exit codes: records saved and every check passed / saved but something failed or is off
EXIT_OK, EXIT_PARTIAL = 0, 3


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:8.1f}"


def summary_lines(ar: dict, dec: dict) -> list[str]:
    """A readable summary of the two records' data (µs; failures named)."""
    a, d = view(ar, TPAllReduce), view(dec, TPDecode)
    out = [f"all-reduce, {a.world_size} ranks ({a.backend}, {a.dtype}), us per all-reduce:",
           "  size      " + " ".join(f"{m:>15}" for m in a.methods)]
    for i, b in enumerate(a.sizes_bytes):
        out.append(f"  {b // 1024:>6} KB " + " ".join(
            f"{_fmt(a.median_us(m)[i]):>15}" for m in a.methods))
    out += [f"decode step {d.preset} ({d.dtype}), us per step:",
            "  batch " + " ".join(f"{m:>20}" for m in d.methods)]
    for i, b in enumerate(d.batch_sizes):
        out.append(f"  {b:>5} " + " ".join(f"{_fmt(d.median_us(m)[i]):>20}"
                                            for m in d.methods))
    out.append("checks: " + json.dumps({**a.checks, **d.checks}, sort_keys=True))
    errors = {**a.errors, **d.errors}
    if errors:
        out.append(f"{len(errors)} failure(s) recorded (first lines):")
        out += [f"  {k}: {v.splitlines()[0][:300]}" for k, v in sorted(errors.items())]
    for label, ranks in d.shutdown.items():
        out.append(f"shutdown ({label} launch): " + ", ".join(
            f"rank {r} {s.get('total_s', float('nan')):.2f} s" for r, s in ranks.items()))
    return out


def run_tp(*, out_root: str | os.PathLike[str] = "runs", world_size: int = 2,
           backend: str | None = None, quick: bool = False, timeout_s: float = 150.0,
           symm_timeout_s: float = 90.0) -> tuple[int, Path]:
    """Measure, save both records into a fresh run folder, print a summary; (exit code, folder)."""
    t0 = time.perf_counter()
    backend = check_launch(world_size, backend)  # bad arguments fail before the folder is made
    run = new_run_dir("tp", root=out_root)
    print(f"[labkit tp] run folder {run}", flush=True)
    ar, dec = measure_tp(world_size=world_size, backend=backend, quick=quick,
                         timeout_s=timeout_s, symm_timeout_s=symm_timeout_s, scratch=run)
    params = {"world_size": world_size, "backend": ar["backend"], "quick": quick,
              "timeout_s": timeout_s, "symm_timeout_s": symm_timeout_s}
    paths = [save_result("tp_allreduce", ar, params, run),
             save_result(f"tp_decode_{dec['preset']}", dec, params, run)]
    lines = summary_lines(ar, dec)
    lines.append(f"total {time.perf_counter() - t0:.1f} s")
    (run / "tp_summary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for line in lines:
        print(line, flush=True)
    for p in paths:
        print(p, flush=True)
    ok = (not ar["errors"] and not dec["errors"] and dec["checks"].get("tp_tokens_equal_tp1")
          and ar["checks"].get("sum_exact"))
    return (EXIT_OK if ok else EXIT_PARTIAL), run
