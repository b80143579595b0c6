"""Capture modes (notebook 10): the ``modes_<preset>`` record kind, the lesson helpers and the
charts on hand-made records; the measurement itself on a GPU (marker ``gpu``)."""

from __future__ import annotations

import copy

import pytest
import torch

from labkit.measure import records as R
from labkit.mixed import BatchDescriptor, TokenDispatcher
from labkit.teach import modes as lm
from labkit.teach import modes as pm

MiB = 2 ** 20


def st(m: float) -> dict:
    return {"median": m, "p10": m * 0.9, "p90": m * 1.1, "mean": m, "n": 5, "unit": "us"}


def record() -> dict:
    """A well-formed modes record (numbers made up for the test, never shown as results)."""
    return {"preset": "small", "dtype": "bfloat16", "n_layer": 4, "batch_sizes": [1, 64],
            "times": {"eager": [st(800.0), st(900.0)], "piecewise": [st(400.0), st(500.0)],
                      "full": [st(200.0), st(300.0)],
                      "attention_only": [st(700.0), st(750.0)]},
            "graphs_per_step": {"eager": 0, "piecewise": 5, "full": 1, "attention_only": 4},
            "graph_launches_counted": {"eager": 0, "piecewise": 5, "full": 1,
                                       "attention_only": 4},
            "pool_bytes": {"eager": None, "piecewise": 3 * MiB, "full": 2 * MiB,
                           "attention_only": MiB},
            "capture_s": {"eager": 0.0, "piecewise": 0.5, "full": 0.2, "attention_only": 0.3},
            "gpu_ops_per_step": 60,
            "checks": {"piecewise_tokens_equal_eager": True, "full_tokens_equal_eager": True,
                       "attention_only_tokens_equal_eager": True}}


# ----------------------------------------------------------------------------- the record kind


def test_modes_record_validates():
    assert R.kind_of("modes_small") is R.Modes and R.kind_of("modes_gpt2") is R.Modes
    m = R.parse("modes_small", record())
    assert isinstance(m, R.Modes)
    assert m.n_layer == 4 and m.batch_sizes == [1, 64]
    assert m.methods == ["eager", "piecewise", "full", "attention_only"]
    assert m.at("full", 64) == 300.0
    assert m.speedup_vs_eager("full") == pytest.approx([4.0, 3.0])
    assert m.pool_bytes["eager"] is None and m.pool_bytes["piecewise"] == 3 * MiB
    assert m.graphs_per_step["piecewise"] == 5


@pytest.mark.parametrize("breakage, field", [
    (lambda d: d.pop("n_layer"), "data.n_layer"),
    (lambda d: d["times"]["full"].pop(), "data.times.full"),
    (lambda d: d["times"].pop("eager"), "data.times.eager"),
    (lambda d: d["graphs_per_step"].update(full="one"), "data.graphs_per_step.full"),
    (lambda d: d["pool_bytes"].update(paged=1), "data.pool_bytes"),
    (lambda d: d.update(tokens_per_s={"full": [1.0, 2.0]}), "data.tokens_per_s.full[0]"),
])
def test_malformed_modes_record_is_refused(breakage, field):
    data = copy.deepcopy(record())
    breakage(data)
    with pytest.raises(R.SchemaError) as info:
        R.parse("modes_small", data)
    assert f"field '{field}" in str(info.value) and "Modes" in str(info.value)


def test_stored_tokens_per_s_that_agree_are_accepted():
    data = record()
    data["tokens_per_s"] = {"full": [R.tokens_per_s(1, 200.0), R.tokens_per_s(64, 300.0)]}
    assert R.parse("modes_small", data).at("full", 1) == 200.0


# ----------------------------------------------------------------------------- lesson helpers


def test_graph_launches_per_mode():
    assert [lm.graph_launches(m, 12) for m in lm.MODES] == [0, 13, 1, 12]
    assert lm.graph_launches("PIECEWISE", 4) == 5 and lm.graph_launches("NONE", 4) == 0
    with pytest.raises(ValueError, match="unknown mode 'HALF'"):
        lm.graph_launches("HALF", 4)
    with pytest.raises(ValueError, match="n_layer must be >= 1"):
        lm.graph_launches("FULL", 0)


SIZES = [1, 2, 4, 8, 16, 32, 64, 128]


@pytest.mark.parametrize("lens, q, mode, want", [
    ([1] * 8, 1, "FULL_AND_PIECEWISE", ("FULL", 8)),           # uniform decode
    ([1] * 5, 1, "FULL_AND_PIECEWISE", ("FULL", 8)),           # padded up
    ([1, 1, 1, 100], 1, "FULL_AND_PIECEWISE", ("PIECEWISE", 128)),   # mixed
    ([1] * 160, 1, "FULL_AND_PIECEWISE", ("NONE", 160)),       # above the largest size
    ([4] * 4, 4, "FULL_AND_PIECEWISE", ("FULL", 16)),          # speculative verify, 1 + 3
    ([1] * 4, 4, "FULL_AND_PIECEWISE", ("PIECEWISE", 4)),      # not 1 + k each: not uniform
    ([1] * 8, 1, "FULL_DECODE_ONLY", ("FULL", 8)),
    ([1, 1, 100], 1, "FULL_DECODE_ONLY", ("NONE", 102)),
    ([1, 1, 100], 1, "FULL", ("FULL", 128)),
    ([1] * 8, 1, "PIECEWISE", ("PIECEWISE", 8)),
    ([1] * 8, 1, "NONE", ("NONE", 8)),
])
def test_vllm_runtime_mode_follows_the_dispatcher_rule(lens, q, mode, want):
    assert lm.vllm_runtime_mode(lens, SIZES, max_num_seqs=256, decode_query_len=q,
                                cudagraph_mode=mode) == want


def test_vllm_runtime_mode_full_keys_stop_at_max_num_seqs_times_query_len():
    # FULL keys exist for capture sizes up to decode_query_len * max_num_seqs only
    assert lm.vllm_runtime_mode([1] * 5, SIZES, max_num_seqs=6) == ("PIECEWISE", 8)
    assert lm.vllm_runtime_mode([1] * 6, [1, 2, 4, 6, 8], max_num_seqs=6) == ("FULL", 6)
    with pytest.raises(ValueError, match="max_num_seqs=4 requests, got 5"):
        lm.vllm_runtime_mode([1] * 5, SIZES, max_num_seqs=4)
    with pytest.raises(ValueError, match="unknown cudagraph_mode 'HALF'"):
        lm.vllm_runtime_mode([1], SIZES, max_num_seqs=4, cudagraph_mode="HALF")


def test_mode_rows():
    assert lm.modes_of(record()) == list(lm.MODES)
    rows = lm.mode_rows(record())
    assert len(rows) == 8
    full64 = next(r for r in rows if r["mode"] == "FULL" and r["batch"] == 64)
    assert full64["step (µs, median)"] == 300 and full64["× vs eager"] == 3.0
    assert full64["graph launches / step"] == 1 and full64["pool (MiB)"] == 2.0
    eager = next(r for r in rows if r["mode"] == "eager (NONE)")
    assert eager["pool (MiB)"] is None and eager["launches counted"] == 0


# ----------------------------------------------------------------------------- charts


def test_step_time_bars():
    fig = pm.step_time_bars(record(), subtitle="test")
    assert [t.name for t in fig.data] == [lm.MODE_LABELS[m] for m in lm.MODES]
    assert list(fig.data[2].y) == [200.0, 300.0] and list(fig.data[0].x) == ["1", "64"]
    assert "4.0×" in fig.data[2].text[0]
    with pytest.raises(KeyError, match="no mode"):
        pm.step_time_bars(record(), modes=["paged"])


# ----------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
def test_measure_modes_on_gpu():
    from labkit.measure.modes import measure_modes

    data = measure_modes("test", batch_sizes=(1, 4), dtype="float32", repeats=3, inner=2)
    m = R.parse("modes_test", data)
    assert m.methods == list(lm.MODES)
    n = m.n_layer
    assert m.graphs_per_step == {"eager": 0, "piecewise": n + 1, "full": 1, "attention_only": n}
    assert m.graph_launches_counted == m.graphs_per_step
    assert m.pool_bytes["eager"] is None
    assert all(m.pool_bytes[k] > 0 for k in ("piecewise", "full", "attention_only"))
    assert all(v is True for v in m.checks.values()) and len(m.checks) == 3
    assert m.gpu_ops_per_step and m.gpu_ops_per_step > 0
    assert torch.cuda.is_available()


def test_a_saved_result_feeds_the_helpers_and_charts(tmp_path):
    from labkit.measure.results import load_result, save_result

    res = load_result(save_result("modes_small", record(), {"preset": "small"}, tmp_path))
    assert isinstance(res.record, R.Modes)
    assert lm.mode_rows(res) == lm.mode_rows(record())
    fig = pm.step_time_bars(res)
    assert "4 layers" in fig.layout.title.text


def test_measure_modes_samples_every_mode_in_turn(monkeypatch):
    """The GPU parts stood in for on the CPU: every mode is built before any is timed, each
    batch size is one interleaved timing call over all four modes, and the record says so;
    graph launches are counted only after the timings."""
    from types import SimpleNamespace

    from labkit.measure import bench, modes as mm
    from labkit.model import build_model, preset as make_preset
    from labkit.timing import Stats

    events: list = []

    class Dispatcher:
        def __init__(self, model, sizes, **kw):
            self.model, self.graphs, self.pieces = model, None, None

        def step(self, t, p, s, check=True):
            return self.model.decode_step(t, p, s)

        def release(self):
            events.append("release")

    def interleaved(fns, **kw):
        events.append(("timed", tuple(fns)))
        for fn in fns.values():
            fn()
        return {name: Stats.from_samples([float(i + 1)]) for i, name in enumerate(fns)}

    attention_only = SimpleNamespace(step=lambda t, p, s: None,
                                     pool_id=lambda: (0, 1),
                                     release=lambda: events.append("release"))
    monkeypatch.setattr(mm, "_need_cuda", lambda what: None)
    monkeypatch.setattr(mm, "_free", lambda: None)
    monkeypatch.setattr(mm, "_timed_capture", lambda build: (build(), 0.5))
    monkeypatch.setattr(mm, "make_model", lambda name, max_batch, dtype: build_model(
        make_preset(name, max_batch=max_batch), "cpu", seed=0))
    monkeypatch.setattr(mm, "PaddingDispatcher", Dispatcher)
    monkeypatch.setattr(mm, "capture_attention_only", lambda model, sizes: attention_only)
    monkeypatch.setattr(mm, "pool_reserved_bytes", lambda pool: 1 << 21)
    monkeypatch.setattr(mm, "tokens_match", lambda model, step, b: True)
    monkeypatch.setattr(mm, "count_step_ops", lambda model: 30)
    monkeypatch.setattr(mm, "count_graph_launches",
                        lambda fn: events.append("counted") or 1)
    monkeypatch.setattr(bench, "time_cuda_interleaved", interleaved)
    data = mm.measure_modes("test", batch_sizes=(1, 2), repeats=2, inner=1)
    timed = [e for e in events if isinstance(e, tuple)]
    assert timed == [("timed", mm.MODES)] * 2
    assert events.index("counted") > max(i for i, e in enumerate(events) if isinstance(e, tuple))
    assert events.count("release") == len(mm.MODES)
    assert data["interleaved"] is True
    assert [data["times"][m][0]["median"] for m in mm.MODES] == [1.0, 2.0, 3.0, 4.0]


# ----------------------------------------------------------------------------- mixed batches

def test_attention_launch_of_each_runtime_mode():
    assert lm.attention_launch("FULL", BatchDescriptor(8, 8, True), [1] * 5) == (8, 1)
    assert lm.attention_launch("FULL", BatchDescriptor(16, 4, True), [4] * 3, 4) == (4, 4)
    # 13 tokens padded to 16: 4 requests and 3 padded one-token requests
    assert lm.attention_launch("PIECEWISE", BatchDescriptor(16), [1, 1, 1, 10]) == (7, 10)
    assert lm.attention_launch("NONE", BatchDescriptor(160), [1] * 159 + [1]) == (160, 1)


def test_attention_rows_uniform_batches_share_a_launch_mixed_ones_do_not():
    d = TokenDispatcher([1, 2, 4, 8, 16], 16, "FULL_AND_PIECEWISE")
    rows = lm.attention_rows(d, {"5": [1] * 5, "8": [1] * 8, "a": [1, 15], "b": [1, 1, 1, 10],
                                 "c": [2, 3, 4, 7], "big": [20]})
    got = [(r["runtime mode"], r["num_tokens"], r["num_reqs"], r["attention: requests"],
            r["attention: longest query"]) for r in rows]
    assert got == [("FULL", 8, 8, 8, 1), ("FULL", 8, 8, 8, 1), ("PIECEWISE", 16, None, 2, 15),
                   ("PIECEWISE", 16, None, 7, 10), ("PIECEWISE", 16, None, 4, 7),
                   ("NONE", 20, None, 1, 20)]
    assert [r["uniform"] for r in rows] == [True, True, False, False, False, False]


def test_step_rows():
    checks = {"a": {"runtime mode": "FULL", "descriptor": BatchDescriptor(16, 4, True),
                    "max |logit diff|": 1.5e-7, "greedy tokens equal": True}}
    (row,) = lm.step_rows({"a": ([4, 4, 4], 4)}, checks)
    assert row == {"step": "a", "requests": 3, "tokens": 12, "uniform": True, "num_tokens": 16,
                   "num_reqs": 4, "runtime mode": "FULL", "max |logit diff|": "1.5e-07",
                   "greedy tokens equal": True}


def mixed_record() -> dict:
    """A well-formed mixed record (numbers made up for the test, never shown as results)."""
    return {"preset": "small", "dtype": "bfloat16", "repeats": 5, "inner": 2,
            "batch_sizes": [1, 8],
            "uniform": {"today_replay": [st(90.0), st(95.0)], "today_step": [st(100.0), st(110.0)],
                        "new_replay": [st(90.0), st(96.0)], "new_step": [st(101.0), st(112.0)]},
            "shapes": [[1, 15], [7, 25]], "mixed_tokens": [16, 32],
            "mixed_modes": ["PIECEWISE", "PIECEWISE"],
            "mixed": {"piecewise": [st(400.0), st(420.0)], "eager": [st(900.0), st(950.0)]},
            "token_sizes": [1, 2, 4, 8, 16, 32], "checks": {"uniform_logits_equal.1": True}}


def test_mixed_rows():
    rows = lm.mixed_rows(mixed_record())
    assert [(r["batch"], r["runtime mode"], r["step (µs, median)"]) for r in rows] == [
        ("decode, 1 row", "FULL", 100), ("decode, 1 row", "FULL", 101),
        ("decode, 8 rows", "FULL", 110), ("decode, 8 rows", "FULL", 112),
        ("1 decode row + 15-token chunk", "PIECEWISE", 400),
        ("1 decode row + 15-token chunk", "NONE", 900),
        ("7 decode rows + 25-token chunk", "PIECEWISE", 420),
        ("7 decode rows + 25-token chunk", "NONE", 950)]
    assert rows[4]["tokens"] == 16 and rows[4]["p10–p90 (µs)"] == "360–440"
    assert rows[0]["path"] != rows[1]["path"]
