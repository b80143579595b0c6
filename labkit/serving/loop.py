"""Continuous batching over a request trace: the serving loop on the tiny GPT.

Every engine step queues the trace's arrivals, admits them first come, first served while a
slot and the cache room of the whole request are free (prefilling each alone: the first
token), decodes every running request one step through a step function (:func:`make_step_fn`
or a :class:`CircuitBreaker`) and retires the finished ones. With ``max_num_batched_tokens``
(chunked prefill) each engine step is instead one token-flattened step of a
:class:`~labkit.mixed.MixedRunner` (:func:`make_mixed_runner`), scheduled as vLLM V1's
``Scheduler.schedule()`` (``vllm/v1/core/sched/scheduler.py``) schedules one: decode rows and
prompt chunks share a token budget. Time comes from a :class:`RealClock` or a
seeded-reproducible :class:`SimClock`; the :class:`ServeRun` holds every token's time and every
step's requests, tokens, padded tokens and mode, which :mod:`labkit.measure.serving_metrics`
turns into TTFT/TPOT/ITL percentiles.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from typing import Literal, Protocol
from collections.abc import Callable, Iterable, Sequence

import torch

from labkit.checks import as_int, as_number
from labkit.kvcache import CacheFullError
from labkit.mixed import FlatBatch, GraphMode, max_step_tokens
from labkit.runner import CudagraphMode, MixedRunner, PaddingDispatcher
from labkit.model import TinyGPT
from labkit.serving.runs import RequestResult, ServeRun, StepRecord
from labkit.serving.traces import TraceRequest

StepFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class Clock(Protocol):
    """Where the engine's time comes from."""

    def now(self) -> float: ...
    def sleep_until(self, t: float) -> None: ...
    def charge(self, kind: str, rows: int) -> None: ...


class RealClock:
    """Wall-clock time; ``charge`` synchronises CUDA so a token's timestamp is when it exists."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.cuda = torch.device(device).type == "cuda"

    def now(self) -> float:
        return time.perf_counter()

    def sleep_until(self, t: float) -> None:
        delay = t - time.perf_counter()
        if delay > 0:
            time.sleep(delay)

    def charge(self, kind: str, rows: int) -> None:
        if self.cuda:
            torch.cuda.synchronize()


class SimClock:
    """Simulated time: a decode step costs ``decode_s + decode_per_row_s * rows`` and a
    prefill ``prefill_s + prefill_per_token_s * tokens``; idle time jumps to the next arrival."""

    def __init__(self, decode_s: float = 0.010, *, decode_per_row_s: float = 0.0,
                 prefill_s: float = 0.0, prefill_per_token_s: float = 0.0) -> None:
        fix = "give SimClock a time in seconds"
        self.decode_s = as_number(decode_s, "decode_s", minimum=0, fix=fix)
        self.decode_per_row_s = as_number(decode_per_row_s, "decode_per_row_s", minimum=0,
                                          fix=fix)
        self.prefill_s = as_number(prefill_s, "prefill_s", minimum=0, fix=fix)
        self.prefill_per_token_s = as_number(prefill_per_token_s, "prefill_per_token_s",
                                             minimum=0, fix=fix)
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def charge(self, kind: str, rows: int) -> None:
        if kind == "decode":
            self.t += self.decode_s + self.decode_per_row_s * rows
        else:
            self.t += self.prefill_s + self.prefill_per_token_s * rows


def eager_step(model: TinyGPT) -> StepFn:
    """``model.decode_step`` taking host-side inputs (as a dispatcher does)."""

    def step(tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        dev = model.device
        return model.decode_step(tokens.to(dev), positions.to(dev), slots.to(dev))

    return step


#: the step modes of :func:`make_step_fn` and ``labkit serve --mode``
StepMode = Literal["eager", "full", "piecewise", "none", "exact"]
STEP_MODES: tuple[StepMode, ...] = ("eager", "full", "piecewise", "none", "exact")
_CUDAGRAPH_MODE: dict[str, CudagraphMode] = {"full": "FULL", "piecewise": "PIECEWISE",
                                             "none": "NONE", "exact": "FULL"}


def check_step_mode(mode: object) -> StepMode:
    """``mode`` if it is one of :data:`STEP_MODES`; else ``ValueError`` naming them."""
    if not isinstance(mode, str) or mode not in STEP_MODES:
        raise ValueError(f"mode {mode!r} is not a step mode; use one of {list(STEP_MODES)}")
    return mode  # type: ignore[return-value]


def make_step_fn(model: TinyGPT, mode: StepMode, sizes: Sequence[int] | None = None,
                 **dispatcher_kwargs) -> StepFn:
    """The step function of ``mode``: ``eager`` (``model.decode_step``), ``full`` /
    ``piecewise`` / ``none`` (a :class:`PaddingDispatcher` over ``sizes``, default powers of
    two, in that ``cudagraph_mode``) or ``exact`` (FULL graphs of every size: no padding)."""
    check_step_mode(mode)
    cap = model.cfg.max_batch
    if mode == "eager":
        return eager_step(model)
    if mode == "exact":
        return PaddingDispatcher(model, list(range(1, cap + 1)), cudagraph_mode="FULL",
                                 **dispatcher_kwargs)
    if sizes is None:
        sizes = sorted({min(2 ** k, cap) for k in range(cap.bit_length() + 1)})
    return PaddingDispatcher(model, sizes, cudagraph_mode=_CUDAGRAPH_MODE[mode],
                             **dispatcher_kwargs)


#: the graph mode of a mixed step in each step mode: vLLM turns FULL into FULL_AND_PIECEWISE
#: for mixed batches (labkit's attention is UNIFORM_BATCH, see :mod:`labkit.mixed`)
MIXED_MODES: dict[str, GraphMode] = {"eager": "NONE", "none": "NONE", "piecewise": "PIECEWISE",
                                     "full": "FULL_AND_PIECEWISE", "exact": "FULL_AND_PIECEWISE"}


def check_budget(max_num_batched_tokens: int, model: TinyGPT | None = None) -> int:
    """The checked token budget of one chunked-prefill step; with ``model``, at most
    :func:`labkit.mixed.max_step_tokens` (``max_batch * max_seq``: no step holds more), checked
    before anything is allocated."""
    n = as_int(max_num_batched_tokens, "max_num_batched_tokens", minimum=1,
               fix="give the tokens one step may run as a whole number >= 1 (e.g. 256), "
                   "or None for no chunked prefill")
    if model is not None and n > (bound := max_step_tokens(model)):
        cfg = model.cfg
        raise ValueError(f"max_num_batched_tokens (labkit serve --max-num-batched-tokens) must "
                         f"be <= {bound} = max_batch {cfg.max_batch} x max_seq {cfg.max_seq}, "
                         f"the most tokens one step can hold, got {n}; give a budget <= {bound} "
                         "(vLLM's default is 8192, labkit's examples use 16 to 256)")
    return n


def make_mixed_runner(model: TinyGPT, mode: StepMode, max_num_batched_tokens: int,
                      sizes: Sequence[int] | None = None, **runner_kwargs) -> MixedRunner:
    """The :class:`MixedRunner` of step ``mode`` for steps of up to ``max_num_batched_tokens``
    tokens: capture sizes ``sizes`` in tokens (default powers of two and the budget; ``exact``:
    every size up to the budget), graph mode :data:`MIXED_MODES`."""
    if not isinstance(model, TinyGPT):
        raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}")
    check_step_mode(mode)
    top = check_budget(max_num_batched_tokens, model)
    if mode == "exact":
        sizes = range(1, top + 1)
    elif sizes is None:
        sizes = sorted({min(2 ** k, top) for k in range(top.bit_length() + 1)})
    return MixedRunner(model, list(sizes), cudagraph_mode=MIXED_MODES[mode], **runner_kwargs)


def decide_of(step_fn: object, bs: int) -> tuple[str, int]:
    """(runtime mode, padded rows) the step function would run ``bs`` rows in (eager: NONE,
    bs); nothing run."""
    decide = getattr(step_fn, "decide", None)
    return decide(bs) if callable(decide) else ("NONE", bs)


def last_step_of(step_fn: object, bs: int) -> tuple[str, int]:
    """(runtime mode, rows run) of the step function's last step of ``bs`` rows, as it decided
    it (a runner's ``last_step``, read after the step, so each step is decided once; a step
    function without one: :func:`decide_of`)."""
    last = getattr(step_fn, "last_step", None)
    return last if last is not None else decide_of(step_fn, bs)


def breaker_settings(window: int = 32, threshold: float = 0.5,
                     cooldown_s: float = 1.0) -> tuple[int, float, float]:
    """Checked :class:`CircuitBreaker` settings (a bad one raises naming it)."""
    window = as_int(window, "window", minimum=1, fix="watch at least one step")
    threshold = as_number(threshold, "threshold", minimum=0, fix="give a hit rate in [0, 1]")
    if threshold > 1:
        raise ValueError(f"threshold must be a hit rate in [0, 1], got {threshold!r}")
    cooldown_s = as_number(cooldown_s, "cooldown_s", minimum=0, fix="give a time in seconds")
    return window, threshold, cooldown_s


class CircuitBreaker:
    """Fall back to eager when graphs stop paying: around ``graph_fn`` (with ``decide``) it
    watches the graph hit rate of the last ``window`` steps; below ``threshold`` it opens and
    runs ``eager_fn`` for ``cooldown_s`` of ``clock`` time, then closes with an empty window.
    ``trips`` holds the times at which it opened."""

    def __init__(self, graph_fn: StepFn, eager_fn: StepFn, clock: Clock, *, window: int = 32,
                 threshold: float = 0.5, cooldown_s: float = 1.0) -> None:
        if not callable(getattr(graph_fn, "decide", None)):
            raise TypeError("graph_fn must have decide(bs) -> (mode, padded), e.g. a "
                            "labkit.runner.PaddingDispatcher")
        self.window, self.threshold, self.cooldown_s = breaker_settings(window, threshold,
                                                                        cooldown_s)
        self.graph_fn, self.eager_fn, self.clock = graph_fn, eager_fn, clock
        self.hits: deque[bool] = deque(maxlen=self.window)
        #: (runtime mode, rows run) of the last step
        self.last_step: tuple[str, int] | None = None
        self.opened_at: float | None = None
        self.trips: list[float] = []

    @property
    def is_open(self) -> bool:
        """True while steps run eager (after a trip, before the cool-down ends)."""
        if self.opened_at is not None and self.clock.now() - self.opened_at >= self.cooldown_s:
            self.opened_at = None
            self.hits.clear()
        return self.opened_at is not None

    @property
    def hit_rate(self) -> float | None:
        """Graph hits over the watched steps (``None`` before any)."""
        return sum(self.hits) / len(self.hits) if self.hits else None

    def decide(self, bs: int) -> tuple[str, int]:
        return ("NONE", bs) if self.is_open else decide_of(self.graph_fn, bs)

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor,
                 slots: torch.Tensor) -> torch.Tensor:
        bs = tokens.shape[0]
        if self.is_open:
            self.last_step = ("NONE", bs)
            return self.eager_fn(tokens, positions, slots)
        out = self.graph_fn(tokens, positions, slots)
        self.last_step = last_step_of(self.graph_fn, bs)
        self.hits.append(self.last_step[0] != "NONE")
        rate = self.hit_rate
        if len(self.hits) == self.window and rate is not None and rate < self.threshold:
            self.opened_at = self.clock.now()
            self.trips.append(self.opened_at)
        return out


def prompt_tokens(index: int, length: int, vocab_size: int, seed: int) -> list[int]:
    """The seeded synthetic prompt of request ``index``: ``length`` ids in ``[0, vocab)``."""
    rng = random.Random(f"labkit-serve:{seed}:{index}")
    return [rng.randrange(vocab_size) for _ in range(length)]


def check_trace(trace: Sequence[TraceRequest], max_seq: int) -> list[TraceRequest]:
    """The trace as a list; a request that cannot fit the cache raises naming it."""
    out = list(trace)
    for i, r in enumerate(out):
        if not isinstance(r, TraceRequest):
            raise TypeError(f"trace entry {i} is a {type(r).__name__}, not a TraceRequest")
        if not (math.isfinite(r.arrival_s) and r.arrival_s >= 0):
            raise ValueError(f"request {i}: arrival_s={r.arrival_s!r} must be a time >= 0")
        if r.prompt_len < 1 or r.output_len < 1:
            raise ValueError(f"request {i}: prompt_len and output_len must be >= 1, got "
                             f"{r.prompt_len}, {r.output_len}")
        if r.prompt_len + r.output_len - 1 > max_seq:
            raise ValueError(f"request {i}: prompt {r.prompt_len} + output {r.output_len} - 1 "
                             f"positions do not fit max_seq={max_seq}; shorten it or build the "
                             "model with a larger max_seq")
    return out


class ServingEngine:
    """Continuous batching of a trace on ``model`` (the module docstring): ``step_fn``
    (default eager), ``clock`` (default :class:`RealClock`), ``seed`` of the synthetic
    prompts, ``max_running`` (default the cache's slots). No preemption.
    ``max_num_batched_tokens`` (None: off) turns on chunked prefill: every step is one
    token-flattened step of ``runner`` (default :func:`make_mixed_runner` in ``eager``) of at
    most that many tokens."""

    def __init__(self, model: TinyGPT, step_fn: StepFn | None = None, *,
                 clock: Clock | None = None, seed: int = 0,
                 max_running: int | None = None, max_num_batched_tokens: int | None = None,
                 runner: MixedRunner | None = None) -> None:
        if not isinstance(model, TinyGPT):
            raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}")
        if step_fn is not None and not callable(step_fn):
            raise TypeError(f"step_fn must be callable (tokens, positions, slots) -> logits, "
                            f"got {type(step_fn).__name__}")
        self.budget = None if max_num_batched_tokens is None else check_budget(
            max_num_batched_tokens, model)
        if self.budget is None and runner is not None:
            raise ValueError("runner runs chunked-prefill steps; give max_num_batched_tokens "
                             "too, or leave runner out")
        if self.budget is not None:
            if step_fn is not None:
                raise ValueError("step_fn is the decode step of serving without chunked "
                                 "prefill; with max_num_batched_tokens give runner="
                                 "make_mixed_runner(model, mode, max_num_batched_tokens)")
            if runner is None:
                runner = make_mixed_runner(model, "eager", self.budget)
            if not isinstance(runner, MixedRunner) or runner.model is not model:
                raise TypeError("runner must be a labkit.mixed.MixedRunner of this model "
                                "(make_mixed_runner(model, mode, max_num_batched_tokens))")
        self.runner = runner
        self.model = model
        self.step_fn: StepFn = step_fn or eager_step(model)
        self.clock: Clock = clock or RealClock(model.device)
        self.seed = as_int(seed, "seed", fix="give the seed as a whole number")
        cap = model.cfg.max_batch
        self.max_running = cap if max_running is None else as_int(
            max_running, "max_running", minimum=1, maximum=cap,
            fix=f"give 1..{cap} (the cache's slots)")

    @torch.no_grad()
    def run(self, trace: Iterable[TraceRequest],
            progress: Callable[[int], None] | None = None) -> ServeRun:
        """Serve every request of ``trace``; every cache slot is free again at the end."""
        model, cfg, clock = self.model, self.model.cfg, self.clock
        reqs = check_trace(list(trace), cfg.max_seq)
        results = [RequestResult(i, r.arrival_s, r.prompt_len, r.output_len)
                   for i, r in enumerate(reqs)]
        pending = deque(sorted(range(len(reqs)), key=lambda i: (reqs[i].arrival_s, i)))
        waiting: deque[int] = deque()
        free_slots = list(range(self.max_running - 1, -1, -1))  # pop() gives 0, 1, 2, ...
        running: dict[int, int] = {}  # request -> slot, in admission order
        prompts: dict[int, list[int]] = {}  # request -> its prompt, while running
        done: dict[int, int] = {}  # request -> prompt tokens in the cache (chunked prefill)
        steps: list[StepRecord] = []
        dev = model.device
        t0 = clock.now()

        def admit() -> int | None:
            """Admit the first queued request if a slot and its whole cache room are free: its
            index (None: nothing admitted)."""
            if not waiting or not free_slots:
                return None
            i = waiting[0]
            r, slot = reqs[i], free_slots[-1]
            try:
                model.cache.reserve(slot, r.prompt_len + r.output_len - 1)
            except CacheFullError as exc:
                model.cache.release(slot)
                if not running:
                    raise CacheFullError(f"request {i} does not fit the empty cache: "
                                         f"{exc}") from None
                return None
            waiting.popleft()
            free_slots.pop()
            running[i] = slot
            results[i].admitted_s = clock.now() - t0
            prompts[i] = prompt_tokens(i, r.prompt_len, cfg.vocab_size, self.seed)
            done[i] = 0
            return i

        def emit(i: int, tok: int, t: float) -> None:
            results[i].tokens.append(tok)
            results[i].token_times_s.append(t)

        def retire(among: Iterable[int]) -> None:
            for i in [i for i in among if len(results[i].tokens) >= reqs[i].output_len]:
                slot = running.pop(i)
                prompts.pop(i)
                done.pop(i)
                model.cache.release(slot)
                free_slots.append(slot)
                if progress is not None:
                    progress(1)

        def chunked_step(budget: int, runner: MixedRunner) -> StepRecord:
            """One chunked-prefill step, scheduled as ``Scheduler.schedule()`` in
            ``vllm/v1/core/sched/scheduler.py``: running requests first, in admission order,
            while budget is left (a decode row takes one token, a request still prefilling its
            next chunk: the rest of its prompt, at most the budget left), then queued requests
            admitted first come, first served while a slot, its cache room and budget are free,
            each with a first chunk. A chunk that ends its prompt gives the first token (from
            its last token's logits), a decode row the next one, any other chunk none."""
            plan: list[tuple[int, int, list[int]]] = []  # (request, first position, tokens)
            for i in running:
                if budget == 0:
                    break
                n, p = done[i], reqs[i].prompt_len
                if n < p:
                    plan.append((i, n, prompts[i][n:n + min(p - n, budget)]))
                else:
                    plan.append((i, p + len(results[i].tokens) - 1, [results[i].tokens[-1]]))
                budget -= len(plan[-1][2])
            admitted = 0
            while budget > 0:
                new = admit()
                if new is None:
                    break
                admitted += 1
                plan.append((new, 0, prompts[new][:budget]))
                budget -= len(plan[-1][2])
            batch = FlatBatch.of([(running[i], first, toks) for i, first, toks in plan])
            start = clock.now() - t0
            picks = runner.step(batch)[batch.last_token()].argmax(-1).tolist()
            mode, run = last_step_of(runner, batch.num_tokens)
            prefill = sum(len(toks) for i, _, toks in plan if done[i] < reqs[i].prompt_len)
            # prompt tokens cost as a prefill, decode rows and padding as a decode step
            if prefill:
                clock.charge("prefill", prefill)
            if run > prefill:
                clock.charge("decode", run - prefill)
            end = clock.now() - t0
            for (i, _, toks), tok in zip(plan, picks):
                if done[i] < reqs[i].prompt_len:
                    done[i] += len(toks)
                    if done[i] < reqs[i].prompt_len:
                        continue  # the prompt goes on in the next step: no token yet
                emit(i, tok, end)
            return StepRecord(start, end, batch.num_reqs, run, mode, mode != "NONE",
                              admitted, batch.num_tokens, prefill)

        try:
            while pending or waiting or running:
                # 1. queue arrivals; idle until the next one when nothing is queued or running
                now = clock.now() - t0
                while pending and reqs[pending[0]].arrival_s <= now:
                    waiting.append(pending.popleft())
                if not waiting and not running:
                    clock.sleep_until(t0 + reqs[pending[0]].arrival_s)
                    continue
                if self.budget is not None and self.runner is not None:
                    steps.append(chunked_step(self.budget, self.runner))
                    retire(list(running))
                    continue
                # 2. admit first come, first served while a slot and its cache room are free
                admitted = 0
                while True:
                    i = admit()
                    if i is None:
                        break
                    admitted += 1
                    logits = model.prefill(torch.tensor([prompts[i]], device=dev),
                                           torch.tensor([running[i]], device=dev))
                    clock.charge("prefill", reqs[i].prompt_len)
                    # the prefill gives the first token
                    emit(i, int(logits.argmax(-1).item()), clock.now() - t0)
                retire(list(running))
                if not running:
                    continue
                # 3. one decode step for every running request, then 4. retire finished ones
                batch = list(running)
                bs = len(batch)
                start = clock.now() - t0
                # host-side batch (the dispatcher checks it and copies it in once)
                tokens = torch.tensor([results[i].tokens[-1] for i in batch])
                positions = torch.tensor([reqs[i].prompt_len + len(results[i].tokens) - 1
                                          for i in batch])
                slots = torch.tensor([running[i] for i in batch])
                new = self.step_fn(tokens, positions, slots).argmax(-1).tolist()
                mode, padded = last_step_of(self.step_fn, bs)
                clock.charge("decode", padded)
                end = clock.now() - t0
                steps.append(StepRecord(start, end, bs, padded, mode, mode != "NONE", admitted,
                                        bs, 0))
                for i, tok in zip(batch, new):
                    emit(i, tok, end)
                retire(batch)
        finally:
            for slot in list(running.values()):
                model.cache.release(slot)
        return ServeRun(results, steps, t0)
