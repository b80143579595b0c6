"""Exercise checks of notebook 18 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from labkit import breakable as bk
from labkit.breakable import breakable_step
from labkit.measure.memory_budget import SIZE_LISTS
from labkit.model import TinyGPT, build_model, preset
from labkit.sizes.graph_estimate import estimate_error_pct, labkit_graph_estimate, vllm_estimate
from labkit.teach import engines2026 as le
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise

MiB = 2**20
#: 18.1: the break layers of the decode steps the learner's replay runs (the test model: 2)
REPLAY_BREAKS: tuple[tuple[int, ...], ...] = ((1,), (0, 1), ())
#: 18.3: the mechanisms offered, and the one labkit's LoRA graph has
WHY_LETTERS = ("a", "b", "c", "d")
WHY_ANSWER = "c"
#: 18.3: bands of the LoRA graphs' pool over the plain graphs' pool
POOL_BANDS = (("a", 1.05), ("b", 1.5), ("c", 3.0), ("d", float("inf")))
#: 18.3: the verdicts of the idle LoRA graph against the plain graph
IDLE_WORDS = ("slower", "no clear difference", "faster")
#: 18.4: (sizes, vLLM's two samples, labkit's grown, labkit's kept, measured pool), hidden
ESTIMATE_CASES: tuple[tuple[list[int], list[int], list[int], list[int] | None, int], ...] = (
    ([1, 2, 4, 8], [100 * MiB, 50 * MiB], [100 * MiB, 2 * MiB], None, 102 * MiB),
    (list(SIZE_LISTS["vllm"]), [300 * MiB, 0], [300 * MiB, 2 * MiB], [0, 0], 304 * MiB),
    ([1, 2, 4, 8], [60 * MiB, 6 * MiB], [60 * MiB, 0], [8 * MiB, 1 * MiB], 75 * MiB),
    (list(SIZE_LISTS["labkit"]), [40 * MiB, 3 * MiB], [40 * MiB, 2 * MiB], None, 90 * MiB),
    ([4], [7 * MiB], [7 * MiB], None, 6 * MiB),
)


def pool_band(ratio: float) -> str:
    """The letter of :data:`POOL_BANDS` a pool ratio falls in."""
    return next(letter for letter, top in POOL_BANDS if ratio < top)


# ---------------------------------------------------------------------------- 18.1


def _decode_setup(breaks_at: Sequence[int]) -> dict[str, Any]:
    """The test model with three prefilled rows, its breakable step captured on the CPU
    stand-in (static tokens, positions, slots), and a snapshot of its cache."""
    model = build_model(preset("test", max_batch=4), seed=0)
    for i in range(3):
        model.cache.reserve(i, 12)
        model.prefill(torch.tensor([[1 + i, 2, 3]]), torch.tensor([i]))
    tokens, positions, slots = torch.tensor([4, 5, 6]), torch.tensor([3, 3, 3]), \
        torch.tensor([2, 0, 1])
    cache = (model.k_cache.clone(), model.v_cache.clone())
    g = le.capture_standin(breakable_step(model, breaks_at), (tokens, positions, slots))
    _restore(model, cache)
    return {"model": model, "graph": g, "cache": cache, "inputs": (tokens, positions, slots)}


def _poison(*tensors: Any) -> None:
    """Fill float tensors with NaN: a replay must write every value it is read for."""
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            t.fill_(float("nan"))


def _restore(model: TinyGPT, cache: tuple[torch.Tensor, torch.Tensor]) -> None:
    model.k_cache.copy_(cache[0])
    model.v_cache.copy_(cache[1])


def replay_outcome(replay: Callable[..., Any], breaks_at: Sequence[int],
                   new_tokens: Sequence[Sequence[int]] = ((7, 8, 9), (40, 3, 77))
                   ) -> dict[str, Any]:
    """Run ``replay(segments, breaks)`` on the test model's breakable step captured on the CPU
    stand-in with breaks at ``breaks_at``, once per list of ``new_tokens`` copied into the
    static tokens: the order of what ran against the order of labkit's
    :meth:`~labkit.breakable.BreakableGraph.replay`, and the static logits against the eager
    ``decode_step`` on the same inputs."""
    s = _decode_setup(breaks_at)
    model, g, cache = s["model"], s["graph"], s["cache"]
    tokens, positions, slots = s["inputs"]
    log: list[tuple[str, int]] = []
    for seg in g.segments:
        seg.log = log
    records = le.break_records(g, log)
    real = bk.BreakableGraph(g.segments, [bk.EagerBreak(r.fn, r.args, dict(r.kwargs), r.output)
                                          for r in records], g.inputs, g.output, 0.0, 0.0)
    out: dict[str, Any] = {"order_ok": True, "logits_ok": True, "error": "", "order": [],
                           "expected_order": []}
    for new in new_tokens:
        t = torch.tensor(list(new))
        with torch.no_grad():
            want = model.decode_step(t, positions, slots).clone()
            _restore(model, cache)
            tokens.copy_(t)
            log.clear()
            real.replay()
            expected = list(log)
            _restore(model, cache)
            tokens.copy_(t)
            log.clear()
            _poison(g.output, *(r.output for r in records))  # nothing left from before
            try:
                replay(g.segments, records)
            except Exception as exc:  # a broken body: reported, not raised
                out.update(order_ok=False, logits_ok=False,
                           error=f"{type(exc).__name__}: {exc}")
                return out
            _restore(model, cache)
        out["order"], out["expected_order"] = list(log), expected
        out["order_ok"] = out["order_ok"] and log == expected
        out["logits_ok"] = out["logits_ok"] and torch.equal(g.output, want)
    return out


@exercise("18.1", "the breakable replay", "write")
def _replay(ex: Exercise, replay: Any) -> None:
    if not ex.check_function("a function of (segments, breaks)", replay):
        return
    for at in REPLAY_BREAKS:
        r = replay_outcome(replay, at)
        what = (f"{len(at)} break{'s' if len(at) != 1 else ''} ({len(at) + 1} "
                f"segment{'s' if len(at) else ''})")
        if r["error"]:
            ex.check_true(f"{what}: replay runs", False,
                          hint=f"it raised {r['error']}; call segments[i].replay() and each "
                               "break's b.fn(*b.args, **b.kwargs)")
            continue
        ex.check_true(f"{what}: segment 0, break 0, segment 1, ... in that order", r["order_ok"],
                      hint=f"it ran {r['order']}: each segment once, each break between the "
                           "segment before it and the one after it, nothing after the last "
                           "segment")
        ex.check_true(f"{what}: logits equal the eager decode_step on new tokens",
                      r["logits_ok"],
                      hint="the segment after a break reads the tensor the break returned at "
                           "capture (b.output): copy the new result into it (b.output.copy_(...))"
                           "; a new tensor is read by nothing")


# ---------------------------------------------------------------------------- 18.2


def best_marks() -> tuple[list[str], int]:
    """The single functions of the toy step whose mark captures, and the fewest ops a working
    mark runs eagerly per replay."""
    works = {name: r["eager_ops"] for name in le.TOY_FUNCTIONS
             if (r := le.try_marks(name))["captured"] and r["equal_eager"]}
    fewest = min(works.values())
    return [n for n, ops in works.items() if ops == fewest], fewest


@exercise("18.2", "where to put the break", "debug")
def _marks(ex: Exercise, mark: Any) -> None:
    if mark is ... or mark is None:
        ex.check("a function name, or a list of them", mark, "a name")
        return
    try:
        got = le.try_marks(mark)
    except (TypeError, ValueError) as exc:
        ex.check_true("names of the toy step's functions", False, hint=str(exc))
        return
    ex.check_true(f"the step captures with {got['marks']} marked", got["captured"],
                  hint=got["error"] + " | a break must hold the host read and return tensors "
                       "(the static buffers the next segment reads)")
    if not got["captured"]:
        return
    ex.check_true("every replay equals the eager step on new inputs", got["equal_eager"])
    _, fewest = best_marks()
    ex.check_true("no more runs eagerly than needs to", got["eager_ops"] <= fewest,
                  hint=f"your breaks run {got['eager_ops']} ops eagerly at every replay, and "
                       "each one ends a segment: mark the smallest function that holds the "
                       "host read and returns tensors")


# ---------------------------------------------------------------------------- 18.3


@exercise("18.3", "what an idle LoRA slot costs", "predict")
def _lora(ex: Exercise, why: Any, pool: Any, idle_step: Any, *, rec: Any) -> None:
    ex.check_one_of("what the LoRA graph holds", why, [WHY_ANSWER],
                    hint="what does a replay run: the kernels captured, or the kernels the "
                         "current ids need? Read make_lora_step in labkit/lora.py")
    if rec is None:
        print("note: no lora_graphs_small record here yet, so any band and verdict are "
              "accepted; the record will grade them once it is filed")
        ex.check_one_of("a pool band", pool, [letter for letter, _ in POOL_BANDS],
                        hint='one of "a", "b", "c" or "d"')
        ex.check_one_of("a verdict", idle_step, IDLE_WORDS,
                        hint=f"one of {', '.join(repr(w) for w in IDLE_WORDS)}")
        return
    ratio = le.lora_pool_ratio(rec)
    if ratio is None:
        ex.check_one_of("a pool band", pool, [letter for letter, _ in POOL_BANDS])
    else:  # a ratio within 1% of a band's edge: either side is defensible
        ex.check_one_of("the LoRA graphs' pool over the plain graphs'", pool,
                        sorted({pool_band(ratio * f) for f in (0.99, 1.0, 1.01)}),
                        hint="what does the pool hold beyond the plain step's intermediates? "
                             "Per row, a gathered A and B for each adapted projection")
    top = max(le.batch_sizes(rec))
    d = le.lora_compare(rec, "lora_idle", "plain", top)
    word = le.verdict_word(d)
    if word in IDLE_WORDS:
        ex.check_one_of(f"the idle LoRA graph against the plain one at batch {top}", idle_step,
                        [word], hint="which kernels does the idle LoRA graph replay that the "
                                     "plain one does not? Do they grow with the batch?")
    else:
        print(f"note: the record's comparison at batch {top} is {word}: any verdict accepted")
        ex.check_one_of("a verdict", idle_step, IDLE_WORDS)


# ---------------------------------------------------------------------------- 18.4


def expected_errors(sizes: list[int], vllm_bytes: list[int], grown: list[int],
                    kept: list[int] | None, measured: int) -> tuple[float, float]:
    """Both estimates' errors in percent of ``measured``, by labkit.sizes.graph_estimate."""
    return (estimate_error_pct(vllm_estimate(vllm_bytes, sizes), measured),
            estimate_error_pct(labkit_graph_estimate(sizes, grown, kept), measured))


def _sizes(sizes: Sequence[int]) -> str:
    return f"{len(sizes)} size{'s' if len(sizes) != 1 else ''}"


@exercise("18.4", "an estimate's error", "write")
def _errors(ex: Exercise, errors: Any) -> None:
    if not ex.check_function("a function of (sizes, vllm_bytes, grown, kept, measured)", errors):
        return
    for sizes, vb, grown, kept, measured in ESTIMATE_CASES:
        want = expected_errors(sizes, vb, grown, kept, measured)
        try:
            got = errors(list(sizes), list(vb), list(grown),
                         None if kept is None else list(kept), measured)
            v, k = float(got[0]), float(got[1])
        except Exception as exc:  # a body that breaks or returns None
            ex.check_true(f"{_sizes(sizes)}: it returns (vLLM %, labkit %)", False,
                          hint=f"it raised {type(exc).__name__}: {exc}")
            continue
        ex.check_true(f"{_sizes(sizes)}, measured {measured / MiB:g} MiB: vLLM's error",
                      math.isclose(v, want[0], abs_tol=1e-3),
                      hint="first + max(second, 1 MiB) × (n − 1), against the measured pool, "
                           "in percent of it; n counts every size")
        ex.check_true(f"{_sizes(sizes)}, measured {measured / MiB:g} MiB: labkit's error",
                      math.isclose(k, want[1], abs_tol=1e-3),
                      hint="grown[0] + grown[1] + what each size between the smallest and the "
                           "largest keeps, interpolated linearly in the size (nothing when kept "
                           "is None); one size: grown[0]")
