"""Exercise checks of notebook 12 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from labkit.measure.records import Roofline, view
from labkit.model import preset
from labkit.roofline import stepcost
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise

#: 12.2's bands for the FULL graph's step at batch 8 over its step at batch 1
GROWTH_BANDS = (("a", 1.25), ("b", 4.0), ("c", float("inf")))


def growth_to(record: Any, batch: int = 8) -> float:
    """The FULL graph's largest median up to ``batch`` rows over its median at the smallest
    batch of a ``roofline_<preset>`` record."""
    r = view(record, Roofline)
    ts = cast(list[float], r.median_us("graph"))  # the FULL graph is timed at every batch
    return max(t for b, t in zip(r.batch_sizes, ts) if b <= batch) / ts[0]


def growth_band(growth: float) -> str:
    """The letter of :data:`GROWTH_BANDS` that ``growth`` falls in."""
    return next(letter for letter, top in GROWTH_BANDS if growth < top)


def rows_reach_weights(cfg: Any, context: int) -> int:
    """The smallest batch whose growing bytes (KV, logits, embedding rows) reach the weights',
    found by trying one batch after another (the definition, not the formula)."""
    batch = 1
    while True:
        sb = stepcost.step_bytes(cfg, batch, context)
        if sb.total - sb.weights >= sb.weights:
            return batch
        batch += 1


def _reason(ex: Exercise, what: str, why: Any) -> None:
    ex.check_true(what, ... if why is ... else isinstance(why, str) and bool(why.strip()),
                  hint="one sentence in your own words")


@exercise("12.1", "rows vs weights", "write")
def _rows_vs_weights(ex: Exercise, crossover_batch: Any, *, cfg: Any, context: int) -> None:
    if not ex.check_function("a function of (cfg, context)", crossover_batch):
        return
    cases = [(cfg, context), (preset("gpt2", dtype="bfloat16", max_seq=1024), 1024),
             (preset("small", dtype="bfloat16", max_seq=1024), min(context, 1024)),
             (preset("gpt2", dtype="float32", max_seq=1024), 1000)]
    for c, ctx in cases:
        ex.check(f"{c.n_layer} layers, {c.dtype}, {ctx} positions", crossover_batch(c, ctx),
                 rows_reach_weights(c, ctx),
                 hint="what does one more row add to step_bytes? the batch is a whole number")


@exercise("12.2", "what seven more rows cost", "predict")
def _seven_rows(ex: Exercise, step_at_8: Any, *, roof: Mapping[str, Any]) -> None:
    live = [rec for rec in roof.values() if rec is not None]
    if not live:
        ex.check_true("a recorded roofline to compare with", False,
                      hint="this exercise needs the roofline records (data/reference/h200/)")
        return
    ex.check_one_of("the FULL graph's step at batch 8", step_at_8,
                    sorted({growth_band(growth_to(rec)) for rec in live}),
                    hint="which bytes does a row add, next to the weights every step reads?")


@exercise("12.3", "toward the floor", "choose")
def _toward_floor(ex: Exercise, change: Any, why: Any) -> None:
    ex.check_one_of("the change", change, ["b"],
                    hint="section 3: after capture the cost is nodes × cost per node")
    _reason(ex, "a reason", why)


@exercise("12.4", "graph lifetime", "debug")
def _graph_lifetime(ex: Exercise, fix: Any, why: Any) -> None:
    ex.check_one_of("the fix", fix, ["b"],
                    hint="which object owns the buffer every replay reads?")
    _reason(ex, "what the replay reads", why)


@exercise("12.5", "what an 8-step graph saves", "predict")
def _multistep_saving(ex: Exercise, saving: Any, *, recs: list[Any]) -> None:
    best = max((g for rec in recs for g in rec.record.gain("multistep", "one_step_graphs")
                if g is not None), default=None)
    if best is None:
        ex.check_true("a recorded multistep run to compare with", False,
                      hint="this exercise needs the multistep records (data/reference/h200/)")
        return
    pct = 100 * (best - 1)
    ex.check_one_of("largest saving per step", saving,
                    ["a" if pct > 20 else "b" if pct >= 5 else "c"],
                    hint="a launch and a copy, next to a whole step")
