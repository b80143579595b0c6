"""A CPU stand-in for a captured CUDA graph, for the pitfall exercises on machines without a GPU.

:class:`SimulatedGraph` keeps the two properties of a graph that the input and output pitfalls
depend on (it reads the tensors it was captured with, and writes into one static output); the
real demonstrations are in :mod:`labkit.measure.pitfalls`.

:data:`standin_cuda` mirrors the part of ``torch.cuda`` that a hand-written capture uses
(``CUDAGraph``, ``graph``, ``Stream``, ``stream``, ``current_stream``) so that notebook 03's
capture exercise runs on a CPU; :func:`graph_api` picks it or the real ``torch.cuda``.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map


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


# ------------------------------------------------------- a stand-in for torch.cuda's graph API


class _Stream:
    """Stand-in for ``torch.cuda.Stream``: CPU work is in order, so waiting is a no-op."""

    def wait_stream(self, other: "_Stream") -> None:
        """Order this stream after ``other`` (nothing to do on the CPU)."""


class _Recorder(TorchDispatchMode):
    """Records every aten op run inside it, with the tensors it read and wrote."""

    def __init__(self, tape: list) -> None:
        super().__init__()
        self.tape = tape

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.tape.append((func, args, kwargs, out))
        return out


class StandInGraph:
    """Stand-in for ``torch.cuda.CUDAGraph`` on the CPU, with the same static-buffer semantics.

    Capture (:func:`graph`) runs the body once and records each operation with the very
    tensors it read and wrote; :meth:`replay` runs the recorded operations again on those
    tensors. So, as with a real graph, a replay reads the static inputs captured (rebinding a
    Python name to a new tensor is not seen; ``copy_`` into the static tensor is) and writes
    into the same outputs, and it returns ``None``. Nothing is faster: it models what a graph
    reads and writes, not its speed.
    """

    def __init__(self) -> None:
        self._tape: list = []
        self.captured = False

    def replay(self) -> None:
        """Run the recorded operations again on the captured tensors (returns ``None``)."""
        if not self.captured:
            raise RuntimeError("replay() before capture: capture the graph first with "
                               "`with graph(g): ...`")
        remap: dict[int, Any] = {}

        def sub(x: Any) -> Any:
            return remap.get(id(x), x) if isinstance(x, torch.Tensor) else x

        with torch.no_grad():
            for func, args, kwargs, out in self._tape:
                new = func(*tree_map(sub, args), **tree_map(sub, kwargs))
                old_leaves, new_leaves = tree_flatten(out)[0], tree_flatten(new)[0]
                for o, n in zip(old_leaves, new_leaves):
                    if isinstance(o, torch.Tensor) and o is not n:
                        remap[id(o)] = n


@contextmanager
def graph(g: StandInGraph, pool: Any = None, stream: Any = None) -> Iterator[None]:
    """Stand-in for ``torch.cuda.graph(g)``: record the body's operations into ``g``."""
    if not isinstance(g, StandInGraph):
        raise TypeError(f"graph() needs a StandInGraph, got {type(g).__name__}; make one with "
                        "CUDAGraph()")
    if g.captured:
        raise RuntimeError("this graph is already captured; make a new CUDAGraph() to capture "
                           "again")
    with _Recorder(g._tape):
        yield
    g.captured = True


@contextmanager
def stream(s: _Stream) -> Iterator[None]:
    """Stand-in for ``torch.cuda.stream(s)``: run the body (in order, on the CPU)."""
    yield


_CURRENT = _Stream()


def current_stream() -> _Stream:
    """Stand-in for ``torch.cuda.current_stream()``."""
    return _CURRENT


#: the names the capture exercise uses, as ``torch.cuda`` spells them
standin_cuda = SimpleNamespace(CUDAGraph=StandInGraph, graph=graph, Stream=_Stream,
                               stream=stream, current_stream=current_stream)


def graph_api(device: str | torch.device) -> Any:
    """``torch.cuda`` on a CUDA device, else the CPU stand-in :data:`standin_cuda`
    (``CUDAGraph``, ``graph``, ``Stream``, ``stream``, ``current_stream``)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda
    if kind == "cpu":
        return standin_cuda
    raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
