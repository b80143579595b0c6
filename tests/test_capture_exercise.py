"""Notebook 03's capture exercise, run through the CPU stand-in of ``torch.cuda`` and, on a
GPU (the ``gpu`` tier, marker ``gpu``), through the real one.

The solution's exercise cell is executed as it is (a graph captured with ``standin_cuda`` must
generate the eager tokens), and with the copy-in replaced by a rebinding of the name, which a
graph never sees: the check must then fail (and raise in strict mode).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
import torch

from labkit.model import build_model, generate, preset
from labkit.teach import simulated
from labkit.teach.exercises import StrictExerciseError
from labkit.teach.notebook import NotebookContext

SOLUTION = Path(__file__).resolve().parents[1] / "notebooks" / "solutions" / "03_capture_replay.ipynb"
COPY_IN = "    static_tokens.copy_(tokens)  # in place: the graph reads these very addresses\n"


def exercise_cells() -> tuple[str, str]:
    """The cell that allocates the static buffers, and the learner's capture cell after it."""
    cells = nbformat.read(SOLUTION, as_version=4).cells
    i = next(i for i, c in enumerate(cells)
             if c.cell_type == "code" and 'nb.check("3.1"' in c.source)
    return cells[i - 1].source, cells[i].source


def run_cells(capture: str, tier: str = "cpu") -> dict:
    """Notebook 03's set-up cell and ``capture`` (its exercise cell, or a changed copy), run
    as a notebook of ``tier`` runs them (``"gpu"``: with the real ``torch.cuda``)."""
    setup, _ = exercise_cells()
    ns = {"nb": NotebookContext(name="03_capture_replay", tier=tier, reference_gpu="H200",
                                gpus_here=1 if tier == "gpu" else 0),
          "preset_live": "small", "prompt": [1, 2, 3], "new_tokens": 12,
          "build_model": build_model, "preset": preset}
    exec(compile(setup, "03-setup", "exec"), ns)
    exec(compile(capture, "03-ex-capture", "exec"), ns)
    return ns


def tokens_through(ns: dict) -> tuple[list[list[int]], list[list[int]]]:
    m, prompt = ns["m3"], [ns["prompt"]]
    return (generate(m, prompt, ns["new_tokens"], step_fn=ns["graph_step"]),
            generate(m, prompt, ns["new_tokens"]))


#: the tiers the exercise runs in: the CPU stand-in here, the real ``torch.cuda`` on a GPU
TIERS = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("tier", TIERS)
def test_the_solution_generates_the_eager_tokens(tier, monkeypatch, capsys):
    monkeypatch.setenv("LABKIT_STRICT_EXERCISES", "1")
    ns = run_cells(exercise_cells()[1], tier)
    device = "cuda" if tier == "gpu" else "cpu"
    assert ns["cuda"] is simulated.graph_api(device)   # torch.cuda live, else the stand-in
    assert ns["static_logits"].device.type == device
    if tier == "gpu":
        assert isinstance(ns["g"], torch.cuda.CUDAGraph)
    assert "PASS" in capsys.readouterr().out
    graph, eager = tokens_through(ns)
    assert graph == eager and len(eager[0]) == 12


@pytest.mark.parametrize("tier", TIERS)
def test_rebinding_the_input_instead_of_copying_fails_the_check(tier, monkeypatch, capsys):
    source = exercise_cells()[1]
    assert COPY_IN in source
    wrong = source.replace(COPY_IN, "    static_tokens = tokens  # wrong: a new local name\n")
    monkeypatch.setenv("LABKIT_STRICT_EXERCISES", "0")
    ns = run_cells(wrong, tier)
    assert "TODO" in capsys.readouterr().out
    graph, eager = tokens_through(ns)
    assert graph != eager
    monkeypatch.setenv("LABKIT_STRICT_EXERCISES", "1")
    with pytest.raises(StrictExerciseError, match="graph tokens == eager tokens"):
        run_cells(wrong, tier)


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
