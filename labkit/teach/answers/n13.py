"""Exercise checks of notebook 13 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from labkit.sizes import engines as es
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach import serving as ls
from labkit.teach.verdicts import compare_runs

#: the words a comparison of two series can end in (``Difference.word``)
WORDS = ("a lower", "no difference measured", "a higher")


@exercise("13.1", "predict the interleaved verdict", "predict")
def _predict_interleaved(ex: Exercise, tpot_p99_word: Any, ttft_p99_word: Any, *,
                         ab: Any) -> None:
    if ab is None:
        ex.check_true("an interleaved record of graphs against eager", ab is not None,
                      hint="this exercise needs serve_graphs_ab (data/reference/h200/)")
        return
    arms = ls.arms_of(ab)
    for what, got, key, hint in (
            ("TPOT p99, graphs against eager", tpot_p99_word, "tpot_ms.p99",
             "TPOT is the decode step plus what slips in between: which part do graphs replay?"),
            ("TTFT p99, graphs against eager", ttft_p99_word, "ttft_ms.p99",
             "TTFT is queueing plus an eager prefill in every mode; how far apart are a few "
             "runs' tails?")):
        ex.check_one_of(what, got, [ls.compare(arms["full"], arms["eager"], key,
                                               interleaved=True).word], hint=hint)


@exercise("13.2", "a verdict drawn from one run", "debug")
def _one_run_verdict(ex: Exercise, verdict: Any, why_gap: Any, reason: Any, *, on_rec: Any,
                     off_rec: Any) -> None:
    ex.check("verdict from the two one-run records", verdict,
             ls.compare(on_rec, off_rec, "ttft_ms.median", interleaved=False).word,
             hint="how many runs does each record hold? ls.compare(...).word says what they allow")
    ex.check_one_of("what explains the one-run gap", why_gap, ["B"],
                    hint="compare serve_capped's one run with the breaker-off arm of the "
                         "interleaved record: same trace, same sizes, no breaker")
    ex.check_true("a reason in a few words", isinstance(reason, str) and bool(reason.strip()),
                  hint="say which rows of the table you read")


@exercise("13.3", "the check of the utilisation claim", "write")
def _utilisation_claim(ex: Exercise, word: Any, utilisation: Any, why: Any) -> None:
    eager_share, graph_share = [0.61, 0.58, 0.60], [0.31, 0.29, 0.33]
    ex.check("word", word, compare_runs(graph_share, eager_share, interleaved=True).word,
             hint="three runs each, interleaved: compare_runs(graphs, eager, interleaved=True)")
    ex.check("is it nvidia-smi's utilisation", utilisation, False,
             hint="an eager step's GPU waits between kernels, and CUDA events around the step "
                  "count that too")
    ex.check_one_of("why", why, ["A"],
                    hint="a fixed arrival rate: less time per step means more idle time")


@exercise("13.4", "vLLM's capture sizes", "read")
def _vllm_sizes(ex: Exercise, largest_size: Any, sizes_24: Any, graph_for_13: Any,
                kind_for_13: Any) -> None:
    want = es.from_vllm(max_num_seqs=24)
    ex.check("largest capture size", largest_size, want.max_capture_size,
             hint="min(2 x max_num_seqs, 512)")
    ex.check("capture sizes", list(sizes_24) if isinstance(sizes_24, (list, tuple)) else sizes_24,
             list(want.capture_sizes), hint="[1, 2, 4] + multiples of 8 up to the largest")
    ex.check("graph for 13 requests", graph_for_13, want.padded(13), hint="the next size up")
    padded = want.padded(13)
    full = padded is not None and padded <= (want.full_max_size or 0)
    ex.check_one_of("FULL or PIECEWISE", kind_for_13, ["FULL" if full else "PIECEWISE"],
                    hint="a uniform decode batch padded to at most max_num_seqs tokens")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1e3 * seconds


def _close(got: Any, want: float | None) -> bool:
    if want is None:
        return got is None
    try:
        return math.isclose(float(got), want, rel_tol=1e-6, abs_tol=1e-9)
    except (TypeError, ValueError):
        return False


@exercise("13.5", "TTFT and TPOT from token timestamps", "write")
def _ttft_tpot(ex: Exercise, ttft_ms: Any, tpot_ms: Any, *, requests: Sequence[Any]) -> None:
    for what, fn, want_of, hint in (
            ("TTFT (ms) of every request", ttft_ms,
             lambda r: 1e3 * ls.ttft_of(r.arrival_s, r.token_times_s),
             "the first token's time minus the arrival, in ms"),
            ("TPOT (ms) of every request", tpot_ms,
             lambda r: _ms(ls.tpot_of(r.token_times_s)),
             "the time from the first to the last token over the number of gaps; a request "
             "of one token has no TPOT (None)")):
        if not ex.check_function(what, fn):
            continue
        got = [(fn(r.arrival_s, r.token_times_s) if fn is ttft_ms else fn(r.token_times_s))
               for r in requests]
        want = [want_of(r) for r in requests]
        if all(g is None for g, w in zip(got, want) if w is not None):
            ex.check(what, ..., want, hint=hint)   # no value returned yet: not answered
            continue
        ex.check_true(what, all(_close(g, w) for g, w in zip(got, want)), hint=hint)


@exercise("13.6", "speculative decoding: which graph", "debug")
def _spec_graph(ex: Exercise, graph_for: Any, padded_rows_of_5: Any, *, spec: Any) -> None:
    q = spec.tokens_per_request
    if ex.check_function("graph_for is a function of the number of requests", graph_for):
        n_max = max(1, (spec.full_max_size or q) // q)
        ex.check_true(f"the graph replayed by a verify step of 1..{n_max} requests",
                      all(graph_for(n) == spec.padded(n * q) for n in range(1, n_max + 1)),
                      hint="capture sizes count tokens, and a verify step of n requests feeds "
                           "n x (1 + k) of them")
    ex.check("padded token rows of a verify step of 5 requests", padded_rows_of_5,
             spec.padded(5 * q) - 5 * q, hint="the graph's tokens minus the real ones")
