"""Record ``lora_graphs_<preset>``: CUDA graphs keyed by ``has_lora`` (:class:`labkit.lora.
LoRAGraphs`, vLLM PR #25914) on a GPU: the graph memory of plain graphs, LoRA graphs and both,
and the step time of each.

Tokens first: at every batch size, greedy tokens with mixed adapter ids (:func:`mixed_ids`) and
with none, through the graphs, equal the eager steps' token for token; the adapters change the
tokens of the rows that have one, and rows without one keep the plain model's. Then the pool
bytes of each graph set captured alone (:func:`labkit.lora.pool_bytes_by_case`), and the step
time of three replays sampled in turn per batch size: the plain graph, the LoRA graph with no
adapter active (ids all ``-1``: what every batch pays without specialisation) and the LoRA graph
with adapters active. Each timed call copies the row ids into the static index (device to
device), as every step of a LoRA engine writes its adapter mapping, then replays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from functools import partial
from typing import Any

import torch

from labkit.checks import as_int, as_number
from labkit.lora import DEFAULT_TARGETS, LoRAAdapters, LoRAGraphs, lora_key, pool_bytes_by_case
from labkit.measure import records
from labkit.measure.bench import (
    _free, _need_cuda, make_model, random_prompts, step_inputs, time_sizes,
)
from labkit.measure.fused_bench import check_counts
from labkit.measure.triton_bench import _versions
from labkit.model import TinyGPT, generate, preset
from labkit.rules import BatchDescriptor
from labkit.timing import time_cuda_interleaved

#: the timed replays, in the order they are sampled within each round
STEPS: tuple[str, ...] = records.LORA_STEPS


def mixed_ids(rows: int, max_loras: int) -> list[int]:
    """Adapter ids of ``rows`` rows: slots ``0 .. max_loras - 1`` in turn, then a row without
    one (``-1``), repeated; row 0 always has an adapter."""
    return [(i + 1) % (max_loras + 1) - 1 for i in range(rows)]


def token_checks(model: TinyGPT, adapters: LoRAAdapters, graphs: LoRAGraphs,
                 sizes: Sequence[int], new_tokens: int) -> dict[str, bool]:
    """Per batch size: graph tokens equal eager ones with no adapter (key ``has_lora=False``)
    and with mixed ids (``has_lora=True``), each step dispatched to the key expected; the
    adapters change the tokens of some row that has one; rows without one keep the plain
    model's tokens."""
    lora_step = graphs.steps[True]
    out: dict[str, bool] = {}
    for b in sizes:
        prompts = random_prompts(model, b, seed=b)
        ids, none = mixed_ids(b, adapters.max_loras), [-1] * b

        def eager(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor,
                  ids: list[int] = ids) -> torch.Tensor:
            adapters.set_index(ids)
            return lora_step(t, p, s)

        def graphed(use: list[int]) -> Callable[..., torch.Tensor]:
            return lambda t, p, s: graphs.step(t, p, s, use)

        plain = generate(model, prompts, new_tokens)
        lora = generate(model, prompts, new_tokens, step_fn=eager)
        g_plain = generate(model, prompts, new_tokens, step_fn=graphed(none))
        key_plain = graphs.last
        g_lora = generate(model, prompts, new_tokens, step_fn=graphed(ids))
        key_lora = graphs.last
        out[f"graph_tokens_equal_eager.plain@{b}"] = g_plain == plain
        out[f"graph_tokens_equal_eager.lora@{b}"] = g_lora == lora
        out[f"keys_as_dispatched@{b}"] = (key_plain == ("FULL", lora_key(b, False))
                                          and key_lora == ("FULL", lora_key(b, True)))
        out[f"lora_changes_tokens@{b}"] = any(x != y for x, y, i in zip(lora, plain, ids)
                                              if i >= 0)
        out[f"rows_without_adapter_equal_plain@{b}"] = all(
            x == y for x, y, i in zip(lora, plain, ids) if i < 0)
    for name in ("graph_tokens_equal_eager", "keys_as_dispatched", "lora_changes_tokens",
                 "rows_without_adapter_equal_plain"):
        out[name] = all(v for k, v in out.items() if k.startswith(name + ".") or
                        k.startswith(name + "@"))
    return out


def time_keys(adapters: LoRAAdapters, graphs: LoRAGraphs, model: TinyGPT,
              sizes: Sequence[int], context: int, repeats: int, inner: int
              ) -> dict[str, list[dict[str, Any]]]:
    """Per batch size, the three replays of :data:`STEPS` sampled in turn on the same inputs
    at ``context`` positions (each call: the row ids copied in, then the replay)."""
    def replay(ids: torch.Tensor, key: BatchDescriptor) -> None:
        adapters.index.copy_(ids)
        graphs.replay(key)

    def fns_at(b: int) -> dict[str, Callable[[], object]]:
        graphs.batch.load(*step_inputs(model, b, context=context))
        idle = adapters.index_for([-1] * b)
        active = adapters.index_for(mixed_ids(b, adapters.max_loras))
        plan = {"plain": (idle, lora_key(b, False)), "lora_idle": (idle, lora_key(b, True)),
                "lora_active": (active, lora_key(b, True))}
        return {name: partial(replay, ids, key) for name, (ids, key) in plan.items()}

    return time_sizes(sizes, fns_at, STEPS, repeats=repeats, inner=inner,
                      timer=time_cuda_interleaved)


def measure_lora_graphs(preset_name: str = "small", batch_sizes: Sequence[int] = (1, 8, 64),
                        dtype: str = "bfloat16", max_loras: int = 4, rank: int = 16,
                        scale: float = 1.0, context: int = 128, max_seq: int = 256,
                        repeats: int = 30, inner: int = 10, new_tokens: int = 8,
                        seed: int = 0) -> dict:
    """Record ``lora_graphs_<preset>`` (see the module docstring): graphs captured at exactly
    ``batch_sizes``, ``max_loras`` random adapters of rank ``rank`` (seeds ``seed + slot``) on
    the default targets."""
    sizes, repeats, inner, new_tokens = check_counts(batch_sizes, repeats, inner, new_tokens)
    cfg0 = preset(preset_name, max_batch=max(sizes), dtype=dtype,
                  max_seq=as_int(max_seq, "max_seq", minimum=2,
                                 fix="give the cache's positions per slot"))
    max_loras = as_int(max_loras, "max_loras", minimum=1, maximum=1024,
                       fix="give the number of adapter slots, such as 4")
    rank = as_int(rank, "rank", minimum=1, maximum=cfg0.d_model,
                  fix=f"give a LoRA rank between 1 and d_model={cfg0.d_model}")
    scale = as_number(scale, "scale", fix="give the LoRA scale, such as 1.0")
    context = as_int(context, "context", minimum=1, maximum=cfg0.max_seq,
                     fix=f"give the positions each row attends to, at most max_seq="
                         f"{cfg0.max_seq}")
    seed = as_int(seed, "seed", minimum=0, maximum=2**62, fix="use a seed such as 0")
    _need_cuda("measure_lora_graphs")
    model: TinyGPT | None = make_model(preset_name, max_batch=max(sizes), dtype=dtype,
                                       max_seq=cfg0.max_seq)
    assert model is not None
    adapters = LoRAAdapters(model, max_loras=max_loras, rank=rank)
    for slot in range(max_loras):
        adapters.random_adapter(slot, seed=seed + slot, scale=scale)
    pool = pool_bytes_by_case(model, adapters, sizes)
    _free()
    graphs = LoRAGraphs(model, adapters, sizes, progress=False)
    try:
        checks = token_checks(model, adapters, graphs, sizes, new_tokens)
        times = time_keys(adapters, graphs, model, sizes, context, repeats, inner)
    finally:
        graphs.release()
    data = {
        "preset": preset_name, "dtype": dtype, "config": model.cfg.to_dict(),
        "batch_sizes": sizes, "max_loras": max_loras, "rank": rank, "scale": scale,
        "targets": list(DEFAULT_TARGETS), "seed": seed, "context": context,
        "new_tokens": new_tokens, "steps": list(STEPS), "interleaved": True,
        "repeats": repeats, "inner": inner, "times": times, "pool_bytes": pool,
        "adapter_bytes": adapters.nbytes(), "keys": [asdict(k) for k in graphs.keys],
        "checks": checks, "device": torch.cuda.get_device_name(), "versions": _versions(),
    }
    del graphs, adapters  # the adapters hold the model
    model = None
    _free()
    return data
