"""Record ``breakable_<preset>``: breakable (segmented) capture of the readable decode step
against FULL and the hand-cut PIECEWISE graphs, and capture time with and without
``gc.freeze()``.

Tokens first: every variant's graphs give the eager ``decode_step``'s greedy tokens at every
batch size (a variant that differs is not timed). The variants, each in a pool of its own, all
on one static batch: ``full`` (labkit's FULL graphs, :mod:`labkit.graphs`), ``breaks_<n>``
(:mod:`labkit.breakable`: ``n`` breaks spread over the layers, 0 one segment, ``L`` the hand
cut's shape) and ``piecewise`` (the hand cut, :mod:`labkit.piecewise`). Then:

* step time: per batch size, every variant's replay in turn, round after round (interleaved,
  CUDA events after warm-up), at ``context`` positions; then the host's time to issue a step
  (``host_times``, :func:`labkit.timing.time_host_issue_interleaved`): where it reaches the GPU
  time, Python issuing the segments and eager calls sets the pace, not the GPU;
* capture time: each variant's sizes captured ``capture_repeats`` times, the variants in turn;
  the whole call (warm-up, capture, the collector's freeze) and the capture alone, in seconds;
* the collector: the breakable graphs of ``gc_sizes`` with ``gc_break_count`` breaks captured
  with the collector frozen (:func:`labkit.graphs.gc_frozen`: collect, freeze, disable, as
  vLLM PR #21146 and SGLang PR #8577 freeze it) and left running, each with and without
  PyTorch's collection before every graph (``torch.compiler.config.force_cudagraph_gc``:
  what ``torch.cuda.graph`` did before every capture until PyTorch PR #158193; vLLM's
  breakable wrapper collects before each graph it captures, PR #54646), over a synthetic heap
  of ``heap_objects`` live Python lists (a server's heap is large, labkit's small): the four
  in turn, ``capture_repeats`` times per heap, with the collections each generation ran
  during the capture (``gc.get_stats``). The freeze pays one full collection up front; what
  it saves depends on how many collections the capture would run (vLLM PR #44363 saw no
  change in capture time once PyTorch stopped collecting), so both are recorded.
"""

from __future__ import annotations

import gc
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Any, Protocol

import torch

from labkit.batch import StaticBatch
from labkit.breakable import capture_breakable_set, spread_breaks
from labkit.checks import as_int, as_int_list, as_size_list
from labkit.graphs import GraphSet, capture_full, new_batch
from labkit.measure.bench import _free, _need_cuda, make_model, step_inputs, time_sizes
from labkit.measure.fused_bench import check_counts, same_tokens
from labkit.measure.triton_bench import _versions
from labkit.model import TinyGPT, preset
from labkit.piecewise import PiecewiseGraphs, capture_pieces
from labkit.timing import Stats, time_cuda_interleaved, time_host_issue_interleaved


class Captured(Protocol):
    """What a variant's capture returns: a runner of the static batch that can be released."""

    def replay(self, rows: int) -> torch.Tensor: ...

    def release(self) -> None: ...


def default_break_counts(n_layer: int) -> list[int]:
    """0, then powers of two below ``n_layer``, then ``n_layer``: 0, 1, 2, 4, 8, 12 for 12."""
    n_layer = as_int(n_layer, "n_layer", minimum=1, fix="give the model's layer count")
    out, k = [0], 1
    while k < n_layer:
        out.append(k)
        k *= 2
    return [*out, n_layer]


def variant_names(break_counts: Sequence[int]) -> list[str]:
    """The variants in the order they are replayed within a round."""
    return ["full", *(f"breaks_{n}" for n in break_counts), "piecewise"]


def variant_shape(name: str, n_layer: int) -> dict[str, Any]:
    """A variant's break layers, segments (graphs) and eager functions per step."""
    if name == "full":
        return {"breaks_at": [], "segments": 1, "eager": 0}
    if name == "piecewise":
        return {"breaks_at": list(range(n_layer)), "segments": n_layer + 1, "eager": n_layer}
    at = list(spread_breaks(n_layer, int(name.removeprefix("breaks_"))))
    return {"breaks_at": at, "segments": len(at) + 1, "eager": len(at)}


def capture_variant(model: TinyGPT, name: str, sizes: list[int], batch: StaticBatch, *,
                    warmup: int, freeze_gc: bool = True) -> tuple[Captured, float]:
    """Capture variant ``name`` for ``sizes`` on ``batch`` in a pool of its own; returns it and
    the seconds spent capturing alone (warm-up excluded)."""
    if name == "full":
        gs: GraphSet = capture_full(model, sizes, batch, model.decode, pool="shared",
                                    order="largest_first", warmup=warmup, progress=False,
                                    check_sync=True)
        return gs, sum(g.capture_s for g in gs.graphs.values())
    if name == "piecewise":
        pw: PiecewiseGraphs = capture_pieces(model, sizes, batch, pool=None, warmup=warmup,
                                             progress=False, check_sync=True)
        return pw, sum(p.capture_s for ps in pw.pieces.values() for p in ps)
    at = spread_breaks(model.cfg.n_layer, int(name.removeprefix("breaks_")))
    bg = capture_breakable_set(model, sizes, batch, at, pool=None, warmup=warmup,
                               progress=False, check_sync=True, freeze_gc=freeze_gc)
    return bg, bg.capture_s()


def _graph_step(batch: StaticBatch, runner: Captured) -> Any:
    """``(tokens, positions, slots) -> logits`` through ``runner`` on ``batch``."""
    def step(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        b = batch.load(t, p, s)
        return runner.replay(b)[:b].clone()
    return step


def synthetic_heap(objects: int) -> list[list[int]]:
    """``objects`` live, GC-tracked Python objects (one-element lists), collected once so they
    sit in the oldest generation, as a long-running server's do."""
    heap = [[i] for i in range(objects)]
    gc.collect()
    return heap


def gc_collections() -> list[int]:
    """Collections run so far, per generation (0, 1, 2)."""
    return [int(s["collections"]) for s in gc.get_stats()]


def force_gc_available() -> bool:
    """Whether this torch has ``torch.compiler.config.force_cudagraph_gc``."""
    return hasattr(getattr(torch.compiler, "config", None), "force_cudagraph_gc")


@contextmanager
def torch_collects(on: bool) -> Iterator[None]:
    """Within the block, PyTorch collects garbage before each graph's capture (``on``) or not."""
    cfg = torch.compiler.config
    old = cfg.force_cudagraph_gc
    cfg.force_cudagraph_gc = on
    try:
        yield
    finally:
        cfg.force_cudagraph_gc = old


def _check(preset_name: str, break_counts: Sequence[int] | None, capture_repeats: int,
           gc_sizes: Sequence[int], gc_break_count: int | None, heap_objects: Sequence[int],
           warmup: int) -> tuple[list[int], int, list[int], int, list[int], int]:
    """The checked counts of :func:`measure_breakable` (nothing allocated)."""
    n_layer = preset(preset_name).n_layer
    counts = (default_break_counts(n_layer) if break_counts is None else
              sorted(set(as_int_list(break_counts, "break_counts", minimum=0, maximum=n_layer,
                                     fix=f"give break counts 0..{n_layer} (the layers)"))))
    if not counts:
        raise ValueError("break_counts is empty; give at least one count such as [0, 1], or "
                         "None for 0, 1, 2, 4, ..., L")
    reps = as_int(capture_repeats, "capture_repeats", minimum=1,
                  fix="capture each configuration at least once (5 or more for a spread)")
    sizes = sorted(set(as_size_list(gc_sizes, "gc_sizes",
                                    fix="give the capture sizes of the GC comparison")))
    gc_breaks = n_layer if gc_break_count is None else as_int(
        gc_break_count, "gc_break_count", minimum=0, maximum=n_layer,
        fix=f"give 0..{n_layer} breaks, or None for every layer")
    heaps = as_int_list(heap_objects, "heap_objects", minimum=0,
                        fix="give heap sizes in objects such as [0, 2000000]")
    if not heaps:
        raise ValueError("heap_objects is empty; give at least one heap size such as [0]")
    warmup = as_int(warmup, "warmup", minimum=0, fix="warm up 0 or more times (3 is usual)")
    return counts, reps, sizes, gc_breaks, heaps, warmup


def _seconds(samples: Sequence[float]) -> dict:
    return Stats.from_samples(list(samples), unit="s").to_dict()


def measure_breakable(preset_name: str = "gpt2", batch_sizes: Sequence[int] = (1, 8, 64),
                      dtype: str = "bfloat16", context: int = 128, max_seq: int = 256,
                      break_counts: Sequence[int] | None = None, repeats: int = 30,
                      inner: int = 10, new_tokens: int = 8, warmup: int = 3,
                      capture_repeats: int = 5,
                      gc_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
                      gc_break_count: int | None = None,
                      heap_objects: Sequence[int] = (0, 2_000_000)) -> dict:
    """Record ``breakable_<preset>`` (see the module docstring). ``break_counts``: None for
    0, 1, 2, 4, ..., L; ``gc_break_count``: None for every layer."""
    sizes, repeats, inner, new_tokens = check_counts(batch_sizes, repeats, inner, new_tokens)
    max_seq = as_int(max_seq, "max_seq", minimum=2, fix="give the cache's positions per slot")
    context = as_int(context, "context", minimum=1, maximum=max_seq,
                     fix=f"give the positions each row attends to, at most max_seq={max_seq}")
    counts, reps, g_sizes, gc_breaks, heaps, warmup = _check(
        preset_name, break_counts, capture_repeats, gc_sizes, gc_break_count, heap_objects,
        warmup)
    _need_cuda("measure_breakable")
    model: TinyGPT | None = make_model(preset_name, max_batch=max(sizes[-1], g_sizes[-1]),
                                       dtype=dtype, max_seq=max_seq)
    assert model is not None
    cfg, n_layer = model.cfg, model.cfg.n_layer
    names = variant_names(counts)
    batch = new_batch(model, sizes[-1])
    checks: dict[str, bool] = {}
    built: dict[str, Captured] = {}
    times: dict[str, list[dict]] = {}
    host_times: dict[str, list[dict]] = {}
    try:  # correct before fast: every variant's tokens before anything is timed
        for name in names:
            built[name], _ = capture_variant(model, name, sizes, batch, warmup=warmup)
            checks[f"graph_tokens_equal_eager.{name}"] = all(
                same_tokens(model, model.decode_step, _graph_step(batch, built[name]), b,
                            new_tokens) for b in sizes)
        timed = [n for n in names if checks[f"graph_tokens_equal_eager.{n}"]]

        def fns_at(b: int, m: TinyGPT = model, staged: StaticBatch = batch
                   ) -> dict[str, Callable[[], object]]:
            staged.load(*step_inputs(m, b, context=context))
            return {n: partial(built[n].replay, b) for n in timed}

        times = time_sizes(sizes if timed else [], fns_at, timed, repeats=repeats, inner=inner,
                           timer=time_cuda_interleaved)
        host_times = time_sizes(sizes if timed else [], fns_at, timed,
                                repeats=max(5, repeats // 2), inner=inner,
                                timer=time_host_issue_interleaved)
    finally:
        for r in built.values():
            r.release()
        built.clear()
    build_s: dict[str, list[float]] = {n: [] for n in names}
    capture_s: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(reps):  # the variants in turn, round after round
        for name in names:
            t0 = time.perf_counter()
            runner, alone = capture_variant(model, name, sizes, batch, warmup=warmup)
            build_s[name].append(time.perf_counter() - t0)
            capture_s[name].append(alone)
            runner.release()
    gc_name = f"breaks_{gc_breaks}"
    gc_batch = new_batch(model, g_sizes[-1])
    configs = [(tc, fz) for tc in ((False, True) if force_gc_available() else (False,))
               for fz in (True, False)]
    gc_rows: list[dict] = []
    gc_enabled, threshold = gc.isenabled(), list(gc.get_threshold())
    for n_obj in heaps:
        heap = synthetic_heap(n_obj)
        secs: dict[tuple[bool, bool], list[float]] = {c: [] for c in configs}
        runs: dict[tuple[bool, bool], list[list[int]]] = {c: [] for c in configs}
        for _ in range(reps):
            for tc, fz in configs:
                with torch_collects(tc) if force_gc_available() else nullcontext():
                    before = gc_collections()
                    t0 = time.perf_counter()
                    runner, _ = capture_variant(model, gc_name, g_sizes, gc_batch,
                                                warmup=warmup, freeze_gc=fz)
                    secs[(tc, fz)].append(time.perf_counter() - t0)
                    runs[(tc, fz)].append([a - b for a, b in zip(gc_collections(), before)])
                runner.release()
        gc_rows.extend({"heap_objects": n_obj, "torch_collects": tc, "freeze_gc": fz,
                        "build_s": _seconds(secs[(tc, fz)]), "collections": runs[(tc, fz)]}
                       for tc, fz in configs)
        del heap
    shapes = {n: variant_shape(n, n_layer) for n in names}
    data = {
        "preset": preset_name, "dtype": dtype, "config": cfg.to_dict(), "context": context,
        "batch_sizes": sizes, "n_layer": n_layer, "break_counts": counts, "variants": names,
        "breaks_at": {n: s["breaks_at"] for n, s in shapes.items()},
        "segments_per_step": {n: s["segments"] for n, s in shapes.items()},
        "eager_per_step": {n: s["eager"] for n, s in shapes.items()},
        "timed": timed, "interleaved": True, "repeats": repeats, "inner": inner,
        "warmup": warmup, "times": times, "host_times": host_times, "capture_repeats": reps,
        "build_s": {n: _seconds(v) for n, v in build_s.items()},
        "capture_s": {n: _seconds(v) for n, v in capture_s.items()},
        "gc": {"sizes": g_sizes, "variant": gc_name, "heap_objects": heaps,
               "gc_enabled": gc_enabled, "gc_threshold": threshold,
               "force_cudagraph_gc_available": force_gc_available(), "rows": gc_rows},
        "checks": {**checks, "graph_tokens_equal_eager": all(checks.values())},
        "device": torch.cuda.get_device_name(),
        "versions": {**_versions(), "python": platform.python_version()},
    }
    del batch, gc_batch
    model = None
    _free()
    return data
