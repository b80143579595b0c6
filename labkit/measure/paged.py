"""Record ``paged_<preset>``: what the paged KV cache costs per decode step, next to the slot
layout, and what each layout holds in memory (notebook 11).

Per ``max_seq``, one captured step per batch size three ways (:data:`LAYOUTS`):
``slot_in_place`` (attention reads the slots in place), ``slot_gather`` (keys and values copied
per layer) and ``paged`` (blocks gathered through the block table).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from labkit.checks import as_int, as_int_list
from labkit.runner import PaddingDispatcher
from labkit.kvcache import PagedKVCache, SlotKVCache
from labkit.measure.bench import _free, _need_cuda, random_prompts, step_inputs, tokens_match
from labkit.model import TinyGPT, build_model, generate, preset
from labkit.timing import time_cuda_interleaved

LAYOUTS = ("slot_in_place", "slot_gather", "paged")


def _build(preset_name: str, layout: str, *, max_batch: int, max_seq: int, block_size: int,
           dtype: str) -> TinyGPT:
    cfg = preset(preset_name, max_batch=max_batch, max_seq=max_seq, dtype=dtype,
                 kv_layout=layout, block_size=block_size)
    return build_model(cfg, "cuda", seed=0)


def _capture_layout(model: TinyGPT, batch_sizes: Sequence[int]
                    ) -> tuple[PaddingDispatcher, bool]:
    """Capture the step at ``batch_sizes``; whether graph tokens equal eager tokens."""
    disp = PaddingDispatcher(model, batch_sizes, progress=False)
    return disp, all(tokens_match(model, disp.step, b) for b in batch_sizes)


def _time_layouts(layouts: dict[str, tuple[TinyGPT, PaddingDispatcher]],
                  batch_sizes: Sequence[int], repeats: int, inner: int) -> dict[str, list[dict]]:
    """One replay per size of every layout, sampled in turn (the timed rows' blocks reserved
    for the timing)."""
    times: dict[str, list[dict]] = {name: [] for name in layouts}
    for b in batch_sizes:
        fns, reserved = {}, {}
        try:
            for name, (model, disp) in layouts.items():
                t, p, s = step_inputs(model, b)
                if id(model) not in reserved:  # two layouts may share one model's cache
                    reserved[id(model)] = (model, s.tolist())
                    for slot, pos in zip(s.tolist(), p.tolist()):
                        model.cache.reserve(slot, pos + 1)
                disp.load_inputs(t, p, s)
                fns[name] = lambda d=disp: d.graphs.replay(b)
            got = time_cuda_interleaved(fns, warmup=5, repeats=repeats, inner=inner)
        finally:
            for model, slots in reserved.values():
                for slot in slots:
                    model.cache.release(slot)
        for name in layouts:
            times[name].append(got[name].to_dict())
    return times


def measure_paged(preset_name: str = "gpt2", batch_sizes: Sequence[int] = (1, 8, 64),
                  max_seqs: Sequence[int] = (256, 1024), block_size: int = 16,
                  dtype: str = "bfloat16", repeats: int = 30, inner: int = 10,
                  new_tokens: int = 8) -> dict:
    """Record ``paged_<preset>``: replay µs per step of the three layouts per ``max_seq`` and
    batch size, each layout's cache bytes, and token checks between the layouts."""
    batch_sizes = sorted(set(as_int_list(batch_sizes, "batch_sizes", minimum=1)))
    max_seqs = sorted(set(as_int_list(max_seqs, "max_seqs", minimum=1)))
    block_size = as_int(block_size, "block_size", minimum=1)
    new_tokens = as_int(new_tokens, "new_tokens", minimum=1,
                        fix="compare at least one generated token")
    bad = [m for m in max_seqs if m % block_size]
    if bad:
        raise ValueError(f"max_seqs {bad} are not multiples of block_size={block_size}; pick "
                         "a block size that divides every max_seq")
    if not batch_sizes or not max_seqs:
        raise ValueError("give at least one batch size and one max_seq")
    _need_cuda("measure_paged")
    max_batch = max(batch_sizes)
    runs: list[dict] = []
    checks: dict[str, bool | float] = {}
    for max_seq in max_seqs:
        slot = _build(preset_name, "slot", max_batch=max_batch, max_seq=max_seq,
                      block_size=block_size, dtype=dtype)
        prompts = random_prompts(slot, max_batch)
        assert isinstance(slot.cache, SlotKVCache)  # _build(..., "slot") made it
        slot.cache.in_place = True
        in_place_tokens = generate(slot, prompts, new_tokens)
        in_place, checks[f"graph_tokens_equal_eager.slot_in_place.{max_seq}"] = \
            _capture_layout(slot, batch_sizes)
        slot.cache.in_place = False
        gather_tokens = generate(slot, prompts, new_tokens)
        gather, checks[f"graph_tokens_equal_eager.slot_gather.{max_seq}"] = \
            _capture_layout(slot, batch_sizes)
        paged = _build(preset_name, "paged", max_batch=max_batch, max_seq=max_seq,
                       block_size=block_size, dtype=dtype)
        paged_tokens = generate(paged, prompts, new_tokens)
        checks[f"paged_tokens_equal_slot_gather.{max_seq}"] = paged_tokens == gather_tokens
        pairs = [(a, b) for r, g in zip(in_place_tokens, paged_tokens) for a, b in zip(r, g)]
        checks[f"paged_token_agreement_slot_in_place.{max_seq}"] = \
            sum(a == b for a, b in pairs) / len(pairs)
        paged_disp, checks[f"graph_tokens_equal_eager.paged.{max_seq}"] = \
            _capture_layout(paged, batch_sizes)
        layouts = {"slot_in_place": (slot, in_place), "slot_gather": (slot, gather),
                   "paged": (paged, paged_disp)}
        try:
            times = _time_layouts(layouts, batch_sizes, repeats, inner)
        finally:
            for _, disp in layouts.values():
                disp.release()
        cache = paged.cache
        assert isinstance(cache, PagedKVCache)  # _build(..., "paged") made it
        block_bytes = cache.nbytes() // cache.num_blocks
        runs.append({"max_seq": max_seq, "times": times,
                     "cache_bytes": {"slot": slot.cache.nbytes(), "paged_pool": cache.nbytes(),
                                     "per_block": block_bytes}})
        slot = paged = cache = layouts = in_place = gather = paged_disp = None
        _free()
    checks["paged_tokens_equal_slot_gather"] = all(
        v for k, v in checks.items() if k.startswith("paged_tokens_equal_slot_gather."))
    checks["graph_tokens_equal_eager"] = all(
        v for k, v in checks.items() if k.startswith("graph_tokens_equal_eager."))
    return {"preset": preset_name, "dtype": dtype, "block_size": block_size,
            "batch_sizes": batch_sizes, "max_seqs": max_seqs,
            "device": torch.cuda.get_device_name(), "runs": runs, "checks": checks,
            "interleaved": True}
