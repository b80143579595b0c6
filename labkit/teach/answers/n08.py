"""Exercise checks of notebook 08 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from typing import Any

from labkit.measure.records import Compile, view
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach.lessons import record_data
from labkit.teach import compile as fairness
from labkit.teach import compile as lf
from labkit.teach import compile as pc
from labkit.teach.verdicts import compare_stats

#: the letters of exercise 8.1 and their groups (:func:`labkit.teach.compile.time_groups`)
KERNEL_KINDS = {"a": "attention", "b": "GEMM (cuBLAS) and split-K reduction", "c": "LayerNorm",
                "d": "cache write"}
#: two groups whose shares of the step lie this close (fraction points) are both right
CLOSE_SHARE = 0.05
#: exercise 8.4: the true statements (A: graphs and fusion remove different costs; C: a graph
#: replays the kernels eager launches; E: the trees may overwrite a kept output)
TRUE_STATEMENTS = frozenset("ACE")


@exercise("8.1", "where the fused step's time goes", "predict")
def _fused_time(ex: Exercise, largest: Any, *, frec: Any) -> None:
    groups = [] if frec is None else [g for g in lf.time_groups(frec) if g["kind"] != "total"]
    if not groups:
        ex.check_true("a fused_gpt2 record with kernel times to check against", False,
                      hint="this exercise needs the fused_gpt2 record (data/reference/h200/)")
        return
    top = groups[0]["share"]
    right = [k for k, kind in KERNEL_KINDS.items() for g in groups
             if g["kind"] == kind and top - g["share"] <= CLOSE_SHARE]
    ex.check_one_of("largest share of the GPU time", largest, right,
                    hint="which kernels read the most bytes, and how many run per layer?")


@exercise("8.2", "the evidence rule", "write")
def _evidence_rule(ex: Exercise, verdict: Any, *, rec: Any) -> None:
    if not ex.check_function("a function verdict(a, b, interleaved)", verdict):
        return

    def col(m: float, lo: float, hi: float, n: int = 30) -> dict:
        return {"median": m, "p10": lo, "p90": hi, "n": n}

    cases = [(col(10, 9, 11, n=1), col(20, 19, 21), True),
             (col(10, 9, 11), col(20, 19, 21), False),
             (col(10, 9, 15), col(14, 13, 16), True), (col(10, 9, 11), col(20, 19, 21), True),
             (col(20, 19, 21), col(10, 9, 11), True)]
    for a, b, il in cases:
        ex.check(f"a={a['median']} b={b['median']} n={a['n']} interleaved={il}",
                 verdict(a, b, il), compare_stats(a, b, interleaved=il).word,
                 hint="follow the four rules in order")
    times = record_data(rec)["times"]
    for i, bs in enumerate(view(rec, Compile).batch_sizes):
        ex.check(f"record, batch {bs}: compile vs dispatcher",
                 verdict(times["compile"][i], times["dispatcher"][i], fairness.interleaved(rec)),
                 fairness.compare(rec, "compile", "dispatcher", bs).word,
                 hint="fairness.interleaved(rec) says how the record was timed")


@exercise("8.3", "break-even", "write")
def _break_even(ex: Exercise, break_even: Any, *, rec: Any) -> None:
    if not ex.check_function("a function break_even(extra_setup_s, saving_us)", break_even):
        return
    c = view(rec, Compile)
    b = c.batch_sizes[0]
    graph, compiled = c.at("graph", b), c.at("compile", b)
    if graph is None or compiled is None:
        raise KeyError(f"the compile record has no graph or compile time at batch {b}")
    ex.check(f"record, batch {b}", break_even(c.compile_s - c.capture_s, graph - compiled),
             pc.break_even_steps(rec, b), rel=1e-3,
             hint="steps = extra seconds / saving in seconds per step")
    ex.check("10 s extra, 10 µs saved per step", break_even(10.0, 10.0), 1e6, rel=1e-6,
             hint="10 µs = 1e-5 s")
    ex.check("no saving", break_even(10.0, 0.0), float("inf"),
             hint="a saving <= 0 never pays back")
    ex.check("no extra set-up", break_even(-1.0, 5.0), 0.0, hint="nothing to pay back")


@exercise("8.4", "graphs, fusion, trees", "choose")
def _true_statements(ex: Exercise, true_statements: Any) -> None:
    got = true_statements
    if isinstance(got, str):
        got = set(got.replace(",", " ").split()) if " " in got or "," in got else set(got)
    if isinstance(got, (set, frozenset, list, tuple)):
        got = frozenset(str(x).strip().upper() for x in got)
    ex.check_one_of("true statements", got, [TRUE_STATEMENTS],
                    hint="graphs do not change the kernels; the trees share one pool per "
                         "device and copy their inputs in")
