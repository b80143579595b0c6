"""Exercise checks of notebook 17 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from labkit.teach import past_launch as pl
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise

#: exercise 17.1's bands for the plain Triton step's median over the PDL step's at batch 1
GAIN_BANDS = (("a", 0.98), ("b", 1.02), ("c", 1.10), ("d", float("inf")))
#: the counter values, program counts and barriers 17.2's function is tried on (hidden)
TARGET_CASES = ((0, 4, 4), (3, 4, 4), (16, 4, 4), (19, 4, 4), (32, 4, 4), (35, 4, 4),
                (1, 132, 4), (132 * 4 * 1000 + 131, 132, 4), (7, 3, 2), (12, 3, 2))
#: the scheduler orders 17.6's wait is run under
SEEDS = tuple(range(8))


def _asked(fn: Callable[..., Any], convert: Callable[[Any], Any]) -> Callable[..., Any]:
    """The learner's ``fn`` called on a hidden case, its answer through ``convert``, or the
    name of the exception it raised (a body that breaks or returns None)."""
    def asked(*case: Any) -> Any:
        try:
            return convert(fn(*case))
        except Exception as exc:  # a body that breaks or returns None
            return type(exc).__name__
    return asked


def _hidden_cases(ex: Exercise, label: str, asked: Callable[..., Any],
                  cases: Sequence[tuple], want: Callable[..., Any],
                  missed_as: Callable[[tuple, Any, Any], str], hint: str) -> bool:
    """One check of how many of ``cases`` (not shown to the learner) ``asked`` answers as
    ``want`` does, the first miss (``missed_as(case, got, wanted)``) leading the hint; whether
    it missed none."""
    missed = [(case, got, wanted) for case in cases
              if (got := asked(*case)) != (wanted := want(*case))]
    first = "" if not missed else f"the first it misses: {missed_as(*missed[0])}; "
    ex.check(label, len(cases) - len(missed), len(cases), hint=first + hint)
    return not missed


def gain_band(gain: float) -> str:
    """The letter of :data:`GAIN_BANDS` a gain falls in."""
    return next(letter for letter, top in GAIN_BANDS if gain < top)


@exercise("17.1", "what PDL buys at batch 1", "predict")
def _pdl_gain(ex: Exercise, pdl_band: Any, *, rec: Any) -> None:
    gain = None if rec is None else pl.pdl_gain(rec, 1)
    if gain is None:
        print("note: no past_launch_gpt2 record here yet, so any band is accepted; the record "
              "will grade this once it is filed")
        ex.check_one_of("a band", pdl_band, [letter for letter, _ in GAIN_BANDS],
                        hint='one of "a", "b", "c" or "d"')
        return
    # a gain within 1% of a band's edge: either side is defensible
    ex.check_one_of("plain step over PDL step at batch 1", pdl_band,
                    sorted({gain_band(gain * f) for f in (0.99, 1.0, 1.01)}),
                    hint="what can overlap with the previous kernel: a launch, the first "
                         "weight bytes, and what else? 61 boundaries of how long each?")


@exercise("17.2", "the barrier's targets", "write")
def _targets(ex: Exercise, targets: Any) -> None:
    if not ex.check_function("a function of (seen, programs, barriers)", targets):
        return
    for seen, P, n in TARGET_CASES:
        try:
            got = targets(seen, P, n)
            got = (int(got[0]), [int(t) for t in got[1]])
        except Exception as exc:  # a body that breaks or returns None
            got = f"{type(exc).__name__}"
        ex.check(f"counter {seen}, {P} programs, {n} barriers", got,
                 pl.barrier_targets(seen, P, n),
                 hint="whole launches add barriers * programs each; this launch has added "
                      "fewer than programs so far")
    try:
        run = pl.simulate(4, 3, targets=lambda seen, P: targets(seen, P, pl.BARRIERS))
        ok, msg = run.ok, run.message
    except Exception as exc:  # a body that breaks or returns None
        ok, msg = False, f"it raised {type(exc).__name__}: {exc}"
    ex.check_true("three launches in the simulator end right", ok,
                  hint=msg or "the residual must equal the reference")


#: 17.3: a letter whose share is within this fraction of the largest is accepted too
NEAR = 0.8


@exercise("17.3", "where the persistent step loses its time", "predict")
def _lost_in(ex: Exercise, lost_in: Any, *, rec: Any) -> None:
    if rec is None:
        print("note: no persistent_stages_gpt2 record here yet, so any letter is accepted; the "
              "record will grade this once it is filed")
        ex.check_one_of("a letter", lost_in, list(pl.LOST_IN), hint='"a", "b" or "c"')
        return
    shares = pl.where_lost(rec, 1)
    top = max(shares.values())
    ex.check_one_of("where most of the persistent step's extra time goes at batch 1", lost_in,
                    sorted(k for k, v in shares.items() if v >= NEAR * top),
                    hint="per step: 4 barriers x 12 layers of a few µs at most, 11 gaps between "
                         "launches, and 5 stages x 12 layers whose tiles one program per SM "
                         "walks one after another")


@exercise("17.4", "which change speeds the persistent step up", "predict")
def _helps(ex: Exercise, helps: Any, *, rows: Any) -> None:
    ex.check_one_of("what the sweep measured for gpt2 at batch 1", helps,
                    [pl.which_helps(rows, "gpt2", 1)],
                    hint="what each change removes and what it adds, per program and stage: "
                         "a second wait is a spin, an acquire and an L1 invalidation before the "
                         "tile may load its inputs; a prefetch is an instruction per 128 bytes, "
                         "all issued before stage 1's own loads")


@exercise("17.6", "a barrier that reads old data", "debug")
def _wait(ex: Exercise, wait: Any, why: Any) -> None:
    if not inspect.isgeneratorfunction(wait):
        ex.check("wait is a generator function (it yields operations)", wait, "a generator")
        return
    try:
        runs = [pl.simulate(4, 2, wait=wait, seed=s) for s in SEEDS]
    except Exception as exc:
        ex.check_true("wait runs in the simulator", False,
                      hint=f"it raised {type(exc).__name__}: {exc}; yield p.load_volatile(...), "
                           "p.acquire() and the like, and keep what a load sends back")
        return
    hung = [r for r in runs if r.status == "deadlock"]
    wrong = [r for r in runs if r.status == "wrong"]
    ex.check_true(f"no deadlock in {len(SEEDS)} scheduler orders", not hung,
                  hint="a plain load may return this program's own L1 copy of the counter, "
                       "forever" if hung else "")
    ex.check_true(f"the right residual in {len(SEEDS)} scheduler orders", not hung and not wrong,
                  hint=(wrong[0].message if wrong else "fix the deadlock first")
                  + " | what drops the L1 copies a program made before the barrier?")
    ex.check_true("a reason in a few words", ... if why is ... else
                  isinstance(why, str) and bool(why.strip()),
                  hint="which value did a program read, and from where?")


#: the kernels 17.7's function is tried on (hidden): registers a thread, shared bytes, warps
FIT_CASES = ((168, 59392, 4), (96, 27136, 4), (255, 0, 4), (128, 0, 4), (129, 0, 4),
             (100, 0, 4), (32, 100_000, 4), (64, 48 * 1024, 8), (40, 0, 1), (24, 0, 2),
             (255, 200_000, 16), (72, 233_000, 4))


@exercise("17.7", "how many programs an SM holds", "write")
def _fit(ex: Exercise, fit: Any) -> None:
    if not ex.check_function("a function of (registers, shared_bytes, warps)", fit):
        return

    asked = _asked(fit, int)
    _hidden_cases(ex, f"right answers on {len(FIT_CASES)} kernels it does not show you", asked,
                  FIT_CASES, lambda *case: pl.programs_per_sm(*case)["fit"],
                  lambda case, got, want: "{} registers, {} bytes of shared memory, {} warps "
                                          "gave {!r}, not {}".format(*case, got, want),
                  "the smallest of four limits; registers go to whole warps in units of 256, "
                  "shared memory to programs with 1 KiB more, in units of 128 bytes")
    launch = next(r for r in pl.resources_record()["rows"]
                  if (r["preset"], r["batch"], r["per_sm"], r["waits"]) == ("small", 8, 4,
                                                                          "stage"))
    held = asked(launch["registers"], launch["shared_bytes"], launch["num_warps"])
    ex.check_true("with it, four programs of small at batch 8 do not fit (the launch the H100 "
                  "refused)", isinstance(held, int) and held < 4,
                  hint=f"your fit gives {held} for {launch['registers']} registers and "
                       f"{launch['shared_bytes']} bytes")


#: (layers, one barrier µs, one launch µs) 17.5's function is tried on (hidden)
SYNC_CASES = ((1, 1.0, 0.0), (1, 0.0, 1.0), (4, 1.5, 1.7), (12, 1.52, 1.36), (2, 2.0, 3.0),
              (24, 0.5, 0.25), (3, 0.0, 0.0))
#: how close 17.5's prediction of gpt2 from small's costs must come to the measured graph
SYNC_TOLERANCE = 0.05


@exercise("17.5", "what the synchronisation costs", "write")
def _sync(ex: Exercise, sync_us: Any, *, record: Any) -> None:
    if not ex.check_function("a function of (layers, barrier_us, launch_us)", sync_us):
        return

    if not _hidden_cases(ex, f"right on {len(SYNC_CASES)} made-up costs it does not show you",
                         _asked(sync_us, lambda v: round(float(v), 6)), SYNC_CASES,
                         lambda *case: round(pl.sync_cost(*case), 6),
                         lambda case, got, _: "{} layers, a barrier of {} µs and a launch of "
                                              "{} µs gave {!r}".format(*case, got),
                         "count the barriers of one layer launch and the launches of a step"):
        return
    predicted, measured = pl.sync_prediction(record, sync_us)
    ex.check_true(f"from small's costs it predicts gpt2's barrier graph ({measured:.1f} µs "
                  f"measured) within {SYNC_TOLERANCE:.0%}",
                  abs(predicted / measured - 1) < SYNC_TOLERANCE,
                  hint=f"your function gives {predicted:.1f} µs")
    print(f"predicted from small: {predicted:.1f} µs; measured for gpt2: {measured:.1f} µs")
