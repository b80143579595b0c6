"""Exercise checks of notebook 09 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from labkit.measure.records import Decode, view
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach.verdicts import compare_runs


def _reason(ex: Exercise, reason: Any) -> None:
    ex.check_true("a reason is given", ... if reason is ... else
                  isinstance(reason, str) and len(reason.strip()) > 0,
                  hint="one sentence: why that one?")


@exercise("9.1", "predict the trend", "predict")
def _trend(ex: Exercise, prediction: Any, *, records: Mapping[str, Any]) -> None:
    sp = [float(s or 0) for s in view(records["decode_small"], Decode).speedup_vs_eager("graph")]
    ex.check_one_of("speed-up at batch 64 vs batch 1", prediction,
                    ["smaller" if sp[-1] < sp[0] else "larger"],
                    hint="a fixed saving per step, divided by a step that grows with the batch")


def _shared_end(p: Mapping[str, Any]) -> str:
    shared = max(p["largest_first"], p["smallest_first"])
    return ("the largest private pool" if shared == p["largest_private"] else
            "the sum of the private pools" if shared >= p["sum_private"] else
            "in between")


@exercise("9.2", "predict the shared pool", "predict")
def _shared_pool(ex: Exercise, shared_pool_ends_at: Any, smallest_first_ends: Any, *,
                 results: Mapping[str, Any]) -> None:
    per = results["pool_max_not_sum"]["evidence"]["per_record"]
    ends = {_shared_end(p) for p in per}
    ex.check_one_of("(a) where one shared pool of ten graphs ends", shared_pool_ends_at,
                    sorted(ends) if len(ends) == 1 else ["in between"],
                    hint="does a graph's pool still hold anything once its replay is done?")
    order = {"larger" if p["smallest_first"] > p["largest_first"] else
             "smaller" if p["smallest_first"] < p["largest_first"] else "the same" for p in per}
    ex.check_one_of("(b) smallest first against largest first, at the end",
                    smallest_first_ends, sorted(order),
                    hint="a block freed after one capture can serve the next capture")


@exercise("9.3", "predict where the output lives", "predict")
def _addresses(ex: Exercise, same_address_every_replay: Any, pointer_in_kernel_args: Any, *,
               results: Mapping[str, Any]) -> None:
    addr = results["pool_offsets"]["evidence"]
    if "output_ptr" not in addr:
        ex.check_true("a pitfalls record with the address demonstration", False,
                      hint="this exercise needs the pitfalls record (data/reference/h200/)")
        return
    ex.check("(a) the same output address at every replay", same_address_every_replay,
             addr["identical_across_replays"], hint="what does a replay launch, with which "
             "arguments?")
    ex.check("(b) the pointer among the kernel's argument bytes", pointer_in_kernel_args,
             addr["pointer_in_kernel_args"], hint="how does a kernel receive a tensor?")


@exercise("9.4", "measured speed-up range", "debug")
def _speedup_range(ex: Exercise, speedup_range: Any, bug: Any, *,
                   decode: Mapping[str, Any]) -> None:
    values = [float(s) for r in decode.values()
              for s in view(r, Decode).speedup_vs_eager("graph") if s is not None]
    if ex.check_function("a function speedup_range(records)", speedup_range):
        lowest, highest = speedup_range(decode)
        ex.check("smallest speed-up", lowest, min(values), rel=1e-6,
                 hint="the minimum over both records")
        ex.check("largest speed-up", highest, max(values), rel=1e-6,
                 hint="the maximum over both records")
    ex.check_true("the bug is explained", ... if bug is ... else
                  isinstance(bug, str) and len(bug.strip()) > 0,
                  hint="a sentence: which values did it read, and which should it?")


@exercise("9.5", "verdict on another GPU", "read")
def _other_gpu(ex: Exercise, predicted: Any, *, other_gpu: Any,
               claim_check: Callable[[Mapping[str, Any]], Any]) -> None:
    ex.check_one_of("verdict of claim 2", predicted,
                    [claim_check({"pool_memory_gpt2": other_gpu}).verdict],
                    hint="above the largest pool, below the sum: which verdict sits between?")


#: exercise 9.6: one run each, timed one after the other, breaks two conditions of the rule;
#: either word names a reason the evidence cannot decide
ONE_RUN = compare_runs([200.0], [2400.0], interleaved=False).word


@exercise("9.6", "a verdict from one run", "choose")
def _one_run(ex: Exercise, word: Any, fix: Any, reason: Any) -> None:
    ex.check_one_of("the word for one run each", word,
                    sorted({ONE_RUN, "untested (1 run)", "untested (not interleaved)"}),
                    hint="section 1's table: when can the evidence not decide?")
    ex.check_one_of("the change that lets it decide", fix, ["B"],
                    hint="many samples, alternating, spreads compared")
    _reason(ex, reason)


@exercise("9.7", "a supported claim", "choose")
def _supported(ex: Exercise, supported: Any, reason: Any) -> None:
    ex.check_one_of("supported rewording", supported, ["B"],
                    hint="the kernels are the same; what changes with batch size and host?")
    _reason(ex, reason)
