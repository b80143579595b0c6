"""Small live runs the lessons make on whatever device is there (notebooks 02-05 and 10;
pool captures need CUDA); :mod:`labkit.teach.lessons` turns them into tables and sentences.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable, Sequence

import torch

from labkit.graphs import Order, PoolMode, capture_decode_graphs
from labkit.measure.bench import step_inputs
from labkit.measure.opcount import count_dispatched_ops  # noqa: F401 - notebook 02 calls it here
from labkit.mixed import FlatBatch
from labkit.runner import MixedRunner
from labkit.model import TinyGPT, generate
from labkit.timing import Stats, time_any

#: the three ways :func:`live_pool_comparison` captures (the sections of a pool_memory record)
MODES = ("private", "shared_largest_first", "shared_smallest_first")


def time_eager_steps(model: TinyGPT, batch_sizes: Sequence[int], *, repeats: int = 10,
                     warmup: int = 2) -> dict[int, Stats]:
    """Time one eager ``decode_step`` per batch size on the model's device (µs per step)."""
    out = {}
    for bs in batch_sizes:
        if not 1 <= int(bs) <= model.cfg.max_batch:
            raise ValueError(f"batch size {bs} must lie in [1, max_batch={model.cfg.max_batch}]; "
                             "build the model with a larger max_batch")
        tokens, positions, slots = step_inputs(model, int(bs))
        out[int(bs)] = time_any(lambda: model.decode_step(tokens, positions, slots, check=False),
                                model.device, warmup=warmup, repeats=repeats, inner=1)
    return out


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
    """Greedy-decode ``max_new_tokens`` with the KV cache and check a full forward pass over
    prompt + generated predicts the same tokens, the last logits within ``atol`` (relative)."""
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
    """A ``step_fn(tokens, positions, slots) -> logits`` that copies its inputs in and replays
    graph ``batch_size``; the logits are the static output, overwritten by the next replay."""
    if batch_size not in graphs.graphs:
        raise KeyError(f"no graph captured for batch size {batch_size}; captured: {graphs.sizes}")

    def step(tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        if tokens.shape[0] != batch_size:
            raise ValueError(f"this step replays the graph for batch size {batch_size}; got a "
                             f"batch of {tokens.shape[0]} (use a padding dispatcher for that)")
        graphs.copy_inputs(tokens, positions, slots)
        return graphs.replay(batch_size)

    return step


def live_pool_comparison(model, sizes: Sequence[int], *, warmup: int = 2) -> dict:
    """Capture ``sizes`` three ways (:data:`MODES`) into a record shaped like
    ``pool_memory_<preset>`` (no ``growth_bytes``). Needs a CUDA GPU."""
    sizes = sorted({int(s) for s in sizes})
    out: dict = {"preset": None, "sizes": sizes}
    for mode in MODES:
        pool: PoolMode = "private" if mode == "private" else "shared"
        order: Order = "smallest_first" if mode == "shared_smallest_first" else "largest_first"
        gs = capture_decode_graphs(model, sizes, pool=pool, order=order, warmup=warmup,
                                   progress=False)
        try:
            rep = gs.memory_report()
        finally:
            gs.release()
        section = {"total_bytes": int(rep["total_reserved_bytes"]),
                   "capture_s": {str(k): float(v) for k, v in rep["capture_s"].items()}}
        if mode == "private":
            section["per_size_bytes"] = {str(p["sizes"][0]): int(p["reserved_bytes"])
                                         for p in rep["pools"]}
        out[mode] = section
    out["largest_private_bytes"] = max(out["private"]["per_size_bytes"].values())
    return out


def naive_reserved_delta(model, sizes: Sequence[int], *, warmup: int = 2) -> dict:
    """The change of ``memory_reserved()`` over a shared-pool capture of ``sizes`` (naive: it
    counts the cuBLAS workspace too) next to the pool's own bytes. CUDA."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_reserved()
    gs = capture_decode_graphs(model, sizes, pool="shared", order="largest_first",
                               warmup=warmup, progress=False)
    try:
        torch.cuda.synchronize()
        after = torch.cuda.memory_reserved()
        pool = int(gs.memory_report()["total_reserved_bytes"])
    finally:
        gs.release()
    naive = int(after - before)
    return {"naive_delta_bytes": naive, "pool_bytes": pool, "outside_pool_bytes": naive - pool}


def run_batch_stream(dispatcher, batch_sizes: Sequence[int], *, seed: int = 0,
                     threads: int | None = 1) -> dict:
    """Feed one random decode step per batch size through ``dispatcher.step``; its counters
    (reset first). ``threads``: CPU threads meanwhile (one is often faster for a tiny model)."""
    cfg = dispatcher.model.cfg
    dev = dispatcher.model.device
    g = torch.Generator().manual_seed(seed)
    dispatcher.reset_counters()
    before = torch.get_num_threads()
    if threads is not None and dev.type == "cpu":
        torch.set_num_threads(threads)
    try:
        for b in batch_sizes:
            tokens = torch.randint(0, cfg.vocab_size, (b,), generator=g).to(dev)
            positions = torch.randint(0, cfg.max_seq, (b,), generator=g).to(dev)
            slots = torch.arange(b, device=dev)
            dispatcher.step(tokens, positions, slots)
    finally:
        torch.set_num_threads(before)
    return dispatcher.counters.to_dict()


def padding_isolation(dispatcher, *, live: int = 3, prompt_len: int = 5, seed: int = 0) -> dict:
    """Show that padded rows write only the scratch slot: prefill slots ``0..live``, step the
    first ``live`` padded up to a larger graph, and report which slots' caches changed."""
    model = dispatcher.model
    cfg = model.cfg
    if live + 1 > cfg.max_batch:
        raise ValueError(f"needs max_batch >= {live + 1}, the model has {cfg.max_batch}")
    padded = dispatcher.padded_size(live)
    if padded is None or padded == live:
        raise ValueError(f"batch {live} must be padded to a larger graph; captured sizes "
                         f"are {dispatcher.sizes}")
    dev = model.device
    g = torch.Generator().manual_seed(seed)
    model.reset_cache()
    for slot in range(live + 1):
        ids = torch.randint(0, cfg.vocab_size, (1, prompt_len), generator=g).to(dev)
        model.prefill(ids, torch.tensor([slot], device=dev))
    before = model.k_cache.clone()
    tokens = torch.randint(0, cfg.vocab_size, (live,), generator=g).to(dev)
    positions = torch.full((live,), prompt_len, dtype=torch.long, device=dev)
    dispatcher.step(tokens, positions, torch.arange(live, device=dev))
    after = model.k_cache
    changed = [not torch.equal(before[:, s], after[:, s]) for s in range(cfg.max_batch + 1)]
    return {"batch": live, "padded_to": padded, "padded_rows": padded - live,
            "stepped_slots_changed": all(changed[:live]),
            "other_request_unchanged": not changed[live],
            "untouched_slots_unchanged": not any(changed[live:cfg.max_batch]),
            "scratch_slot_changed": changed[cfg.scratch_slot]}


def mixed_requests(runner: MixedRunner, query_lens: Sequence[int], *, seed: int = 0
                   ) -> tuple[list[list[int]], FlatBatch]:
    """One step for ``runner``: request ``i`` in slot ``i`` with ``query_lens[i]`` random
    tokens, a decode row continuing a prompt of 2 to 6 tokens, any other a first chunk; the
    prompts and the batch."""
    q, vocab = runner.dispatcher.uniform_query_len, runner.model.cfg.vocab_size
    g = torch.Generator().manual_seed(seed)

    def toks(n: int) -> list[int]:
        return torch.randint(0, vocab, (n,), generator=g).tolist()

    prompts = [toks(2 + i % 5) if n == q else [] for i, n in enumerate(query_lens)]
    return prompts, FlatBatch.of([(i, len(p), toks(n)) for i, (p, n) in
                                  enumerate(zip(prompts, query_lens))])


@torch.no_grad()
def check_mixed_step(runner: MixedRunner, query_lens: Sequence[int], *, seed: int = 0
                     ) -> dict[str, object]:
    """Run the step of :func:`mixed_requests` on a fresh cache and compare every token's
    logits with the full forward pass: the decision, the largest difference, whether close
    (atol 2e-5, rtol 1e-4) and whether the greedy tokens agree."""
    m = runner.model
    prompts, batch = mixed_requests(runner, query_lens, seed=seed)
    m.reset_cache()
    for slot, (p, n) in enumerate(zip(prompts, batch.query_lens)):
        m.cache.reserve(slot, len(p) + n)
        if p:
            m.prefill(torch.tensor([p], device=m.device), torch.tensor([slot], device=m.device))
    mode, key = runner.decide(batch)
    got = runner.step(batch).float()
    want, at = [], 0
    for p, n in zip(prompts, batch.query_lens):
        seq = p + batch.tokens[at:at + n]
        want.append(m(torch.tensor([seq], device=m.device))[0, len(p):].float())
        at += n
    ref = torch.cat(want)
    return {"runtime mode": mode, "descriptor": key,
            "max |logit diff|": float((got - ref).abs().max()),
            "logits close": bool(torch.allclose(got, ref, atol=2e-5, rtol=1e-4)),
            "greedy tokens equal": got.argmax(-1).tolist() == ref.argmax(-1).tolist()}
