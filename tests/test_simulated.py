"""labkit.teach.simulated.SimulatedGraph: the CPU stand-in keeps a graph's input/output semantics."""

from __future__ import annotations

import pytest
import torch

from labkit.teach.simulated import SimulatedGraph


def test_simulated_graph_rebinding_is_stale_and_copy_fixes_it():
    static_x = torch.zeros(3)
    g = SimulatedGraph(lambda t: t * 2, static_x)
    static_x.copy_(torch.tensor([1.0, 2.0, 3.0]))
    assert g.replay().tolist() == [2.0, 4.0, 6.0]
    static_x = torch.tensor([5.0, 5.0, 5.0])       # rebinding: the graph never sees it
    assert g.replay().tolist() == [2.0, 4.0, 6.0]
    g.inputs[0].copy_(static_x)                     # the fix
    assert g.replay().tolist() == [10.0, 10.0, 10.0]


def test_simulated_graph_output_is_static_and_overwritten():
    x = torch.ones(2)
    g = SimulatedGraph(lambda t: t + 1, x)
    held = g.replay()
    kept = held.clone()
    x.fill_(10.0)
    again = g.replay()
    assert again is held and held.tolist() == [11.0, 11.0]
    assert kept.tolist() == [2.0, 2.0]


def test_simulated_graph_rejects_non_tensor_inputs():
    with pytest.raises(TypeError, match="input 0"):
        SimulatedGraph(lambda t: t, [1.0, 2.0])
