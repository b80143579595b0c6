"""Record ``modes_<preset>``: CUDA-graph capture modes side by side on the GPU: eager (NONE),
PIECEWISE, FULL, and "capture only the attention".

vLLM's PIECEWISE mode (``vllm/config/compilation.py`` ``CUDAGraphMode``) captures everything
*between* the attention ops (:mod:`labkit.piecewise` makes the same cut); a popular article
describes the other way round, which :class:`AttentionOnlyGraphs` builds, so both splits are
timed alike. Every mode's tokens are checked against eager tokens before timing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Any, cast
from collections.abc import Callable, Sequence

import torch

from labkit.runner import CudagraphMode, PaddingDispatcher
from labkit.graphs import CapturedGraph, capture_callable, gc_frozen, pool_reserved_bytes
from labkit.kvcache import StepMeta
from labkit.measure import records
from labkit.measure.bench import (_free, _need_cuda, count_step_ops, make_model, step_inputs,
                                  time_sizes, tokens_match, tokens_per_s_of)
from labkit.measure.opcount import profile_call
from labkit.model import Block, TinyGPT, attention

#: the modes a ``modes_<preset>`` record times, in chart order
MODES: tuple[str, ...] = ("eager", "piecewise", "full", "attention_only")
#: the dispatcher's ``cudagraph_mode`` for each dispatcher-driven mode
CUDAGRAPH_MODE: dict[str, CudagraphMode] = {"eager": "NONE", "piecewise": "PIECEWISE",
                                            "full": "FULL"}
_META_FIELDS = tuple(f.name for f in fields(StepMeta))


@dataclass
class AttentionOnlyGraphs:
    """Per batch size, one captured graph per layer holding only ``attention`` (cache write +
    attend) on static q, k, v and step-metadata buffers; everything else runs eagerly."""

    model: TinyGPT
    graphs: dict[int, list[CapturedGraph]]
    qkv: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    meta: dict[int, StepMeta]

    def pool_id(self) -> tuple[int, int]:
        """The id of the shared pool (for :func:`labkit.graphs.pool_reserved_bytes`)."""
        return next(iter(self.graphs.values()))[0].pool

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor,
             slots: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, V)``: everything eager but each layer's attention, replayed after
        copying q, k, v and the metadata into its buffers."""
        b = tokens.shape[0]
        if b not in self.graphs:
            raise KeyError(f"no attention graphs for batch size {b}; captured: "
                           f"{sorted(self.graphs)}")
        m = self.model
        dev = m.device
        x, meta = m.embed_step(tokens.to(dev), positions.to(dev), slots.to(dev))
        static = self.meta[b]
        for f in _META_FIELDS:
            getattr(static, f).copy_(getattr(meta, f))
        sq, sk, sv = self.qkv[b]
        for block, g in zip(cast("list[Block]", m.blocks), self.graphs[b]):  # no list copy
            q, k, v = block.pre_attention(x)
            sq.copy_(q)
            sk.copy_(k)
            sv.copy_(v)
            x = block.post_attention(x, g.replay())
        return m.head(x)

    def release(self) -> None:
        self.graphs.clear()
        _free()


@torch.no_grad()
def capture_attention_only(model: TinyGPT, sizes: Sequence[int]) -> AttentionOnlyGraphs:
    """Capture every layer's ``attention`` for each size (largest first) into one shared
    pool; warm-up and capture write only the scratch slot."""
    if not torch.cuda.is_available() or model.device.type != "cuda":
        raise RuntimeError("capturing CUDA graphs needs the model on a CUDA GPU (model is on "
                           f"{model.device}); on CPU run labkit.piecewise.piecewise_step")
    cfg, dev = model.cfg, model.device
    handle = torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream()
    graphs: dict[int, list[CapturedGraph]] = {}
    qkv: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    metas: dict[int, StepMeta] = {}
    with gc_frozen():
        for bs in sorted({int(b) for b in sizes}, reverse=True):
            shape = (bs, cfg.n_head, cfg.head_dim)
            q, k, v = (torch.zeros(shape, dtype=cfg.torch_dtype, device=dev) for _ in range(3))
            positions = torch.zeros(bs, dtype=torch.long, device=dev)
            slots = torch.full((bs,), cfg.scratch_slot, dtype=torch.long, device=dev)
            meta = model.cache.step_meta(positions, slots)
            meta = StepMeta(*(getattr(meta, f).clone() for f in _META_FIELDS))
            graphs[bs] = [
                capture_callable(lambda q_, k_, v_, *m_, layer=i: attention(
                    model.cache, layer, q_, k_, v_, StepMeta(*m_)),
                    q, k, v, *(getattr(meta, f) for f in _META_FIELDS), pool=handle,
                    stream=stream, warmup=3, label=(bs, i))
                for i in range(cfg.n_layer)]
            qkv[bs], metas[bs] = (q, k, v), meta
    return AttentionOnlyGraphs(model, graphs, qkv, metas)


def count_graph_launches(fn) -> int:
    """``cudaGraphLaunch`` calls one call of ``fn`` makes, counted by the profiler."""
    return int(profile_call(fn)["graph_launches"])


def _timed_capture(build) -> tuple[Any, float]:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = build()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def _dispatcher_pool_bytes(disp: PaddingDispatcher) -> int | None:
    """Bytes of the dispatcher's shared pool (``None``: nothing captured, eager)."""
    if disp.graphs is not None:
        return pool_reserved_bytes(next(iter(disp.graphs.graphs.values())).pool)
    if disp.pieces is not None:
        return pool_reserved_bytes(next(iter(disp.pieces.pieces.values()))[0].pool)
    return None


@torch.no_grad()
def measure_modes(preset_name: str, batch_sizes: Sequence[int] = (1, 8, 64),
                  dtype: str = "bfloat16", repeats: int = 20, inner: int = 10) -> dict:
    """Record ``modes_<preset>``: per batch size, the step time of eager, ``PIECEWISE``,
    ``FULL`` (a dispatcher each) and attention-only, sampled in turn; graph launches per step
    (profiled last), GPU operations per eager step, pool bytes, capture seconds, checks."""
    _need_cuda("measure_modes")
    batch_sizes = sorted({int(b) for b in batch_sizes})
    model = make_model(preset_name, max_batch=max(batch_sizes), dtype=dtype)
    n_layer = model.cfg.n_layer
    graphs_per_step: dict[str, int] = {}
    pool_bytes: dict[str, int | None] = {}
    capture_s: dict[str, float] = {}
    checks: dict[str, bool] = {}
    runners: dict[str, Any] = {}
    steps: dict[str, Callable[..., torch.Tensor]] = {}
    for mode in MODES:
        if mode == "attention_only":
            runner, secs = _timed_capture(lambda: capture_attention_only(model, batch_sizes))
            steps[mode] = runner.step
            graphs_per_step[mode] = n_layer
            pool_bytes[mode] = pool_reserved_bytes(runner.pool_id())
        else:
            runner, secs = _timed_capture(lambda: PaddingDispatcher(
                model, batch_sizes, progress=False, cudagraph_mode=CUDAGRAPH_MODE[mode]))
            graphs_per_step[mode] = {"eager": 0, "full": 1}.get(mode, n_layer + 1)
            pool_bytes[mode] = _dispatcher_pool_bytes(runner)

            def step(t, p, s, _d=runner):
                return _d.step(t, p, s, check=False)
            steps[mode] = step
        runners[mode] = runner
        capture_s[mode] = secs
        if mode != "eager":
            checks[f"{mode}_tokens_equal_eager"] = all(tokens_match(model, steps[mode], b)
                                                       for b in batch_sizes)

    def fns_at(b: int) -> dict[str, Any]:
        t, p, s = step_inputs(model, b)
        return {m: (lambda f=steps[m]: f(t, p, s)) for m in MODES}

    times = time_sizes(batch_sizes, fns_at, MODES, repeats=repeats, inner=inner)
    t1, p1, s1 = step_inputs(model, batch_sizes[0])
    counted = {m: count_graph_launches(lambda f=steps[m]: f(t1, p1, s1)) for m in MODES}
    for runner in runners.values():
        runner.release()
    runners = steps = {}  # drop references before freeing
    runner = None
    _free()
    gpu_ops = count_step_ops(model)
    out = {
        "preset": preset_name,
        "dtype": dtype,
        "config": model.cfg.to_dict(),
        "n_layer": n_layer,
        "batch_sizes": batch_sizes,
        "times": times,
        "interleaved": True,
        "tokens_per_s": tokens_per_s_of(batch_sizes, times),
        "graphs_per_step": graphs_per_step,
        "graph_launches_counted": counted,
        "gpu_ops_per_step": gpu_ops,
        "gpu_ops_counted": records.GPU_OPS_SCOPE,
        "pool_bytes": pool_bytes,
        "capture_s": capture_s,
        "checks": checks,
    }
    model = None  # drop references before freeing
    _free()
    return out
