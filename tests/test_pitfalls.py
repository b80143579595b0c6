"""Tests of labkit.measure.pitfalls: the CPU stand-in, the record readers and the quiz everywhere;
each live pitfall on a CUDA GPU (``@pytest.mark.gpu``)."""

from __future__ import annotations

import json

import pytest
import torch

from labkit.measure import pitfalls


# ---------------------------------------------------------------------------- CPU parts


def test_rules_cover_every_pitfall_and_quiz_answer():
    assert set(pitfalls.PITFALL_NAMES) == set(pitfalls.RULES) == set(pitfalls.PITFALLS)
    for item in pitfalls.QUIZ.values():
        assert item.answer in pitfalls.RULES


def test_check_quiz():
    right = {k: item.answer for k, item in pitfalls.QUIZ.items()}
    assert all(pitfalls.check_quiz(right).values())
    wrong = dict(right, a="rng")
    res = pitfalls.check_quiz(wrong)
    assert res["a"] is False and sum(res.values()) == len(right) - 1
    assert not any(pitfalls.check_quiz({}).values())


def test_simulated_graph_rebinding_is_stale_and_copy_fixes_it():
    static_x = torch.zeros(3)
    g = pitfalls.SimulatedGraph(lambda t: t * 2, static_x)
    static_x.copy_(torch.tensor([1.0, 2.0, 3.0]))
    assert g.replay().tolist() == [2.0, 4.0, 6.0]
    static_x = torch.tensor([5.0, 5.0, 5.0])       # rebinding: the graph never sees it
    assert g.replay().tolist() == [2.0, 4.0, 6.0]
    g.inputs[0].copy_(static_x)                     # the fix
    assert g.replay().tolist() == [10.0, 10.0, 10.0]


def test_simulated_graph_output_is_static_and_overwritten():
    x = torch.ones(2)
    g = pitfalls.SimulatedGraph(lambda t: t + 1, x)
    held = g.replay()
    kept = held.clone()
    x.fill_(10.0)
    again = g.replay()
    assert again is held and held.tolist() == [11.0, 11.0]
    assert kept.tolist() == [2.0, 2.0]


def test_simulated_graph_rejects_non_tensor_inputs():
    with pytest.raises(TypeError, match="input 0"):
        pitfalls.SimulatedGraph(lambda t: t, [1.0, 2.0])


def _fake_record() -> dict:
    return {"pitfalls": [
        {"name": "host_sync", "rule": pitfalls.RULES["host_sync"], "what": "w",
         "error": "CUDA graph capture failed: host synchronisation\n  fix: ...", "fix": "f",
         "fixed_ok": True, "details": {}},
        {"name": "rng", "rule": pitfalls.RULES["rng"], "what": "w", "error": "", "fix": "f",
         "fixed_ok": False, "details": {}},
    ]}


def test_summary_rows_and_by_name():
    rec = _fake_record()
    rows = pitfalls.summary_rows(rec)
    assert [r["pitfall"] for r in rows] == ["host_sync", "rng"]
    assert rows[0]["what happened"] == "CUDA graph capture failed: host synchronisation"
    assert rows[0]["fixed"] == "yes" and rows[1]["fixed"] == "NO"
    assert set(pitfalls.by_name(rec)) == {"host_sync", "rng"}
    with pytest.raises(KeyError, match="not a 'pitfalls' record"):
        pitfalls.by_name({"x": 1})


def test_describe_has_error_and_fix():
    text = pitfalls.describe(_fake_record()["pitfalls"][0], source="recorded")
    assert "host synchronisation" in text and "fix  : f" in text and "fixed: yes" in text
    assert "[recorded]" in text.splitlines()[0]


def test_describe_addresses():
    seg = {"segment_base": 0x7F0000000000, "offset_in_segment": 512}
    addr = {"replay_output_ptrs": [0x7F0000000200] * 2, "identical_across_replays": True,
            "graphs": [{"graph": "A", "input_ptr": 1, "output_ptr": 0x7F0000000200,
                        "output_segment": seg, "pool_id": [0, 1]}],
            "ordinary_tensor_ptr": 2, "kernel_args": None}
    text = pitfalls.describe_addresses(addr)
    assert "0x7f0000000200, 0x7f0000000200  (identical)" in text
    assert "segment 0x7f0000000000 + 512 bytes, pool (0, 1)" in text
    assert "not read" in text
    assert "not available" in pitfalls.describe_addresses({"error": "x"})


def test_err_text_keeps_chain_and_drops_cpp_frames():
    try:
        try:
            raise ValueError("first")
        except ValueError:
            raise RuntimeError("second\nframe #0: c10::whatever\nException raised from x")
    except RuntimeError as exc:
        text = pitfalls._err_text(exc)
    assert text.startswith("ValueError: first")
    assert "RuntimeError: second" in text and "frame #" not in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU message")
def test_live_pitfalls_refuse_cpu_with_a_clear_message():
    for fn in list(pitfalls.PITFALLS.values()) + [pitfalls.address_demo,
                                                   pitfalls.run_all_pitfalls]:
        with pytest.raises(RuntimeError, match="recorded 'pitfalls' reference"):
            fn("cpu")


# ---------------------------------------------------------------------------- GPU: each pitfall


def _is_pitfall(d: dict) -> None:
    for key in ("name", "what", "error", "fix", "fixed_ok"):
        assert key in d, key
    json.dumps(d)  # JSON-able


@pytest.mark.gpu
def test_gpu_host_sync():
    d = pitfalls.pitfall_host_sync()
    _is_pitfall(d)
    assert d["details"]["labkit_error_class"] == "CaptureSyncError"
    assert "host synchronisation" in d["error"]
    assert d["details"]["device_usable_after_failed_capture"]
    assert d["fixed_ok"]


@pytest.mark.gpu
def test_gpu_dynamic_shape():
    d = pitfalls.pitfall_dynamic_shape()
    _is_pitfall(d)
    assert d["details"]["labkit_error_class"] == "CaptureSyncError"
    assert d["fixed_ok"] and all(d["details"]["fixed_checks"])


@pytest.mark.gpu
def test_gpu_output_overwritten():
    d = pitfalls.pitfall_output_overwritten()
    _is_pitfall(d)
    det = d["details"]
    assert det["same_buffer"] and det["held_before"] == [2.0, 4.0, 6.0, 8.0]
    assert det["held_after"] == [20.0, 40.0, 60.0, 80.0]
    assert det["clone_kept_value"]
    assert det["dispatcher"] == {"copy_outputs_false_kept": False,
                                 "copy_outputs_true_kept": True}
    shared = det["shared_pool"]
    if shared["reused_address"]:
        assert shared["b_overwritten_by_a"] and shared["b_output_after_replay_a"] == 2.0
    assert shared["clone_kept_value"]
    assert d["fixed_ok"]


@pytest.mark.gpu
def test_gpu_input_rebound():
    d = pitfalls.pitfall_input_rebound()
    _is_pitfall(d)
    det = d["details"]
    assert det["stale"] == det["previous_step"] == [2.0, 4.0, 6.0, 8.0]
    assert det["fixed"] == det["expected"] == [20.0, 40.0, 60.0, 80.0]
    assert det["captured_input_ptr"] != det["rebound_ptr"]
    assert d["fixed_ok"]


@pytest.mark.gpu
def test_gpu_rng():
    d = pitfalls.pitfall_rng()
    _is_pitfall(d)
    det = d["details"]
    assert det["device_draws_differ"] and det["host_draws_identical"]
    assert det["reseed_repeats_draw"]
    assert d["fixed_ok"]


@pytest.mark.gpu
def test_gpu_address_demo():
    d = pitfalls.address_demo()
    json.dumps(d)
    assert d["identical_across_replays"] and d["same_pool"] and d["absolute"]
    a, b = d["graphs"]
    assert a["output_segment"]["segment_pool_id"] == a["pool_id"]
    assert a["output_ptr"] != b["output_ptr"]
    k = d["kernel_args"]
    if k is not None and "error" not in k:      # needs the cuda-python bindings
        assert k["input_ptr_found"] and k["output_ptr_found"]
    assert "identical" in pitfalls.describe_addresses(d)


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_compiled_output_overwritten():
    d = pitfalls.compiled_output_overwritten()
    _is_pitfall(d)
    assert "overwritten by a subsequent run" in d["error"]
    assert d["details"]["raised_right_after_compile"]
    assert d["details"]["mark_step_begin_ok"]
    assert d["fixed_ok"]


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_run_all_pitfalls_is_json_and_complete():
    rec = pitfalls.run_all_pitfalls()
    json.dumps(rec)
    assert [p["name"] for p in rec["pitfalls"]] == list(pitfalls.PITFALL_NAMES)
    assert all(p["fixed_ok"] for p in rec["pitfalls"])
    assert rec["address_demo"]["identical_across_replays"]


def test_error_texts_carry_file_names_not_machine_paths():
    text = 'Stack trace: File "/home/me/src/labkit/measure/pitfalls.py", line 22, in f'
    assert pitfalls._strip_paths(text) == 'Stack trace: File "pitfalls.py", line 22, in f'
    assert pitfalls._strip_paths("ratio 1/2, a/b") == "ratio 1/2, a/b"
