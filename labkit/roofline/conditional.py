"""What this PyTorch offers of CUDA graph *conditional nodes* (IF / WHILE, CUDA 12.4+).

A conditional node runs its child graph when (IF) or while (WHILE) a device value says so, so
a decode loop that stops at an end token could live in one graph (notebook 12 gives the
history). :func:`conditional_support` only looks; :func:`if_node_demo` captures an IF node.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

__all__ = ["conditional_support", "if_node_demo", "IF_METHODS", "WHILE_METHODS"]

#: methods of ``torch._C._CUDAGraph`` an IF node needs (PyTorch's own binding)
IF_METHODS = ("get_currently_capturing_graph", "begin_capture_to_if_node",
              "end_capture_to_conditional_node")
#: a WHILE-node binding, were there one (none in the releases checked)
WHILE_METHODS = ("begin_capture_to_while_node",)


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except Exception:
        return False
    return True


def conditional_support() -> dict[str, Any]:
    """What this process can use (imports and attributes only): torch and CUDA versions, a
    GPU, the IF / WHILE node methods of ``CUDAGraph``, torch's ``torch.cond`` capture helper,
    and cuda-python (the route NeMo takes to build WHILE nodes by hand)."""
    graph_cls = getattr(torch._C, "_CUDAGraph", None)
    def has(name: str) -> bool:
        return graph_cls is not None and hasattr(graph_cls, name)
    cuda_python = next((m for m in ("cuda.bindings.runtime", "cuda.cudart") if _importable(m)),
                       None)
    return {
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cuda_built": bool(torch.backends.cuda.is_built()),
        "gpu_available": bool(torch.cuda.is_available()),
        "if_node": all(has(m) for m in IF_METHODS),
        "while_node": all(has(m) for m in WHILE_METHODS),
        "torch_cond_capture": _importable("torch._higher_order_ops.cudagraph_conditional_nodes"),
        "cuda_python": cuda_python,
    }


def if_node_demo() -> dict[str, Any]:
    """Capture ``x += 1`` in an IF node, replay it with the predicate on, off, on; never raises."""
    support = conditional_support()
    if not support["gpu_available"]:
        return {"ok": False, "values": [], "error": "no CUDA GPU in this process"}
    if not support["if_node"]:
        return {"ok": False, "values": [],
                "error": f"torch {support['torch']} has no IF-node binding on CUDAGraph"}
    try:
        x = torch.zeros(1, device="cuda")
        pred = torch.ones((), dtype=torch.bool, device="cuda")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            current = torch._C._CUDAGraph.get_currently_capturing_graph()
            current.begin_capture_to_if_node(pred)
            try:
                x.add_(1)
            finally:
                current.end_capture_to_conditional_node()
        values = []
        for flag in (True, False, True):
            pred.fill_(flag)
            graph.replay()
            values.append(float(x.item()))
        return {"ok": values == [1.0, 1.0, 2.0], "values": values, "error": None}
    except Exception as exc:
        return {"ok": False, "values": [], "error": f"{type(exc).__name__}: {exc}"}
