"""Notebook 14's pure helpers (labkit.teach.tp) and charts (labkit.teach.tp) on
hand-made tp_allreduce / tp_decode records, and the notebook set-up's two-GPU reference folder."""

from __future__ import annotations

import pytest

from labkit.measure.records import TPAllReduce, TPDecode
from labkit.teach import notebook
from labkit.teach import tp as lt
from labkit.teach import tp as tpp


def _st(us: float) -> dict:
    return {"median": us, "p10": us * 0.9, "p90": us * 1.1, "mean": us, "n": 5, "unit": "us"}


def _allreduce() -> TPAllReduce:
    return TPAllReduce.from_data({
        "backend": "nccl", "world_size": 2, "dtype": "bfloat16", "sizes_bytes": [2048, 12288],
        "times": {"pg_eager": [_st(40), _st(50)], "pg_graph": [_st(15), _st(20)],
                  "one_shot_eager": [None, None], "one_shot_graph": [_st(5), _st(6)]},
        "checks": {"sum_exact": True}, "errors": {"one_shot_eager": "RuntimeError: boom | tb"},
        "graph_ops": 20})


def _decode(symm: bool = True) -> TPDecode:
    times = {"tp1_eager": [_st(900), _st(1000), _st(1500)],
             "tp1_graph": [_st(600), _st(700), _st(1400)],
             "tp2_eager": [_st(2000), _st(2100), _st(2200)],
             "tp2_graph": [_st(700), _st(650), _st(900)],
             "tp2_eager_noop": [_st(800), _st(850), _st(1000)],
             "tp2_graph_noop": [_st(340), _st(410), _st(660)],
             "tp2_graph_symm_mem": [_st(500), _st(560), _st(800)] if symm else [None] * 3}
    return TPDecode.from_data({"preset": "gpt2", "dtype": "bfloat16", "world_size": 2,
                               "batch_sizes": [1, 8, 64], "times": times,
                               "checks": {"tp_tokens_equal_tp1": True}})


def test_split_arithmetic():
    assert lt.allreduces_per_step(12) == 24
    assert lt.allreduces_per_step(12, vocab_parallel_embedding=True) == 25
    assert lt.DECODE_BYTES == 8 * 768 * 2
    assert lt.shard_shapes(768, 12, 2) == {"qkv": (1152, 768), "proj": (768, 384),
                                           "fc": (1536, 768), "fc_out": (768, 1536)}
    with pytest.raises(ValueError, match="n_head=12 is not divisible by world_size=5"):
        lt.shard_shapes(768, 12, 5)
    with pytest.raises(ValueError, match="n_layer"):
        lt.allreduces_per_step(0)


def test_rank_weight_share_keeps_the_head_whole():
    # gpt2: head 50257 x 768, layers 12 x 12 x 768^2: a rank of two holds about two-thirds
    share = lt.rank_weight_share(12, 768, 50257, 2)
    head, layers = 50257 * 768, 12 * 12 * 768 ** 2
    assert share == pytest.approx((head + layers / 2) / (head + layers))
    assert 0.6 < share < 0.7
    assert lt.rank_weight_share(12, 768, 50257, 1) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        lt.rank_weight_share(12, 768, 50257, 0)


def test_versus_compares_two_methods_and_never_calls_them_interleaved():
    d = lt.versus(_allreduce(), "pg_graph", "pg_eager", 12288)
    assert (d.a, d.b) == (20, 50) and d.ratio == pytest.approx(0.4)
    assert d.separated and not d.interleaved and d.word == "untested (not interleaved)"
    step = lt.versus(_decode(), "tp2_graph_noop", "tp1_graph", 8)
    assert step.ratio == pytest.approx(410 / 700) and step.runs == 5
    with pytest.raises(ValueError):
        lt.versus(_decode(), "tp2_graph", "tp1_graph", 3)       # no batch 3 recorded


def test_tp_table_crossover_and_split():
    rec = _decode()
    rows = lt.tp_table(rec)
    assert [r["batch"] for r in rows] == [1, 8, 64]
    assert rows[0]["TP=1 / TP=2, graph"] == round(600 / 700, 2)
    assert rows[1]["TP=1 / TP=2, graph"] == round(700 / 650, 2)
    assert rows[0]["TP=2 graph (µs)"] == 700 and rows[0]["TP=2 graph, no-op all-reduce (µs)"] == 340
    assert lt.tp_table(_decode(symm=False))[0]["TP=2 graph, symm_mem all-reduce (µs)"] is None
    assert lt.crossover(rec) == 8
    assert lt.crossover(rec, "graph_symm_mem") == 1
    assert lt.crossover(rec, "eager") is None
    split = lt.comm_split(rec)
    assert split[0] == {"batch": 1, "step_us": 700, "compute_us": 340, "comm_us": 360,
                        "comm_share": pytest.approx(360 / 700)}
    assert lt.decode_label("tp2_graph_noop") == "TP=2 graph, no-op all-reduce"
    assert lt.decode_label("tp1_eager") == "TP=1 eager"


def test_charts_build_from_the_records():
    ar = tpp.allreduce_chart(_allreduce(), subtitle="H200 x2")
    assert [t.name for t in ar.data] == ["NCCL, eager", "NCCL, in a CUDA graph",
                                         "symm_mem one-shot, graph"]
    assert ar.layout.xaxis.type == "log" and "2 ranks" in ar.layout.title.text
    step = tpp.tp_step_chart(_decode(symm=False))
    assert [t.name for t in step.data] == ["TP=1 eager", "TP=1 graph", "TP=2 eager",
                                           "TP=2 graph"]
    split = tpp.comm_split_chart(_decode())
    assert list(split.data[1].y) == [360, 240, 240]
    assert split.layout.barmode == "stack"


def test_two_gpu_notebooks_read_the_two_gpu_reference_folder():
    assert notebook.reference_folder(1) == "h200" and notebook.reference_folder(2) == "h200x2"
    with pytest.raises(ValueError, match="gpus must be a positive int"):
        notebook.reference_folder(0)
    ctx = notebook.NotebookContext("14_x", "gpu", "h200x2", gpus_needed=2, gpus_here=1)
    assert not ctx.live and ctx.too_few_gpus
    assert "measures on 2 GPUs and this machine has 1" in notebook.banner_html(ctx, "H200")
    assert notebook.NotebookContext("x", "gpu", "h200", gpus_here=1).live
    cpu = notebook.NotebookContext("14_x", "cpu", "h200x2", gpus_needed=2)
    assert not cpu.live and not cpu.too_few_gpus
    got = notebook.measure_many_or_reference(cpu, ["tp_allreduce_missing_x"], lambda: {})
    assert got == {"tp_allreduce_missing_x": None}


def test_two_gpu_records_are_filed_and_labelled_as_two_gpus():
    from labkit.measure.results import Result, _measured_on, gpus_used, provenance_line

    env = {"tier": "gpu", "gpu_name": "NVIDIA H200", "torch": "2.11.0"}
    two = {"backend": "nccl", "world_size": 2}
    assert gpus_used(two) == 2 and gpus_used({"backend": "gloo", "world_size": 2}) == 1
    assert gpus_used({"preset": "gpt2"}) == 1 and gpus_used([]) == 1
    assert _measured_on(env, two) == "h200x2" and _measured_on(env, {}) == "h200"
    assert _measured_on({"tier": "cpu"}, two) == "cpu"
    res = Result("tp_allreduce", two, {}, env, 1, "2026-11-30")
    assert provenance_line(res).startswith("measured on 2 x NVIDIA H200")


def test_the_tp_key_charts_read_the_two_gpu_folder_and_build():
    from dataclasses import asdict

    from labkit.measure.results import Result
    from labkit.suite import images

    charts = {c.stem: c for c in images.key_charts() if c.stem.startswith("14_")}
    assert sorted(charts) == ["14_tp_allreduce", "14_tp_comm_gpt2", "14_tp_decode_gpt2"]
    assert {c.gpus for c in charts.values()} == {2}
    env = {"tier": "gpu", "gpu_name": "NVIDIA H200"}
    ar = Result("tp_allreduce", _raw(_allreduce()), {}, env, 1, "2026-11-30")
    fig = charts["14_tp_allreduce"].build(ar)
    assert "measured on 2 x NVIDIA H200" in fig.layout.title.text
    dec = Result("tp_decode_gpt2", _raw(_decode()), {}, env, 1, "2026-11-30")
    assert charts["14_tp_comm_gpt2"].build(dec).layout.barmode == "stack"
    assert asdict(charts["14_tp_decode_gpt2"])["record"] == "tp_decode_gpt2"


def _raw(rec) -> dict:
    """A typed tp record back as the ``data`` dict of a result (nccl, two ranks)."""
    out = {"backend": "nccl", "world_size": rec.world_size, "checks": rec.checks,
           "times": {m: [None if s is None else s.to_dict() for s in col]
                     for m, col in rec.times.items()}}
    if isinstance(rec, TPAllReduce):
        out.update(sizes_bytes=rec.sizes_bytes, dtype=rec.dtype)
    else:
        out.update(preset=rec.preset, dtype=rec.dtype, batch_sizes=rec.batch_sizes)
    return out
