"""CPU stand-ins for captured CUDA graphs (what a graph reads and writes, not its speed):
:data:`standin_cuda` for the ``torch.cuda`` names a capture uses, :func:`graph_api` to pick it.
Capture records each aten op with its memory; replay reruns them on it. A tensor the capture
creates gets a block of the graph's pool, as in ``c10/cuda/CUDACachingAllocator.cpp``: free once
unused (the graph still writes it), best fit for a later capture into the pool. Simplified: a
block is a whole storage (no splitting, rounding, segments or streams)."""

from __future__ import annotations

import weakref
from contextlib import contextmanager, nullcontext
from types import SimpleNamespace
from typing import Any
from collections.abc import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

_BLOCKS: Any = weakref.WeakValueDictionary()  # address of every live block -> its pool


class Pool:
    """Stand-in for a graph memory pool (``graph_pool_handle()``): its ``blocks``."""

    def __init__(self) -> None:
        self.blocks: list[torch.UntypedStorage] = []

    def take(self, nbytes: int) -> torch.UntypedStorage:
        """The smallest free block (used by the pool alone) of ``nbytes`` or more, or a new one."""
        free = [b for b in self.blocks
                if b.nbytes() >= nbytes and torch._C._storage_Use_Count(b._cdata) == 1]
        if not free:
            free = [torch.UntypedStorage(nbytes)]
            self.blocks.append(free[0])
            _BLOCKS[free[0].data_ptr()] = self
        return min(free, key=lambda b: b.nbytes())


class _Ref:
    """Where a tensor on a block lies: the tape keeps this (a graph keeps addresses), not the
    tensor, so a tensor dropped during capture frees its block."""

    def __init__(self, t: torch.Tensor) -> None:
        self.at = (t.untyped_storage(), t.storage_offset(), t.size(), t.stride())
        self.dtype = t.dtype

    def tensor(self) -> torch.Tensor:
        return torch.empty(0, dtype=self.dtype).set_(*self.at)


class _Recorder(TorchDispatchMode):
    def __init__(self, tape: list, pool: Pool) -> None:
        super().__init__()
        self.tape, self.pool = tape, pool

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves, spec = tree_flatten(func(*args, **kwargs))
        read = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                if isinstance(t, torch.Tensor)}
        made = []
        for i, t in enumerate(leaves):  # a new, non-empty storage: move it onto a block
            if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes() \
                    and t.untyped_storage().data_ptr() not in read:
                block = self.pool.take(t.untyped_storage().nbytes())
                leaves[i] = torch.empty(0, dtype=t.dtype).set_(
                    block, t.storage_offset(), t.size(), t.stride()).copy_(t)
                made.append((i, _Ref(leaves[i])))
        ref = lambda t: _Ref(t) if isinstance(t, torch.Tensor) and (  # noqa: E731
            t.untyped_storage().data_ptr() in _BLOCKS) else t
        self.tape.append((func, tree_map(ref, args), tree_map(ref, kwargs), made))
        return tree_unflatten(leaves, spec)


class StandInGraph:
    """Stand-in for ``torch.cuda.CUDAGraph``: :meth:`replay` reruns the captured ops on the
    captured memory (``copy_`` into a static input is seen, rebinding a name is not)."""

    def __init__(self) -> None:
        self._tape: list = []
        self._pool: Pool | None = None
        self.captured = False

    def pool(self) -> Pool | None:
        """This graph's pool (``None`` before capture), to capture another graph into it."""
        return self._pool

    def replay(self) -> None:
        if not self.captured:
            raise RuntimeError("replay() before capture: capture the graph first with "
                               "`with graph(g): ...`")
        with torch.no_grad():
            for func, args, kwargs, made in self._tape:
                live = lambda x: x.tensor() if isinstance(x, _Ref) else x  # noqa: E731
                leaves = tree_flatten(func(*tree_map(live, args), **tree_map(live, kwargs)))[0]
                for i, ref in made:
                    ref.tensor().copy_(leaves[i])


@contextmanager
def graph(g: StandInGraph, pool: Pool | None = None, stream: Any = None) -> Iterator[None]:
    """Stand-in for ``torch.cuda.graph(g, pool=...)``: record the body into ``g``, from ``pool``."""
    if not isinstance(g, StandInGraph) or g.captured:
        raise RuntimeError(f"graph() needs a new CUDAGraph(), got {g!r} (a graph already "
                           "captured cannot be captured again)")
    if not isinstance(pool, (Pool, type(None))):
        raise TypeError(f"pool must come from graph_pool_handle() or g.pool(), got {pool!r}")
    g._pool = pool or Pool()
    with _Recorder(g._tape, g._pool):
        yield
    g.captured = True


class SimulatedGraph:
    """``fn(*inputs)`` captured: ``replay()`` recomputes it from ``.inputs`` into ``.output``."""

    def __init__(self, fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> None:
        bad = [i for i, t in enumerate(inputs) if not isinstance(t, torch.Tensor)]
        if bad:
            raise TypeError(f"input {bad[0]} must be a tensor allocated before capture")
        self.inputs, self._graph = tuple(inputs), StandInGraph()
        with torch.no_grad(), graph(self._graph):
            self.output = fn(*self.inputs).clone()

    def replay(self) -> torch.Tensor:
        self._graph.replay()
        return self.output


_STREAM = SimpleNamespace(wait_stream=lambda other: None)  # CPU work runs in order

#: the names a hand-written capture uses, as ``torch.cuda`` spells them
standin_cuda = SimpleNamespace(CUDAGraph=StandInGraph, graph=graph, graph_pool_handle=Pool,
                               Stream=lambda: _STREAM, current_stream=lambda: _STREAM,
                               stream=lambda stream: nullcontext())


def graph_api(device: str | torch.device) -> Any:
    """``torch.cuda`` on a CUDA device, else the CPU stand-in :data:`standin_cuda`."""
    kind = torch.device(device).type
    if kind not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    return torch.cuda if kind == "cuda" else standin_cuda
