"""labkit.teach.launch: launch-cost bars, the work sweep chart, the CPU/GPU timeline."""

from __future__ import annotations

import pytest

from labkit.teach import launch as tp
from labkit.measure.results import Result
from labkit.timing import Stats


def S(m: float) -> dict:
    return {"median": m, "p10": 0.9 * m, "p90": 1.2 * m, "mean": m, "n": 10, "unit": "us"}


def overhead(**over) -> dict:
    sweep = [{"numel": n, "eager": S(e), "graph": S(g)}
             for n, e, g in ((1, 7.0, 0.8), (2**10, 7.0, 0.9), (2**20, 8.0, 7.5), (2**24, 40.0, 40.0))]
    data = {"device": "cuda:0", "host_per_launch": S(6.8), "launch_sync": S(13.0),
            "gpu_per_eager_kernel": S(6.9), "gpu_per_graph_node": S(0.84), "n_kernels": 200,
            "notes": [], "sweep": sweep}
    data.update(over)
    return data


def timeline() -> dict:
    eager = {"events": [{"lane": "CPU", "name": "cudaLaunchKernel", "start_us": 0, "dur_us": 5},
                        {"lane": "GPU", "name": "k0", "start_us": 6, "dur_us": 2},
                        {"lane": "CPU", "name": "cudaLaunchKernel", "start_us": 10, "dur_us": 5},
                        {"lane": "GPU", "name": "k1", "start_us": 16, "dur_us": 2}],
             "step_us": 20.0}
    graph = {"events": [{"lane": "CPU", "name": "cudaGraphLaunch", "start_us": 0, "dur_us": 4},
                        {"lane": "GPU", "name": "k0", "start_us": 5, "dur_us": 2},
                        {"lane": "GPU", "name": "k1", "start_us": 7, "dur_us": 2}],
             "step_us": 9.0}
    return {"eager": eager, "graph": graph}


def as_result(name: str, data: dict) -> Result:
    env = {"tier": "gpu", "gpu_name": "NVIDIA H200", "driver": "580.95", "torch": "2.11.0",
           "cuda": "13.0", "git_commit": "abcdef0123"}
    return Result(name, data, {}, env, 1, "2026-01-02T00:00:00+00:00")


def test_overhead_bars_show_medians_and_skip_missing():
    fig = tp.launch_overhead_bars(overhead(launch_sync=None), subtitle="")
    bar = fig.data[0]
    assert list(bar.y) == [6.8, 6.9, 0.84]
    assert len(bar.x) == 3 and "sync" not in " ".join(bar.x)
    assert bar.error_y.array[0] == pytest.approx(0.2 * 6.8)
    assert bar.error_y.arrayminus[0] == pytest.approx(0.1 * 6.8)


def test_overhead_bars_add_cpu_dispatch_labelled_as_cpu():
    cpu = {"host_per_launch": Stats(4.0, 3.0, 5.0, 4.0, 5).to_dict()}
    fig = tp.launch_overhead_bars(overhead(), cpu=cpu)
    assert len(fig.data) == 2
    assert fig.data[1].y == (4.0,)
    assert "CPU" in fig.data[1].name and "no kernel launch" in fig.data[1].name
    assert fig.data[0].name == "cuda:0"


def test_overhead_bars_accept_a_stats_object_via_launch_overhead_dataclass():
    from labkit.timing import LaunchOverhead

    lo = LaunchOverhead("cpu", Stats(5.0, 4.0, 6.0, 5.0, 3), None, None, None, 10)
    fig = tp.launch_overhead_bars(overhead(), cpu=lo)
    assert fig.data[1].y == (5.0,)


def test_overhead_bars_refuse_an_empty_record():
    with pytest.raises(ValueError, match="holds none"):
        tp.launch_overhead_bars({"device": "cpu", "n_kernels": 200, "sweep": []})


def test_result_provenance_becomes_the_subtitle():
    fig = tp.launch_overhead_bars(as_result("launch_overhead", overhead()))
    assert "NVIDIA H200" in fig.layout.title.text and "2026-01-02" in fig.layout.title.text
    fig = tp.launch_overhead_bars(as_result("launch_overhead", overhead()), subtitle="mine")
    assert "mine" in fig.layout.title.text and "H200" not in fig.layout.title.text


def test_sweep_chart_marks_where_eager_meets_graph():
    fig = tp.sweep_chart(overhead(), subtitle="")
    names = [t.name for t in fig.data]
    assert names[:2] == ["eager", "graph replay"]
    star = fig.data[2]
    assert star.x == (2**20,) and star.y == (8.0,)  # 8.0 / 7.5 <= 1.1
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert "2^20" in fig.layout.xaxis.ticktext


def test_sweep_chart_highlight_and_cpu_only_sweep():
    fig = tp.sweep_chart(overhead(), highlight=1000)
    ring = fig.data[-1]
    assert ring.name == "selected size" and ring.x == (1024, 1024) and ring.y == (7.0, 0.9)
    cpu = overhead(sweep=[{"numel": 1, "eager": S(5.0), "graph": None},
                          {"numel": 4, "eager": S(5.5), "graph": None}])
    fig = tp.sweep_chart(cpu)
    assert [t.name for t in fig.data] == ["eager"]  # no graph line, no meeting point


def test_timeline_lanes_eager_above_graph():
    fig = tp.timeline_chart(timeline(), subtitle="")
    assert len(fig.data) == 4
    lanes = [t.y[0] for t in fig.data]
    assert lanes[0].startswith("eager · CPU") and lanes[3].startswith("graph replay · GPU")
    assert "step 20 µs" in lanes[1]
    # plotly draws category arrays bottom-up: eager must come last to be on top
    assert list(fig.layout.yaxis.categoryarray) == lanes[::-1]
    gpu_graph = fig.data[3]
    assert list(gpu_graph.base) == [5.0, 7.0] and list(gpu_graph.x) == [2.0, 2.0]
    assert gpu_graph.orientation == "h"


def test_timeline_one_method_and_unknown_method():
    fig = tp.timeline_chart(timeline(), methods=("eager",))
    assert len(fig.data) == 2
    with pytest.raises(KeyError, match="compile"):
        tp.timeline_chart(timeline(), methods=("eager", "compile"))


def test_short_kernel_names_for_hover():
    long = ("void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, long>"
            "(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, int)")
    assert tp.short_name(long) == "at::native::indexSelectSmallIndex"
    assert tp.short_name("cudaLaunchKernel") == "cudaLaunchKernel"
    assert tp.short_name("x" * 100, limit=10) == "x" * 9 + "…"
    fig = tp.timeline_chart({"eager": {"events": [{"lane": "GPU", "name": long, "start_us": 0,
                                                   "dur_us": 1}], "step_us": 1.0}},
                            methods=("eager",))
    assert fig.data[1].customdata[0][0] == "at::native::indexSelectSmallIndex"
