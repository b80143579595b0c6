"""Notebook 17's topic code (labkit.teach.past_launch) and exercise checks: the barrier
simulator shows each bug it models and none with labkit's barrier, the rows and verdicts of a
past_launch record, the graders; and the notebook run on a stand-in record."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from labkit.teach import past_launch as lp
from labkit.teach.answers import n17
from labkit.teach.answers.registry import run
from labkit.teach.exercises import STRICT_ENV, StrictExerciseError
from nbrun import run_on_references

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- the simulator


def test_labkit_barrier_is_right_in_every_order_and_over_launches():
    for seed in range(10):
        r = lp.simulate(4, launches=3, seed=seed)
        assert r.status == "ok" and r.x == r.expected == lp.reference_layers([1, 2, 3, 4], 3)
        assert not r.stale_reads and not r.early_reads
        assert r.counter == 3 * lp.BARRIERS * 4  # every launch adds 4 P, nothing resets it


def test_a_single_program_needs_no_other_to_arrive():
    r = lp.simulate(1, launches=2)
    assert r.ok and r.counter == 2 * lp.BARRIERS


def test_a_missing_acquire_reads_the_residual_from_stage_1s_l1_copies():
    bug = lp.simulate(4, launches=1, wait=lp.wait_no_acquire, seed=0)
    assert bug.status == "wrong" and bug.x != bug.expected
    # every stale read is of the residual x, of another program's tile, older than L2
    assert bug.stale_reads and all(name.startswith("x") and int(name[1:]) != pid and got != l2
                                   for _, pid, name, got, l2 in bug.stale_reads)
    assert lp.seeds_status(range(10), programs=4, launches=1, wait=lp.wait_no_acquire) == \
        {"wrong": 10}


def test_a_counter_reused_without_a_base_passes_later_barriers_early():
    once = lp.simulate(4, launches=1, targets=lp.targets_without_base, seed=0)
    assert once.ok  # right the first time: the counter starts at 0
    again = lp.simulate(4, launches=3, targets=lp.targets_without_base, seed=0)
    assert again.status == "wrong" and again.early_reads and not again.stale_reads
    assert all(launch >= 1 for launch, *_ in again.early_reads)
    assert lp.seeds_status(range(10), programs=4, launches=2,
                           targets=lp.targets_without_base) == {"wrong": 10}


def test_a_plain_load_spin_hangs_and_is_reported_not_hung():
    r = lp.simulate(4, launches=2, wait=lp.wait_plain_load, seed=0, max_ops=50_000)
    assert r.status == "deadlock" and r.stuck["spinning"] and r.ops <= 50_001


def test_an_oversubscribed_grid_deadlocks_and_a_cooperative_launch_is_refused():
    r = lp.simulate(6, launches=1, resident=4, seed=3)
    assert r.status == "deadlock"
    assert r.stuck == {"launch": 0, "spinning": [0, 1, 2, 3], "never_resident": [4, 5]}
    assert r.counter == 4  # the four resident programs arrived at the first barrier
    with pytest.raises(lp.LaunchRefused, match=r"6 programs.*at most 4"):
        lp.simulate(6, launches=1, resident=4, cooperative=True)
    assert lp.simulate(4, launches=2, resident=4, cooperative=True).ok
    # fewer resident slots but no barrier to wait at would be fine; with barriers it is not
    assert lp.seeds_status(range(5), programs=6, launches=1, resident=4, cooperative=True) == \
        {"refused": 5}


def test_barrier_targets_start_at_this_launchs_base():
    assert lp.barrier_targets(0, 4) == (0, [4, 8, 12, 16])
    assert lp.barrier_targets(19, 4) == (16, [20, 24, 28, 32])
    assert lp.barrier_targets(7, 3, 2) == (6, [9, 12])
    assert lp.targets_without_base(19, 4) == (0, [4, 8, 12, 16])


def test_simulate_checks_its_arguments_and_refuses_a_foreign_op():
    with pytest.raises(ValueError, match="programs"):
        lp.simulate(0)
    with pytest.raises(ValueError, match="resident"):
        lp.simulate(2, resident=0)

    def odd(p, target):
        yield lp.Op("teleport")

    with pytest.raises(ValueError, match="teleport"):
        lp.simulate(2, launches=1, wait=odd)


# ---------------------------------------------------------------------------- a stand-in record


def _stats(median: float, spread: float = 1.0, n: int = 30) -> dict:
    return {"median": median, "p10": median - spread, "p90": median + spread,
            "mean": median, "n": n, "unit": "us"}


def fake_data(preset: str = "gpt2", n_layer: int = 12, *, pdl: float = 270.0,
              passes: bool = True) -> dict:
    """A past_launch record's data as measure_past_launch returns it (made-up numbers)."""
    sizes = [1, 8, 64]
    times = {"triton": [_stats(288.0), _stats(450.0), _stats(865.0)],
             "triton_pdl": [_stats(pdl), _stats(440.0), _stats(864.5)],
             "triton_persistent": [_stats(250.0), _stats(430.0), _stats(900.0)],
             "triton_persistent@1": [_stats(250.0), _stats(430.0), _stats(900.0)]}
    fid = {name: {"agreement": 1.0, "kl": {"mean": 1e-4, "max": 1e-3},
                  "float32_tokens_equal": True, "passes": True}
           for name in ("readable", "fused", "triton", "triton_pdl", "triton_persistent")}
    fid["triton_pdl"]["passes"] = passes
    return {"preset": preset, "dtype": "bfloat16", "config": {"n_layer": n_layer},
            "context": 128, "batch_sizes": sizes, "steps": list(lp.WAYS),
            "timed": list(lp.WAYS), "interleaved": True, "repeats": 30, "inner": 10,
            "times": times, "kernel_us": {"triton": [280.0, 440.0, 850.0]},
            "floor_us": [60.0, 68.0, 132.0], "sm_count": 132, "programs_per_sm": [1, 2],
            "cooperative": True, "cooperative_error": None,
            "refused": {"triton_persistent@2": "RuntimeError: too many blocks"},
            "kernels": {"triton": [5 * n_layer + 1] * 3, "triton_pdl": [5 * n_layer + 1] * 3,
                        "triton_persistent": [n_layer + 1] * 3},
            "fidelity": fid}


def test_rows_and_verdicts_of_a_record():
    d = fake_data()
    rows = lp.ways_rows(d)
    assert [r["batch"] for r in rows] == [1, 8, 64]
    assert rows[0]["PDL vs kernels"] == "faster" and rows[1]["PDL vs kernels"] == "faster"
    assert rows[2]["PDL vs kernels"] == "no faster or slower"
    assert rows[2]["persistent vs kernels"] == "slower"
    assert rows[0]["launches (persistent)"] == 13 and rows[0]["launches (kernels)"] == 61
    assert lp.pdl_gain(d) == pytest.approx(288 / 270)
    assert lp.launches_match(d) and lp.gate_passes(d)
    assert lp.median_us(d, "triton_pdl", 8) == 440.0 and lp.floor_at(d, 64) == 132.0
    v = lp.variant_rows(d)
    assert v[0]["programs"] == 132 and v[1]["refused"].startswith("RuntimeError")
    assert v[1]["batch 1 µs"] is None
    gate = lp.gate_rows(d)
    assert gate[0]["KL limit"] == pytest.approx(2e-4 + 1e-6, rel=1e-2)
    assert lp.cooperative_notes(d)[0] == "cooperative launch on" and len(lp.cooperative_notes(d)) == 2
    fig = lp.ways_chart(d, subtitle="")
    assert len(fig.data) == 4 and fig.data[-1].y == (60.0, 68.0, 132.0)


def test_a_verdict_agrees_with_the_spreads_only():
    d = fake_data()
    assert lp.spread_agrees(lp.compare(d, "triton_pdl", 1))          # 269-271 vs 287-289
    assert lp.spread_agrees(lp.compare(d, "triton_pdl", 64))         # overlap: no verdict
    one = fake_data()
    one["times"]["triton_pdl"][0]["n"] = 1
    assert lp.verdict_word(lp.compare(one, "triton_pdl", 1)) == "untested (1 run)"
    assert not lp.spread_agrees(lp.compare(one, "triton_pdl", 1))
    assert lp.compare(d, "absent", 1) is None and lp.verdict_word(None) == "not timed"


def test_a_failed_gate_and_a_wrong_launch_count_are_seen():
    assert not lp.gate_passes(fake_data(passes=False))
    d = fake_data()
    d["kernels"]["triton_persistent"][1] = 61
    assert not lp.launches_match(d)


def test_a_step_stopped_by_the_gate_is_named_with_its_reason_and_shows_no_speed():
    d = fake_data()
    assert lp.failed_gate(d) == {} and lp.gated_fairly(d) and lp.timed(d, "triton_persistent")
    assert lp.step_phrase(d, "triton_pdl", 1) == "270 µs (**faster**)"
    stopped = fake_data()
    row = stopped["fidelity"]["triton_persistent"]
    row["passes"], row["float32_tokens_equal"] = False, False
    assert not lp.gated_fairly(stopped)  # still timed: the gate was not obeyed
    stopped["timed"] = ["triton", "triton_pdl"]
    del stopped["times"]["triton_persistent"]
    assert lp.gated_fairly(stopped) and not lp.timed(stopped, "triton_persistent")
    assert lp.failed_gate(stopped) == {
        "triton_persistent": "its float32 tokens differ from the readable step's"}
    assert lp.step_phrase(stopped, "triton_persistent", 1).startswith(
        "not timed (it failed the fidelity gate: its float32 tokens differ")
    assert "stopped: triton_persistent" in lp.gate_summary(stopped)
    stopped["fidelity"]["triton_pdl"]["kl"]["mean"] = 1.0
    stopped["fidelity"]["triton_pdl"]["passes"] = False
    assert "mean KL 1 is above the limit" in lp.failed_gate(stopped)["triton_pdl"]
    assert not lp.gated_fairly(stopped)  # PDL timed though it failed


def test_the_split_of_a_triton_record():
    from labkit.measure.results import load_reference

    s = lp.triton_split(load_reference("triton_gpt2"))
    assert s["kernels"] == 61 and s["n_layer"] == 12
    assert s["replay_us"] == pytest.approx(s["floor_us"] + s["kernels_beyond_floor_us"]
                                           + s["gaps_us"])


# ---------------------------------------------------------------------------- the graders


@pytest.fixture
def strict(monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "1")


def test_17_1_is_graded_by_the_record_and_open_without_one(strict, capsys):
    assert run("17.1", 17, pdl_band="d", rec=None).passed
    assert "no past_launch_gpt2 record" in capsys.readouterr().out
    with pytest.raises(StrictExerciseError):
        run("17.1", 17, pdl_band="e", rec=None)
    d = fake_data(pdl=270.0)  # 288 / 270 = 1.067
    assert n17.gain_band(lp.pdl_gain(d)) == "c"
    assert run("17.1", 17, pdl_band="c", rec=d).passed
    with pytest.raises(StrictExerciseError):
        run("17.1", 17, pdl_band="b", rec=d)
    edge = fake_data(pdl=288.0 / 1.019)  # within 1% of the edge at 1.02: both sides accepted
    assert run("17.1", 17, pdl_band="b", rec=edge).passed
    assert run("17.1", 17, pdl_band="c", rec=edge).passed


def test_17_2_accepts_the_targets_and_refuses_a_fixed_target(strict):
    assert run("17.2", 17, targets=lambda s, p, n: lp.barrier_targets(s, p, n)).passed
    with pytest.raises(StrictExerciseError):
        run("17.2", 17, targets=lambda s, p, n: lp.targets_without_base(s, p, n))
    with pytest.raises(StrictExerciseError):   # off by one launch
        run("17.2", 17, targets=lambda s, p, n: (s - s % (n * p) + n * p,
                                                 [s - s % (n * p) + k * p
                                                  for k in range(1, n + 1)]))


def test_17_4_accepts_labkits_wait_and_refuses_each_bug(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)
    assert run("17.6", 17, wait=lp.wait_acquire, why="L1 copies").passed
    for bug in (lp.wait_plain_load, lp.wait_no_acquire):
        assert not run("17.6", 17, wait=bug, why="x").passed
    assert not run("17.6", 17, wait=lambda p, t: None, why="x").passed

    def raises(p, target):
        yield p.load_volatile(lp.READY)
        raise RuntimeError("boom")

    assert not run("17.6", 17, wait=raises, why="x").passed  # reported, not raised


# ---------------------------------------------------------------------------- the notebook


@pytest.mark.slow
def test_the_notebook_runs_with_records_present(tmp_path, monkeypatch):
    """Notebook 17's solution, on a data folder that holds stand-in past_launch records
    (reference files): every record cell and statement runs; a PDL verdict the record
    contradicts would fail it."""
    data = tmp_path / "data"
    shutil.copytree(ROOT / "data" / "reference", data / "reference")
    for preset, layers in (("small", 4), ("gpt2", 12)):
        rec = {"schema": json.loads((ROOT / "data" / "reference" / "h200" /
                                     "triton_gpt2.json").read_text())["schema"],
               "name": f"past_launch_{preset}", "created": "2026-01-01T00:00:00+00:00",
               "params": {}, "env": {"gpu_name": "stand-in", "tier": "gpu"},
               "data": fake_data(preset, layers, pdl=250.0)}
        (data / "reference" / "h200" / f"past_launch_{preset}.json").write_text(json.dumps(rec))
    text = run_on_references(ROOT / "notebooks" / "solutions" / "17_past_launch.ipynb", data,
                             tmp_path, monkeypatch, strict=True)
    assert "no H200 reference recorded yet for past_launch" not in text
    assert "checked: gpt2: at batch 1 the PDL step is faster than the plain Triton step" in text
    assert "[TODO]" not in text and "[PASS] 17.1" in text


def test_a_record_that_times_a_step_the_gate_stopped_is_refused():
    from labkit.measure import records

    ok = records.parse("past_launch_gpt2", fake_data())
    assert ok.timed == list(lp.WAYS) and ok.kernels["triton_persistent"] == [13] * 3
    bad = fake_data(passes=False)  # PDL failed the gate but is listed as timed
    with pytest.raises(records.SchemaError, match="did not pass the fidelity gate"):
        records.parse("past_launch_gpt2", bad)
    short = fake_data()
    short["floor_us"] = short["floor_us"][:2]
    with pytest.raises(records.SchemaError, match="floor_us"):
        records.parse("past_launch_gpt2", short)


def _sass_row(version, unused, used):
    return {"triton": version, "ptxas": "V0", "arch": "sm_90",
            "wait_value_unused": dict(zip(("acquire_loads", "l1_invalidations"), unused)),
            "wait_value_used": dict(zip(("acquire_loads", "l1_invalidations"), used))}


def test_the_acquire_verdicts_follow_the_compiled_rows():
    rows = [_sass_row("3.6.0", (0, 0), (1, 1)), _sass_row("3.9.0", (0, 1), (1, 1))]
    assert lp.dropped_in(rows) == ["3.6.0"]
    assert lp.kept_in_all(rows) and lp.load_gone_invalidation_kept(rows)
    table = lp.acquire_rows(rows, rows[1])
    assert len(table) == 6 and table[-1]["source"] == "compiled here"
    assert "Triton 3.6.0: unused 0/0" in lp.acquire_summary(rows)
    # a wait that lost its acquire, a later Triton that drops both, no rows: each verdict flips
    assert not lp.kept_in_all([_sass_row("3.6.0", (0, 0), (0, 0))])
    assert not lp.load_gone_invalidation_kept([_sass_row("3.10.0", (0, 0), (1, 1))])
    assert not lp.kept_in_all([]) and lp.dropped_in(rows[1:]) == []


def test_the_recorded_sweeps_say_what_notebook_17_states():
    """The shipped files: Triton 3.6 dropped the unused acquire; labkit's wait kept it; before
    the fix the persistent step left the readable tokens at one row only."""
    rows = lp.acquire_records()
    assert "3.6.0" in lp.dropped_in(rows) and lp.kept_in_all(rows)
    found = lp.before_fix()
    assert found["equal_at_1"] < 1 == found["equal_at_8_plus"]
    assert not found["repeatable_at_1"] and found["one_program_equal"]
    assert found["stages_1_2_differ"] == 0 < found["stages_3_5_differ"]
    assert lp.before_fix_row(found)["repeats itself, 1 row"] is False
    assert lp.before_fix_shows(found).startswith("float32 tokens equal, 1 row: 0.125; ")
    assert "repeats itself, 1 row: False" in lp.before_fix_shows(found)


def test_the_split_puts_the_persistent_steps_time_inside_its_kernels():
    rec = {"batch_sizes": [1], "floor_us": [10.0], "interleaved": True,
           "times": {s: [{"median": m, "p10": m, "p90": m, "n": 3}]
                     for s, m in (("triton", 100.0), ("triton_persistent", 150.0))},
           "kernel_us": {"triton": [80.0], "triton_persistent": [145.0]}}
    rows = lp.split_rows(rec, 1)
    assert [r["between kernels µs"] for r in rows] == [20.0, 5.0]
    assert rows[1]["kernels beyond floor µs"] == 135.0
    assert lp.moved_inside(rec, 1)
    rec["kernel_us"]["triton_persistent"] = [70.0]  # less inside: the verdict flips
    assert not lp.moved_inside(rec, 1)


# ------------------------------------------------------------ the persistent step's stages

def _stamps(layers=2, programs=3, t0=1_000_000):
    """Clock stamps (ns) of a made-up step: in each layer program p starts p*100 ns late,
    arrives at barrier k at 10 µs * k + p * 1 µs, ends 5 µs after its last arrival; the next
    layer starts 2 µs after the last end."""
    out, start = [], t0
    for _ in range(layers):
        layer = []
        for p in range(programs):
            arrivals = [start + 10_000 * k + 1_000 * p for k in (1, 2, 3, 4)]
            layer.append([start + 100 * p, *arrivals, arrivals[-1] + 5_000])
        out.append(layer)
        start = max(p[5] for p in layer) + 2_000
    return out


def test_stamped_replays_read_the_stamps_after_each_replay(monkeypatch):
    """The record's and the sweep's stamped replays: replay, wait for the GPU, read."""
    from labkit.measure.past_launch import stamped_replays

    log: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: log.append("sync"))

    class Graphs:
        def replay(self, b):
            log.append(f"replay {b}")

    class Step:
        def stamps_at(self, b):
            log.append("read")
            return torch.full((1, 1, 6), log.count("read"))

    got = stamped_replays(Graphs(), Step(), 4, 2)
    assert got == [[[[1] * 6]], [[[2] * 6]]]
    assert log == ["replay 4", "sync", "read"] * 2


def test_stage_split_reads_the_critical_path_and_the_barriers_lateness():
    from labkit.measure.past_launch import STAGES, stage_rows, stage_split

    s = stage_split(_stamps())
    # stage 1: first start to the last arrival (program 2: 10 µs + 2 µs); then 10 µs each;
    # stage 5: last arrival at barrier 4 to the last end, 5 µs
    assert s["stages"] == [[12.0, 10.0, 10.0, 10.0, 5.0]] * 2
    assert s["late"] == [[1.0] * 4] * 2       # last arrival 2 µs, median 1 µs after the first
    assert s["ramp"] == [0.2, 0.2] and s["gaps"] == [2.0]
    rows = stage_rows([s, s], [[5.0, 4.0, 3.0, 6.0, 3.0]] * 2)
    assert [r["stage"] for r in rows] == list(STAGES)
    assert rows[0]["persistent_us"] == 12.0 and rows[0]["kernel_us"] == 5.0
    assert rows[4]["late_us"] is None and rows[3]["late_us"] == 1.0
    with pytest.raises(ValueError, match="6 clock readings"):
        stage_split([[[1, 2, 3]]])
    with pytest.raises(ValueError, match="at least one"):
        stage_rows([])


def fake_stages(stamped: float = 465.0) -> dict:
    """A persistent_stages record's data (made-up numbers): two layers, batch 1 and 8."""
    row = lambda k, per, kern: {  # noqa: E731
        "stage": k, "persistent_us": per, "persistent_p10": per - 0.5,
        "persistent_p90": per + 0.5, "late_us": 1.0, "kernel_us": kern,
        "kernel_p10": kern - 0.2, "kernel_p90": kern + 0.2}
    from labkit.measure.past_launch import STAGES
    rows = [row(k, per, kern) for k, per, kern in
            zip(STAGES, (60.0, 40.0, 30.0, 50.0, 40.0), (50.0, 30.0, 20.0, 40.0, 35.0))]
    rows[4]["late_us"] = None
    return {"preset": "gpt2", "dtype": "bfloat16", "config": {"n_layer": 2}, "context": 128,
            "batch_sizes": [1, 8], "steps": ["triton", "triton_persistent",
                                             "triton_persistent_stamped"],
            "interleaved": True, "repeats": 30, "inner": 10,
            "times": {"triton": [_stats(400.0), _stats(500.0)],
                      "triton_persistent": [_stats(460.0), _stats(520.0)],
                      "triton_persistent_stamped": [_stats(stamped), _stats(525.0)]},
            "stamped_steps": 20, "stages": [rows, rows], "gaps_us": [3.0, 3.0],
            "ramp_us": [0.5, 0.5], "head_us": [40.0, 40.0], "plain_kernels_us": [390.0, 480.0],
            "clock_ns": 32, "programs": 132, "cooperative": True}


def test_the_stage_table_and_its_checks():
    from labkit.measure import records

    d = fake_stages()
    records.parse("persistent_stages_gpt2", d)
    table = lp.stage_table(d, 1)
    assert table[0]["persistent − kernel µs"] == 10.0 and table[0]["p10–p90"] == "59.5–60.5"
    t = lp.stage_totals(d, 1)
    assert t["stages_us"] == 440.0 and t["gaps_us"] == 3.0 and t["accounted_us"] == 483.0
    assert lp.stages_account(d, 1)                      # 483 against 465: within 10%
    assert not lp.stages_account(fake_stages(stamped=400.0), 1)
    assert lp.stamps_cheap(d, 1)                        # +1.1%
    assert not lp.stamps_cheap(fake_stages(stamped=480.0), 1)
    assert lp.stages_slower_than_kernels(d, 1)          # 217.5 against 176
    assert lp.largest_loss(d, 1) == ("LN1 + QKV", 10.0)
    assert lp.late_below_loss(d, 1) and lp.largest_late(d, 1) == 1.0   # 1 µs against 45 µs
    late = fake_stages()
    late["stages"][0][1] = {**late["stages"][0][1], "late_us": 50.0}
    assert not lp.late_below_loss(late, 1)
    shows = lp.stage_shows(d, 1)
    assert shows["stamps"] == "stamped 465.0 µs, without stamps 460.0 µs (+1.1%)"
    assert shows["account"].startswith("stages 440 + gaps 3 + LM head 40 = 483 µs")
    assert "p10s add up to 217.5 µs, the kernels' p90s to 176.0 µs" in shows["slower"]
    assert lp.stamps_cost_text(d) == "+1.1% at batch 1 and +1.0% at 8"
    bad = fake_stages()
    bad["stages"][0] = bad["stages"][0][:4]
    with pytest.raises(records.SchemaError, match="5 stages"):
        records.parse("persistent_stages_gpt2", bad)


def test_17_3_is_graded_by_the_stage_record_and_open_without_one(strict, capsys):
    assert run("17.3", 17, lost_in="c", rec=None).passed
    assert "no persistent_stages_gpt2 record" in capsys.readouterr().out
    d = fake_stages()
    # 2 layers: waits 2 x 4 x 1 µs = 8; stages lose 2 x 45 - 8 = 82; gaps 1 x 3 = 3
    assert lp.where_lost(d, 1) == {"a": 8.0, "b": 82.0, "c": 3.0}
    assert run("17.3", 17, lost_in="b", rec=d).passed
    for wrong in ("a", "c", "d"):
        with pytest.raises(StrictExerciseError):
            run("17.3", 17, lost_in=wrong, rec=d)
    def with_waits(late):
        rec = fake_stages()
        rec["stages"][0] = [{**r, "late_us": None if r["late_us"] is None else late}
                            for r in rec["stages"][0]]
        return rec

    assert lp.where_lost(with_waits(10.0), 1) == {"a": 80.0, "b": 10.0, "c": 3.0}
    assert run("17.3", 17, lost_in="a", rec=with_waits(10.0)).passed
    with pytest.raises(StrictExerciseError):
        run("17.3", 17, lost_in="b", rec=with_waits(10.0))
    near = with_waits(5.0)  # 40 against 50: within 80% of the largest, both accepted
    assert run("17.3", 17, lost_in="a", rec=near).passed
    assert run("17.3", 17, lost_in="b", rec=near).passed


# ------------------------------------------------------------------ the two changes tried


def _line(step: str, median: float, **kw) -> dict:
    return {"preset": "gpt2", "b": 1, "step": step, "median": median, "p10": median - 1.0,
            "p90": median + 1.0, **kw}


def fake_tried(stage_wait: float = 448.0, prefetched: float = 470.0,
               first_stage: float = 9.5) -> list[dict]:
    """Lines of a `triton_sweep.py --schedule prefetch` run (made-up numbers): the plain
    kernels, four persistent candidates, and three stage tables."""
    def cand(i, median, waits, prefetch, per_sm=1):
        return _line(f"p{i}", median, per_sm=per_sm, stripes=False, prefetch=prefetch,
                     waits=waits)

    def stages(first, rest):
        from labkit.measure.past_launch import STAGES
        return [{"stage": s, "persistent_us": v, "kernel_us": 4.0}
                for s, v in zip(STAGES, [first, *rest])]

    return [_line("kernels", 300.0), cand(0, 478.0, "tile", False),
            cand(1, 500.0, "tile", True), cand(2, stage_wait, "stage", False),
            cand(3, prefetched, "stage", True), cand(4, 425.0, "tile", False, per_sm=2),
            {"preset": "gpt2", "b": 1, "stamped": True, "prefetch": False, "waits": "tile",
             "stages": stages(7.0, [5.0, 5.0, 8.4, 9.6])},
            {"preset": "gpt2", "b": 1, "stamped": True, "prefetch": False, "waits": "stage",
             "stages": stages(7.0, [5.0, 4.2, 7.2, 8.5])},
            {"preset": "gpt2", "b": 1, "stamped": True, "prefetch": True, "waits": "stage",
             "stages": stages(first_stage, [4.8, 3.7, 6.9, 8.3])}]


def test_the_sweep_of_the_two_changes_and_its_checks():
    rows = fake_tried()
    table = lp.tried_table(rows)
    assert [r["× plain"] for r in table] == [1.0, 1.59, 1.67, 1.49, 1.57, 1.42]
    assert table[3]["tiles that wait"] == "first only" and table[2]["L2 prefetch"] == "yes"
    assert lp.wait_once_faster(rows) and not lp.waits_within_spread(rows)
    assert not lp.wait_once_faster(fake_tried(stage_wait=477.5))      # within the spread
    assert lp.waits_within_spread(fake_tried(stage_wait=477.5))
    assert lp.prefetch_slower(rows)
    assert not lp.prefetch_slower(fake_tried(prefetched=449.0))      # one wait within spread
    assert lp.two_per_sm_faster(rows) and lp.persistent_all_slower(rows)
    faster = [*rows, _line("p5", 290.0, per_sm=2, stripes=True, prefetch=True, waits="stage")]
    assert not lp.persistent_all_slower(faster)
    moves = lp.prefetch_moves(rows)
    assert moves["first_stage"] == pytest.approx(2.5) and moves["later"] == pytest.approx(1.2)
    assert lp.prefetch_costs_first_stage(rows)
    assert not lp.prefetch_costs_first_stage(fake_tried(first_stage=8.0))   # +1.0 against 1.2
    stages = lp.tried_stage_table(rows)
    assert stages[-1] == {"stage": "all five", "every tile waits": 35.0,
                          "first tile waits": 31.9, "first tile waits + prefetch": 33.2,
                          "plain kernel": 20.0}
    shows = lp.tried_shows(rows)
    assert shows["waits"] == ("first tile waits 448 µs (p10–p90 447–449), every tile waits "
                              "478 µs (p10–p90 477–479)")
    assert shows["stages"] == "stage 1 +2.5 µs per layer, stages 2-5 together -1.2 µs per layer"
    with pytest.raises(KeyError, match="no candidate"):
        lp.tried_step(rows, waits="stage", per_sm=2)
    assert {k: round(v, 3) for k, v in lp.batch1_beyond_noise(rows).items()} == {
        "prefetch, every tile waits": 0.046, "prefetch, first tile waits": 0.049,
        "one program per SM against two": 0.125, "every tile waits against the first": 0.067}


def fake_sizes(small8_stage: float = 84.0, four64: float = 196.0) -> list[dict]:
    """Lines of two prefetch sweeps at three sizes (made-up numbers): gpt2 at batch 1 without
    the per-SM candidates, small at 8 (four per SM refused) and at 64."""
    def at(preset, b, step, median, **kw):
        return {**_line(step, median, **kw), "preset": preset, "b": b}

    def cand(preset, b, median, waits, per_sm=1):
        return at(preset, b, "p", median, per_sm=per_sm, stripes=False, prefetch=False,
                  waits=waits)

    return [at("gpt2", 1, "kernels", 300.0), cand("gpt2", 1, 478.0, "tile"),
            cand("gpt2", 1, 448.0, "stage"),
            at("small", 64, "kernels", 153.0), cand("small", 64, 221.0, "tile"),
            cand("small", 64, 218.0, "stage"), cand("small", 64, 180.0, "stage", 2),
            cand("small", 64, four64, "stage", 4),
            {"preset": "small", "b": 8, "cand": {}, "per_sm": 4, "stripes": False,
             "prefetch": False, "waits": "stage",
             "error": "RuntimeError('Triton Error [CUDA]: too many blocks in cooperative "
                      "launch')"},
            at("small", 8, "kernels", 85.0), cand("small", 8, 80.0, "tile"),
            cand("small", 8, small8_stage, "stage"), cand("small", 8, 100.0, "stage", 2)]


def test_every_size_of_the_two_sweeps_and_its_checks():
    rows = fake_sizes()
    assert lp.tried_sizes(rows) == [("gpt2", 1), ("small", 8), ("small", 64)]
    assert lp.wait_sizes(rows) == {"gpt2 at batch 1": "faster", "small at batch 8": "slower",
                                   "small at batch 64": "faster"}
    assert lp.wait_sizes(fake_sizes(small8_stage=80.5))["small at batch 8"] == \
        "within the spread"
    # gpt2 at batch 1 has no per-SM candidates: it is left out, not guessed
    assert lp.four_per_sm(rows) == {"small at batch 8": "refused", "small at batch 64": "slower"}
    assert lp.four_per_sm_slower(rows)
    assert not lp.four_per_sm_slower(fake_sizes(four64=181.0))       # within the spread
    assert lp.four_per_sm(fake_sizes(four64=170.0))["small at batch 64"] == "faster"
    assert lp.beats_plain(rows) == ["small at batch 8"]
    # 80 against 85 is -5.9%: no longer a win once two captures of the same waits differ by 7.5%
    assert lp.beats_plain(fake_sizes(small8_stage=86.0)) == []
    table = lp.sizes_table(rows)
    assert [(r["model"], r["batch"], r["one wait per stage is"]) for r in table] == [
        ("gpt2", 1, "faster"), ("small", 8, "slower"), ("small", 64, "faster")]
    assert table[0]["2 per SM"] == "not tried" and table[1]["4 per SM"] == "refused"
    assert table[2]["4 per SM"] == 196.0 and table[1]["fastest persistent × plain"] == 0.94
    # which sizes give programs a later tile is the heuristic's (132 SMs), not the sweep's
    assert [lp.later_tiles(p, b) for p, b in lp.tried_sizes(rows)] == [2, 0, 0]
    assert lp.later_tiles("gpt2", 64) == 1 and lp.later_tiles("small", 1) == 3
    assert lp.wait_sizes(rows, later=True) == {"gpt2 at batch 1": "faster"}
    assert lp.wait_sizes(rows, later=False) == {"small at batch 8": "slower",
                                                "small at batch 64": "faster"}
    assert lp.wait_faster_where_it_acts(rows) and lp.same_waits_both_ways(rows)
    assert not lp.same_waits_both_ways(fake_sizes(small8_stage=80.5))
    assert lp.wait_ratio(rows, "small", 8) == pytest.approx(1.05)
    assert lp.capture_noise(rows) == pytest.approx(0.05)
    assert lp.wins_beyond_noise(rows) == ["gpt2 at batch 1"]             # 448/478: -6.3%
    assert lp.wins_beyond_noise(fake_sizes(small8_stage=90.0)) == []      # +12.5% floor
    shows = lp.sizes_shows(rows)
    assert shows["noise"] == ("largest difference where the waits are the same 5.0%; one wait "
                              "per stage over one per tile where it acts: gpt2 at batch 1 -6.3%")
    assert shows["plain"] == "faster than the plain kernels at: small at batch 8"
    assert shows["batch1"] == ("floor 5.0%; gpt2 at batch 1: every tile waits against the "
                               "first +6.7%")    # no prefetch or per-SM lines at batch 1 here
    assert shows["four"] == ("four programs per SM against two: small at batch 8: refused; "
                             "small at batch 64: slower")


def test_the_filed_sweeps_hold_disjoint_sizes():
    first, more = ({(r["preset"], r["b"]) for r in lines if "preset" in r}
                   for lines in (_lines(lp.TRIED_FILE), _lines(lp.TRIED_MORE_FILE)))
    assert first and more and not first & more
    assert len(lp.tried()) == sum(len(_lines(f)) for f in (lp.TRIED_FILE, lp.TRIED_MORE_FILE))


def _lines(name: str) -> list[dict]:
    path = Path(__file__).resolve().parents[1] / "data" / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def test_17_4_is_graded_by_the_sweep(strict):
    rows = fake_tried()
    assert lp.which_helps(rows) == "b"
    assert run("17.4", 17, helps="b", rows=rows).passed
    for wrong in ("a", "c", "d"):
        with pytest.raises(StrictExerciseError):
            run("17.4", 17, helps=wrong, rows=rows)
    assert lp.which_helps(fake_tried(stage_wait=477.5)) == "d"       # within the spread
    helped = fake_tried(prefetched=440.0)
    helped[2] = {**helped[2], "median": 470.0, "p10": 469.0, "p90": 471.0}
    assert lp.prefetch_faster(helped) and lp.which_helps(helped) == "a"


# ---------------------------------------------------------------------- how many programs fit


def test_programs_per_sm_follows_hoppers_limits():
    # the persistent layer kernel of small at batch 8 (Triton 3.6): 168 registers, 58 KiB
    assert lp.programs_per_sm(168, 59392, 4) == {
        "by registers": 3, "by shared memory": 3, "by warps": 16, "by blocks": 32, "fit": 3}
    # gpt2 at batch 64: 96 registers, 26.5 KiB: five fit, by registers
    assert lp.programs_per_sm(96, 27136, 4)["fit"] == 5
    assert lp.programs_per_sm(255, 0, 4)["by registers"] == 2          # 8,192 a warp
    assert lp.programs_per_sm(128, 0, 4)["by registers"] == 4
    assert lp.programs_per_sm(129, 0, 4)["by registers"] == 3          # 4,128 -> 4,352 a warp
    assert lp.programs_per_sm(32, 232 * 1024 - 1024, 4)["by shared memory"] == 0
    assert lp.programs_per_sm(16, 0, 16)["fit"] == 4                   # 64 warps an SM


def fake_resources(registers: int = 168, shared: int = 59392) -> dict:
    rows = [{"preset": "small", "batch": 8, "per_sm": n, "waits": w, "num_warps": 4,
             "registers": registers, "shared_bytes": shared, "spill_stores": 0}
            for n in (1, 2, 4) for w in ("tile", "stage")]
    rows += [{"preset": "gpt2", "batch": 64, "per_sm": n, "waits": "stage", "num_warps": 4,
              "registers": 96, "shared_bytes": 27136, "spill_stores": 0} for n in (1, 4)]
    return {"triton": "3.6.0", "rows": rows}


def fake_launches(four8: str = "refused") -> list[dict]:
    timed = [{"preset": "small", "b": 8, "step": f"p{n}", "per_sm": n, "waits": "stage",
              "stripes": False, "prefetch": False, "median": 80.0 + n} for n in (1, 2)]
    timed += [{"preset": "gpt2", "b": 64, "step": "p7", "per_sm": 4, "waits": "stage",
               "stripes": False, "prefetch": False, "median": 1131.0},
              {"preset": "small", "b": 8, "stamped": True, "waits": "stage", "prefetch": False},
              {"preset": "small", "b": 8, "step": "p9", "per_sm": 4, "waits": "stage",
               "stripes": True, "prefetch": True, "median": 90.0}]
    if four8 == "refused":
        timed.append({"preset": "small", "b": 8, "cand": {}, "per_sm": 4, "waits": "stage",
                      "stripes": False, "prefetch": False,
                      "error": "RuntimeError('Triton Error [CUDA]: too many blocks in "
                               "cooperative launch')"})
    elif four8 == "ran":
        timed.append({"preset": "small", "b": 8, "step": "p7", "per_sm": 4, "waits": "stage",
                      "stripes": False, "prefetch": False, "median": 99.0})
    return timed


def test_the_compiler_predicts_which_launches_the_gpu_refused():
    found = lp.fits(fake_resources(), fake_launches())
    seen = {(f["preset"], f["per_sm"], f["waits"]): (f["fits"], f["seen"]) for f in found}
    assert seen[("small", 4, "stage")] == (False, "refused")
    assert seen[("small", 2, "stage")] == (True, "ran")
    assert seen[("small", 1, "tile")] == (True, "not tried")      # the sweep timed "stage"
    assert seen[("gpt2", 4, "stage")] == (True, "ran")            # a stripes line is not it
    assert lp.fits_agree(found)
    table = lp.fits_table(found)
    assert table[0] == {"size": "small at batch 8", "registers": 168, "shared KiB": 58.0,
                        "fit per SM": 3, "limited by": "registers and shared memory",
                        "1 per SM": "fits; ran",
                        "2 per SM": "fits; ran", "4 per SM": "does not fit; refused"}
    assert table[1]["4 per SM"] == "fits; ran" and "2 per SM" not in table[1]
    assert lp.fits_shows(found) == ("3 launches ran, the tightest small at batch 8, 2 per SM, "
                                    "waits='stage': 3 fit; refused: small at batch 8, 4 per "
                                    "SM, waits='stage': 3 fit")
    assert lp.refused_launches(found) == ["small at batch 8, 4 per SM"]


@pytest.mark.parametrize("four8,registers,shared", [
    ("ran", 168, 59392),          # ran where it does not fit
    ("refused", 96, 27136),       # refused where five fit
    ("not tried", 168, 59392)])   # nothing refused: the prediction is untested
def test_the_fit_statement_fails_when_the_gpu_disagrees(four8, registers, shared):
    assert not lp.fits_agree(lp.fits(fake_resources(registers, shared), fake_launches(four8)))


def test_the_recorded_resources_are_the_gpu_machines_triton_and_cover_the_sweeps():
    rec = lp.resources_record()
    assert rec["triton"] == "3.6.0" and rec["ptxas"].startswith("V12.8")
    assert rec["machine"] == "compiled without a GPU (no kernel ran)" and rec["commit"]
    keys = {(r["preset"], r["batch"], r["per_sm"], r["waits"]) for r in rec["rows"]}
    assert {(r["preset"], r["b"], r["per_sm"], r["waits"]) for r in lp.tried()
            if "per_sm" in r and not r.get("stripes") and not r.get("prefetch")} <= keys
    with pytest.raises(LookupError, match=r"no row for Triton 9\.9"):
        lp.resources_record("9.9")


def test_17_7_takes_the_smallest_limit_and_refuses_each_slip(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)
    assert run("17.7", 17, fit=lambda r, s, w: lp.programs_per_sm(r, s, w)["fit"]).passed
    sm = lp.HOPPER_SM
    slips = [
        lambda r, s, w: min(sm["registers"] // (r * 32 * w), sm["shared_bytes"] // (s + 1024),
                            sm["warps"] // w, sm["blocks"]),          # no warp rounding
        lambda r, s, w: lp.programs_per_sm(r, s - 1024, w)["fit"],   # no reserved KiB
        lambda r, s, w: lp.programs_per_sm(r, 0, w)["fit"],           # registers only
        lambda r, s, w: None,
        lambda r, s, w: 1 / 0,
    ]
    for slip in slips:
        assert not run("17.7", 17, fit=slip).passed
    with pytest.raises(StrictExerciseError):
        monkeypatch.setenv(STRICT_ENV, "1")
        run("17.7", 17, fit=slips[0])


# ---------------------------------------------------------------------- several heads a tile


def fake_heads(two64: float = 1350.0, two8: float = 540.0, plain64: float = 895.0) -> list[dict]:
    def line(b, step, heads, per_sm, median, t=64, splits=1):
        return {"preset": "gpt2", "b": b, "step": step, "per_sm": per_sm, "heads": heads,
                "median": median, "p10": median - 2, "p90": median + 2,
                "blocks": {"t": t, "splits": splits}}
    return [line(64, "kernels", None, None, plain64), line(64, "p0", 1, 1, 1438.0),
            line(64, "p1", 1, 1, 1437.0), line(64, "p2", 2, 1, two64),
            line(64, "p3", 4, 1, 1383.0), line(64, "p4", 4, 1, 1535.0, t=32),
            line(64, "p6", 2, 2, 1013.0),
            line(8, "kernels", None, None, 449.0), line(8, "p0", 1, 1, 525.0, splits=3),
            line(8, "p1", 1, 1, 480.0), line(8, "p2", 2, 1, two8),
            line(8, "p3", 4, 1, 596.0), line(8, "p4", 4, 1, 690.0, t=32),
            {"preset": "gpt2", "b": 8, "stamped": True, "heads": 4, "stages": []}]


def test_the_heads_sweep_table_reads_each_variant():
    rows = lp.heads_table(fake_heads())
    assert [(r["model"], r["batch"]) for r in rows] == [("gpt2", 8), ("gpt2", 64)]
    assert rows[0] == {"model": "gpt2", "batch": 8, "plain kernels": 449.0, "1 head": 525.0,
                       "1 head, unsplit": 480.0, "2 heads": 540.0, "4 heads": 596.0,
                       "2 heads ÷ 1": 1.029, "fastest persistent × plain": 1.07}
    assert rows[1]["4 heads"] == 1383.0 and rows[1]["fastest persistent × plain"] == 1.13
    assert lp.two_heads_verdicts(fake_heads(), 0.044) == {"gpt2 at batch 8": "slower",
                                                          "gpt2 at batch 64": "faster"}
    assert lp.beats_plain(fake_heads(), 0.044) == []
    assert "2 heads ÷ 1 = 0.939" in lp.heads_shows(fake_heads(), 0.044)


@pytest.mark.parametrize("kw,size,verdict", [
    ({"two64": 1400.0}, "gpt2 at batch 64", "within the spread"),  # 2.6% faster: under the floor
    ({"two64": 1437.0}, "gpt2 at batch 64", "within the spread"),
    ({"two8": 520.0}, "gpt2 at batch 8", "within the spread"),     # 1% faster: under the floor
    ({"two8": 526.0}, "gpt2 at batch 8", "within the spread")])
def test_the_heads_verdicts_fail_when_the_sweep_says_otherwise(kw, size, verdict):
    assert lp.two_heads_verdicts(fake_heads(**kw), 0.044)[size] == verdict


def test_the_heads_plain_check_fails_where_a_variant_wins():
    assert lp.beats_plain(fake_heads(plain64=1500.0), 0.044) == ["gpt2 at batch 64"]


def test_the_filed_heads_sweep_is_read():
    rows = lp.heads_rows()
    assert {(r["model"], r["batch"]) for r in lp.heads_table(rows)} == {
        ("gpt2", 8), ("gpt2", 64), ("small", 8), ("small", 64)}


# ---------------------------------------------------------------------- the synchronisation alone


def _sync_record(barriers=(40.0, 39.0, 41.0), kernels=(30.0, 29.5, 30.5)) -> dict:
    """A made-up synchronisation record: 2 layers, each graph's median, p10, p90 (µs)."""
    def t(m, lo, hi):
        return {"median": m, "p10": lo, "p90": hi, "n": 30}
    return {"barriers_per_layer": 4, "repeats": 30, "presets": {"small": {
        "n_layer": 2, "launches": {"kernels": 11, "kernels_pdl": 11, "launches": 3,
                                   "barriers": 3, "barriers_2": 3},
        "times": {"kernels": t(*kernels), "kernels_pdl": t(20.0, 19.5, 20.5),
                  "launches": t(8.0, 7.9, 8.1), "triton_pdl": t(90.0, 89.0, 91.0),
                  "barriers": t(*barriers), "barriers_2": t(48.0, 47.0, 49.0),
                  "triton": t(100.0, 99.0, 101.0),
                  "triton_persistent": t(160.0, 158.0, 162.0)}}}}


def test_sync_summary_derives_one_barrier_and_one_boundary():
    s = lp.sync_summary(_sync_record(), "small")
    assert s["per_barrier_us"] == pytest.approx((40.0 - 8.0) / 8)
    assert s["per_barrier_2_us"] == pytest.approx((48.0 - 8.0) / 8)
    assert s["per_boundary_us"] == pytest.approx(30.0 / 11)
    assert s["sync_share"] == pytest.approx(40.0 / 160.0)
    assert s["kernels_share"] == pytest.approx(0.30)
    assert s["pdl_share"] == pytest.approx(20.0 / 90.0)
    assert "per_barrier_acquire_us" not in s  # a run from before poll="acquire"
    later = _sync_record()
    t = later["presets"]["small"]["times"]
    t["barriers_acquire"] = {**t["barriers"], "median": 36.0}
    t["triton_persistent_acquire"] = {**t["triton_persistent"], "median": 150.0}
    s = lp.sync_summary(later, "small")
    assert s["per_barrier_acquire_us"] == pytest.approx((36.0 - 8.0) / 8)
    assert s["persistent_acquire_us"] == 150.0
    assert "per_boundary_one_us" not in s  # a run from before the fan-in graphs
    t["kernels_plain"] = {**t["kernels"], "median": 22.0}
    t["kernels_one"] = {**t["kernels"], "median": 11.0}
    t["barriers_8"] = {**t["barriers"], "median": 24.0}
    later["presets"]["small"]["launches"].update(kernels_plain=11, kernels_one=11)
    later["presets"]["small"]["fan_in"] = [8]
    s = lp.sync_summary(later, "small")
    assert s["per_boundary_plain_us"] == pytest.approx(2.0)
    assert s["per_boundary_one_us"] == pytest.approx(1.0)
    assert s["per_barrier_8_us"] == pytest.approx((24.0 - 8.0) / 8)
    assert "chain_us" not in s
    t["chain"] = {**t["barriers"], "median": 60.0}
    s = lp.sync_summary(later, "small")
    assert s["chain_us"] == 60.0 and s["chain_share"] == pytest.approx(60.0 / 160.0)
    assert s["per_exchange_us"] == pytest.approx((60.0 - 40.0) / 10)  # 8 barriers, 10 stages
    assert "persistent_stage_us" not in s
    t["triton_persistent_stage"] = {**t["triton_persistent"], "median": 140.0}
    assert lp.sync_summary(later, "small")["persistent_stage_us"] == 140.0
    plain, pdl, persistent = lp.sync_table(_sync_record())
    assert persistent["that alone µs"] == 40.0 and persistent["share of the step"] == "25%"
    assert persistent["what orders its work"] == "3 launches, 8 barriers"
    assert plain["that alone µs"] == 30.0 and plain["what orders its work"] == "11 launches"
    assert pdl["share of the step"] == "22%"
    units = lp.sync_units(_sync_record())[0]
    assert units["one barrier"] == 4.0 and units["one PDL boundary"] == pytest.approx(1.82)


def test_sync_verdict_needs_the_spreads_apart():
    assert lp.sync_verdict(_sync_record(), "small") == "longer"
    assert lp.sync_verdict(_sync_record(barriers=(20.0, 19.0, 21.0)), "small") == "shorter"
    overlapping = _sync_record(barriers=(30.4, 29.0, 31.0))
    assert lp.sync_verdict(overlapping, "small") == "within the spread"
    assert lp.sync_verdicts([_sync_record(), overlapping]) == {
        ("longer", "shorter"), ("within the spread", "shorter")}
    assert "barriers alone 40.0 µs" in lp.sync_shows(_sync_record())


def test_17_5_counts_barriers_and_launches_and_refuses_each_slip(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)
    record = _sync_record()
    gpt2 = json.loads(json.dumps(record["presets"]["small"]))
    gpt2["n_layer"] = 12   # 48 barriers of 4 µs and 13 launches of 8/3 µs: 226.7 µs
    gpt2["times"]["barriers"].update(median=222.0, p10=221.0, p90=223.0)
    record["presets"]["gpt2"] = gpt2
    assert run("17.5", 17, sync_us=lp.sync_cost, record=record).passed
    slips = [
        lambda layers, b, launch: layers * b + (layers + 1) * launch,  # one barrier a layer
        lambda layers, b, launch: 4 * layers * b + layers * launch,    # no LM head's launch
        lambda layers, b, launch: 4 * layers * (b + launch),           # a launch per barrier
        lambda layers, b, launch: None,
        lambda layers, b, launch: 1 / 0,
    ]
    for slip in slips:
        assert not run("17.5", 17, sync_us=slip, record=record).passed
    with pytest.raises(StrictExerciseError):
        monkeypatch.setenv(STRICT_ENV, "1")
        run("17.5", 17, sync_us=slips[0], record=record)


def test_17_5_predicts_gpt2_from_small_within_the_tolerance_on_the_record():
    """On the recorded H100 runs the rule, fed small's costs, lands within 5% of gpt2's
    barrier graph; a rule that forgets the head's launch does not."""
    record = lp.sync_record(lp.sync_records())
    predicted, measured = lp.sync_prediction(record, lp.sync_cost)
    assert abs(predicted / measured - 1) < n17.SYNC_TOLERANCE
    assert lp.sync_cost(12, 1.5, 1.0) == 4 * 12 * 1.5 + 13 * 1.0
