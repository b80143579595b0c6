"""`labkit tp` end to end on two gloo ranks (the records, their checks, skipped GPU parts and
per-rank shutdown times), the launcher's shutdown report and bounded shutdown, and the tp
record kinds."""

from __future__ import annotations

import gc
import multiprocessing
import time

import pytest
import torch
import torch.distributed as dist

from labkit.distributed.launch import RankTimeout, release_graphs, run_ranks, shutdown
from labkit.measure.records import SchemaError, TPAllReduce, TPDecode, parse
from labkit.measure.results import gpus_used, load_result
from labkit.measure.tp import TARGET_ALLREDUCE_BYTES, decode_methods, default_spec
from labkit.suite.cli import main
from labkit.suite.tp_cli import EXIT_OK, run_tp


@pytest.fixture(scope="module")
def tp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tp")
    code, run = run_tp(out_root=out, backend="gloo", world_size=2)
    assert multiprocessing.active_children() == []
    return code, run


def test_cpu_run_saves_both_records_with_provenance(tp_run):
    code, run = tp_run
    assert code == EXIT_OK
    ar = load_result(run / "results" / "tp_allreduce.json")
    dec = load_result(run / "results" / "tp_decode_test.json")
    for res in (ar, dec):
        assert res.env["torch"] and res.params["backend"] == "gloo"
        assert res.params["world_size"] == 2
    assert (run / "tp_summary.txt").read_text().startswith("all-reduce, 2 ranks (gloo")


def test_cpu_allreduce_record_times_eager_and_names_what_it_skipped(tp_run):
    _, run = tp_run
    a = load_result(run / "results" / "tp_allreduce.json").record
    assert isinstance(a, TPAllReduce)
    spec = default_spec(cpu=True)
    assert a.sizes_bytes == spec["sizes_bytes"] and a.world_size == 2
    assert all(t is not None and t > 0 for t in a.median_us("pg_eager"))
    assert a.median_us("pg_graph") == [None, None]
    assert a.checks["sum_exact.pg_eager"] is True and a.checks["sum_exact"] is True
    assert "CUDA graphs need CUDA" in a.skipped["pg_graph"]
    assert "symmetric memory needs CUDA and NCCL" in a.skipped["one_shot_eager"]
    assert a.errors == {}
    assert a.at("pg_eager", 2048) == a.median_us("pg_eager")[0]
    assert a.at("pg_eager", 999) is None
    assert len(a.rank_medians["pg_eager"]) == 2 and len(a.rank_medians["pg_eager"][0]) == 2


def test_cpu_decode_record_checks_tokens_and_times_every_eager_method(tp_run):
    _, run = tp_run
    d = load_result(run / "results" / "tp_decode_test.json").record
    assert isinstance(d, TPDecode)
    assert d.methods == decode_methods(2) and d.batch_sizes == [1, 4]
    for m in ("tp1_eager", "tp2_eager", "tp2_eager_noop"):
        assert all(t is not None and t > 0 for t in d.median_us(m)), m
    for m in ("tp1_graph", "tp2_graph", "tp2_graph_noop", "tp2_graph_symm_mem"):
        assert d.median_us(m) == [None, None] and m in d.skipped
    assert d.checks["tp_tokens_equal_tp1"] is True
    assert d.checks["tp_tokens_equal_tp1.pg.eager"] is True
    assert d.checks["tp_tokens_equal_tp1.pg.dispatcher_eager"] is True
    assert d.checks["ranks_in_lockstep.pg.dispatcher_eager"] is True
    assert d.checks["token_agreement.pg.eager"] == 1.0
    assert d.errors == {}
    # both records say which backend ran them: an NCCL pair is filed under <gpu>x2
    raw = load_result(run / "results" / "tp_decode_test.json").data
    assert raw["backend"] == "gloo" and gpus_used(raw) == 1
    assert gpus_used({**raw, "backend": "nccl"}) == 2
    assert d.comm_us(1, graph=False) == pytest.approx(d.at("tp2_eager", 1)
                                                      - d.at("tp2_eager_noop", 1))
    assert d.comm_us(1) is None  # no graph on CPU
    ranks = d.shutdown["pg"]
    assert sorted(ranks) == ["0", "1"]
    for r in ranks.values():
        assert r["total_s"] >= r["destroy_s"] >= 0 and r["graphs_reset"] == 0


def test_tp_decode_record_names_a_missing_field():
    with pytest.raises(SchemaError, match=r"field 'data.world_size' is missing.*TPDecode"):
        parse("tp_decode_gpt2", {"preset": "gpt2", "batch_sizes": [1], "times": {}})
    with pytest.raises(SchemaError, match=r"data.times.pg_eager.*one entry per batch size"):
        parse("tp_allreduce", {"backend": "nccl", "world_size": 2, "sizes_bytes": [2048, 4096],
                               "times": {"pg_eager": [None]}})


def test_cli_refuses_too_few_gpus_and_bad_world_size(capsys, tmp_path):
    out = tmp_path / "runs"
    if not (torch.cuda.is_available() and torch.cuda.device_count() >= 64):
        assert main(["tp", "--backend", "nccl", "--world-size", "64", "--out", str(out)]) == 2
        assert "need 64 CUDA devices" in capsys.readouterr().err
    assert main(["tp", "--backend", "gloo", "--world-size", "1", "--out", str(out)]) == 2
    assert "tensor parallelism needs 2 or more ranks" in capsys.readouterr().err
    assert not out.exists()  # checked before the run folder is made


def _ok(rank: int, world_size: int) -> int:
    return rank * 10


def test_run_ranks_reports_each_ranks_shutdown():
    info: dict = {}
    assert run_ranks(_ok, 2, backend="gloo", timeout_s=60, info=info) == [0, 10]
    assert sorted(info["shutdown"]) == [0, 1] and info["shutdown_hung"] == []
    for steps in info["shutdown"].values():
        assert {"release_graphs_s", "barrier_s", "destroy_s", "total_s"} <= set(steps)
    with pytest.raises(TypeError, match="info must be a dict"):
        run_ranks(_ok, 2, backend="gloo", info=[])
    with pytest.raises(ValueError, match="shutdown_timeout_s must be a positive"):
        run_ranks(_ok, 2, backend="gloo", shutdown_timeout_s=0)


def _slow_shutdown(rank: int, world_size: int) -> int:
    """Rank 1 stalls in shutdown: its first gc.collect() (release_graphs) sleeps."""
    if rank == 1:
        gc.disable()  # only release_graphs' explicit gc.collect() runs the callback
        gc.callbacks.append(lambda phase, info: time.sleep(60) if phase == "start" else None)
    return rank


def test_a_rank_hung_in_shutdown_keeps_the_results_when_asked():
    info: dict = {}
    t0 = time.monotonic()
    res = run_ranks(_slow_shutdown, 2, backend="gloo", timeout_s=60, shutdown_timeout_s=2,
                    info=info)
    assert res == [0, 1]
    assert 1 in info["shutdown_hung"]
    assert time.monotonic() - t0 < 50
    assert multiprocessing.active_children() == []
    with pytest.raises(RankTimeout, match="rank 1 in shutdown"):
        run_ranks(_slow_shutdown, 2, backend="gloo", timeout_s=3)
    assert multiprocessing.active_children() == []


def test_shutdown_in_one_process_times_each_step():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    steps = shutdown("gloo")
    assert not dist.is_initialized()
    assert steps["graphs_reset"] == 0 and steps["total_s"] >= steps["destroy_s"]
    assert shutdown("gloo")["graphs_reset"] == 0  # no group: only the release step
    if not torch.cuda.is_available():
        assert release_graphs() == 0  # no CUDA here: nothing to reset


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs 2 CUDA devices")
def test_two_gpus_measure_everything_with_collectives_in_the_graphs(tmp_path):
    from labkit.measure.tp import measure_tp

    spec = {**default_spec(quick=True), "preset": "small", "batch_sizes": [1, 8],
            "sizes_bytes": [2048, 12288], "repeats": 3}
    ar, dec = measure_tp(world_size=2, backend="nccl", spec=spec, scratch=tmp_path)
    a, d = TPAllReduce.from_data(ar), TPDecode.from_data(dec)
    assert a.checks["sum_exact.pg_eager"] and a.checks["sum_exact.pg_graph"]
    assert all(t is not None for t in a.median_us("pg_graph"))
    assert d.checks["tp_tokens_equal_tp1.pg.eager"] and d.checks["tp_tokens_equal_tp1.pg.graph"]
    assert d.checks["ranks_in_lockstep.pg.graph"] and d.checks["dispatcher_replayed_graphs.pg"]
    for m in ("tp1_graph", "tp2_graph", "tp2_graph_noop"):
        assert all(t is not None for t in d.median_us(m)), (m, d.errors)
    assert d.comm_us(1) is not None
    assert not any(k.startswith(("tp2_graph.", "pg_graph", "launch.pg")) for k in d.errors)
    if "launch.symm_mem" not in d.errors and "symm_mem.model" not in d.errors:
        assert d.checks["tp_tokens_equal_tp1.symm_mem.graph"]
    for label in d.shutdown:
        assert sorted(d.shutdown[label]) == ["0", "1"]
    assert multiprocessing.active_children() == []


# ------------------------------------------------------------------ symmetric-memory code paths
# The CUDA kernels cannot run here; these tests run every line of labkit's symmetric-memory
# paths on one gloo rank with the symm_mem allocation and kernels replaced by one-rank fakes
# (the sum over one rank is the input), so a Python error in them shows up on CPU.


@pytest.fixture()
def one_gloo_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture()
def fake_symm_mem(monkeypatch, one_gloo_rank):
    import importlib

    import labkit.measure.tp.allreduce as mtp  # the module whose _symm_buffer asks
    import labkit.distributed.tp as ltp

    sm = importlib.import_module("torch.distributed._symmetric_memory")
    calls: dict[str, int] = {"one_shot": 0, "two_shot": 0, "rendezvous": 0}

    def one_shot(buf, op, group, out):
        assert op == "sum" and isinstance(group, str) and buf.numel() == out.numel()
        calls["one_shot"] += 1
        return out.copy_(buf.view(out.shape))

    def two_shot(buf, op, group):
        calls["two_shot"] += 1
        return buf

    def rendezvous(t, group):
        calls["rendezvous"] += 1
        return object()

    for mod in (ltp, mtp):
        monkeypatch.setattr(mod, "symm_mem_unavailable", lambda device: None)
    monkeypatch.setattr(sm, "empty", lambda n, dtype=None, device=None:
                        torch.zeros(n, dtype=dtype, device=device))
    monkeypatch.setattr(sm, "rendezvous", rendezvous)
    monkeypatch.setattr(sm, "enable_symm_mem_for_group", lambda name: None, raising=False)
    monkeypatch.setattr(torch.ops.symm_mem, "one_shot_all_reduce_out", one_shot)
    monkeypatch.setattr(torch.ops.symm_mem, "two_shot_all_reduce_", two_shot)
    return calls


def test_symm_mem_unavailable_names_the_reason_for_a_cuda_device_on_cpu():
    from labkit.distributed.tp import symm_mem_unavailable

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert symm_mem_unavailable(torch.device("cuda", 0)).startswith("it needs CUDA tensors")
    assert symm_mem_unavailable(torch.device("cpu")).startswith("it needs CUDA tensors")


def test_symm_mem_allreduce_copies_in_and_out(fake_symm_mem):
    from labkit.distributed.tp import SymmMemAllReduce

    ar = SymmMemAllReduce(None, 16, torch.float32, torch.device("cpu"))
    assert fake_symm_mem["rendezvous"] == 1 and ar.buffer.numel() == 16
    x = torch.arange(8, dtype=torch.float32).view(2, 1, 4)
    assert ar(x) is x and torch.equal(x, torch.arange(8.0).view(2, 1, 4))
    assert fake_symm_mem["one_shot"] == 1
    big = torch.ones(2, 1, 16)  # larger than the buffer: the process-group fallback
    assert torch.equal(ar(big), torch.ones(2, 1, 16)) and fake_symm_mem["one_shot"] == 1


def test_the_symm_mem_parts_run_end_to_end_on_one_rank(fake_symm_mem):
    from labkit.measure.tp import _PARTS, _Rank

    spec = {**default_spec(cpu=True), "sizes_bytes": [256, 1024]}
    r = _Rank(0, 1, spec)
    for part in ("check_symm", "allreduce_symm", "decode_symm"):
        _PARTS[part](r)
    out = r.out
    assert dict(out["errors"]) == {}
    assert out["checks"]["tp_tokens_equal_tp1.symm_mem.eager"] is True
    assert out["checks"]["tp_tokens_equal_tp1.symm_mem.dispatcher_eager"] is True
    assert out["checks"]["sum_exact.one_shot_eager"] is True
    assert out["checks"]["sum_exact.two_shot_eager"] is True
    assert all(s is not None for s in out["times"]["one_shot_eager"])
    assert all(s is not None for s in out["times"]["two_shot_eager"])
    assert "tp1_graph_symm_mem" in out["skipped"] and "one_shot_graph" in out["skipped"]
    assert fake_symm_mem["one_shot"] > 0 and fake_symm_mem["two_shot"] > 0


def test_quick_and_full_sweeps_both_measure_the_12kb_message_the_lessons_quote():
    # notebook 14's live tier is quick; its statements read the 12 KB message
    from labkit.teach.tp import DECODE_BYTES

    assert DECODE_BYTES == TARGET_ALLREDUCE_BYTES == 8 * 768 * 2
    quick, full = default_spec(quick=True)["sizes_bytes"], default_spec()["sizes_bytes"]
    assert TARGET_ALLREDUCE_BYTES in quick and TARGET_ALLREDUCE_BYTES in full
    assert quick == sorted(set(quick)) and len(quick) < len(full)

