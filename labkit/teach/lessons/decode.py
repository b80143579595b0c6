"""Decode-step helpers for notebooks 00–03: KV cache size, live eager timing, the
cached-versus-full-forward check, op counting, the copy-in replay step and record tables."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from labkit.measure.records import Decode, view
from labkit.model import GPTConfig, TinyGPT, generate
from labkit.timing import Stats, time_any
from labkit.measure.bench import step_inputs


def kv_cache_bytes(cfg: GPTConfig) -> int:
    """Bytes of the static K and V caches of a :class:`TinyGPT` built from ``cfg``:
    ``2 × n_layer × (max_batch + 1) × n_head × max_seq × head_dim × bytes per element``
    (the ``+ 1`` is the scratch slot padded rows write to)."""
    element = torch.empty((), dtype=cfg.torch_dtype).element_size()
    return (2 * cfg.n_layer * (cfg.max_batch + 1) * cfg.n_head * cfg.max_seq * cfg.head_dim
            * element)


def tokens_per_s(batch_size: int, step_us: float) -> float:
    """Decode throughput: every step produces one token per row."""
    if step_us <= 0:
        raise ValueError(f"step time must be > 0 µs, got {step_us}")
    return batch_size * 1e6 / step_us


def time_eager_steps(model: TinyGPT, batch_sizes: Sequence[int], *, repeats: int = 10,
                     warmup: int = 2) -> dict[int, Stats]:
    """Time one eager ``decode_step`` per batch size on the model's device (µs per step).

    Inputs come from :func:`labkit.measure.bench.step_inputs`, as in the GPU measurement. On CPU
    this is host wall time: the ops run inline, there is no kernel launch.
    """

    out = {}
    for bs in batch_sizes:
        if not 1 <= int(bs) <= model.cfg.max_batch:
            raise ValueError(f"batch size {bs} must lie in [1, max_batch={model.cfg.max_batch}]; "
                             "build the model with a larger max_batch")
        tokens, positions, slots = step_inputs(model, int(bs))
        out[int(bs)] = time_any(lambda: model.decode_step(tokens, positions, slots, check=False),
                                model.device, warmup=warmup, repeats=repeats, inner=1)
    return out


def count_dispatched_ops(fn: Callable[[], Any], *, include_views: bool = False) -> Counter:
    """Count the ATen operators ``fn()`` dispatches (views excluded by default: they launch
    no kernel). On a GPU most non-view ops launch one kernel, so the total approximates the
    kernels per step; some launch none or several, so it is an estimate, not a kernel count."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts: Counter = Counter()

    class _Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if include_views or not getattr(func, "is_view", False):
                counts[str(func.overloadpacket.__name__)] += 1
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), _Count():
        fn()
    return counts


@dataclass
class CachedCheck:
    """Cached decode versus a full forward pass over the same tokens."""

    tokens_equal: bool
    max_abs_logit_diff: float
    generated: list[int]

    def __bool__(self) -> bool:
        return self.tokens_equal


@torch.no_grad()
def check_cached_equals_full(model: TinyGPT, prompt: Sequence[int], max_new_tokens: int,
                             *, atol: float = 1e-4) -> CachedCheck:
    """Greedy-decode ``max_new_tokens`` with the KV cache, then run one full forward pass over
    prompt + generated tokens (no cache) and check that it predicts the same tokens, and
    that the logits of the last cached step match the full pass: max abs difference at most
    ``atol`` × the largest full-pass logit (at least ``atol``)."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    generated = generate(model, [list(prompt)], max_new_tokens)[0]
    seq = list(prompt) + generated
    dev = model.device
    full = model(torch.tensor([seq], device=dev))[0]            # (T, V)
    predicted = full[len(prompt) - 1: len(seq) - 1].argmax(-1).tolist()
    last = len(seq) - 1
    step = model.decode_step(torch.tensor([seq[-1]], device=dev), torch.tensor([last], device=dev),
                             torch.tensor([0], device=dev))[0]
    diff = float((step.float() - full[last].float()).abs().max())
    return CachedCheck(predicted == generated and diff <= atol * max(1.0, float(full.abs().max())),
                       diff, generated)


def replay_step(graphs, batch_size: int) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor],
                                                    torch.Tensor]:
    """A ``step_fn(tokens, positions, slots) -> logits`` that copies its inputs into the
    graph set's static buffers and replays graph ``batch_size`` (the copy-in pattern).

    The returned logits are the graph's static output: the next replay overwrites them, so
    use (or copy) them before the next step, as :func:`labkit.model.generate` does.
    """
    if batch_size not in graphs.graphs:
        raise KeyError(f"no graph captured for batch size {batch_size}; captured: {graphs.sizes}")

    def step(tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        if tokens.shape[0] != batch_size:
            raise ValueError(f"this step replays the graph for batch size {batch_size}; got a "
                             f"batch of {tokens.shape[0]} (use a padding dispatcher for that)")
        graphs.copy_inputs(tokens, positions, slots)
        return graphs.replay(batch_size)

    return step


def decode_rows(record: Any, methods: Sequence[str] | None = None) -> list[dict]:
    """One row per batch size of a ``decode_<preset>`` record: median step time (µs),
    tokens/s and speed-up over eager of each method, ready for :func:`labkit.teach.plots.table`."""
    dec = view(record, Decode)
    methods = list(methods or dec.methods)
    has_eager = "eager" in dec.methods
    cols = {m: (dec.median_us(m), dec.tokens_per_s(m),
                dec.speedup_vs_eager(m) if has_eager else [None] * len(dec.batch_sizes))
            for m in methods}
    rows = []
    for i, bs in enumerate(dec.batch_sizes):
        row: dict = {"batch": bs}
        for m in methods:
            t, tps, sp = (col[i] for col in cols[m])
            row[f"{m} µs"] = None if t is None else round(t, 1)
            row[f"{m} tok/s"] = None if tps is None else round(tps)
            if m != "eager":
                row[f"{m} speed-up"] = None if sp is None else round(sp, 2)
        rows.append(row)
    return rows
