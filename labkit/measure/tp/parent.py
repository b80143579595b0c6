"""The parent process: two launches of the ranks, each with its own time limit, their results
merged into the data of ``tp_allreduce`` and ``tp_decode_<preset>`` (:func:`measure_tp`)."""

from __future__ import annotations

import os
import pickle
import tempfile
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

from labkit.checks import as_int, as_int_list
from labkit.distributed.launch import (RankError, RankTimeout, check_devices, default_backend,
                                       run_ranks)
from labkit.measure.tp.spec import (PG_METHODS, PG_PARTS, SYMM_METHODS, SYMM_PARTS,
                                    decode_methods, default_spec)
from labkit.measure.tp.worker import rank_main


def _launch(parts: Sequence[str], world_size: int, backend: str, spec: dict, timeout_s: float,
            partial: Path) -> tuple[list[dict], dict, str | None]:
    """Run ``parts`` on every rank: (per-rank results, or what rank 0 saved before a failure;
    launcher info; the failure or None)."""
    info: dict = {}
    spec = {**spec, "parts": list(parts), "partial": str(partial)}
    t0 = time.perf_counter()
    try:
        res = run_ranks(rank_main, world_size, args=(spec,), backend=backend,
                        timeout_s=timeout_s, start_timeout_s=120, grace_s=10,
                        shutdown_timeout_s=30, info=info)
        info["wall_s"] = time.perf_counter() - t0
        return res, info, None
    except (RankError, RankTimeout) as exc:
        info["wall_s"] = time.perf_counter() - t0
        why = f"{type(exc).__name__}: {exc}"
        print(f"[labkit tp] launch of {list(parts)} failed: {why[:2000]}", flush=True)
        if partial.is_file():
            with open(partial, "rb") as f:
                return [pickle.load(f)], info, why
        return [], info, why


def _merge(results: list[dict], into: dict, methods: Sequence[str], n: int,
           keep: Callable[[str], bool]) -> None:
    """Merge rank 0's times, every rank's medians, checks that hold on every rank and errors of
    any rank into ``into`` (checks and errors where ``keep(key)``)."""
    if not results:
        return
    r0 = results[0]
    for m in methods:
        if m in r0["times"]:
            into["times"][m] = r0["times"][m]
            into["rank_medians"][m] = [[(res["times"][m][i] or {}).get("median")
                                        if m in res["times"] else None for res in results]
                                       for i in range(n)]
    for res in results:
        for k, v in res["checks"].items():
            if keep(k):
                prev = into["checks"].get(k)
                into["checks"][k] = (v if prev is None else bool(prev and v)
                                     if isinstance(v, bool) else min(prev, v))
        for k, v in res["errors"].items():
            if keep(k):
                into["errors"].setdefault(k, f"rank {res['rank']}: {v}")
        for k, v in res.get("skipped", {}).items():
            if keep(k):
                into["skipped"].setdefault(k, v)
        into["notes"].extend(res.get("notes", []))
    into.setdefault("parts_s", {}).update(r0.get("parts_s", {}))
    into["device"] = r0.get("device", into.get("device", ""))


def check_launch(world_size: int, backend: str | None) -> str:
    """The backend a launch of ``world_size`` ranks uses (``backend``, else the default),
    checked to run on this machine before anything is made."""
    world_size = as_int(world_size, "world_size", minimum=2,
                        fix="tensor parallelism needs 2 or more ranks")
    backend = default_backend() if backend is None else backend
    check_devices(world_size, backend)
    return backend


def measure_tp(*, world_size: int = 2, backend: str | None = None, quick: bool = False,
               spec: dict | None = None, timeout_s: float = 150.0,
               symm_timeout_s: float = 90.0, scratch: str | os.PathLike[str] | None = None,
               log: Callable[[str], None] = print) -> tuple[dict, dict]:
    """Measure everything on ``world_size`` ranks: the data of ``tp_allreduce`` and
    ``tp_decode_<preset>``. A failed part or launch is recorded in ``errors``, never raised."""
    backend = check_launch(world_size, backend)
    world_size = int(world_size)
    cpu = backend == "gloo"
    spec = dict(spec) if spec is not None else default_spec(quick, cpu=cpu)
    as_int_list(spec["batch_sizes"], "batch_sizes", minimum=1)
    as_int_list(spec["sizes_bytes"], "sizes_bytes", minimum=16)
    scratch = Path(scratch) if scratch is not None else Path(tempfile.gettempdir())
    scratch.mkdir(parents=True, exist_ok=True)
    sizes, batches = list(spec["sizes_bytes"]), list(spec["batch_sizes"])
    ar: dict[str, Any] = {"backend": backend, "world_size": world_size, "dtype": spec["dtype"],
                          "sizes_bytes": sizes, "graph_ops": spec["graph_ops"], "times": {},
                          "rank_medians": {}, "checks": {}, "errors": {}, "skipped": {},
                          "notes": [], "shutdown": {}, "launch": {}}
    dec: dict[str, Any] = {"backend": backend, "preset": spec["preset"], "dtype": spec["dtype"],
                           "world_size": world_size, "batch_sizes": batches,
                           "config": {"preset": spec["preset"], **spec.get("overrides", {})},
                           "times": {}, "rank_medians": {}, "checks": {}, "errors": {},
                           "skipped": {}, "notes": [], "shutdown": {}, "launch": {}}
    symm_why = None if not cpu else "symmetric memory needs CUDA and NCCL (this run is gloo)"
    for label, parts, limit in (("pg", PG_PARTS, timeout_s), ("symm_mem", SYMM_PARTS,
                                                               symm_timeout_s)):
        if label == "symm_mem" and symm_why:
            for m in SYMM_METHODS:
                ar["skipped"][m] = symm_why
            dec["skipped"][f"tp{world_size}_graph_symm_mem"] = symm_why
            continue
        log(f"[labkit tp] launch {label}: parts {list(parts)} on {world_size} ranks "
            f"({backend}), limit {limit:.0f} s")
        partial = scratch / f".tp-{label}-{os.getpid()}.partial"
        results, info, failure = _launch(parts, world_size, backend, spec, limit, partial)
        partial.unlink(missing_ok=True)
        for d in (ar, dec):
            d["shutdown"][label] = {str(k): v for k, v in info.get("shutdown", {}).items()}
            d["launch"][label] = {"wall_s": info.get("wall_s"),
                                  "shutdown_hung": info.get("shutdown_hung", []),
                                  "exit_codes": {str(k): v for k, v in
                                                 info.get("exit_codes", {}).items()},
                                  "failure": failure}
            if failure:
                d["errors"][f"launch.{label}"] = failure[:4000]
        _merge(results, ar, [*PG_METHODS, *SYMM_METHODS], len(sizes), _is_allreduce_key)
        _merge(results, dec, decode_methods(world_size), len(batches),
               lambda k: not _is_allreduce_key(k))
    for d, methods, n in ((ar, [*PG_METHODS, *SYMM_METHODS], len(sizes)),
                          (dec, decode_methods(world_size), len(batches))):
        for m in methods:  # every method has a column; None where it did not run (see errors)
            d["times"].setdefault(m, [None] * n)
        _split_errors(d)
    tokens = [v for k, v in dec["checks"].items() if k.startswith("tp_tokens_equal_tp1.")]
    dec["checks"]["tp_tokens_equal_tp1"] = bool(tokens) and all(tokens)
    sums = [v for k, v in ar["checks"].items() if k.startswith("sum_exact.")]
    ar["checks"]["sum_exact"] = bool(sums) and all(sums)
    return ar, dec


def _is_allreduce_key(key: str) -> bool:
    """Whether a check or error key belongs to the all-reduce sweep (else: to decode)."""
    head = key.split(".")[0]
    return head in PG_METHODS or head in SYMM_METHODS or key.startswith(
        ("sum_exact.", "symm_mem.rendezvous", "part.allreduce"))


def _split_errors(d: dict) -> None:
    """Add each method's first ``method.size`` error under the method's own name."""
    for k in list(d["errors"]):
        head = k.split(".")[0]
        if head in d["times"] and head != k:
            d["errors"].setdefault(head, d["errors"][k])
