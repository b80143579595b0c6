"""Exercise checks of notebook 05 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from labkit.measure import lesson_runs
from labkit.measure.records import Dispatcher, view
from labkit.sizes import padded_size, vllm_default_sizes
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach.lessons import record_data, stat
from labkit.teach import sizing as ls

#: how close (relative) two of exercise 5.2's options may lie and both be right
CLOSE = 0.1


@exercise("5.1", "write the padding lookup", "write")
def _pad_lookup(ex: Exercise, pad_to: Any, *, capture_sizes: Sequence[int],
                pad_table: Sequence[int]) -> None:
    if not ex.check_function("a function pad_to(batch_size, capture_sizes)", pad_to):
        return
    lookup: Callable[[int, list[int]], Any] = pad_to
    for sizes in (list(capture_sizes), [1, 2, 4, 8, 16, 32], [3, 7, 100],
                  vllm_default_sizes(512)):
        wrong = [b for b in range(1, max(sizes) + 20)
                 if lookup(b, sizes) != padded_size(b, sizes)]
        ex.check_true(f"sizes {ls.short_list(sizes, head=4)}", not wrong, hint=(
            f"batch {wrong[0]}: yours gives {lookup(wrong[0], sizes)}" if wrong else ""))
    off = [b for b in range(1, len(pad_table))
           if lookup(b, list(capture_sizes)) != (pad_table[b] or None)]
    ex.check_true("agrees with the dispatcher's table pad_table", not off, hint=(
        f"batch {off[0]}: the table says {pad_table[off[0]] or None}" if off else ""))


@exercise("5.2", "predict what a padded batch costs", "predict")
def _padded_cost(ex: Exercise, padded_5: Any, batch_129: Any, *, rec: Any) -> None:
    disp = view(record_data(rec), Dispatcher)
    at = {m: dict(zip(disp.batch_sizes, disp.times[m])) for m in disp.times}
    d5, d8, e5 = (stat(at[m][b]) for m, b in (("dispatcher", 5), ("dispatcher", 8),
                                               ("eager", 5)))
    if d5 is None or d8 is None or e5 is None:
        raise KeyError("the dispatcher record has no dispatcher time at 5 or 8, or eager at 5")
    options = {"a": d8, "b": d8 * 5 / 8, "c": e5}
    off = {k: abs(d5 - v) / v for k, v in options.items()}
    closest = min(off, key=off.__getitem__)
    ex.check_one_of("batch 5 through the dispatcher", padded_5,
                    [k for k, v in off.items() if v <= CLOSE] or [closest],
                    hint="what does the graph of 8 compute, whatever its rows hold?")
    ex.check_one_of("batch 129", batch_129,
                    ["eager" if (disp.padded_to or [])[disp.batch_sizes.index(129)] is None
                     else "graph"], hint="which graph could hold 129 rows?")


@exercise("5.3", "predict the dispatcher's cost per model", "predict")
def _cost_per_model(ex: Exercise, extra_us: Any, larger_share: Any, *, over_rec: Any) -> None:
    over = ls.overhead_record_rows(over_rec)
    extra = {m: [r["extra (µs)"] for r in over if r["model"] == m] for m in ("small", "gpt2")}
    share = {m: [r["dispatcher / replay"] for r in over if r["model"] == m] for m in extra}
    mean = {m: sum(v) / len(v) for m, v in extra.items()}
    q = mean["small"] / mean["gpt2"]
    word = ("about the same" if 1 / 1.5 <= q <= 1.5 else
            "larger for small" if q > 1 else "larger for gpt2")
    near = [w for lo, hi, w in ((1.35, 1.65, "larger for small"),
                                (1 / 1.65, 1 / 1.35, "larger for gpt2"))
            if lo <= q <= hi]   # near the factor 1.5: both neighbours are defensible
    ex.check_one_of("(a) extra µs per step", extra_us,
                    [word] + near + (["about the same"] if near else []),
                    hint="which parts of the dispatcher's work depend on the model?")
    ex.check_one_of("(b) the larger share of the step", larger_share,
                    [max(share, key=lambda m: sum(share[m]) / len(share[m]))],
                    hint="a share is the extra time over the step time")


@exercise("5.4", "padding waste", "read")
def _padding_waste(ex: Exercise, padded_rows: Any, waste: Any, *, dispatcher: Any) -> None:
    check = lesson_runs.run_batch_stream(dispatcher, [3, 5, 9, 17])
    ex.check("padded rows", padded_rows, check["padded_rows"],
             hint="sum of padded - real per step")
    ex.check("waste", waste, check["waste"], rel=1e-3, hint="padded / (real + padded)")
