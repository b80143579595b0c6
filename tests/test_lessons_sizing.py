"""labkit.teach.sizing (cost models and rows from records, size lists), the cost-model
math in labkit.sizes.fit, and labkit.teach.sizing."""

from __future__ import annotations

import pytest

from labkit.sizes import Interpolated, isotonic, linear_fit
from labkit.teach import sizing as ls

MiB = 2**20


def stats(m: float) -> dict:
    return {"median": m, "p10": m, "p90": m, "mean": m, "n": 1, "unit": "us"}


def pool_record() -> dict:
    sizes = [1, 2, 4, 8]
    per = {str(s): 1000 + 10 * s for s in sizes}
    return {"sizes": sizes, "private": {"per_size_bytes": per, "total_bytes": sum(per.values())},
            "shared_largest_first": {"total_bytes": 1080 + 3 * 20},
            "shared_smallest_first": {"total_bytes": 2000},
            "largest_private_bytes": 1080}


def disp_record() -> dict:
    bss = [1, 2, 3, 4, 6, 8]
    return {"capture_sizes": [1, 2, 4], "batch_sizes": bss, "padded_to": [1, 2, 4, 4, None, None],
            "times": {"eager": [stats(100 + 10 * b) for b in bss],
                      "graph_exact": [stats(10 + b) for b in bss[:4]] + [None, None],
                      "dispatcher": [stats(14 + b) for b in [1, 2, 4, 4]]
                      + [stats(161), stats(181)]}}


def test_linear_fit_exact_line():
    fit = linear_fit([1, 2, 3], [5, 7, 9])
    assert (fit.a, fit.b, fit.r2, fit.n) == (pytest.approx(3), pytest.approx(2), 1.0, 3)
    assert fit(10) == pytest.approx(23)
    assert linear_fit([1, 2, 3], [5, 7, 9], floor=6)(0) == 6
    with pytest.raises(ValueError):
        linear_fit([1, 1], [2, 3])
    with pytest.raises(ValueError):
        linear_fit([1, 2], [2])


def test_memory_model_and_residual():
    fit = ls.memory_model_from_record(pool_record())
    assert fit.a == pytest.approx(1000) and fit.b == pytest.approx(10)
    assert fit.floor == 1010 and fit(-50) == 1010      # never below the smallest pool
    assert ls.shared_residual_from_record(pool_record()) == pytest.approx(20)
    with pytest.raises(ValueError, match="pool_memory"):
        ls.memory_model_from_record({"sizes": []})


def test_interpolated_inside_and_outside():
    f = Interpolated((1, 3, 5), (10, 30, 40))
    assert f(1) == 10 and f(2) == 20 and f(4) == 35
    assert f(7) == pytest.approx(50)        # extrapolated from the last two points
    assert f(0) == pytest.approx(0)
    assert (f.lo, f.hi) == (1, 5)
    assert Interpolated((2,), (7,))(100) == 7
    with pytest.raises(ValueError):
        Interpolated((3, 1), (1, 2))


def test_isotonic():
    assert isotonic([1, 3, 2, 4]) == [1, 2.5, 2.5, 4]
    assert isotonic([5, 1, 1]) == [pytest.approx(7 / 3)] * 3
    assert isotonic([1, 2, 3]) == [1, 2, 3]
    assert isotonic([]) == []


def test_monotone_time_model():
    rec = disp_record()
    rec["times"]["graph_exact"][2] = stats(11)   # a noisy dip at batch 3
    assert ls.time_model(rec).ys == (11, 11.5, 11.5, 14)   # raw: 11, 12, 11, 14


def test_time_models_from_record():
    step = ls.time_model(disp_record())
    assert step.xs == (1, 2, 3, 4) and step(4) == 14
    eager = ls.time_model(disp_record(), "eager")
    assert eager(5) == pytest.approx(150)
    with pytest.raises(ValueError, match="compile"):
        ls.time_model(disp_record(), "compile")


def test_dispatcher_rows():
    table = ls.dispatcher_rows(disp_record())
    assert [r["padded to"] for r in table] == [1, 2, 4, 4, "eager", "eager"]
    assert table[4]["exact graph (µs)"] == "—" and table[4]["dispatcher (µs)"] == 161
    assert table[0]["eager (µs)"] == 110 and table[0]["exact graph (µs)"] == 11


def test_overhead_rows_from_a_bench_record():
    bench = {"rows": [{"model": "small", "batch": 1, "graph_us": 170.04, "dispatcher_us": 204.0,
                       "dispatcher_over_graph": 204.0 / 170.04},
                      {"model": "gpt2", "batch": 8, "eager_us": 4000.0}],
             "targets": [], "pool": []}
    (row,) = ls.overhead_rows(bench)
    assert (row["model"], row["batch"], row["bare replay (µs)"], row["extra (µs)"]) == \
        ("small", 1, 170.0, 34.0)
    assert row["dispatcher / replay"] == 1.2


def test_short_list():
    assert ls.short_list([1, 2, 3]) == "1, 2, 3"
    assert ls.short_list(list(range(1, 20)), head=3) == "1, 2, 3, … 19"


def test_size_set_rows():
    dist = {1: 0.5, 3: 0.5}
    rows = ls.size_set_rows(dist, {"pow2": [1, 2, 4], "exact": [1, 3]},
                            step_time=lambda s: 10 + s, memory=lambda s: 100 * MiB + s * MiB)
    pow2, exact = rows
    assert pow2["padded rows / step"] == 0.5 and exact["padded rows / step"] == 0.0
    assert pow2["hit rate (%)"] == 100.0
    assert pow2["expected step (µs)"] == pytest.approx(0.5 * 11 + 0.5 * 14)
    assert pow2["graph memory (MiB)"] == 104.0
    private = ls.size_set_rows(dist, {"pow2": [1, 2, 4]}, memory=lambda s: s * MiB,
                               pool="private")
    assert private[0]["graph memory (MiB)"] == 7.0


def test_plots_sizes():
    from labkit.teach import sizing as ps
    from labkit.sizes import ParetoPoint

    fig = ps.trace_histogram({1: 0.25, 3: 0.75}, {"a": [1, 2, 4], "b": [3]})
    assert list(fig.data[0].y) == [25.0, 75.0]
    assert list(fig.data[1].x) == [1, 2, 4] and list(fig.data[2].y) == ["b"]
    front = [ParetoPoint(1, (8,), 1 * MiB, 5.0), ParetoPoint(2, (4, 8), 2 * MiB, 3.0)]
    fig = ps.pareto_chart(front, chosen=front[1], named={"x": (3 * MiB, 4.0)}, budget=2.5 * MiB)
    assert list(fig.data[0].x) == [1.0, 2.0]
    assert fig.data[-1].x[0] == 2.0 and "chosen" in fig.data[-1].name
    assert fig.layout.shapes[0].x0 == 2.5
    with pytest.raises(ValueError):
        ps.pareto_chart([])


def test_overhead_rows_from_a_dispatcher_overhead_record():
    from labkit.measure.records import OVERHEAD_METHODS

    def st(m, half=1.0):
        return {"median": m, "p10": m - half, "p90": m + half, "mean": m, "n": 15, "unit": "us"}

    medians = {"replay": 100.0, "copy_replay": 104.0, "stage_replay": 112.0,
               "step_device": 105.0, "step_host": 114.0, "step_host_copy": 116.0}
    assert set(medians) == set(OVERHEAD_METHODS)
    times = {m: [st(v), st(v, half=20.0)] for m, v in medians.items()}
    rec = {"dtype": "bfloat16", "repeats": 15, "inner": 50,
           "runs": [{"preset": "small", "batch_sizes": [1, 8], "times": times, "checks": {}}]}
    apart, overlap = ls.overhead_record_rows(rec)
    assert (apart["model"], apart["batch"], apart["extra (µs)"]) == ("small", 1, 14.0)
    assert apart["dispatcher / replay"] == 1.14 and apart["dispatcher vs replay"] == "a higher"
    assert apart["host inputs staged, then replay: + µs"] == 12.0
    assert overlap["dispatcher vs replay"] == "no difference measured"
