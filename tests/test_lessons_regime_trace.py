"""Pure helpers: decode regime from the launch sweep."""

import pytest

from labkit.teach import launch as regime


def _st(m):
    return {"median": m, "p10": m, "p90": m, "mean": m, "n": 1, "unit": "us"}


def _lo(host=8.0, sweep=((1, 9.0, 1.0), (1 << 20, 9.0, 3.0), (1 << 24, 34.0, 32.0))):
    return {"device": "cuda", "n_kernels": 200, "notes": [],
            "host_per_launch": _st(host), "launch_sync": _st(19.0),
            "gpu_per_eager_kernel": _st(host), "gpu_per_graph_node": _st(1.0),
            "sweep": [{"numel": n, "eager": _st(e), "graph": _st(g)}
                      for n, e, g in sweep]}


def test_sweep_bandwidth():
    assert regime.sweep_bandwidth(_lo()) == pytest.approx((1 << 24) * 8 / 32e-6)
    with pytest.raises(ValueError, match="no graph column"):
        regime.sweep_bandwidth({**_lo(), "sweep": [{"numel": 1, "eager": _st(1.0),
                                                    "graph": None}]})


def test_weight_bytes():
    assert regime.weight_bytes(1, 2, 3) == (4 * 4 + 2 * 2 * 8 + 3 * 2) * 2
    assert regime.weight_bytes(1, 2, 3, d_ff=5, gated=True) == (16 + 3 * 2 * 5 + 6) * 2
    with pytest.raises(ValueError, match="n_layer"):
        regime.weight_bytes(0, 2, 3)


def _dec(n_layer, kernels, d=64, vocab=1000):
    return {"config": {"n_layer": n_layer, "d_model": d, "vocab_size": vocab,
                       "dtype": "bfloat16"}, "kernels_per_step": kernels}


def test_regime_rows_measure_count_and_estimate():
    lo = _lo(host=10.0)             # 10 µs per launch, 1 µs per graph node
    bw = regime.sweep_bandwidth(lo)
    big = {"name": "big", "n_layer": 20, "d_model": 128, "d_ff": 256, "vocab_size": 500,
           "gated": True}
    small, _mid, est = regime.regime_rows(lo, {"a": _dec(4, 65), "b": _dec(12, 173)}, big)
    assert (small["name"], small["kernels"], small["counted"]) == ("a", 65, True)
    assert small["launch_us"] == pytest.approx(650.0)
    assert small["weight_bytes"] == regime.weight_bytes(4, 64, 1000)
    assert small["read_us"] == pytest.approx(small["weight_bytes"] / bw * 1e6)
    assert small["floor_us"] == pytest.approx(small["read_us"] + 65 * 1.0)
    # the estimate: 13.5 operations per layer through (4, 65) and (12, 173)
    assert not est["counted"] and est["per_layer"] == pytest.approx(13.5)
    assert est["kernels"] == pytest.approx(65 + 13.5 * 16)
    assert est["weight_bytes"] == regime.weight_bytes(20, 128, 500, d_ff=256, gated=True)
    assert est["read_share"] == pytest.approx(est["read_us"] / est["floor_us"])
    assert len(regime.regime_rows(lo, {"a": _dec(4, 65)}, None)) == 1
    with pytest.raises(ValueError, match="different layer counts"):
        regime.regime_rows(lo, {"a": _dec(4, 65), "b": _dec(4, 70)})


def test_regime_rows_on_the_h200_records():
    from labkit.measure.results import load_reference

    lo = load_reference("launch_overhead")
    decs = {n: load_reference(f"decode_{n}") for n in ("small", "gpt2")}
    rows = regime.regime_rows(lo, decs)
    assert [r["counted"] for r in rows] == [True, True, False]
    assert all(r["launch_us"] > 10 * r["read_us"] for r in rows[:2])


def test_choices_and_counts():
    from labkit.teach import exercises as choices
    from labkit.teach import launch as counts

    assert choices.closest_choice(1.02, {"a": 1, "b": 8, "c": 64}) == "a"
    assert choices.closest_choice(30.0, {"a": 1, "b": 8, "c": 64}) == "c"
    with pytest.raises(ValueError, match="ratio > 0"):
        choices.closest_choice(0, {"a": 1})
    with pytest.raises(ValueError, match="ratio > 0"):
        choices.closest_choice(2.0, {"a": -1})
    assert counts.gpu_ops_per_step({"kernels_per_step": 65}) == 65
    assert counts.gpu_ops_per_step({"kernels_per_step": {"eager": 62, "compile": 55}},
                                   "compile") == 55
    assert counts.gpu_ops_per_step({"gpu_ops_per_step": 170}) == 170
    with pytest.raises(ValueError, match="no GPU operation count"):
        counts.gpu_ops_per_step({"kernels_per_step": 65}, "compile")
    with pytest.raises(ValueError, match="method must be one of"):
        counts.gpu_ops_per_step({"kernels_per_step": 65}, "graph")
