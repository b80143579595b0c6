"""Notebook 11's helpers: synthetic request lengths, paged-cache arithmetic, the
``paged_<preset>`` record kind, its charts and its measurement (GPU only)."""

from __future__ import annotations

import copy
import inspect
import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

from labkit.kvcache import PAD_BLOCK, PagedKVCache
from labkit.measure import records as R
from labkit.measure.paged import LAYOUTS, measure_paged
from labkit.teach import paged as lp
from labkit.teach import paged as pp
from labkit.serving.traces import Request, request_lengths

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- traces


def test_request_lengths_are_seeded_and_pinned():
    a = request_lengths(50, seed=3, max_seq=512)
    assert a == request_lengths(50, seed=3, max_seq=512)
    assert a != request_lengths(50, seed=4, max_seq=512)
    assert request_lengths(3, seed=0, max_seq=1024) == [Request(280, 49), Request(65, 202),
                                                        Request(48, 142)]
    assert Request(280, 49).length == 329


def test_request_lengths_fit_max_seq():
    reqs = request_lengths(2000, seed=1, max_seq=64, prompt_median=60, output_median=60)
    assert all(r.prompt >= 1 and r.output >= 1 and r.length <= 64 for r in reqs)
    assert max(r.length for r in reqs) == 64      # the clip is reached on this heavy tail


@pytest.mark.parametrize("kwargs, match", [({"n": 0}, "n must be >= 1"),
                                           ({"max_seq": 1}, "max_seq must be >= 2"),
                                           ({"prompt_median": 0}, "prompt_median"),
                                           ({"output_sigma": float("nan")}, "output_sigma")])
def test_request_lengths_refuse_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        request_lengths(**kwargs)


# ----------------------------------------------------------------------------- arithmetic


def test_bytes_per_position():
    assert lp.bytes_per_position(12, 12, 64, "bfloat16") == 36864
    assert lp.bytes_per_position(2, 2, 16, "float32") == 2 * 2 * 2 * 16 * 4
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        lp.bytes_per_position(1, 1, 1, "int8")
    with pytest.raises(ValueError, match="n_layer must be >= 1"):
        lp.bytes_per_position(0, 1, 1)


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(0, 32), min_size=1, max_size=4),
       block_size=st.sampled_from([1, 2, 4, 8, 16, 32]), data=st.data())
def test_the_slot_mapping_formula_of_notebook_11_matches_the_cache(lengths, block_size, data):
    cache = PagedKVCache(layers=1, max_batch=4, max_seq=32, heads=1, head_dim=2,
                         block_size=block_size)
    for slot, n in enumerate(lengths):
        cache.reserve(slot, n)
    slot = data.draw(st.integers(0, len(lengths) - 1))
    pos = data.draw(st.integers(0, 31))
    got = int(cache.write_index(torch.tensor([pos]), torch.tensor([slot])))
    row = cache.host_table[slot].tolist()
    assert got == row[pos // block_size] * block_size + pos % block_size
    if pos >= -(-lengths[slot] // block_size) * block_size:     # not reserved: the pad block
        assert got // block_size == PAD_BLOCK


def test_cache_memory_values():
    m = lp.cache_memory([1, 16, 17], max_seq=32, block_size=16, bytes_per_pos=2)
    assert m == {"requests": 3, "blocks": 4, "slot_bytes": 192, "paged_bytes": 128,
                 "used_bytes": 68, "paged_waste_bytes": 60, "saving": 1.5}
    assert lp.cache_memory([0, 1, 16, 17, 32, 33], max_seq=64, block_size=16,
                           bytes_per_pos=1)["blocks"] == 0 + 1 + 1 + 2 + 2 + 3
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        lp.cache_memory([3], max_seq=32, block_size=0, bytes_per_pos=2)
    with pytest.raises(ValueError, match="longer than max_seq=32"):
        lp.cache_memory([40], max_seq=32, block_size=16, bytes_per_pos=2)


def test_block_size_tradeoff():
    rows = lp.block_size_tradeoff([1, 16, 17], [1, 16, 32], max_seq=32, bytes_per_pos=1)
    assert [r["block_size"] for r in rows] == [1, 16, 32]
    assert [r["blocks"] for r in rows] == [34, 4, 3]
    assert [r["waste_bytes"] for r in rows] == [0, 30, 62]
    assert [r["table_entries_per_request"] for r in rows] == [32, 2, 1]
    assert rows[1]["waste_share"] == pytest.approx(30 / 64)


# ----------------------------------------------------------------------------- the record


def _stats(us: float) -> dict:
    return {"median": us, "p10": us * 0.95, "p90": us * 1.05, "mean": us, "n": 30,
            "unit": "us"}


def _record() -> dict:
    def run(max_seq, scale):
        return {"max_seq": max_seq,
                "times": {"slot_in_place": [_stats(100 * scale), _stats(200 * scale)],
                          "slot_gather": [_stats(150 * scale), _stats(400 * scale)],
                          "paged": [_stats(160 * scale), _stats(420 * scale)]},
                "cache_bytes": {"slot": 1000 * max_seq, "paged_pool": 1001 * max_seq,
                                "per_block": 16}}

    return {"preset": "gpt2", "dtype": "bfloat16", "block_size": 16, "batch_sizes": [1, 64],
            "max_seqs": [256, 1024], "runs": [run(256, 1), run(1024, 2)],
            "checks": {"paged_tokens_equal_slot_gather": True, "graph_tokens_equal_eager": True,
                       "paged_token_agreement_slot_in_place.256": 0.98}}


def test_paged_kind_is_registered_and_parses():
    assert R.kind_of("paged_gpt2") is R.Paged and R.kind_of("paged_small") is R.Paged
    assert R.kind_of("paged") is None
    rec = R.parse("paged_gpt2", _record())
    assert isinstance(rec, R.Paged)
    assert rec.max_seqs == [256, 1024] and rec.block_size == 16
    short, long = rec.runs
    assert long.at("paged", 64) == 840
    assert short.median_us("slot_gather") == [150, 400]
    assert short.cache_bytes["slot"] == 256000


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["runs"][0]["times"].pop("paged"), "data.runs[0].times.paged"),
    (lambda d: d["runs"][1]["times"]["slot_gather"].pop(), "data.runs[1].times.slot_gather"),
    (lambda d: d.pop("block_size"), "data.block_size"),
    (lambda d: d["runs"][0]["cache_bytes"].update(slot=1.5), "data.runs[0].cache_bytes.slot"),
    (lambda d: d.update(runs=[]), "data.runs"),
])
def test_paged_record_names_the_bad_field(edit, field):
    d = copy.deepcopy(_record())
    edit(d)
    with pytest.raises(R.SchemaError) as info:
        R.parse("paged_gpt2", d)
    assert f"field '{field}'" in str(info.value)


def test_paged_rows():
    rows = lp.paged_rows(_record())
    assert [(r["max_seq"], r["batch"]) for r in rows] == [(256, 1), (256, 64), (1024, 1),
                                                         (1024, 64)]
    assert rows[0]["paged_over_in_place"] == pytest.approx(1.6)
    assert rows[3]["paged_over_gather"] == pytest.approx(840 / 800)
    assert rows[3]["paged_us"] == 840 and rows[3]["slot_in_place_us"] == 400


def test_paged_defaults_fit_measure_paged_and_the_notebooks():
    params = R.default_params("paged_gpt2")
    inspect.signature(measure_paged).bind(**R.measure_kwargs(params))
    assert set(LAYOUTS) == set(R.PAGED_LAYOUTS)
    for path in (ROOT / "notebooks" / "11_paged_kv.ipynb",
                 ROOT / "notebooks" / "solutions" / "11_paged_kv.ipynb"):
        nb = json.loads(path.read_text())
        cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
        values: dict = {}
        exec("".join(cell["source"]), {}, values)
        assert values["preset_name"] == params["preset"]
        for key in ("batch_sizes", "max_seqs", "block_size", "repeats"):
            assert values[key] == params[key], (path.name, key)


# ----------------------------------------------------------------------------- charts


def test_speed_chart_builds():
    fig = pp.speed_chart(_record(), subtitle="x")
    assert len(fig.data) == 6                     # 3 layouts x 2 max_seqs
    assert list(fig.data[2].y) == [160, 420]
    assert "block size 16" in fig.layout.title.text


# ----------------------------------------------------------------------------- measurement


@pytest.mark.parametrize("kwargs, match", [({"max_seqs": [100]}, "not multiples of block_size"),
                                           ({"batch_sizes": [0]}, "batch_sizes"),
                                           ({"block_size": 0}, "block_size"),
                                           ({"new_tokens": 0}, "new_tokens")])
def test_measure_paged_refuses_bad_input_before_anything(kwargs, match):
    with pytest.raises(ValueError, match=match):
        measure_paged("test", **kwargs)


@pytest.mark.gpu
def test_measure_paged_on_the_gpu():
    data = measure_paged("small", batch_sizes=(1, 4), max_seqs=(64, 128), block_size=16,
                         repeats=3, inner=2, new_tokens=4)
    rec = R.parse("paged_small", data)
    assert rec.max_seqs == [64, 128] and rec.batch_sizes == [1, 4]
    assert all(set(r.times) == set(LAYOUTS) for r in rec.runs)
    assert rec.checks["paged_tokens_equal_slot_gather"] is True
    assert rec.checks["graph_tokens_equal_eager"] is True
    short, long = rec.runs
    assert long.cache_bytes["slot"] == 2 * short.cache_bytes["slot"]


def test_measure_paged_samples_the_three_layouts_in_turn(monkeypatch):
    """The GPU parts stood in for on the CPU: at each max_seq and batch size the three layouts
    are one interleaved timing call, paged rows hold their blocks while timed and give them
    back, and the record says it was interleaved."""
    from types import SimpleNamespace

    import labkit.measure.paged as mp
    from labkit.model import build_model, preset as make_preset
    from labkit.timing import Stats

    calls: list = []

    class Dispatcher:
        def __init__(self, model, sizes, **kw):
            self.model = model
            self.graphs = SimpleNamespace(replay=lambda b: None)

        def step(self, t, p, s, check=True):
            return self.model.decode_step(t, p, s)

        def load_inputs(self, t, p, s):
            if self.model.cache.layout == "paged":  # the timed rows own room for their position
                assert all(self.model.cache.capacity(x) > y for x, y in zip(s.tolist(), p.tolist()))

        def release(self):
            pass

    def interleaved(fns, **kw):
        calls.append(tuple(fns))
        for fn in fns.values():
            fn()
        return {name: Stats.from_samples([float(i + 1)]) for i, name in enumerate(fns)}

    def build(name, layout, *, max_batch, max_seq, block_size, dtype):
        return build_model(make_preset(name, max_batch=max_batch, max_seq=max_seq,
                                       kv_layout=layout, block_size=block_size), "cpu", seed=0)

    monkeypatch.setattr(mp, "_need_cuda", lambda what: None)
    monkeypatch.setattr(mp, "_free", lambda: None)
    monkeypatch.setattr(mp, "_build", build)
    monkeypatch.setattr(mp, "PaddingDispatcher", Dispatcher)
    monkeypatch.setattr(mp, "tokens_match", lambda model, step, b: True)
    monkeypatch.setattr(mp, "time_cuda_interleaved", interleaved)
    monkeypatch.setattr(mp.torch.cuda, "get_device_name", lambda *a: "stand-in")
    data = measure_paged("test", batch_sizes=(1, 2), max_seqs=(32,), block_size=8, repeats=2,
                         inner=1, new_tokens=2)
    assert calls == [("slot_in_place", "slot_gather", "paged")] * 2
    assert data["interleaved"] is True
    assert data["runs"][0]["times"]["paged"][0]["median"] == 3.0
