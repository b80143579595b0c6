"""Pooled multi-graph capture: one CUDA graph per batch size, private pools or one shared pool.

As a serving engine does it (vLLM, SGLang): the static inputs (a
:class:`labkit.batch.StaticBatch`) are allocated once at the largest size, graph ``bs`` reading
their first ``bs`` rows; each callable is warmed up on a side stream with PyTorch's sync debug
mode set to ``error`` (a host sync is caught *before* capture, with its line); the garbage
collector is frozen; pool memory is read from the allocator's per-pool accounting
(``torch.cuda.memory_snapshot()``), not from global counters that cuBLAS workspaces distort.
The step to capture is passed in; bad captures raise :class:`CaptureError` subclasses naming
the rule broken and the fix. ``capture_full`` and ``capture_unchecked`` take checked arguments.
"""

from __future__ import annotations

import gc
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

import torch

from labkit.batch import StaticBatch
from labkit.checks import as_bool, as_int
from labkit.model import Decode, DecodeStep, TinyGPT
from labkit.step_checks import check_capture_sizes, check_choice

PoolMode = Literal["shared", "private"]
POOL_MODES: tuple[PoolMode, ...] = ("shared", "private")
Order = Literal["largest_first", "smallest_first"]
ORDERS: tuple[Order, ...] = ("largest_first", "smallest_first")
PoolId = tuple[int, int]
T = TypeVar("T")


class CaptureError(RuntimeError):
    """A capture broke a rule of CUDA graphs. ``rule`` and ``fix`` say which and what to do."""

    def __init__(self, rule: str, fix: str, detail: str = "") -> None:
        self.rule, self.fix, self.detail = rule, fix, detail
        msg = f"CUDA graph capture failed: {rule}.\n  fix: {fix}"
        if detail:
            msg += f"\n  where: {detail}"
        super().__init__(msg)


class CaptureSyncError(CaptureError):
    """The captured code synchronised with the host (``.item()``, ``.cpu()``, ``nonzero`` ...)."""


class CaptureAllocationError(CaptureError):
    """The captured code did something the stream cannot record (a host copy, a new stream)."""


class CaptureOOMError(CaptureError):
    """The GPU ran out of memory while capturing; everything captured so far was released."""


SYNC_RULE = ("host synchronisation during capture: the captured code waits for the GPU or "
             "reads a value back to the CPU (.item(), .cpu(), .tolist(), print(tensor), "
             "torch.cuda.synchronize(), or an op whose output shape depends on the data such "
             "as nonzero, boolean-mask indexing or unique)")
SYNC_FIX = ("keep values on the device and shapes fixed: use device tensors for positions and "
            "indices, replace data-dependent shapes with masks (torch.where), and do any "
            "host-side decision before capture")
STREAM_RULE = ("an operation the capture stream cannot record: a host-to-device copy from "
               "pageable memory (torch.tensor(..., device='cuda') inside the captured code), "
               "work on another stream, or an allocation outside the graph's pool")
STREAM_FIX = ("create tensors before capture and copy new data into them (static.copy_(new)); "
              "run only on the capture stream; allocate buffers before capture")


def _user_frame(exc: BaseException) -> str:
    """The innermost frame outside torch/labkit.graphs, as 'file:line: code'."""
    frames = traceback.extract_tb(exc.__traceback__)
    for fr in reversed(frames):
        fname = fr.filename.replace("\\", "/")
        if "/torch/" in fname or fname.endswith("labkit/graphs.py"):
            continue
        return f"{fname.rsplit('/', 1)[-1]}:{fr.lineno}: {(fr.line or '').strip()}"
    return ""


def _chain(exc: BaseException | None) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and all(e is not exc for e in out):
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def translate_capture_error(exc: BaseException) -> BaseException:
    """Map a raw error raised while warming up or capturing to a :class:`CaptureError`."""
    chain = _chain(exc)
    where = next((w for w in (_user_frame(e) for e in chain) if w), "")
    text = " | ".join(str(e) for e in chain)
    if any(isinstance(e, torch.cuda.OutOfMemoryError) for e in chain):
        return CaptureOOMError(
            "the GPU ran out of memory during capture",
            "capture fewer or smaller batch sizes, lower max_batch / max_seq, use one shared "
            "pool (pool='shared', largest first), or free other GPU memory", where)
    if "synchronizing CUDA operation" in text:
        return CaptureSyncError(SYNC_RULE, SYNC_FIX, where)
    lower = text.lower()
    if ("operation not permitted when stream is capturing" in text
            or "StreamCaptureUnsupported" in text
            or ("capture" in lower and "invalidated" in lower)):
        # pageable host copies and syncs both end here; tell them apart by the user's line
        if any(s in where for s in (".item()", ".cpu()", ".tolist()", "synchronize", "print(",
                                    "nonzero", ".numpy()")):
            return CaptureSyncError(SYNC_RULE, SYNC_FIX, where)
        return CaptureAllocationError(STREAM_RULE + " (or a host synchronisation)",
                                      STREAM_FIX, where)
    return exc


@contextmanager
def sync_debug_errors() -> Iterator[None]:
    """Within the block, any synchronising CUDA call raises (PyTorch sync debug mode)."""
    old = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():  # "prototype feature" notice, once per call otherwise
        warnings.simplefilter("ignore", UserWarning)
        torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            torch.cuda.set_sync_debug_mode(old)


@contextmanager
def gc_frozen() -> Iterator[None]:
    """Freeze and disable Python's garbage collector (as vLLM does around capture)."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()


@dataclass
class CapturedGraph:
    """One captured callable: replay it after copying new data into ``inputs``. ``fn`` is kept
    as long as the graph: tensors it owns would otherwise be freed while the graph still reads
    them (found with the fused step: NaN logits, then an illegal memory access at batch 256)."""

    graph: torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]
    output: Any
    pool: PoolId
    capture_s: float
    warmup_s: float
    label: object = None
    fn: Callable[..., Any] | None = None

    def replay(self) -> Any:
        """Replay; the returned output is the static buffer the next replay overwrites."""
        self.graph.replay()
        return self.output


def capture_callable(fn: Callable[..., Any], *inputs: torch.Tensor, pool: Any = None,
                     stream: torch.cuda.Stream | None = None, warmup: int = 3,
                     check_sync: bool = True, label: object = None) -> CapturedGraph:
    """Warm up ``fn(*inputs)`` on a side stream, then capture it into a CUDA graph. ``pool``: a
    handle from ``torch.cuda.graph_pool_handle()`` or another graph's ``pool()`` to share memory
    (``None``: a private pool). A failed capture raises :class:`CaptureError` and leaves nothing
    behind."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    warmup = as_int(warmup, "warmup", minimum=0, fix="warm up 0 or more times (3 is usual)")
    as_bool(check_sync, "check_sync")
    require_cuda("CUDA graphs need a CUDA GPU (torch.cuda.is_available() is False); on CPU run "
               "the callable eagerly instead")
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
            raise ValueError(f"input {i} must be a CUDA tensor allocated before capture; got "
                             f"{getattr(t, 'device', type(t).__name__)}")
    return capture_unchecked(fn, inputs, pool, stream or torch.cuda.Stream(), warmup,
                             check_sync, label)


def require_cuda(message: str, model: TinyGPT | None = None) -> None:
    if not torch.cuda.is_available() or (model is not None and model.device.type != "cuda"):
        raise RuntimeError(message)


def warm_up(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], stream: torch.cuda.Stream,
            warmup: int, check_sync: bool) -> float:
    """Run ``fn(*inputs)`` ``warmup`` times on ``stream`` before a capture (cuBLAS handles,
    allocator blocks), with a host sync refused when ``check_sync``; a failure raises as a
    :class:`CaptureError` where one applies. Returns the seconds it took."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    stream.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                with sync_debug_errors() if check_sync else nullcontext():
                    fn(*inputs)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
    except Exception as exc:
        raise translate_capture_error(exc) from exc
    return time.perf_counter() - t0


def capture_unchecked(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], pool: Any,
                      stream: torch.cuda.Stream, warmup: int, check_sync: bool,
                      label: object = None) -> CapturedGraph:
    """:func:`capture_callable` on checked arguments."""
    warmup_s = warm_up(fn, inputs, stream, warmup, check_sync)
    t1 = time.perf_counter()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, pool=pool, stream=stream):
            output = fn(*inputs)
        torch.cuda.synchronize()
    except Exception as exc:
        del graph
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        raise translate_capture_error(exc) from exc
    return CapturedGraph(graph, tuple(inputs), output, graph.pool(), time.perf_counter() - t1,
                         warmup_s, label, fn=fn)


def _pool_bytes(pool: Iterable[int], key: str) -> int:
    pid = tuple(pool)
    return sum(int(seg.get(key, 0)) for seg in torch.cuda.memory_snapshot()
               if tuple(seg.get("segment_pool_id", (0, 0))) == pid)


def pool_reserved_bytes(pool: Iterable[int]) -> int:
    """Bytes the caching allocator holds in segments that belong to ``pool``."""
    return _pool_bytes(pool, "total_size")


def pool_active_bytes(pool: Iterable[int]) -> int:
    """Bytes in ``pool`` held by live blocks (graph intermediates kept for replay, outputs)."""
    return _pool_bytes(pool, "active_size")


@dataclass
class GraphSet:
    """FULL decode-step graphs for several batch sizes over one :class:`StaticBatch`: a runner
    of the dispatcher (``replay(rows)`` on what the static batch holds)."""

    graphs: dict[int, CapturedGraph]
    batch: StaticBatch
    pool_mode: PoolMode
    order: Order
    capture_order: list[int] = field(default_factory=list)
    #: the output is a static buffer the next replay overwrites
    static: bool = True

    @property
    def sizes(self) -> list[int]:
        return sorted(self.graphs)

    @property
    def logits(self) -> torch.Tensor | None:
        """Static logits ``(largest size, V)`` that graph ``b`` writes the first ``b`` rows of;
        it lies outside the graphs' pool, so a graph's output never pins pool memory."""
        return self.batch.logits

    def copy_inputs(self, tokens: torch.Tensor, positions: torch.Tensor,
                    slots: torch.Tensor) -> int:
        """Copy a batch into the first rows of the static buffers; returns its size."""
        return self.batch.load(tokens, positions, slots)

    def replay(self, bs: int) -> torch.Tensor:
        """Replay graph ``bs`` on what is in the static buffers; returns its static logits."""
        if isinstance(bs, bool) or not isinstance(bs, int):
            raise TypeError(f"bs must be an int batch size, got {bs!r}")
        if bs not in self.graphs:
            raise KeyError(f"no graph captured for batch size {bs}; captured: {self.sizes}")
        return cast(torch.Tensor, self.graphs[bs].replay())

    def pools(self) -> dict[PoolId, list[int]]:
        """Pool id -> the batch sizes whose graphs live in it."""
        out: dict[PoolId, list[int]] = {}
        for bs, g in self.graphs.items():
            out.setdefault(g.pool, []).append(bs)
        return out

    def memory_report(self) -> dict[str, Any]:
        """Per-pool reserved bytes (allocator accounting), total, and capture times."""
        pools = [{"sizes": sorted(sizes), "reserved_bytes": pool_reserved_bytes(pid),
                  "active_bytes": pool_active_bytes(pid)}
                 for pid, sizes in self.pools().items()]
        return {"pool_mode": self.pool_mode, "order": self.order,
                "capture_order": self.capture_order, "pools": pools,
                "total_reserved_bytes": sum(p["reserved_bytes"] for p in pools),
                "capture_s": {bs: g.capture_s for bs, g in self.graphs.items()},
                "warmup_s": {bs: g.warmup_s for bs, g in self.graphs.items()}}

    def release(self) -> None:
        """Drop every graph and return the pools' memory to the device."""
        release(self.graphs)


def release(graphs: dict[Any, Any]) -> None:
    """Drop ``graphs`` (any captured objects by key) and return their memory to the device."""
    graphs.clear()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def progress_bar(items: Sequence[T], enabled: bool | None, desc: str) -> Iterable[T]:
    """``items``, with a progress bar when ``enabled`` (``None``: more than four of them)."""
    if not (len(items) > 4 if enabled is None else enabled):
        return items
    from tqdm.auto import tqdm
    return tqdm(items, desc=desc, unit="graph", leave=False)  # type: ignore[no-any-return]


@contextmanager
def capturing(captured: dict[Any, Any], what: str, freeze_gc: bool = True) -> Iterator[None]:
    """The garbage collector frozen (``freeze_gc=False``: left as it is); on any error
    everything ``captured`` (size -> graphs) is released and the error raised again (out of
    memory says which sizes were released)."""
    try:
        with gc_frozen() if freeze_gc else nullcontext():
            yield
    except BaseException as exc:
        done = sorted(captured)
        release(captured)
        if isinstance(exc, CaptureOOMError):
            raise CaptureOOMError(exc.rule, exc.fix + f" ({what} already captured for sizes "
                                  f"{done} were released; the model and its cache are intact)",
                                  exc.detail) from exc
        raise


def new_batch(model: TinyGPT, logits_rows: int, rows: int | None = None) -> StaticBatch:
    """A :class:`StaticBatch` (of ``rows`` rows) with a logits buffer of ``logits_rows`` rows;
    out of memory -> :class:`CaptureOOMError`."""
    try:
        return StaticBatch(model, logits_rows=logits_rows, rows=rows)
    except torch.cuda.OutOfMemoryError as exc:
        raise CaptureOOMError(
            "the GPU ran out of memory allocating the graphs' static buffers (the logits "
            f"buffer alone is {logits_rows} x {model.cfg.vocab_size} values)",
            "capture fewer or smaller batch sizes, lower max_batch / max_seq, or free other "
            "GPU memory; nothing was captured and the model and its cache are intact") from exc


def check_capture(model: object, sizes: Iterable[int], pool: object, order: object,
                  warmup: object, progress: object, check_sync: object) -> list[int]:
    """The checks shared by every public capture entry point; returns the sorted sizes."""
    if not isinstance(model, TinyGPT):
        raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}")
    out = check_capture_sizes(sizes, model.cfg.max_batch)
    check_choice(pool, "pool", POOL_MODES)
    check_choice(order, "order", ORDERS)
    as_int(warmup, "warmup", minimum=0, fix="warm up 0 or more times (3 is usual)")
    if progress is not None:
        as_bool(progress, "progress")
    as_bool(check_sync, "check_sync")
    return out


def capture_decode_graphs(model: TinyGPT, sizes: Sequence[int], *, pool: PoolMode = "shared",
                          order: Order = "largest_first", warmup: int = 3,
                          progress: bool | None = None, check_sync: bool = True,
                          on_captured: Callable[[int, CapturedGraph], None] | None = None,
                          step: DecodeStep | None = None) -> GraphSet:
    """Capture ``step`` (default ``model.decode_step``, called with ``check=False``) once per
    batch size on a new :class:`StaticBatch`, whose pad rows make warm-up and capture write only
    the scratch slot. On an error every graph captured so far is released.
    ``on_captured(bs, graph)`` is called after each capture."""
    sizes = check_capture(model, sizes, pool, order, warmup, progress, check_sync)
    if on_captured is not None and not callable(on_captured):
        raise TypeError(f"on_captured must be callable (bs, graph) or None, got "
                        f"{type(on_captured).__name__}")
    if step is not None and not callable(step):
        raise TypeError(f"step must be a decode step (model.decode_step, "
                        f"labkit.fused.make_fused_step(model), ...), got {step!r}")
    require_cuda("capturing CUDA graphs needs the model on a CUDA GPU (model is on "
               f"{model.device}); on CPU use eager decode_step", model)
    batch = new_batch(model, sizes[-1])
    fn = step or model.decode_step

    def decode(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor,
               out: torch.Tensor | None = None) -> torch.Tensor:
        return fn(t, p, s, check=False, out=out)

    return capture_full(model, sizes, batch, decode, pool=pool, order=order, warmup=warmup,
                        progress=progress, check_sync=check_sync, on_captured=on_captured)


def capture_full(model: TinyGPT, sizes: list[int], batch: StaticBatch, decode: Decode, *,
                 pool: PoolMode, order: Order, warmup: int, progress: bool | None,
                 check_sync: bool,
                 on_captured: Callable[[int, CapturedGraph], None] | None = None) -> GraphSet:
    """:func:`capture_decode_graphs` on checked arguments and an unchecked ``decode``."""
    seq = sizes[::-1] if order == "largest_first" else list(sizes)
    handle = torch.cuda.graph_pool_handle() if pool == "shared" else None
    stream = torch.cuda.Stream()
    logits = batch.logits
    graphs: dict[int, CapturedGraph] = {}

    def one_step(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return decode(t, p, s, None if logits is None else logits[:t.shape[0]])

    with capturing(graphs, "graphs"):
        for bs in progress_bar(seq, progress, f"capturing ({pool} pool)"):
            graphs[bs] = capture_unchecked(one_step, batch.view(bs), handle, stream, warmup,
                                           check_sync, label=bs)
            if on_captured is not None:
                on_captured(bs, graphs[bs])
    return GraphSet(graphs, batch, pool, order, capture_order=seq)
