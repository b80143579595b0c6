"""Record ``while_decode_<preset>``: decoding until a stop token in one CUDA graph (a WHILE
node, :mod:`labkit.roofline.while_loop`) against the two ways notebook 12 knows, on a GPU.

Per batch size ``b``, steps ``k`` and stop placement (:data:`STOPS`: ``early``, each row's
stop token is its token at step ``k // 2 - 1``, so the loop ends by step ``k // 2``; ``never``,
a token no row produces), three ways produce the same tokens (:data:`METHODS`):
``host_loop``, one-step graph replays with the host reading every step's tokens, checking the
stop tokens and feeding the tokens back (what a server does: vLLM V1 checks each request's
stop and EOS tokens on the host after every step, ``vllm/v1/core/sched/utils.py``
``check_stop``; labkit's loop keeps only that check); ``multistep``, notebook 12's
graph of a fixed ``k`` steps, the host cutting at the stop afterwards; ``while_node``, one
launch of the WHILE graph. Each time is one whole decode, tokens on the host (µs per call).

Before anything is timed: the plain decode (:func:`~labkit.roofline.while_loop.
decode_until_stop`) equals the fixed-``k`` decode cut at the stop, and every way's tokens and
step count equal it, token for token. Then the three are timed interleaved after warm-up
(medians with p10/p90), and the WHILE graph's tokens are checked again after the timing.
Without a way to build the node here (:func:`~labkit.roofline.while_loop.while_support`)
the record is the verdict: the torch version and what is missing, nothing timed.
``python -m labkit.measure.recorder RUN_DIR while_decode_small`` records it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from labkit.checks import as_int, as_int_list, as_size_list
from labkit.measure import records
from labkit.measure.bench import _free, _need_cuda, make_model
from labkit.measure.roofline import _prefilled
from labkit.model import TinyGPT
from labkit.roofline.multistep import MultiStepGraph, capture_multistep, single_steps
from labkit.roofline.while_loop import (
    WhileDecodeGraph, WhileResult, capture_decode_while, decode_until_stop, route_error,
    stop_after, while_support,
)
from labkit.timing import time_cuda_interleaved

#: the ways timed, in the order they are sampled within each round
METHODS: tuple[str, ...] = records.WHILE_METHODS
#: where the stop tokens are placed: half-way (the loop ends early) or never produced
STOPS: tuple[str, ...] = ("early", "never")


def place_stops(tokens: torch.Tensor, where: str, vocab_size: int) -> list[int]:
    """Stop tokens for a case, from the fixed-``k`` decode ``tokens`` ``(B, k)``: ``early``,
    each row's token at step ``k // 2 - 1`` (the loop then ends by step ``k // 2``); ``never``,
    the smallest token id no row produced, for every row."""
    if where not in STOPS:
        raise ValueError(f"where must be one of {list(STOPS)}, got {where!r}")
    rows = tokens.tolist()
    k = tokens.shape[1]
    if where == "early":
        if k < 2:
            raise ValueError(f"an early stop needs k >= 2 steps, got k={k}")
        return [row[k // 2 - 1] for row in rows]
    seen = {t for row in rows for t in row}
    free = next((t for t in range(vocab_size) if t not in seen), None)
    if free is None:
        raise ValueError(f"every one of the {vocab_size} token ids was produced; decode fewer "
                         "steps or use a larger vocabulary for a stop that never comes")
    return [free] * len(rows)


def host_loop(one: MultiStepGraph, tokens: torch.Tensor, positions: torch.Tensor,
              slots: torch.Tensor, max_steps: int, stops: Sequence[int]) -> WhileResult:
    """A server's loop on a one-step graph: replay, the tokens to the host, stop tokens
    checked, the tokens back and the positions advanced; until every row stopped or
    ``max_steps``."""
    one.load(tokens, positions, slots)
    b = len(stops)
    rows: list[list[int]] = [[] for _ in range(b)]
    done = [False] * b
    steps = 0
    while steps < max_steps and not all(done):
        ids = one.replay()[:, 0].tolist()  # to the host
        for r, tok in enumerate(ids):
            if not done[r]:
                rows[r].append(tok)
                done[r] = tok == stops[r]
        steps += 1
        one.tokens.copy_(torch.tensor(ids))  # and back
        one.positions.add_(1)
    padded = [row + [-1] * (max_steps - len(row)) for row in rows]
    return WhileResult(torch.tensor(padded, dtype=torch.long), steps)


def _versions(support: dict[str, Any]) -> dict[str, Any]:
    return {"torch": torch.__version__, "cuda": torch.version.cuda,
            "cuda_python": support.get("cuda_python"), "nvrtc": support.get("nvrtc"),
            "driver": support.get("driver")}


def _check_args(batch_sizes: Sequence[int], max_steps: Sequence[int], stops: Sequence[str],
                max_seq: int, repeats: int, warmup: int) -> tuple[list[int], list[int],
                                                                 list[str], int, int, int]:
    max_seq = as_int(max_seq, "max_seq", minimum=8, fix="give the cache's positions per slot")
    sizes = sorted(set(as_size_list(batch_sizes, "batch_sizes",
                                    fix="give batch sizes such as [1, 8]")))
    ks = sorted(set(as_int_list(max_steps, "max_steps", minimum=2, maximum=max_seq // 2,
                                fix=f"give steps from 2 to max_seq // 2 = {max_seq // 2}")))
    if not ks:
        raise ValueError("max_steps must not be empty; give steps such as [8, 32]")
    if isinstance(stops, str) or not stops or any(s not in STOPS for s in stops) \
            or len(set(stops)) != len(stops):
        raise ValueError(f"stops must list some of {list(STOPS)} once each, got {stops!r}")
    repeats = as_int(repeats, "repeats", minimum=1, fix="take at least one sample")
    warmup = as_int(warmup, "warmup", minimum=0, fix="warm up 0 or more times")
    return sizes, ks, list(stops), max_seq, repeats, warmup


def measure_while_decode(preset_name: str = "small", batch_sizes: Sequence[int] = (1, 8),
                         max_steps: Sequence[int] = (8, 32), stops: Sequence[str] = STOPS,
                         dtype: str = "bfloat16", max_seq: int = 256, repeats: int = 20,
                         warmup: int = 3) -> dict:
    """Record ``while_decode_<preset>`` (see the module docstring)."""
    sizes, ks, stops, max_seq, repeats, warmup = _check_args(
        batch_sizes, max_steps, stops, max_seq, repeats, warmup)
    _need_cuda("measure_while_decode")
    support = while_support()
    head = {"preset": preset_name, "dtype": dtype, "max_seq": max_seq, "stops": stops,
            "support": support, "route": support["route"], "interleaved": True,
            "repeats": repeats, "warmup": warmup,
            "device": torch.cuda.get_device_name(), "versions": _versions(support)}
    cases: dict[str, list] = {"batch_sizes": [], "max_steps": [], "stop": [],
                              "stop_tokens": [], "steps_run": []}
    times: dict[str, list] = {m: [] for m in METHODS}
    if support["route"] is None:
        return {**head, **cases, "times": times, "checks": {}, "timed": False,
                "verdict": route_error(support), "config": {}}
    model: TinyGPT | None = make_model(preset_name, max_batch=max(sizes), dtype=dtype,
                                       max_seq=max_seq)
    assert model is not None
    checks: dict[str, list[bool]] = {}
    pool = torch.cuda.graph_pool_handle()
    for b in sizes:
        _time_size(model, b, ks, stops, pool, repeats, warmup, cases, times, checks)
        _free()
    data = {**head, **cases, "times": times, "timed": True, "verdict": None,
            "config": model.cfg.to_dict(),
            "checks": {name: all(v) for name, v in checks.items()}}
    model = None
    _free()
    return data


def _time_size(model: TinyGPT, b: int, ks: list[int], stops: list[str], pool: Any,
               repeats: int, warmup: int, cases: dict[str, list], times: dict[str, list],
               checks: dict[str, list[bool]]) -> None:
    """Every case of batch size ``b``: checked, then timed; appended to ``cases``, ``times``
    and ``checks`` (the graphs die here)."""
    def check(name: str, ok: bool) -> None:
        checks.setdefault(name, []).append(bool(ok))

    t, p, s = _prefilled(model, b)
    one = capture_multistep(model, b, 1, pool=pool)
    for k in ks:
        fixed = single_steps(model, t, p, s, k).cpu()  # the plain decode, k steps
        many = capture_multistep(model, b, k, pool=pool)
        many.load(t, p, s)
        wg: WhileDecodeGraph = capture_decode_while(model, k, place_stops(
            fixed, stops[0], model.cfg.vocab_size), batch_size=b, pool=pool)
        try:
            for where in stops:
                stop = place_stops(fixed, where, model.cfg.vocab_size)
                plain = decode_until_stop(model, t, p, s, k, stop)
                check("plain_decode_equals_fixed_k_cut_at_stop", plain == stop_after(fixed, stop))
                check("host_loop_equals_plain_decode",
                      host_loop(one, t, p, s, k, stop) == plain)
                check("multistep_cut_at_stop_equals_plain_decode",
                      stop_after(many.replay().cpu(), stop) == plain)
                got = wg.replay(t, p, s, stop)
                check("while_node_equals_plain_decode", got == plain)
                check(f"{where}_steps_as_placed", got.steps <= k // 2 if where == "early"
                      else got.steps == k)

                def run_host() -> None:
                    host_loop(one, t, p, s, k, stop)

                def run_multistep() -> None:
                    many.replay().tolist()  # the host cuts at the stop afterwards

                def run_while() -> None:
                    wg.launch()
                    wg.out.tolist()

                fns = {"host_loop": run_host, "multistep": run_multistep,
                       "while_node": run_while}
                stats = time_cuda_interleaved(fns, warmup=warmup, repeats=repeats, inner=1)
                check("while_node_equals_plain_decode_after_timing", wg.loop.result() == plain)
                for name in METHODS:
                    times[name].append(stats[name].to_dict())
                for key, value in (("batch_sizes", b), ("max_steps", k), ("stop", where),
                                   ("stop_tokens", stop), ("steps_run", got.steps)):
                    cases[key].append(value)
        finally:
            wg.release()
