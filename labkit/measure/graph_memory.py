"""Record ``graph_memory_<preset>``: the memory of every capture list's graphs in ONE shared
pool, as vLLM captures them, against vLLM's estimate and labkit's, and the same estimates taken
against a smaller KV cache than the graphs are captured against.

vLLM captures every graph into one pool per process (``CUDAGraphWrapper``,
vllm/compilation/cuda_graph.py, takes ``current_platform.get_global_graph_pool()``), so each
point here is one shared pool captured largest first. Its bytes, and those of every sample, are
the allocator's per-pool accounting (:func:`labkit.graphs.pool_reserved_bytes`), where vLLM
reads ``torch.cuda.mem_get_info`` around each sample (driver objects included): the errors here
are the estimates' own. The points are notebook 16's: each list of
:data:`labkit.measure.memory_budget.SIZE_LISTS` at each ``max_seq``, on its paged cache of two
blocks.

The under-estimate (vLLM #57475, PR #57595): vLLM profiles against a minimal KV cache
(``GPUModelRunner._init_minimal_kv_cache_for_profiling``, vllm/v1/worker/gpu_model_runner.py:
one block per request), then sizes the real cache and captures against it; the issue reports
the real capture needing more than was reserved, and out of memory. What of a graph grows with
the cache depends on the attention implementation. In labkit's readable step
the paged layout gathers ``max_seq`` positions per row through the block table whatever the
number of blocks, and the slot layout reads its rows in place on CUDA: here the estimate is
profiled against a cache with shorter rows (``profile_max_seq``) and, paged, the fewest blocks,
then set against the graphs captured against the real cache, with a third capture that changes
the blocks alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from labkit.checks import as_int, as_int_list
from labkit.graphs import (CaptureOOMError, CapturedGraph, capture_decode_graphs,
                           pool_active_bytes, pool_reserved_bytes)
from labkit.kvcache import LAYOUTS, Layout
from labkit.measure.bench import _free, _need_cuda, make_model
from labkit.measure.memory_budget import SIZE_LISTS, _capture_all, _capture_samples, _paged_model
from labkit.model import TinyGPT, preset
from labkit.sizes.graph_estimate import (estimate_error_pct, labkit_graph_estimate,
                                         labkit_sample_sizes, vllm_estimate)
from labkit.step_checks import check_capture_sizes, check_choice

#: the paged cache of notebook 16's points: the pad block and one (memory_budget._paged_model)
FEW_BLOCKS = 2


def _labkit_samples(model: TinyGPT, sizes: list[int]) -> dict[str, Any]:
    """labkit's two sampled captures (:func:`labkit_sample_sizes`: the largest, then the
    smallest) into one temporary shared pool: the reserved bytes (``grown``) and the live
    bytes (``kept``) each capture added."""
    sample = labkit_sample_sizes(sizes)
    after: dict[int, tuple[int, int]] = {}

    def read(b: int, g: CapturedGraph) -> None:
        after[b] = (pool_reserved_bytes(g.pool), pool_active_bytes(g.pool))

    _free()
    try:
        gs = capture_decode_graphs(model, sample, pool="shared", progress=False,
                                   on_captured=read)
    except CaptureOOMError as exc:
        _free()
        return {"labkit_sample_sizes": sample, "labkit_sample_oom": str(exc)}
    reserved, active = ([after[b][i] for b in sample] for i in (0, 1))
    out = {"labkit_sample_sizes": sample,
           "labkit_grown": [reserved[0], *(b - a for a, b in itertools.pairwise(reserved))],
           "labkit_kept": [active[0], *(b - a for a, b in itertools.pairwise(active))]}
    gs.release()
    del gs
    _free()
    return out


def _runs(model: TinyGPT, sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    """``repeats`` times: the whole list in one shared pool, largest first
    (``measured_bytes``; ``oom`` if it did not fit), vLLM's two samples, labkit's two."""
    runs = []
    for _ in range(repeats):
        whole = _capture_all(model, sizes, "shared")
        runs.append({k: whole[k] for k in ("measured_bytes", "device_bytes", "startup_s", "oom")
                     if k in whole}
                    | _capture_samples(model, sizes, "shared") | _labkit_samples(model, sizes))
    return runs


def _cache_model(preset_name: str, layout: Layout, max_batch: int, max_seq: int,
                 num_blocks: int | None, dtype: str, block_size: int) -> TinyGPT:
    """A model on a cache of ``layout`` with rows of ``max_seq`` positions (paged:
    ``num_blocks`` blocks, ``None`` as many as the slots need)."""
    extra: dict[str, Any] = {"num_blocks": num_blocks} if layout == "paged" else {}
    return make_model(preset_name, max_batch=max_batch, dtype=dtype, max_seq=max_seq,
                      kv_layout=layout, block_size=block_size, **extra)


def measure_pools(preset_name: str, size_lists: Mapping[str, list[int]], max_seqs: list[int],
                  small_sizes: list[int], profile_max_seq: int, layouts: Sequence[Layout],
                  repeats: int, dtype: str, block_size: int) -> dict[str, Any]:
    """The GPU part of :func:`measure_graph_memory`: per ``max_seq`` and capture list the
    runs of :func:`_runs` on notebook 16's paged model; then, for ``small_sizes``, per layout
    the runs against the small cache (``profile``), the real one (``real``) and, paged, the
    real rows on the fewest blocks (``real_few_blocks``)."""
    largest = max(max(s) for s in size_lists.values())
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "points": [],
                           "small_cache": []}
    for max_seq in max_seqs:
        model = _paged_model(preset_name, largest, max_seq, dtype, block_size)
        for name, sizes in size_lists.items():
            out["points"].append({"size_list": name, "max_seq": max_seq, "layout": "paged",
                                  "num_blocks": FEW_BLOCKS, "runs": _runs(model, sizes, repeats)})
        del model
        _free()
    real_max_seq = max(max_seqs)
    for layout in layouts:
        caches: list[tuple[str, int, int | None]] = [("profile", profile_max_seq, FEW_BLOCKS),
                                                     ("real", real_max_seq, None)]
        if layout == "paged":
            caches.append(("real_few_blocks", real_max_seq, FEW_BLOCKS))
        for role, max_seq, blocks in caches:
            model = _cache_model(preset_name, layout, max(small_sizes), max_seq, blocks, dtype,
                                 block_size)
            num_blocks = getattr(model.cache, "num_blocks", None)
            out["small_cache"].append({"layout": layout, "cache": role, "max_seq": max_seq,
                                       "num_blocks": num_blocks,
                                       "runs": _runs(model, small_sizes, repeats)})
            del model
            _free()
    return out


def _estimated(run: Mapping[str, Any], sizes: list[int]) -> dict[str, int | None]:
    """Both estimates of one run's samples (``None`` where a sample ran out of memory)."""
    return {"vllm_estimate_bytes": (vllm_estimate(run["sample_bytes"], sizes)
                                    if "sample_bytes" in run else None),
            "labkit_estimate_bytes": (labkit_graph_estimate(sizes, run["labkit_grown"],
                                                            run["labkit_kept"])
                                      if "labkit_grown" in run else None)}


def _error(estimate: int | None, measured: int | None) -> float | None:
    return None if estimate is None or not measured else estimate_error_pct(estimate, measured)


def _with_errors(run: Mapping[str, Any], sizes: list[int]) -> dict[str, Any]:
    """``run`` with both estimates and their errors against its own measured pool."""
    est = _estimated(run, sizes)
    measured = run.get("measured_bytes")
    return {**run, **est,
            "vllm_error_pct": _error(est["vllm_estimate_bytes"], measured),
            "labkit_error_pct": _error(est["labkit_estimate_bytes"], measured)}


def _span(values: Sequence[float | None]) -> list[float] | None:
    """``[min, max]`` of the known values; ``None`` if none is known."""
    known = [v for v in values if v is not None]
    return [min(known), max(known)] if known else None


def small_cache_rows(small: Sequence[Mapping[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """Per layout: each cache's runs (estimates and errors against its own pool), then the
    estimates profiled against the small cache set against the pool measured against the real
    one (``profiled_*_error_pct``, run by run), labkit's from samples against the real cache
    (``real_labkit_error_pct``), and how much the pool changes from the small cache to the real
    one (``rows_change_pct``) and, paged, with the blocks alone (``blocks_change_pct``)."""
    out: dict[str, Any] = {}
    for layout in dict.fromkeys(c["layout"] for c in small):
        caches = {c["cache"]: {**c, "runs": [_with_errors(r, sizes) for r in c["runs"]]}
                  for c in small if c["layout"] == layout}
        prof, real = caches["profile"]["runs"], caches["real"]["runs"]
        row: dict[str, Any] = {"caches": caches}
        for who in ("vllm", "labkit"):
            row[f"profiled_{who}_error_pct"] = [
                _error(p[f"{who}_estimate_bytes"], r.get("measured_bytes"))
                for p, r in zip(prof, real)]
        row["real_labkit_error_pct"] = [r["labkit_error_pct"] for r in real]
        row["rows_change_pct"] = [_error(p.get("measured_bytes"), r.get("measured_bytes"))
                                  for p, r in zip(prof, real)]
        if "real_few_blocks" in caches:
            row["blocks_change_pct"] = [
                _error(f.get("measured_bytes"), r.get("measured_bytes"))
                for f, r in zip(caches["real_few_blocks"]["runs"], real)]
        out[layout] = row
    return out


def graph_memory_record(raw: Mapping[str, Any], preset_name: str,
                        size_lists: Mapping[str, list[int]], max_seqs: list[int],
                        small_sizes: list[int], profile_max_seq: int, repeats: int, dtype: str,
                        block_size: int) -> dict[str, Any]:
    """The ``graph_memory_<preset>`` record from :func:`measure_pools`' numbers (``raw``):
    per point and run both estimates and their errors in percent of the measured pool, the
    span of each estimate's errors over all points, and :func:`small_cache_rows`."""
    points = []
    for p in raw["points"]:
        sizes = list(size_lists[p["size_list"]])
        points.append({**p, "sizes": sizes, "n_graphs": len(sizes),
                       "runs": [_with_errors(r, sizes) for r in p["runs"]]})
    errors = {who: [r[f"{who}_error_pct"] for p in points for r in p["runs"]]
              for who in ("vllm", "labkit")}
    known = [abs(e) for e in errors["labkit"] if e is not None]
    return {"preset": preset_name, "dtype": dtype, "device": raw.get("device", ""),
            "versions": {"torch": torch.__version__, "cuda": torch.version.cuda},
            "pool": "shared", "order": "largest_first", "block_size": block_size,
            "repeats": repeats, "size_lists": {k: list(v) for k, v in size_lists.items()},
            "max_seqs": list(max_seqs), "points": points,
            "vllm_error_pct_span": _span(errors["vllm"]),
            "labkit_error_pct_span": _span(errors["labkit"]),
            "labkit_worst_abs_error_pct": max(known) if known else None,
            "small_cache": {"sizes": list(small_sizes), "profile_max_seq": profile_max_seq,
                            "real_max_seq": max(max_seqs), "profile_num_blocks": FEW_BLOCKS,
                            "layouts": small_cache_rows(raw["small_cache"], small_sizes)}}


def measure_graph_memory(preset_name: str,
                         size_lists: Mapping[str, Sequence[int]] | None = None,
                         max_seqs: Sequence[int] = (256, 1024),
                         small_cache_sizes: Sequence[int] | None = None,
                         profile_max_seq: int = 256,
                         layouts: Sequence[Layout] = LAYOUTS, repeats: int = 2,
                         dtype: str = "bfloat16", block_size: int = 16) -> dict[str, Any]:
    """Record ``graph_memory_<preset>``: per capture list (default :data:`SIZE_LISTS`) and
    ``max_seq``, ``repeats`` times, the pool of the whole list in one shared pool (largest
    first, as vLLM), vLLM's estimate from its two samples and labkit's from its two
    (:mod:`labkit.sizes.graph_estimate`), each error in percent. Then the under-estimate, for
    ``small_cache_sizes`` (default labkit's list) and each of ``layouts``: both estimates
    sampled against a cache of ``profile_max_seq`` positions per row (paged: 2 blocks), set
    against the pool captured against the real cache (``max(max_seqs)`` positions, paged: every
    slot's blocks), and the pool with the real rows on 2 blocks. Out of memory: ``oom`` or
    ``*_sample_oom`` in that run, its errors ``None``."""
    preset(preset_name, dtype=dtype)  # the preset and dtype checked before anything runs
    if size_lists is not None and not isinstance(size_lists, Mapping):
        raise TypeError(f"size_lists must map a name to capture sizes, e.g. {{'mine': [1, 2, "
                        f"4]}}, got {type(size_lists).__name__}")
    if isinstance(layouts, str):
        raise TypeError(f"layouts must be a list of KV layouts, e.g. ['paged'], got "
                        f"{layouts!r}")
    lists = {str(k): check_capture_sizes(v) for k, v in (size_lists or SIZE_LISTS).items()}
    small = check_capture_sizes(SIZE_LISTS["labkit"] if small_cache_sizes is None
                                else small_cache_sizes)
    block_size = as_int(block_size, "block_size", minimum=1)
    seqs = sorted(set(as_int_list(max_seqs, "max_seqs", minimum=1)))
    profile = as_int(profile_max_seq, "profile_max_seq", minimum=1)
    kinds = [check_choice(x, "layouts", LAYOUTS) for x in dict.fromkeys(layouts)]
    repeats = as_int(repeats, "repeats", minimum=1, fix="measure each point at least once")
    if not lists or not seqs or any(m % block_size for m in [*seqs, profile]):
        raise ValueError(f"give at least one size list and one max_seq; max_seqs {seqs} and "
                         f"profile_max_seq={profile} must be multiples of "
                         f"block_size={block_size}")
    if profile >= seqs[-1]:
        raise ValueError(f"profile_max_seq={profile} must be below the real cache's "
                         f"max(max_seqs)={seqs[-1]}: the estimate is profiled against a "
                         "smaller cache than the graphs are captured against")
    _need_cuda("measure_graph_memory")
    raw = measure_pools(preset_name, lists, seqs, small, profile, kinds, repeats, dtype,
                        block_size)
    return graph_memory_record(raw, preset_name, lists, seqs, small, profile, repeats, dtype,
                               block_size)
