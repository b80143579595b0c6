"""The all-reduce parts (``allreduce_pg``, ``allreduce_symm``): every method checked for an exact
sum, then timed per message size, eager and captured."""

from __future__ import annotations

import importlib
from typing import Any
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from labkit.graphs import capture_callable
from labkit.measure.tp.rank import _Rank, _say, _time
from labkit.timing import time_cuda
from labkit.distributed.tp import enable_symm_mem, symm_mem_unavailable


def _symm_buffer(r: _Rank, numel: int, dtype: torch.dtype) -> tuple[torch.Tensor, str]:
    """A symmetric-memory buffer of ``numel`` values, rendezvous'd over the world group."""
    why = symm_mem_unavailable(r.device)
    if why:
        raise RuntimeError(f"symmetric memory is unavailable: {why}")
    symm_mem = importlib.import_module("torch.distributed._symmetric_memory")

    world = dist.group.WORLD
    if world is None:
        raise RuntimeError("symmetric memory needs an initialised torch.distributed process "
                           "group; start the ranks with labkit.distributed.launch.run_ranks")
    name = world.group_name
    enable_symm_mem(symm_mem, name)
    buf = symm_mem.empty(numel, dtype=dtype, device=r.device)
    r.symm_handles.append(symm_mem.rendezvous(buf, name))  # kept alive with the buffer
    buf.zero_()
    return buf, name


def _allreduce_ops(kind: str, numel: int, bufs: dict
                   ) -> tuple[Callable[[], Any], Callable[[], torch.Tensor], bool]:
    """(operation, where its result is, whether it reduces in place) for one method kind."""
    if kind == "pg":
        x = bufs["x"][:numel]
        return (lambda: dist.all_reduce(x)), (lambda: x), True
    buf, name = bufs["symm"]
    b = buf[:numel]
    if kind == "one_shot":
        out = bufs["out"][:numel]
        if hasattr(torch.ops.symm_mem, "one_shot_all_reduce_out"):
            op = lambda: torch.ops.symm_mem.one_shot_all_reduce_out(b, "sum", name, out)  # noqa
        else:
            op = lambda: out.copy_(torch.ops.symm_mem.one_shot_all_reduce(b, "sum", name))  # noqa
        return op, (lambda: out), False
    return (lambda: torch.ops.symm_mem.two_shot_all_reduce_(b, "sum", name)), (lambda: b), True


def _fill(kind: str, numel: int, bufs: dict, value: float) -> None:
    src = bufs["x"] if kind == "pg" else bufs["symm"][0]
    src[:numel].fill_(value)
    if kind == "one_shot":
        bufs["out"][:numel].zero_()


def _check_sum(r: _Rank, kind: str, numel: int, bufs: dict, run: Callable[[], Any],
               ops: int) -> bool:
    """Each rank puts ``rank + 1``; after ``ops`` reductions the result must be exactly
    ``S * N**(ops-1)`` in place, ``S`` out of place."""
    n = r.world_size
    s = n * (n + 1) / 2
    _fill(kind, numel, bufs, float(r.rank + 1))
    run()
    _, result, inplace = _allreduce_ops(kind, numel, bufs)
    want = s * n ** (ops - 1) if inplace else s
    ok = bool((result().float() == want).all())
    _fill(kind, numel, bufs, 0.0)
    if r.device.type == "cuda":
        torch.cuda.synchronize()
    return ok


def _sweep_method(r: _Rank, kind: str, graph: bool, bufs: dict) -> None:
    """Time one all-reduce method at every size; a size that fails is recorded, the next runs."""
    spec = r.spec
    method = f"{kind}_{'graph' if graph else 'eager'}"
    sizes = spec["sizes_bytes"]
    elem = bufs["elem"]
    col: list[dict | None] = [None] * len(sizes)
    r.out["times"][method] = col
    k = spec["graph_ops"]
    checked = False
    if graph and r.device.type != "cuda":
        r.out["skipped"][method] = "CUDA graphs need CUDA; on CPU only eager is timed"
        return
    for i, nbytes in enumerate(sizes):
        numel = nbytes // elem

        def one() -> dict:
            nonlocal checked
            op, _, _ = _allreduce_ops(kind, numel, bufs)
            if not graph:
                if not checked:
                    r.out["checks"][f"sum_exact.{method}"] = _check_sum(r, kind, numel, bufs,
                                                                         op, 1)
                    checked = True
                return _time(op, r.device, spec["repeats"], k).to_dict()

            def many() -> None:
                for _ in range(k):
                    op()

            cg = capture_callable(many, warmup=1, check_sync=False)
            try:
                if not checked:
                    r.out["checks"][f"sum_exact.{method}"] = _check_sum(
                        r, kind, numel, bufs, cg.graph.replay, k)
                    checked = True
                st = time_cuda(cg.graph.replay, warmup=2, repeats=spec["repeats"],
                               inner=spec["graph_replays"])
                return st.per(k).to_dict()  # one replay runs k all-reduces
            finally:
                cg.graph.reset()
                del cg

        col[i] = r.attempt(f"{method}.{nbytes}", one)
    _say(r.rank, f"{method}: " + ", ".join(
        f"{b // 1024}K {c['median']:.1f}us" for b, c in zip(sizes, col) if c))


def _allreduce_part(r: _Rank, kinds: Sequence[str]) -> None:
    spec = r.spec
    dtype = getattr(torch, spec["dtype"])
    elem = torch.empty((), dtype=dtype).element_size()
    numel = max(spec["sizes_bytes"]) // elem
    bufs: dict[str, Any] = {"elem": elem,
                            "x": torch.zeros(numel, dtype=dtype, device=r.device)}
    if any(k != "pg" for k in kinds):
        got = r.attempt("symm_mem.rendezvous", lambda: _symm_buffer(r, numel, dtype))
        if got is None:
            for k in kinds:
                for m in ("eager", "graph"):
                    r.out["errors"].setdefault(f"{k}_{m}", r.out["errors"].get(
                        "symm_mem.rendezvous", "symmetric memory unavailable"))
            return
        bufs["symm"] = got
        bufs["out"] = torch.zeros(numel, dtype=dtype, device=r.device)
    for kind in kinds:
        for graph in (False, True):
            _sweep_method(r, kind, graph, bufs)
    bufs.clear()
    r.symm_handles.clear()
