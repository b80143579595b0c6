"""The CUDA level of a WHILE conditional node (:mod:`labkit.roofline.while_loop`): cuda-python
and NVRTC, as NVIDIA NeMo builds its nodes (``nemo/core/utils/cuda_python_utils.py``).

:func:`capture_cuda_python` captures the loop's init and body as two PyTorch graphs
(``keep_graph=True``) and assembles the parent by hand: a conditional handle
(``cudaGraphConditionalHandleCreate``, default 1 at each launch), the init as a child graph,
the WHILE node (``cudaGraphAddNode``) and the body as a child graph of the node's body graph;
the condition is set on the device by a one-thread kernel calling ``cudaGraphSetConditional``
(compiled by NVRTC, launched with ``cuLaunchKernel`` at the end of the body's capture).
:func:`capture_torch` uses PyTorch's own binding where a torch has it (PR #184989).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import importlib
import importlib.util
import os
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["MIN_CUDA", "call", "capture_cuda_python", "capture_torch", "cuda_python",
           "nvrtc_version", "version_tuple", "TORCH_WHILE_METHODS"]

#: methods of ``torch._C._CUDAGraph`` the torch route needs (PyTorch PR #184989)
TORCH_WHILE_METHODS = ("get_currently_capturing_graph", "begin_capture_to_while_node",
                       "set_conditional_handle_for_current_node",
                       "end_capture_to_conditional_node")
MIN_CUDA = (12, 4)
#: ``cudaGraphCondAssignDefault`` (``driver_types.h``): apply the default at every launch
_ASSIGN_DEFAULT = 1
_KERNEL_NAME = "labkit_set_while"
# the two declarations NeMo writes out too, so that NVRTC needs no CUDA include directory
_KERNEL_SOURCE = r"""
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);
extern "C" __global__ void labkit_set_while(cudaGraphConditionalHandle handle, const bool* go)
{
    cudaGraphSetConditional(handle, *go ? 1u : 0u);
}
"""


def version_tuple(text: str | None) -> tuple[int, int] | None:
    try:
        major, minor = (text or "").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def cuda_python() -> tuple[Any, Any, Any, str]:
    """cuda-python's runtime, driver and NVRTC modules and its version (raises ImportError)."""
    rt = importlib.import_module("cuda.bindings.runtime")
    drv = importlib.import_module("cuda.bindings.driver")
    nvrtc = importlib.import_module("cuda.bindings.nvrtc")
    version = str(getattr(importlib.import_module("cuda.bindings"), "__version__", "?"))
    return rt, drv, nvrtc, version


def call(result: Any, what: str) -> Any:
    """A cuda-python call's result without its status: raises naming ``what`` on failure."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"{what} failed with {err!r}; the WHILE node cannot be built "
                           "(check the driver supports CUDA >= 12.4 and cuda-python matches "
                           "torch's CUDA major version)")
    return values[0] if len(values) == 1 else tuple(values) or None


def _nvrtc_candidates() -> list[str]:
    """``libnvrtc.so.*`` inside the ``nvidia`` wheels (``nvidia/cu13/lib``,
    ``nvidia/cuda_nvrtc/lib``): torch's CUDA wheels install them."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    found = [p for r in roots for p in sorted(glob.glob(os.path.join(r, "*", "lib",
                                                                      "libnvrtc.so.*")))]
    major = (torch.version.cuda or "").split(".")[0]
    return sorted(found, key=lambda p: not p.endswith(f".so.{major}"))


def nvrtc_version(nvrtc: Any) -> tuple[int, int]:
    """NVRTC's version, loading the library from torch's ``nvidia`` wheels if cuda-python's
    own search misses it."""
    try:
        return call(nvrtc.nvrtcVersion(), "nvrtcVersion")
    except Exception as first:
        for path in _nvrtc_candidates():
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return call(nvrtc.nvrtcVersion(), "nvrtcVersion")
            except Exception:
                continue
        raise RuntimeError(f"NVRTC not found ({first})") from first


@functools.cache
def _set_while_kernel(device_index: int) -> tuple[Any, Any]:
    """The condition kernel, compiled by NVRTC for this GPU (a cubin; PTX if that fails) and
    loaded: ``(module, function)``."""
    _, drv, nvrtc, _ = cuda_python()
    nvrtc_version(nvrtc)
    major, minor = torch.cuda.get_device_capability(device_index)
    errors = []
    for arch, kind in ((f"sm_{major}{minor}", "CUBIN"), (f"compute_{major}{minor}", "PTX")):
        try:
            image = _compile_retrying(nvrtc, arch, kind)
            module = call(drv.cuModuleLoadData(image), f"cuModuleLoadData ({kind})")
            func = call(drv.cuModuleGetFunction(module, _KERNEL_NAME.encode()),
                         "cuModuleGetFunction")
            return module, func
        except Exception as exc:
            errors.append(f"{kind} for {arch}: {exc}")
    raise RuntimeError("the condition kernel could not be built: " + " | ".join(errors))


def _loaded_nvrtc_dir() -> str | None:
    """The folder of the ``libnvrtc.so`` this process loaded (Linux: ``/proc/self/maps``)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = [line.split()[-1] for line in maps if "/libnvrtc.so" in line]
    except OSError:
        return None
    return os.path.dirname(paths[0]) if paths else None


def _preload_nvrtc_builtins() -> bool:
    """libnvrtc opens ``libnvrtc-builtins`` by name, which a wheel's folder is not on the
    search path for: load the one beside the loaded libnvrtc (or in the ``nvidia`` wheels)."""
    here = _loaded_nvrtc_dir()
    dirs = [here] if here else [os.path.dirname(p) for p in _nvrtc_candidates()]
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "libnvrtc-builtins.so.*"))):
            if ".alt." in os.path.basename(path):
                continue
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return True
            except OSError:
                continue
    return False


def _compile_retrying(nvrtc: Any, arch: str, kind: str) -> bytes:
    """:func:`_compile`, once more after loading libnvrtc-builtins if NVRTC could not."""
    try:
        return _compile(nvrtc, arch, kind)
    except RuntimeError as exc:
        if "builtins" not in str(exc) or not _preload_nvrtc_builtins():
            raise
        return _compile(nvrtc, arch, kind)


def _compile(nvrtc: Any, arch: str, kind: str) -> bytes:
    prog = call(nvrtc.nvrtcCreateProgram(_KERNEL_SOURCE.encode(), b"labkit_while.cu", 0,
                                          [], []), "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode()]
        status = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if int(status[0]) != 0:
            size = call(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            log = bytearray(size)
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"nvrtcCompileProgram failed: {log.decode(errors='replace')}")
        size = call(getattr(nvrtc, f"nvrtcGet{kind}Size")(prog), f"nvrtcGet{kind}Size")
        image = bytearray(size)
        call(getattr(nvrtc, f"nvrtcGet{kind}")(prog, image), f"nvrtcGet{kind}")
        return bytes(image)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _launch_set_while(drv: Any, func: Any, handle: Any, go: torch.Tensor) -> None:
    """Launch (capture) the condition kernel on the current stream: handle <- ``*go``."""
    handle_arg = ctypes.c_ulonglong(int(handle))
    go_arg = ctypes.c_void_p(go.data_ptr())
    params = (ctypes.c_void_p * 2)(ctypes.addressof(handle_arg), ctypes.addressof(go_arg))
    call(drv.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, torch.cuda.current_stream().cuda_stream,
                             ctypes.addressof(params), 0), "cuLaunchKernel (condition kernel)")


def _add_while_node(rt: Any, version: str, parent: Any, after: Any,
                    handle: Any) -> tuple[Any, Any]:
    """Add a WHILE node after ``after`` to ``parent``: ``(node, its body graph)``."""
    params = rt.cudaGraphNodeParams()
    params.type = rt.cudaGraphNodeType.cudaGraphNodeTypeConditional
    params.conditional.handle = handle
    params.conditional.type = rt.cudaGraphConditionalNodeType.cudaGraphCondTypeWhile
    params.conditional.size = 1
    if (version_tuple(version) or (13, 0)) >= (13, 0):  # CUDA 13 added edge data (None: default)
        node = call(rt.cudaGraphAddNode(parent, [after], None, 1, params), "cudaGraphAddNode")
    else:
        node = call(rt.cudaGraphAddNode(parent, [after], 1, params), "cudaGraphAddNode")
    return node, params.conditional.phGraph_out[0]


def _destroy(rt: Any, graph_exec: Any, parent: Any) -> None:
    with contextlib.suppress(Exception):  # no launch may still run (none at shutdown)
        torch.cuda.synchronize()
    if graph_exec is not None:
        rt.cudaGraphExecDestroy(graph_exec)
    if parent is not None:
        rt.cudaGraphDestroy(parent)


def capture_cuda_python(loop: Any, pool: Any, stream: torch.cuda.Stream
                         ) -> tuple[Callable[[], None], list[Any], Callable[[], None]]:
    """The parent graph assembled by hand (module docstring): ``(launch, kept, release)``."""
    rt, drv, _, version = cuda_python()
    index = loop.out.device.index if loop.out.device.index is not None \
        else torch.cuda.current_device()
    call(rt.cudaSetDevice(index), "cudaSetDevice")
    module, func = _set_while_kernel(index)
    parent = call(rt.cudaGraphCreate(0), "cudaGraphCreate")
    graph_exec = None
    try:
        handle = call(rt.cudaGraphConditionalHandleCreate(parent, 1, _ASSIGN_DEFAULT),
                       "cudaGraphConditionalHandleCreate")
        init_g = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(init_g, pool=pool, stream=stream):
            loop.init()
        body_g = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(body_g, pool=pool, stream=stream):
            loop.body()
            _launch_set_while(drv, func, handle, loop.go)
        init_node = call(rt.cudaGraphAddChildGraphNode(parent, None, 0,
                                                        init_g.raw_cuda_graph()),
                          "cudaGraphAddChildGraphNode (init)")
        _, body = _add_while_node(rt, version, parent, init_node, handle)
        call(rt.cudaGraphAddChildGraphNode(body, None, 0, body_g.raw_cuda_graph()),
              "cudaGraphAddChildGraphNode (body)")
        graph_exec = call(rt.cudaGraphInstantiate(parent, 0), "cudaGraphInstantiate")
    except BaseException:
        _destroy(rt, graph_exec, parent)
        raise

    def launch() -> None:
        call(rt.cudaGraphLaunch(graph_exec, torch.cuda.current_stream().cuda_stream),
              "cudaGraphLaunch")

    state = {"exec": graph_exec, "parent": parent}

    def release() -> None:
        _destroy(rt, state.pop("exec", None), state.pop("parent", None))

    # the PyTorch graphs hold the pool the body's intermediates live in: kept alive with it
    return launch, [init_g, body_g, module, func], release


def capture_torch(loop: Any, pool: Any, stream: torch.cuda.Stream
                   ) -> tuple[Callable[[], None], list[Any], Callable[[], None]]:
    """The WHILE node through PyTorch's own binding (PR #184989)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=stream):
        loop.init()
        current: Any = getattr(torch.cuda.CUDAGraph, TORCH_WHILE_METHODS[0])()
        current.begin_capture_to_while_node(loop.go)
        try:
            loop.body()
            current.set_conditional_handle_for_current_node(loop.go)
        finally:
            current.end_capture_to_conditional_node()
    return graph.replay, [graph], lambda: None
