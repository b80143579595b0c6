"""Where a captured graph reads and writes: its buffers' device addresses, their allocator
segments and (with the CUDA driver bindings) the addresses in its kernels' arguments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from labkit.graphs import capture_callable
from labkit.measure.pitfalls.common import _cleanup, _err_text, _require_cuda


def _segment_of(ptr: int) -> dict | None:
    for seg in torch.cuda.memory_snapshot():
        base, size = int(seg["address"]), int(seg["total_size"])
        if base <= ptr < base + size:
            return {"segment_base": base, "segment_size": size,
                    "offset_in_segment": ptr - base,
                    "segment_pool_id": list(seg.get("segment_pool_id", (0, 0)))}
    return None


def kernel_pointer_args(graph: torch.cuda.CUDAGraph, ptrs: Sequence[int]) -> dict | None:
    """Which of ``ptrs`` appear as 8-byte values in the kernel arguments of ``graph``
    (captured with ``keep_graph=True``), read through the CUDA driver API; ``None`` without
    the ``cuda-python`` bindings or ``cuFuncGetParamInfo`` (CUDA 12.4+)."""
    try:
        import ctypes

        from cuda.bindings import driver as cu  # type: ignore
    except ImportError:
        return None
    ok = cu.CUresult.CUDA_SUCCESS
    hgraph = cu.CUgraph(graph.raw_cuda_graph())
    err, _, count = cu.cuGraphGetNodes(hgraph, 0)
    err, nodes, count = cu.cuGraphGetNodes(hgraph, count)
    if err != ok:
        return None
    wanted = {int(p) for p in ptrs}
    kernels: list[dict[str, Any]] = []
    for node in nodes:
        err, kind = cu.cuGraphNodeGetType(node)
        if err != ok or kind != cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
            continue
        err, prm = cu.cuGraphKernelNodeGetParams(node)
        base = int(prm.kernelParams) if err == ok else 0
        if not base:
            continue
        words, n_params = [], 0
        for i in range(256):
            res = cu.cuFuncGetParamInfo(prm.func, i)
            if res[0] != ok:
                break
            size = int(res[2])
            arg = ctypes.c_void_p.from_address(base + 8 * i).value
            if arg is None:  # a null parameter pointer: nothing to read there
                break
            data = ctypes.string_at(arg, size)
            words += [int.from_bytes(data[j:j + 8], "little") for j in range(0, size - 7, 8)]
            n_params += 1
        try:
            name = cu.cuFuncGetName(prm.func)[1]
            name = name.decode() if isinstance(name, bytes) else str(name)
        except Exception:
            name = ""
        kernels.append({"kernel": name[:120], "n_params": n_params,
                        "pointers_found": [hex(w) for w in words if w in wanted]})
    found = {hex(p): any(hex(p) in k["pointers_found"] for k in kernels) for p in wanted}
    return {"n_nodes": int(count), "kernels": kernels, "found": found}


def address_demo(device: str | torch.device = "cuda", replays: int = 5) -> dict:
    """Two graphs in one shared pool, A replayed with new inputs: its output's ``data_ptr()``
    each time, each pointer's allocator segment and whether the addresses sit in a graph's
    kernel arguments (:func:`kernel_pointer_args`)."""
    dev = _require_cuda(device)
    pool = torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream()
    n = 4096
    xa = torch.randn(n, device=dev)
    xb = torch.randn(n, device=dev)
    ga = capture_callable(lambda t: t * 2, xa, pool=pool, stream=stream, label="A")
    gb = capture_callable(lambda t: torch.tanh(t) + 1, xb, pool=pool, stream=stream, label="B")
    ptrs = []
    for _ in range(replays):
        xa.copy_(torch.randn(n, device=dev))
        ptrs.append(ga.replay().data_ptr())
    outside = torch.empty(n, device=dev)      # an ordinary tensor, for comparison
    graphs = []
    for label, g, inp in (("A", ga, xa), ("B", gb, xb)):
        graphs.append({"graph": label, "input_ptr": inp.data_ptr(),
                       "output_ptr": g.output.data_ptr(),
                       "input_segment": _segment_of(inp.data_ptr()),
                       "output_segment": _segment_of(g.output.data_ptr()),
                       "pool_id": list(g.pool)})
    # a third graph, kept as a CUDA graph object: read its kernels' arguments
    kernel_args: dict | None
    try:
        xc = torch.randn(n, device=dev)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            _ = xc * 3                          # warm-up
        torch.cuda.current_stream().wait_stream(stream)
        gc_graph = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(gc_graph, pool=pool, stream=stream):
            yc = xc * 3
        torch.cuda.synchronize()
        kernel_args = kernel_pointer_args(gc_graph, [xc.data_ptr(), yc.data_ptr()])
        if kernel_args is not None:
            kernel_args.update(input_ptr=xc.data_ptr(), output_ptr=yc.data_ptr(),
                               input_ptr_found=kernel_args["found"][hex(xc.data_ptr())],
                               output_ptr_found=kernel_args["found"][hex(yc.data_ptr())])
        del gc_graph, xc, yc
    except Exception as exc:
        kernel_args = {"error": _err_text(exc)}
    seg = graphs[0]["output_segment"] or {}
    result = {
        "replay_output_ptrs": ptrs,
        "replay_output_ptrs_hex": [hex(p) for p in ptrs],
        "identical_across_replays": len(set(ptrs)) == 1,
        "graphs": graphs,
        "same_pool": graphs[0]["pool_id"] == graphs[1]["pool_id"],
        "ordinary_tensor_ptr": outside.data_ptr(),
        "absolute": bool(seg) and seg.get("segment_base", 0) > 0
        and ptrs[0] == seg["segment_base"] + seg["offset_in_segment"],
        "kernel_args": kernel_args,
        "note": "data_ptr() is a device virtual address in the process's one address space; "
                "the pool's segments sit at such addresses and a graph's kernels carry them "
                "as arguments",
    }
    del ga, gb, outside
    _cleanup()
    return result
