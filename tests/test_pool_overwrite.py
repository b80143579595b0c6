"""The ``pool_overwrite`` record (notebook 04): its kind, the recorded run, and what the
measurement says without a GPU. The live demonstration is in tests/test_gpu_lessons.py; the
same addresses rule on the CPU stand-in in tests/test_simulated.py."""

from __future__ import annotations

import copy

import pytest
import torch

from labkit.measure import records as R
from labkit.measure.pool_overwrite import measure_pool_overwrite
from labkit.measure.results import save_result

# a record shaped like measure_pool_overwrite's (test data, not a measurement)
DATA = {"device": "test", "torch": "x", "numel": 1024, "dtype": "float32",
        "a_temporary_value": 2.0, "b_expected_value": 105.0,
        "a_temporary_ptr": 0x7F0000000000, "b_output_ptr": 0x7F0000000000, "same_block": True,
        "b_in_capture_order": [105.0], "b_after_replay_b": [105.0], "b_after_replay_a": [2.0],
        "overwritten": True,
        "fix_clone": {"copy_after_replay_a": [105.0], "kept_output_after_replay_a": [2.0],
                      "ok": True},
        "fix_keep_a_temporary": {"a_temporary_ptr": 0x7F0000000000,
                                 "b_output_ptr": 0x7F0000800000, "same_block": False,
                                 "b_after_replay_a": [105.0], "ok": True},
        "fixed": True}


def test_kind_and_defaults():
    assert R.kind_of("pool_overwrite") is R.PoolOverwrite
    assert R.default_params("pool_overwrite") == {"numel": 1 << 20}
    rec = R.parse("pool_overwrite", DATA)
    assert rec.same_block and rec.overwritten and rec.b_after_replay_a == [2.0]
    assert rec.fix_clone.values_after_replay_a == [105.0] and rec.fix_clone.ok
    assert rec.fix_keep_a_temporary.same_block is False
    assert rec.fix_keep_a_temporary.b_output_ptr == 0x7F0000800000


def test_a_missing_field_is_named(tmp_path):
    bad = copy.deepcopy(DATA)
    del bad["fix_keep_a_temporary"]["b_after_replay_a"]
    with pytest.raises(R.SchemaError, match=r"data\.fix_keep_a_temporary\.b_after_replay_a"):
        save_result("pool_overwrite", bad, {}, tmp_path)
    assert not (tmp_path / "results" / "pool_overwrite.json").exists()


def test_measurement_names_its_inputs():
    with pytest.raises(ValueError, match="numel must be a positive int"):
        measure_pool_overwrite(numel=-1)
    with pytest.raises(ValueError, match="numel"):
        measure_pool_overwrite(numel=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_without_cuda_it_says_what_to_do_instead():
    with pytest.raises(RuntimeError, match=r"needs a CUDA GPU.*recorded 'pool_overwrite' reference"):
        measure_pool_overwrite("cpu")


def test_the_recorded_h200_run_shows_the_overwrite_and_both_fixes():
    from labkit.measure.results import load_reference

    try:
        res = load_reference("pool_overwrite")
    except FileNotFoundError:
        pytest.skip("no H200 reference recorded yet for pool_overwrite")
    rec = res.record
    assert rec.same_block and rec.a_temporary_ptr == rec.b_output_ptr
    assert rec.b_after_replay_a == [rec.a_temporary_value] and rec.overwritten
    assert rec.fixed and rec.fix_keep_a_temporary.same_block is False
    assert rec.fix_clone.values_after_replay_a == [rec.b_expected_value]
