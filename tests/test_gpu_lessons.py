"""CUDA tests (marker ``gpu``) of the lessons' live paths: the shared-pool overwrite (notebook
04) and PyTorch's own graph API as notebook 07 shows it (exercise 3.1 of notebook 03 runs live
in ``test_capture_exercise.py``, its ``gpu`` tier).

Skipped without CUDA; on a GPU: ``pytest -m gpu tests/test_gpu_lessons.py``.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from labkit.measure import records
from labkit.measure.pool_overwrite import A_SCALE, B_SHIFT, RECORD, measure_pool_overwrite

pytestmark = pytest.mark.gpu
SOLUTIONS = Path(__file__).resolve().parents[1] / "notebooks" / "solutions"


def _cell(notebook: str, marker: str) -> str:
    nbformat = pytest.importorskip("nbformat", reason="reads the solution notebooks")
    nb = nbformat.read(SOLUTIONS / notebook, as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "code" and marker in c.source)


# ------------------------------------------------------------------ 04: the shared-pool overwrite


def test_overwrite_b_output_takes_a_freed_temporary_and_a_replay_overwrites_it():
    data = measure_pool_overwrite()
    rec = records.parse(RECORD, data)
    assert rec.same_block and rec.a_temporary_ptr == rec.b_output_ptr
    b_value = 5.0 + B_SHIFT
    assert rec.b_in_capture_order == [b_value]          # read right after A, B: correct
    assert rec.b_after_replay_b == [b_value]
    assert rec.b_after_replay_a == [1.0 * A_SCALE]      # A's temporary, in B's kept output
    assert rec.overwritten


def test_overwrite_fixes_clone_and_keeping_a_temporary_alive():
    rec = records.parse(RECORD, measure_pool_overwrite(numel=1 << 18))
    assert rec.fix_clone.ok and rec.fix_clone.values_after_replay_a == [5.0 + B_SHIFT]
    keep = rec.fix_keep_a_temporary
    assert keep.ok and keep.same_block is False and keep.a_temporary_ptr != keep.b_output_ptr
    assert rec.fixed


def test_overwrite_refuses_bad_numel_before_touching_the_gpu():
    with pytest.raises(ValueError, match="numel must be a positive int"):
        measure_pool_overwrite(numel=0)


# ------------------------------------------------------------------ 07: PyTorch's API as shown


def test_api_cell_of_07_shows_replay_returning_none_live():
    source = _cell("07_pitfalls.ipynb", "torch.cuda.CUDAGraph.replay() returned")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "07-api", "exec"), {"nb": SimpleNamespace(live=True),
                                                 "torch": torch})
    text = out.getvalue()
    assert "torch.cuda.CUDAGraph has .inputs: False" in text
    assert "torch.cuda.CUDAGraph.replay() returned: None" in text
    assert "the result is in static_out: [2.0, 2.0, 2.0, 2.0]" in text


def test_api_replay_returns_none_and_graph_has_no_inputs():
    static_in = torch.ones(4, device="cuda")
    static_in * 3                                      # warm-up before capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = static_in * 3
    static_in.fill_(2.0)
    assert g.replay() is None
    assert static_out.tolist() == [6.0] * 4
    assert not hasattr(g, "inputs") and not hasattr(g, "output")


# ------------------------------------------------------------------ one count of GPU ops per step


def test_ops_count_is_the_step_alone_three_below_a_count_that_makes_its_inputs():
    from labkit.measure.bench import count_gpu_ops, count_step_ops, make_model, step_inputs

    model = make_model("small", max_batch=8, dtype="bfloat16")
    alone = count_step_ops(model)
    with_inputs = count_gpu_ops(lambda: model.decode_step(*step_inputs(model, 1)))
    assert alone > 0
    assert with_inputs - alone == 3          # tokens, positions, slots copied to the GPU
    assert count_step_ops(model) == alone    # the same every time
