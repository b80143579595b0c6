"""Capture plumbing that can be checked without a GPU: error translation and refusals."""

import pytest
import torch

from labkit.graphs import (CaptureAllocationError, CaptureError, CaptureOOMError,
                           CaptureSyncError, capture_callable, capture_decode_graphs,
                           translate_capture_error)
from labkit.model import build_model, preset


def _raise(exc):
    try:
        raise exc
    except BaseException as e:
        return e


def test_sync_debug_error_becomes_sync_error():
    e = translate_capture_error(_raise(RuntimeError("called a synchronizing CUDA operation")))
    assert isinstance(e, CaptureSyncError)
    assert "host synchronisation" in str(e) and "fix:" in str(e)


def test_capture_errors_are_classified():
    e = translate_capture_error(_raise(RuntimeError(
        "CUDA error: operation not permitted when stream is capturing")))
    assert isinstance(e, CaptureAllocationError) and "static.copy_" in str(e)
    oom = translate_capture_error(_raise(torch.cuda.OutOfMemoryError("CUDA out of memory")))
    assert isinstance(oom, CaptureOOMError) and "max_batch" in str(oom)
    other = ValueError("unrelated")
    assert translate_capture_error(other) is other
    assert issubclass(CaptureSyncError, CaptureError)


def test_chained_oom_is_found():
    try:
        try:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        except Exception as inner:
            raise RuntimeError("capture_end failed") from inner
    except RuntimeError as outer:
        assert isinstance(translate_capture_error(outer), CaptureOOMError)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU behaviour")
def test_capture_refuses_cleanly_without_cuda():
    m = build_model(preset("test"))
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        capture_decode_graphs(m, [1, 2])
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        capture_callable(lambda t: t + 1, torch.ones(2))


def test_check_capture_sizes_sorts_and_refuses_instead_of_coercing():
    from labkit.graphs import check_capture_sizes

    assert check_capture_sizes([8, 1, 4], 8) == [1, 4, 8]
    import numpy as np
    assert check_capture_sizes(np.array([2, 1])) == [1, 2]
    for bad, error, words in [([2.5], TypeError, "int"), (["3"], TypeError, "int"),
                              ([True], TypeError, "bool"), ([1, 1], ValueError, "once"),
                              ([], ValueError, "empty"), ([0], ValueError, ">= 1"),
                              (4, TypeError, "list")]:
        with pytest.raises(error, match=words):
            check_capture_sizes(bad)
    with pytest.raises(ValueError, match="max_batch"):
        check_capture_sizes([1, 16], 8)


def test_capture_arguments_are_checked_before_cuda_is_needed():
    m = build_model(preset("test"))
    with pytest.raises(ValueError, match="pool"):
        capture_decode_graphs(m, [1, 2], pool="pooled")
    with pytest.raises(TypeError, match="warmup"):
        capture_decode_graphs(m, [1, 2], warmup=2.5)
    with pytest.raises(TypeError, match="capture sizes"):
        capture_decode_graphs(m, [1, "2"])
