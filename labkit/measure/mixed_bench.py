"""Measure mixed batches and speculative decoding under graphs (notebook 15): the uniform decode
step on the token-flattened path against today's FULL step, mixed batches under PIECEWISE
against eager, the verify step's cost by ``k``, and speculative decoding on real text.

Every timing is interleaved (:func:`labkit.measure.bench.time_sizes`) after the outputs are
checked; a step is compared with the bare replay of its own graph as well as with the other
path: a capture is a measurement of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch

from labkit.runner import PaddingDispatcher
from labkit.measure.bench import _free, _need_cuda, step_inputs, time_sizes
from labkit.measure.serve import measure_chunked
from labkit.mixed import FlatBatch
from labkit.runner import MixedRunner
from labkit.model import TinyGPT, build_model, generate, preset
from labkit.serving.spec import generate_speculative
from labkit.support.corpus import encode, load_corpus
from labkit.support.paths import shipped_file
from labkit.timing import Stats

Timer = Callable[..., dict[str, Stats]]
#: the ways a uniform decode step of ``b`` rows is run in :func:`measure_mixed`
UNIFORM_METHODS = ("today_replay", "today_step", "new_replay", "new_step")
#: (decode rows, prefill chunk tokens) of the mixed batches timed
MIXED_SHAPES = ((1, 15), (7, 25), (31, 33), (56, 200))
TOKEN_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def _decode_batch(model: TinyGPT, b: int) -> tuple[FlatBatch, tuple[torch.Tensor, ...]]:
    t, p, s = step_inputs(model, b)
    host = tuple(x.cpu() for x in (t, p, s))
    batch = FlatBatch.of([(int(s_), int(p_), [int(t_)]) for t_, p_, s_ in zip(*host)])
    return batch, host


def _mixed_batch(model: TinyGPT, rows: int, chunk: int, seed: int) -> FlatBatch:
    g = torch.Generator().manual_seed(seed)
    toks = torch.randint(0, model.cfg.vocab_size, (rows + chunk,), generator=g).tolist()
    at = model.cfg.max_seq // 2  # decode rows at context ~max_seq / 2
    reqs = [(i, at + i % 8, [toks[i]]) for i in range(rows)]
    return FlatBatch.of([*reqs, (rows, 0, toks[rows:])])


def measure_mixed(preset_name: str, batch_sizes: Sequence[int] = (1, 8, 64),
                  shapes: Sequence[tuple[int, int]] = MIXED_SHAPES, dtype: str = "bfloat16",
                  repeats: int = 15, inner: int = 20, *, device: str = "cuda",
                  timer: Timer | None = None) -> dict[str, Any]:
    """Record ``mixed_<preset>``: (1) a uniform decode batch of ``b`` rows through today's
    FULL :class:`PaddingDispatcher` and through :class:`MixedRunner` (FULL_AND_PIECEWISE),
    each step beside its own graph's bare replay; (2) mixed batches of ``rows`` decode rows and
    one prefill chunk, PIECEWISE graphs against eager. Tokens are checked first."""
    if device == "cuda":
        _need_cuda("measure_mixed")
    sizes = sorted({int(b) for b in batch_sizes})
    max_batch = max(max(sizes), max(r for r, _ in shapes) + 1)
    model = build_model(preset(preset_name, max_batch=max_batch, dtype=dtype), device, seed=0)
    today = PaddingDispatcher(model, sizes, cudagraph_mode="FULL", progress=False,
                              capture=device == "cuda")
    runner = MixedRunner(model, TOKEN_SIZES, progress=False, capture=device == "cuda")
    eager = MixedRunner(model, TOKEN_SIZES, cudagraph_mode="NONE", capture=False)
    checks: dict[str, bool] = {}

    def uniform_at(b: int) -> Mapping[str, Callable[[], object]]:
        batch, host = _decode_batch(model, b)
        kv = model.cache.kv.clone()
        a = today.step(*host)
        model.cache.kv.copy_(kv)
        c = runner.step(batch)
        checks[f"uniform_logits_equal.{b}"] = bool(torch.equal(a, c))
        run = runner.dispatcher.padded(b) or b
        return {"today_replay": lambda: today.runner("FULL").replay(b),
                "today_step": lambda: today.step(*host),
                "new_replay": lambda: runner.graphs.replay(run) if runner.graphs else None,
                "new_step": lambda: runner.step(batch)}

    uniform = time_sizes(sizes, uniform_at, UNIFORM_METHODS, repeats=repeats, inner=inner,
                         timer=timer)
    batches = [_mixed_batch(model, r, c, seed=i) for i, (r, c) in enumerate(shapes)]
    tokens = [b.num_tokens for b in batches]

    def mixed_at(n: int) -> Mapping[str, Callable[[], object]]:
        batch = batches[tokens.index(n)]
        kv = model.cache.kv.clone()
        a = runner.step(batch)
        model.cache.kv.copy_(kv)
        c = eager.step(batch)
        checks[f"mixed_tokens_equal_eager.{n}"] = bool(torch.equal(a.argmax(-1),
                                                                  c.argmax(-1)))
        return {"piecewise": lambda: runner.step(batch), "eager": lambda: eager.step(batch)}

    modes = [runner.decide(b)[0] for b in batches]
    mixed = time_sizes(tokens, mixed_at, ("piecewise", "eager"), repeats=repeats, inner=inner,
                       timer=timer)
    today.release()
    runner.release()
    if device == "cuda":
        _free()
    return {"preset": preset_name, "dtype": dtype, "repeats": repeats, "inner": inner,
            "batch_sizes": sizes, "uniform": uniform, "shapes": [list(s) for s in shapes],
            "mixed_tokens": tokens, "mixed_modes": modes, "mixed": mixed,
            "token_sizes": TOKEN_SIZES, "checks": checks}


def measure_verify(preset_name: str = "gpt2", ks: Sequence[int] = (1, 2, 4),
                   batch_sizes: Sequence[int] = (1, 8, 32), dtype: str = "bfloat16",
                   repeats: int = 15, inner: int = 20, *, device: str = "cuda",
                   timer: Timer | None = None) -> dict[str, Any]:
    """The FULL-graph step of ``R`` requests of ``1 + k`` tokens each (the verify step), per
    ``k`` (k = 0: the decode step), timed interleaved per ``R``."""
    if device == "cuda":
        _need_cuda("measure_verify")
    sizes = sorted({int(b) for b in batch_sizes})
    qs = [1] + [1 + int(k) for k in ks]
    model = build_model(preset(preset_name, max_batch=max(sizes), dtype=dtype), device, seed=0)
    runners = {q: MixedRunner(model, [r * q for r in sizes], uniform_query_len=q,
                              progress=False, capture=device == "cuda") for q in qs}

    def fns_at(r: int) -> Mapping[str, Callable[[], object]]:
        fns: dict[str, Callable[[], object]] = {}
        for q, runner in runners.items():
            g = torch.Generator().manual_seed(r * q)
            toks = torch.randint(0, model.cfg.vocab_size, (r, q), generator=g).tolist()
            batch = FlatBatch.of([(i, model.cfg.max_seq // 2, toks[i]) for i in range(r)])
            assert runner.decide(batch)[0] == "FULL"
            fns[f"k{q - 1}"] = partial(runner.step, batch)
        return fns

    times = time_sizes(sizes, fns_at, [f"k{q - 1}" for q in qs], repeats=repeats, inner=inner,
                       timer=timer)
    for runner in runners.values():
        runner.release()
    if device == "cuda":
        _free()
    return {"preset": preset_name, "dtype": dtype, "repeats": repeats, "inner": inner,
            "ks": [q - 1 for q in qs], "batch_sizes": sizes, "times": times}


def _char_model(device: str, max_batch: int) -> TinyGPT:
    return TinyGPT.load(shipped_file("checkpoints", "char", ".safetensors"), device,
                        max_batch=max_batch)


def measure_spec(ks: Sequence[int] = (1, 2, 4), n_prompts: int = 8, prompt_len: int = 64,
                 new_tokens: int = 128, repeats: int = 5, *, device: str = "cuda",
                 ) -> dict[str, Any]:
    """Speculative decoding (n-gram drafts, greedy) with the trained byte-level model on the
    corpus against plain greedy decoding through FULL graphs (``plain``: tokens stay on the
    GPU; ``plain_synced``: read to the host every step, as a server does): tokens equal,
    acceptance rate,
    tokens per step and wall-clock seconds of the whole generation, the arms interleaved in
    each of ``repeats`` rounds (after one discarded round)."""
    if device == "cuda":
        _need_cuda("measure_spec")
    text = encode(load_corpus())
    stride = len(text) // (n_prompts + 1)
    prompts = [text[i * stride:i * stride + prompt_len] for i in range(1, n_prompts + 1)]
    model = _char_model(device, n_prompts)
    capture = device == "cuda"
    plain = PaddingDispatcher(model, [n_prompts], cudagraph_mode="FULL", progress=False,
                              capture=capture)
    reqs = sorted({1, 2, 4, n_prompts} - {r for r in (2, 4) if r > n_prompts})
    runners = {k: MixedRunner(model, [r * (k + 1) for r in reqs], uniform_query_len=k + 1,
                              progress=False, capture=capture) for k in ks}
    want = generate(model, prompts, new_tokens, step_fn=plain.step)
    def synced(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        out = plain.step(t, p, s)
        out.argmax(-1).tolist()  # the tokens to the host every step, as a server streams them
        return out

    arms: dict[str, Callable[[], Any]] = {
        "plain": lambda: generate(model, prompts, new_tokens, step_fn=plain.step),
        "plain_synced": lambda: generate(model, prompts, new_tokens, step_fn=synced)}
    for k, runner in runners.items():
        arms[f"k{k}"] = partial(generate_speculative, model, prompts, new_tokens, k,
                                runner.verify)
    out: dict[str, Any] = {"ks": list(ks), "n_prompts": n_prompts, "prompt_len": prompt_len,
                           "new_tokens": new_tokens, "repeats": repeats,
                           "seconds": {a: [] for a in arms}, "stats": {}, "checks": {}}
    for round_ in range(repeats + 1):
        for name, arm in arms.items():
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            got = arm()
            if device == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            if round_ == 0:  # warm-up round: check, keep the stats
                tokens = got if name.startswith("plain") else got[0]
                agree = sum(a == b for x, y in zip(tokens, want) for a, b in zip(x, y))
                out["checks"][f"token_agreement.{name}"] = agree / (n_prompts * new_tokens)
                if not name.startswith("plain"):
                    s = got[1]
                    out["stats"][name] = {"steps": s.steps, "drafted": s.drafted,
                                          "accepted": s.accepted, "emitted": s.emitted,
                                          "acceptance_rate": s.acceptance_rate,
                                          "tokens_per_step": s.tokens_per_step}
            else:
                out["seconds"][name].append(dt)
    plain.release()
    for runner in runners.values():
        runner.release()
    if device == "cuda":
        _free()
    return out


def measure_chunked_small(max_requests: int = 150, repeats: int = 3) -> dict[str, Any]:
    """Record ``chunked_small``: the long-prompt trace on the small model (bf16, 32 slots)
    without chunked prefill and with a budget of 64 tokens, eager and with graphs."""
    model = build_model(preset("small", max_batch=32, dtype="bfloat16"), "cuda", seed=0)
    out = measure_chunked(model, "long_prompts", ("eager", "full"), (64,), repeats,
                          max_requests=max_requests)
    _free()
    return out
