"""Decode until a stop token inside one CUDA graph: a WHILE conditional node around the step.

Notebook 12's multi-step graph runs a fixed ``k`` steps. Here one graph holds a CUDA WHILE
node (CUDA 12.4+) whose body is one greedy decode step (the argmax fed back and the positions
advanced on the device, the token written into a static ``out`` at a device step counter),
ending with the condition: go on while ``step < max_steps`` and some row has not yet produced
its stop token. One launch runs as many steps as the tokens ask for.

Semantics (:class:`WhileResult`, the same for every path here): ``tokens[r, i]`` is row
``r``'s greedy token of step ``i`` up to and including its stop token, :data:`PAD` after it
and in every column at or past ``steps``; ``steps`` is the number of decode steps run.
:func:`decode_until_stop` computes it with a host loop (the reference, CPU or GPU),
:meth:`WhileDecode.run` with the graph's own init and body driven by the host,
:func:`capture_decode_while` in one graph.

Two routes build the node. PyTorch's own binding (``CUDAGraph.begin_capture_to_while_node``,
``set_conditional_handle_for_current_node``, ``end_capture_to_conditional_node``; PyTorch PR
#184989, ``aten/src/ATen/cuda/CUDAGraph.cpp``), used when this torch has it. Otherwise the
CUDA level through cuda-python, as NVIDIA NeMo does (``nemo/core/utils/cuda_python_utils.py``,
``with_conditional_node``; its RNNT greedy decoder): NeMo captures the body straight into the
node's body graph (``cudaStreamBeginCaptureToGraph``); labkit simplifies that: it captures the
init and the body as two ordinary PyTorch graphs (``keep_graph=True``, so PyTorch's allocator
keeps their memory in its pool) and assembles the parent by hand: ``cudaGraphCreate``, a
conditional handle (``cudaGraphConditionalHandleCreate``, default 1 at each launch), the init
as a child graph node, the WHILE node (``cudaGraphAddNode``) after it, the body as a child
graph node of the node's body graph. The condition is set on the device by a one-thread kernel
calling ``cudaGraphSetConditional``, compiled by NVRTC and launched with ``cuLaunchKernel``
at the end of the body's capture. Those CUDA-level pieces are :mod:`labkit.roofline.while_node`.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from labkit.checks import as_int
from labkit.graphs import warm_up
from labkit.model import TinyGPT
from labkit.roofline.while_node import (
    MIN_CUDA as _MIN_CUDA, call as _call, capture_cuda_python as _capture_cuda_python,
    capture_torch as _capture_torch, cuda_python as _cuda_python,
    nvrtc_version as _nvrtc_version, version_tuple as _version, TORCH_WHILE_METHODS,
)

__all__ = ["PAD", "WhileResult", "stop_after", "decode_until_stop", "WhileDecode",
           "WhileDecodeGraph", "capture_decode_while", "while_support", "route_error",
           "TORCH_WHILE_METHODS", "ROUTES"]

#: the token id written after a row's stop token (no real token id is negative)
PAD = -1
#: the two ways to build the WHILE node, preferred first
ROUTES = ("torch", "cuda-python")

# --------------------------------------------------------------------------- the semantics

@dataclass(frozen=True, eq=False)
class WhileResult:
    """Tokens ``(B, max_steps)`` (int64, on the CPU; :data:`PAD` after a row's stop token and
    in columns ``>= steps``) and the number of decode steps run."""

    tokens: torch.Tensor
    steps: int

    def generated(self) -> list[list[int]]:
        """Each row's tokens without the padding (its stop token last, if it stopped)."""
        return [[t for t in row if t != PAD] for row in self.tokens.tolist()]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, WhileResult) and self.steps == other.steps
                and torch.equal(self.tokens.cpu(), other.tokens.cpu()))


def _stops(stop_token: object, rows: int, vocab_size: int | None) -> list[int]:
    """One stop token id per row: an int for every row, or a sequence of one per row."""
    fix = ("give a token id (int) or one per row" if vocab_size is None else
           f"give a token id in [0, {vocab_size}) or one per row")
    top = None if vocab_size is None else vocab_size - 1
    if isinstance(stop_token, torch.Tensor):
        stop_token = stop_token.tolist()
    if isinstance(stop_token, (str, bytes)) or not isinstance(stop_token, Sequence):
        return [as_int(stop_token, "stop_token", minimum=0, maximum=top, fix=fix)] * rows
    if len(stop_token) != rows:
        raise ValueError(f"stop_token has {len(stop_token)} entries for {rows} rows; {fix}")
    return [as_int(v, f"stop_token[{i}]", minimum=0, maximum=top, fix=fix)
            for i, v in enumerate(stop_token)]


def stop_after(tokens: torch.Tensor, stop_token: int | Sequence[int]) -> WhileResult:
    """What the WHILE loop returns, from ``tokens`` ``(B, k)`` decoded for a fixed ``k`` steps
    (as notebook 12's multi-step graph does): each row cut after its first stop token, the loop
    ended at the step where the last row stopped (or after ``k``)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.shape[1] < 1 \
            or tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError("tokens must be an integer tensor (B, k) with k >= 1, got "
                         f"{getattr(tokens, 'dtype', type(tokens).__name__)} "
                         f"{tuple(getattr(tokens, 'shape', ()))}; pass the fixed-k decode")
    rows = tokens.detach().cpu().long().tolist()
    stops = _stops(stop_token, len(rows), None)
    k = tokens.shape[1]
    out = [[PAD] * k for _ in rows]
    last = 0
    for r, (row, stop) in enumerate(zip(rows, stops)):
        n = row.index(stop) + 1 if stop in row else k
        out[r][:n] = row[:n]
        last = max(last, n)
    steps = k if any(stop not in row for row, stop in zip(rows, stops)) else last
    return WhileResult(torch.tensor(out, dtype=torch.long).reshape(len(rows), k), steps)


def _check_model(model: object, max_steps: object) -> int:
    if not isinstance(model, TinyGPT):
        raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}")
    return as_int(max_steps, "max_steps", minimum=1, maximum=model.cfg.max_seq,
                  fix="run at least one step and no more than the cache holds (max_seq)")


def _check_batch(model: TinyGPT, tokens: torch.Tensor, positions: torch.Tensor,
                 slots: torch.Tensor, max_steps: int, batch_size: int | None = None) -> int:
    """The batch's kinds, shapes and values (read on the host), and room in the cache for
    every position the loop may write (``positions + 0 .. max_steps - 1``)."""
    b = model.check_step(tokens, positions, slots, check=True, who="decode until stop")
    if batch_size is not None and b != batch_size:
        raise ValueError(f"this loop was built for {batch_size} rows, got {b}; capture one "
                         "per batch size")
    top = int(positions.max())
    if top + max_steps > model.cfg.max_seq:
        raise ValueError(f"{max_steps} steps from position {top} write past the KV cache "
                         f"(max_seq={model.cfg.max_seq}); lower max_steps or build the model "
                         "with a larger max_seq")
    return b


@torch.no_grad()
def decode_until_stop(model: TinyGPT, tokens: torch.Tensor, positions: torch.Tensor,
                      slots: torch.Tensor, max_steps: int,
                      stop_token: int | Sequence[int]) -> WhileResult:
    """The reference: one ``decode_step`` at a time, each argmax read on the host, which stops
    when every row has produced its stop token or after ``max_steps`` (inputs as for
    ``decode_step``; CPU or GPU)."""
    max_steps = _check_model(model, max_steps)
    b = _check_batch(model, tokens, positions, slots, max_steps)
    stops = _stops(stop_token, b, model.cfg.vocab_size)
    rows = [[PAD] * max_steps for _ in range(b)]
    done = [False] * b
    t, p, steps = tokens, positions, 0
    while steps < max_steps and not all(done):
        ids = model.decode_step(t, p, slots).argmax(-1).tolist()  # host round trip
        for r, tok in enumerate(ids):
            if not done[r]:
                rows[r][steps] = tok
                done[r] = tok == stops[r]
        steps += 1
        t = torch.tensor(ids, device=tokens.device)
        p = p + 1
    return WhileResult(torch.tensor(rows, dtype=torch.long), steps)


# ------------------------------------------------------------------- the loop, init and body

class WhileDecode:
    """The static buffers of one WHILE loop of ``batch_size`` rows and the two pieces a graph
    holds: :meth:`init` (inputs into the loop state) and :meth:`body` (one step, then the
    condition into ``go``). :meth:`run` drives them from the host (CPU or GPU): what the WHILE
    node does on the device."""

    def __init__(self, model: TinyGPT, batch_size: int, max_steps: int,
                 stop_token: int | Sequence[int]) -> None:
        self.max_steps = _check_model(model, max_steps)
        self.batch_size = as_int(batch_size, "batch_size", minimum=1,
                                 maximum=model.cfg.max_batch,
                                 fix="use a batch size the cache holds (<= max_batch)")
        self.default_stop = _stops(stop_token, self.batch_size, model.cfg.vocab_size)
        self.model = model
        b, dev = self.batch_size, model.device

        def ids(fill: int, shape: tuple[int, ...] = (b,)) -> torch.Tensor:
            return torch.full(shape, fill, dtype=torch.long, device=dev)

        # inputs, filled by load(); scratch-slot defaults make warm-up harmless
        self.tokens_in, self.positions_in = ids(0), ids(0)
        self.slots = ids(model.cfg.scratch_slot)
        self.stop = torch.tensor(self.default_stop, dtype=torch.long, device=dev)
        # the loop state, reset by init()
        self.cur, self.pos, self.step = ids(0), ids(0), ids(0, (1,))
        self.done = torch.zeros(b, dtype=torch.bool, device=dev)
        self.out = ids(PAD, (b, self.max_steps))
        self.go = torch.ones((), dtype=torch.bool, device=dev)

    def load(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
             stop_token: int | Sequence[int] | None = None) -> None:
        """Copy a checked batch (and its stop tokens; ``None``: the loop's default) into the
        static inputs."""
        _check_batch(self.model, tokens, positions, slots, self.max_steps, self.batch_size)
        stops = self.default_stop if stop_token is None else _stops(
            stop_token, self.batch_size, self.model.cfg.vocab_size)
        self.tokens_in.copy_(tokens)
        self.positions_in.copy_(positions)
        self.slots.copy_(slots)
        self.stop.copy_(torch.tensor(stops, dtype=torch.long))

    def init(self) -> None:
        """Inputs into the loop state: first tokens and positions, step 0, no row done."""
        self.cur.copy_(self.tokens_in)
        self.pos.copy_(self.positions_in)
        self.step.zero_()
        self.done.zero_()
        self.out.fill_(PAD)
        self.go.fill_(True)

    @torch.no_grad()
    def body(self) -> None:
        """One greedy step on the device (capture-safe: no host read): its token into
        ``out[:, step]`` (PAD for rows already done), rows that produced their stop token
        marked done, tokens fed back, positions and step advanced, then ``go``: another step?"""
        tok = self.model.decode_step(self.cur, self.pos, self.slots, check=False).argmax(-1)
        self.out.index_copy_(1, self.step, tok.masked_fill(self.done, PAD).unsqueeze(1))
        self.done.logical_or_(tok == self.stop)
        self.cur.copy_(tok)
        self.pos.add_(1)
        self.step.add_(1)
        torch.logical_and(self.step[0] < self.max_steps, ~self.done.all(), out=self.go)

    def run_eager(self) -> None:
        """:meth:`init`, then :meth:`body` while ``go`` (read on the host after each step)."""
        self.init()
        self.body()
        while bool(self.go):
            self.body()

    def result(self) -> WhileResult:
        """The last run's tokens and steps (read from the device: a sync)."""
        return WhileResult(self.out.cpu(), int(self.step.item()))

    def run(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
            stop_token: int | Sequence[int] | None = None) -> WhileResult:
        """Load, run from the host, read back."""
        self.load(tokens, positions, slots, stop_token)
        self.run_eager()
        return self.result()


# ------------------------------------------------------------------------ what is available

def _has_keep_graph() -> bool:
    cls = getattr(torch.cuda, "CUDAGraph", None)
    try:
        params = inspect.signature(cls.__new__).parameters  # type: ignore[union-attr]
    except (TypeError, ValueError, AttributeError):
        return False
    return "keep_graph" in params and hasattr(cls, "raw_cuda_graph")


def while_support() -> dict[str, Any]:
    """What this process can use to build the WHILE node, and what each route lacks; never
    raises. ``route``: ``"torch"`` (PyTorch's binding), ``"cuda-python"`` (cuda-python +
    NVRTC + ``CUDAGraph(keep_graph=True)``), or ``None``; ``routes``: every route that works
    here, preferred first; ``missing``: one line per lack."""
    graph_cls = getattr(torch._C, "_CUDAGraph", None)
    out: dict[str, Any] = {
        "torch": torch.__version__, "cuda_runtime": torch.version.cuda,
        "gpu_available": False, "driver": None,
        "torch_while_node": graph_cls is not None and all(
            hasattr(graph_cls, m) for m in TORCH_WHILE_METHODS),
        "torch_keep_graph": _has_keep_graph(),
        "cuda_python": None, "nvrtc": None, "routes": [], "route": None, "missing": [],
    }
    missing: list[str] = out["missing"]
    try:
        out["gpu_available"] = bool(torch.cuda.is_available())
    except Exception as exc:  # a broken driver install
        missing.append(f"torch.cuda.is_available() failed: {type(exc).__name__}: {exc}")
    if not out["gpu_available"]:
        missing.append("no CUDA GPU in this process (torch.cuda.is_available() is False)")
    runtime = _version(torch.version.cuda)
    if runtime is None or runtime < _MIN_CUDA:
        missing.append(f"torch {torch.__version__} is built for CUDA {torch.version.cuda}; "
                       "conditional nodes need CUDA >= 12.4")
    if not out["torch_while_node"]:
        missing.append(f"torch {torch.__version__} has no WHILE-node binding on CUDAGraph "
                       f"({', '.join(TORCH_WHILE_METHODS[1:3])}; PyTorch PR #184989)")
    if not out["torch_keep_graph"]:
        missing.append(f"torch {torch.__version__} has no CUDAGraph(keep_graph=True) / "
                       "raw_cuda_graph(), which the cuda-python route needs (torch >= 2.8)")
    try:
        _, drv, nvrtc, version = _cuda_python()
    except Exception as exc:
        missing.append(f"cuda-python is not importable ({type(exc).__name__}: {exc}); "
                       "pip install cuda-bindings matching the CUDA major version")
    else:
        old = (_version(version) or _MIN_CUDA) < _MIN_CUDA  # 12.3 cannot add the node
        out["cuda_python"] = None if old else version
        if old:
            missing.append(f"cuda-python {version} is older than 12.4; pip install a newer "
                           "cuda-bindings")
        try:
            major, minor = _nvrtc_version(nvrtc)
            out["nvrtc"] = f"{major}.{minor}"
        except Exception as exc:
            missing.append(f"NVRTC cannot be loaded ({type(exc).__name__}: {exc}); pip "
                           "install nvidia-cuda-nvrtc matching the CUDA major version")
        if out["gpu_available"]:
            try:
                v = _call(drv.cuDriverGetVersion(), "cuDriverGetVersion")
                out["driver"] = f"{v // 1000}.{v % 1000 // 10}"
            except Exception as exc:
                missing.append(f"cuDriverGetVersion failed ({type(exc).__name__}: {exc})")
    driver = _version(out["driver"])
    if driver is not None and driver < _MIN_CUDA:
        missing.append(f"the driver supports CUDA {out['driver']}; conditional nodes need a "
                       "driver for CUDA >= 12.4")
    cuda_ok = out["gpu_available"] and runtime is not None and runtime >= _MIN_CUDA and (
        driver is None or driver >= _MIN_CUDA)
    routes = [r for r, ok in (
        ("torch", out["torch_while_node"]),
        ("cuda-python", out["torch_keep_graph"] and out["cuda_python"] and out["nvrtc"]
         and driver is not None)) if cuda_ok and ok]
    out["routes"], out["route"] = routes, (routes[0] if routes else None)
    return out


def route_error(support: dict[str, Any]) -> str:
    """Why no WHILE node can be built here, from :func:`while_support`'s record: the torch
    version, what is missing, and the CUDA-level alternative."""
    lacks = "; ".join(support.get("missing") or []) or "nothing reported missing"
    return (f"no way to build a CUDA graph WHILE node in this process (torch "
            f"{support.get('torch')}, CUDA {support.get('cuda_runtime')}): {lacks}. The "
            "CUDA-level alternative: cuda-python (cuda.bindings) and NVRTC on a CUDA >= 12.4 "
            "GPU with torch >= 2.8: cudaGraphConditionalHandleCreate, cudaGraphAddNode with a "
            "WHILE conditional, a kernel calling cudaGraphSetConditional (as NVIDIA NeMo does); "
            "on CPU use WhileDecode.run or decode_until_stop")


# ------------------------------------------------------------------ cuda-python plumbing
class WhileDecodeGraph:
    """One CUDA graph around a :class:`WhileDecode`: :meth:`replay` loads a batch, launches
    once and reads the result; :meth:`launch` alone is the timed part."""

    def __init__(self, loop: WhileDecode, route: str, launch: Callable[[], None],
                 kept: list[Any], release: Callable[[], None]) -> None:
        self.loop, self.route = loop, route
        self._launch, self._kept = launch, kept
        self._finalizer = weakref.finalize(self, release)

    @property
    def out(self) -> torch.Tensor:
        """The static output ``(B, max_steps)``, overwritten by the next launch."""
        return self.loop.out

    def load(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
             stop_token: int | Sequence[int] | None = None) -> None:
        """Copy a batch into the static inputs (checked: a host read)."""
        self._alive()
        self.loop.load(tokens, positions, slots, stop_token)

    def launch(self) -> None:
        """One graph launch: init, then decode steps until every row stopped or max_steps."""
        self._alive()
        self._launch()

    def replay(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
               stop_token: int | Sequence[int] | None = None) -> WhileResult:
        """Load, launch once, read the tokens and the steps run back from the device."""
        self.load(tokens, positions, slots, stop_token)
        self.launch()
        return self.loop.result()

    def release(self) -> None:
        """Destroy the graph now (the object is unusable after)."""
        self._finalizer()
        self._kept.clear()

    def _alive(self) -> None:
        if not self._finalizer.alive:
            raise RuntimeError("this WHILE graph was released; capture a new one")


def capture_decode_while(model: TinyGPT, max_steps: int, stop_token: int | Sequence[int], *,
                         batch_size: int = 1, pool: Any = None, warmup: int = 2,
                         route: str | None = None) -> WhileDecodeGraph:
    """Capture one CUDA graph that decodes ``batch_size`` rows until each has produced its
    ``stop_token`` (an id, or one per row; :meth:`WhileDecodeGraph.replay` may change it) or
    ``max_steps`` steps ran, in a WHILE node. ``route``: ``"torch"`` or ``"cuda-python"``
    (``None``: the first :func:`while_support` offers). ``pool``: a graph pool handle to share
    (``None``: one of its own)."""
    max_steps = _check_model(model, max_steps)
    batch_size = as_int(batch_size, "batch_size", minimum=1, maximum=model.cfg.max_batch,
                        fix="use a batch size the cache holds (<= max_batch)")
    _stops(stop_token, batch_size, model.cfg.vocab_size)
    warmup = as_int(warmup, "warmup", minimum=1, fix="warm the step up at least once")
    if route is not None and route not in ROUTES:
        raise ValueError(f"route must be one of {list(ROUTES)} or None, got {route!r}")
    if model.device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError("capture_decode_while needs the model on a CUDA GPU (model is on "
                           f"{model.device}); on CPU use WhileDecode.run or decode_until_stop")
    support = while_support()
    chosen = route or support["route"]
    if chosen not in support["routes"]:
        raise RuntimeError(route_error(support))
    loop = WhileDecode(model, batch_size, max_steps, stop_token)
    stream = torch.cuda.Stream()

    def one_step() -> None:
        loop.init()
        loop.body()

    with torch.no_grad():
        warm_up(one_step, (), stream, warmup, check_sync=False)
    pool = pool if pool is not None else torch.cuda.graph_pool_handle()
    build = _capture_torch if chosen == "torch" else _capture_cuda_python
    with torch.no_grad():
        launch, kept, release = build(loop, pool, stream)
    torch.cuda.synchronize()
    return WhileDecodeGraph(loop, chosen, launch, kept, release)
