"""Tests of labkit.measure.pitfalls: rules and error texts everywhere; each live pitfall on a
CUDA GPU (``@pytest.mark.gpu``). Reading the record and the quiz: test_lessons_pitfalls.py;
the CPU stand-in: test_simulated.py."""

from __future__ import annotations

import json

import pytest
import torch

from labkit.measure import pitfalls


# ---------------------------------------------------------------------------- CPU parts


def test_rules_cover_every_pitfall():
    assert set(pitfalls.PITFALL_NAMES) == set(pitfalls.RULES) == set(pitfalls.PITFALLS)


def test_err_text_keeps_chain_and_drops_cpp_frames():
    try:
        try:
            raise ValueError("first")
        except ValueError:
            raise RuntimeError(  # noqa: B904 (the implicit chain is what is tested)
                "second\nframe #0: c10::whatever\nException raised from x")
    except RuntimeError as exc:
        text = pitfalls._err_text(exc)
    assert text.startswith("ValueError: first")
    assert "RuntimeError: second" in text and "frame #" not in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU message")
def test_live_pitfalls_refuse_cpu_with_a_clear_message():
    for fn in [*pitfalls.PITFALLS.values(), pitfalls.address_demo, pitfalls.run_all_pitfalls]:
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
def test_gpu_autocast():
    d = pitfalls.pitfall_autocast()
    _is_pitfall(d)
    det = d["details"]
    assert det["cache_on_stale"] and not det["cache_on_correct"]      # the cached cast is baked in
    assert det["cache_off_correct"] and not det["cache_off_stale"]    # the fix sees the update
    assert det["row0_replay_cache_on"] == det["row0_before"]
    assert "cache_enabled=False" in (det["make_graphed_callables_error"] or "")
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
    assert d["identical_across_replays"] and len(set(d["replay_output_ptrs"])) == 1


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


def test_labkit_capture_error_returns_the_refusal_or_says_none_came(monkeypatch):
    from labkit.graphs import CaptureError
    from labkit.measure.pitfalls import common

    def refuse(fn, *inputs):
        raise CaptureError("no host synchronisation", "stay on the device")

    monkeypatch.setattr(common, "capture_callable", refuse)
    msg, cls = common.labkit_capture_error(lambda t: t, torch.ones(2))
    assert cls == "CaptureError" and "no host synchronisation" in msg and "fix:" in msg
    monkeypatch.setattr(common, "capture_callable", lambda fn, *inputs: object())
    assert common.labkit_capture_error(lambda t: t, torch.ones(2)) == (
        "no error (unexpected: the capture went through)", None)
