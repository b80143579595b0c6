"""Timers on CPU: statistics, host timing, CUDA-only figures marked unavailable."""

import time

import pytest
import torch

from labkit.timing import (Stats, launch_bound_sweep, launch_overhead, time_any, time_cuda,
                           time_cuda_interleaved, time_host, time_host_issue_interleaved)


def test_stats_quantiles():
    s = Stats.from_samples([5, 1, 3, 2, 4, 6, 7, 8, 9, 10, 11])
    assert s.median == 6 and s.n == 11
    assert s.p10 == pytest.approx(2.0) and s.p90 == pytest.approx(10.0)
    assert s.mean == pytest.approx(6.0)
    assert Stats.from_samples([3.0]).p90 == 3.0
    with pytest.raises(ValueError, match="repeats"):
        Stats.from_samples([])


def test_time_host_counts_calls():
    calls = []
    s = time_host(lambda: calls.append(1), warmup=3, repeats=7, inner=2)
    assert len(calls) == 3 + 7 * 2 and s.n == 7 and s.median >= 0
    with pytest.raises(ValueError, match="repeats"):
        time_host(lambda: None, repeats=0)


def test_host_issue_timing_alternates_and_divides_by_inner():
    calls: list[str] = []
    got = time_host_issue_interleaved(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        warmup=1, repeats=3, inner=2)
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 3
    assert got["a"].n == got["b"].n == 3 and got["a"].median >= 0

    def slow() -> None:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1e-3:
            pass
    per = time_host_issue_interleaved({"slow": slow}, warmup=0, repeats=2, inner=3)["slow"]
    assert per.median >= 1000.0  # µs per call, not per sample of three
    with pytest.raises(TypeError, match="mapping"):
        time_host_issue_interleaved({})
    with pytest.raises(ValueError, match="inner"):
        time_host_issue_interleaved({"a": lambda: None}, inner=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU behaviour")
def test_cuda_only_figures_are_unavailable_not_zero_on_cpu():
    lo = launch_overhead("cpu", n_kernels=20, repeats=5)
    assert lo.host_per_launch.median > 0
    assert lo.launch_sync is None and lo.gpu_per_graph_node is None
    assert lo.gpu_per_eager_kernel is None
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        time_cuda(lambda: None)
    pts = launch_bound_sweep([1, 1024], "cpu", n_kernels=5, repeats=3)
    assert [p.numel for p in pts] == [1, 1024] and all(p.graph is None for p in pts)
    assert time_any(lambda: None, "cpu", repeats=3).n == 3


def test_interleaved_timing_refuses_bad_input():
    with pytest.raises(TypeError, match="mapping"):
        time_cuda_interleaved([lambda: None])
    with pytest.raises(TypeError, match="mapping"):
        time_cuda_interleaved({})
    with pytest.raises(TypeError, match="callable"):
        time_cuda_interleaved({"a": 3})
    with pytest.raises(ValueError, match="repeats"):
        time_cuda_interleaved({"a": lambda: None}, repeats=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_interleaved_timing_needs_cuda():
    with pytest.raises(RuntimeError, match="time_host"):
        time_cuda_interleaved({"a": lambda: None})


@pytest.mark.gpu
def test_interleaved_timing_alternates_samples():
    calls: list[str] = []
    got = time_cuda_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                                warmup=0, repeats=3, inner=2)
    assert calls == ["a", "a", "b", "b"] * 3
    assert got["a"].n == got["b"].n == 3
