"""Notebook 03's capture exercise, run through the CPU stand-in of ``torch.cuda``.

The solution's exercise cell is executed as it is (a graph captured with ``standin_cuda`` must
generate the eager tokens), and with the copy-in replaced by a rebinding of the name, which a
graph never sees: the check must then fail (and raise in strict mode).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
import torch

from labkit.model import build_model, generate, preset
from labkit.teach import simulated
from labkit.teach.exercises import Exercise, StrictExerciseError

SOLUTION = Path(__file__).resolve().parents[1] / "notebooks" / "solutions" / "03_capture_replay.ipynb"
COPY_IN = "    static_tokens.copy_(tokens)  # solution: copy into the static inputs\n"


def exercise_source() -> str:
    nb = nbformat.read(SOLUTION, as_version=4)
    return next(c.source for c in nb.cells
                if c.cell_type == "code" and 'Exercise("3.1 write the capture")' in c.source)


def run_cell(source: str) -> dict:
    ns = {"nb": SimpleNamespace(live=False), "preset_live": "small", "prompt": [1, 2, 3],
          "new_tokens": 12, "build_model": build_model, "preset": preset,
          "generate": generate, "Exercise": Exercise}
    exec(compile(source, "03-ex-capture", "exec"), ns)
    return ns


def test_the_solution_generates_the_eager_tokens_through_the_stand_in(monkeypatch):
    monkeypatch.setenv("LABKIT_STRICT_EXERCISES", "1")
    ns = run_cell(exercise_source())
    assert ns["cuda"] is simulated.standin_cuda
    assert ns["ex"].passed
    assert ns["graph_tokens_31"] == ns["eager_tokens_31"] and len(ns["eager_tokens_31"][0]) == 12


def test_rebinding_the_input_instead_of_copying_fails_the_check(monkeypatch):
    source = exercise_source()
    assert COPY_IN in source
    wrong = source.replace(COPY_IN, "    static_tokens = tokens  # wrong: a new local name\n")
    monkeypatch.setenv("LABKIT_STRICT_EXERCISES", "0")
    ns = run_cell(wrong)
    assert not ns["ex"].passed
    assert ns["graph_tokens_31"] != ns["eager_tokens_31"]
    monkeypatch.setenv("LABKIT_STRICT_EXERCISES", "1")
    with pytest.raises(StrictExerciseError, match="graph tokens == eager tokens"):
        run_cell(wrong)


def test_stand_in_replay_reads_the_captured_tensors_and_returns_none():
    x = torch.tensor([1.0, 2.0])
    out = torch.zeros(2)
    cuda = simulated.graph_api("cpu")
    g = cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="before capture"):
        g.replay()
    with cuda.graph(g):
        torch.mul(x, 3, out=out)
    x.copy_(torch.tensor([5.0, 6.0]))
    assert g.replay() is None and out.tolist() == [15.0, 18.0]
    x = torch.tensor([7.0, 7.0])                  # rebinding: the graph still reads the old one
    g.replay()
    assert out.tolist() == [15.0, 18.0]
    with pytest.raises(RuntimeError, match="already captured"), cuda.graph(g):
        pass


def test_graph_api_picks_the_device():
    assert simulated.graph_api("cpu") is simulated.standin_cuda
    assert simulated.graph_api("cuda") is torch.cuda
    with pytest.raises(ValueError, match="device must be"):
        simulated.graph_api("meta")
