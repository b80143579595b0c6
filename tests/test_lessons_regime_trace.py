"""Pure helpers: decode regime from the launch sweep."""

import pytest

from labkit.teach.lessons import regime


def _st(m):
    return {"median": m, "p10": m, "p90": m, "mean": m, "n": 1, "unit": "us"}


def _lo(host=8.0, sweep=((1, 9.0, 1.0), (1 << 20, 9.0, 3.0), (1 << 24, 34.0, 32.0))):
    return {"device": "cuda", "n_kernels": 200, "notes": [],
            "host_per_launch": _st(host), "launch_sync": _st(19.0),
            "gpu_per_eager_kernel": _st(host), "gpu_per_graph_node": _st(1.0),
            "sweep": [{"numel": n, "eager": _st(e), "graph": _st(g)}
                      for n, e, g in sweep]}


def test_bandwidth_crossover_and_first_point():
    lo = _lo()
    bw = regime.sweep_bandwidth(lo)
    assert bw == pytest.approx((1 << 24) * 8 / 32e-6)
    assert regime.hiding_bytes(lo) == pytest.approx(8e-6 * bw)
    assert regime.first_gpu_bound_point(lo)["numel"] == 1 << 24
    assert regime.first_gpu_bound_point(_lo(host=50.0)) is None


def test_weight_bytes_and_regimes():
    assert regime.weight_bytes(1, 2, 3) == (4 * 4 + 2 * 2 * 8 + 3 * 2) * 2
    assert regime.weight_bytes(1, 2, 3, d_ff=5, gated=True) == (16 + 3 * 2 * 5 + 6) * 2
    assert regime.kernels_per_layer(65, 4, 173, 12) == (13.5, 11.0)
    row = regime.step_regime(1e6, 100, 10.0, 1e12)
    assert row == {"launch_us": 1000.0, "read_us": 1.0, "bound": "launch-bound"}
    assert regime.step_regime(1e10, 100, 10.0, 1e12)["bound"] == "weight-bandwidth-bound"
    floor = regime.replay_floor_us(3e6, 10, 1.0, 1e12)
    assert floor == {"floor_us": 13.0, "read_share": pytest.approx(3 / 13)}


def test_regime_rejects_bad_input():
    with pytest.raises(ValueError, match="n_layer"):
        regime.weight_bytes(0, 2, 3)
    with pytest.raises(ValueError, match="different layer counts"):
        regime.kernels_per_layer(1, 4, 2, 4)
    with pytest.raises(ValueError, match="no graph column"):
        regime.sweep_bandwidth({**_lo(), "sweep": [{"numel": 1, "eager": _st(1.0),
                                                    "graph": None}]})


def test_choices_and_noise():
    from labkit.teach.lessons import choices, counts

    assert choices.closest_choice(1.02, {"a": 1, "b": 8, "c": 64}) == "a"
    assert choices.closest_choice(30.0, {"a": 1, "b": 8, "c": 64}) == "c"
    with pytest.raises(ValueError, match="ratio > 0"):
        choices.closest_choice(0, {"a": 1})
    assert choices.spread(_st(5.0)) == 1.0
    noisy = {**_st(10.0), "p10": 10.0, "p90": 20.0}
    assert "NOISY" in choices.noise_note(noisy) and "NOISY" not in choices.noise_note(_st(5.0))
    assert counts.gpu_ops_per_step({"kernels_per_step": 65}) == 65
    assert counts.gpu_ops_per_step({"kernels_per_step": {"eager": 62, "compile": 55}},
                                   "compile") == 55
    assert counts.gpu_ops_per_step({"gpu_ops_per_step": 170}) == 170
    with pytest.raises(ValueError, match="no GPU operation count"):
        counts.gpu_ops_per_step({"kernels_per_step": 65}, "compile")
    with pytest.raises(ValueError, match="method must be one of"):
        counts.gpu_ops_per_step({"kernels_per_step": 65}, "graph")
    assert counts.describe_count({"kernels_per_step": 65}).startswith(
        "65 GPU operations per eager step (kernels plus memory copies and fills of one decode "
        "step at batch 1, its inputs already on the GPU")
    # one counting function: a record made with it says so; an older decode record is flagged
    new = {"kernels_per_step": 62, "gpu_ops_counted": "decode_step"}
    assert not counts.counts_inputs(new) and counts.LEGACY_NOTE not in counts.describe_count(new)
    assert counts.counts_inputs({"kernels_per_step": 65})
    assert counts.describe_count({"kernels_per_step": 65}).endswith(counts.LEGACY_NOTE + ")")
    assert not counts.counts_inputs({"gpu_ops_per_step": 62})          # modes: step alone
    assert not counts.counts_inputs({"kernels_per_step": {"eager": 62, "compile": 55}})
