"""A CPU stand-in for a captured CUDA graph, for the pitfall exercises on machines without a GPU.

:class:`SimulatedGraph` keeps the two properties of a graph that the input and output pitfalls
depend on (it reads the tensors it was captured with, and writes into one static output); the
real demonstrations are in :mod:`labkit.measure.pitfalls`.
"""

from __future__ import annotations

from typing import Callable

import torch


class SimulatedGraph:
    """A CPU stand-in for a captured graph (for exercises without a GPU).

    It keeps the two properties the input/output pitfalls depend on: replay reads the very
    tensors it was "captured" with (a real graph reads their addresses), and it writes into
    one static output tensor, returned by every replay. Nothing is faster: it is a model of
    the semantics, not of the performance.
    """

    def __init__(self, fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> None:
        for i, t in enumerate(inputs):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"input {i} must be a tensor allocated before capture, got "
                                f"{type(t).__name__}")
        self.fn = fn
        self.inputs = tuple(inputs)
        self.output = fn(*self.inputs).clone()

    def replay(self) -> torch.Tensor:
        """Recompute from the captured inputs into the static output; return the output."""
        with torch.no_grad():
            self.output.copy_(self.fn(*self.inputs))
        return self.output
