"""Pooled multi-graph capture: one CUDA graph per batch size, private pools or one shared pool.

What this module does, in the order a serving engine does it (vLLM, SGLang):

1. static input buffers are allocated once at the largest size; graph ``bs`` reads ``[:bs]``;
2. each callable is warmed up on the capture stream (a side stream), with PyTorch's sync
   debug mode set to ``error`` so that a host synchronisation is caught *before* capture
   and reported with the line that caused it;
3. the garbage collector is frozen while capturing;
4. each graph is captured into its own private pool, or all into one shared pool, largest
   first (later, smaller graphs reuse freed blocks) or smallest first;
5. the memory each pool holds is read from the allocator's own per-pool accounting
   (``torch.cuda.memory_snapshot()`` segments by pool id), not from global counters, which
   cuBLAS workspaces and other streams distort.

Bad captures raise :class:`CaptureError` subclasses that name the rule broken and the fix.
"""

from __future__ import annotations

import gc
import numbers
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Sequence

import torch

from labkit.checks import as_bool, as_int, as_size_list
from labkit.fused import step_function

PoolMode = Literal["shared", "private"]
Order = Literal["largest_first", "smallest_first"]

# ---------------------------------------------------------------------------------- errors


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


def _chain(exc: BaseException) -> list[BaseException]:
    out, seen = [], set()
    while exc is not None and id(exc) not in seen:
        out.append(exc)
        seen.add(id(exc))
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
    import warnings

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


# ---------------------------------------------------------------------------------- one graph


@dataclass
class CapturedGraph:
    """One captured callable: replay it after copying new data into ``inputs``.

    ``fn`` is the callable that was captured, kept for as long as the graph: a replay reads
    every tensor the capture read, and tensors the callable owns (buffers a step object
    caches between calls, say) would otherwise be freed with it while the graph still points
    at their memory. The caching allocator then hands that memory to the next eager
    allocation and the replay reads garbage (found with the fused step: NaN logits, then an
    illegal memory access at batch 256)."""

    graph: "torch.cuda.CUDAGraph"
    inputs: tuple[torch.Tensor, ...]
    output: Any
    pool: tuple[int, int]
    capture_s: float
    warmup_s: float
    label: Any = None
    fn: Any = None

    def replay(self) -> Any:
        """Replay; the returned output is the static buffer the next replay overwrites."""
        self.graph.replay()
        return self.output


def capture_callable(fn: Callable[..., Any], *inputs: torch.Tensor, pool: Any = None,
                     stream: "torch.cuda.Stream | None" = None, warmup: int = 3,
                     check_sync: bool = True, label: Any = None) -> CapturedGraph:
    """Warm up ``fn(*inputs)`` on a side stream, then capture it into a CUDA graph.

    ``pool``: a handle from ``torch.cuda.graph_pool_handle()`` or another graph's ``pool()``
    to share memory; ``None`` gives the graph a private pool. Raises :class:`CaptureError`
    naming the broken rule; a failed capture leaves nothing captured behind.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    warmup = as_int(warmup, "warmup", minimum=0, fix="warm up 0 or more times (3 is usual)")
    as_bool(check_sync, "check_sync")
    if not torch.cuda.is_available():
        raise RuntimeError("CUDA graphs need a CUDA GPU (torch.cuda.is_available() is False); "
                           "on CPU run the callable eagerly instead")
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
            raise ValueError(f"input {i} must be a CUDA tensor allocated before capture; got "
                             f"{getattr(t, 'device', type(t).__name__)}")
    stream = stream or torch.cuda.Stream()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    stream.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                if check_sync:
                    with sync_debug_errors():
                        fn(*inputs)
                else:
                    fn(*inputs)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - translated and re-raised
        raise translate_capture_error(exc) from exc
    t1 = time.perf_counter()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, pool=pool, stream=stream):
            output = fn(*inputs)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        del graph
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        raise translate_capture_error(exc) from exc
    t2 = time.perf_counter()
    return CapturedGraph(graph, tuple(inputs), output, graph.pool(), t2 - t1, t1 - t0, label,
                         fn=fn)


# ---------------------------------------------------------------------------------- pool memory


def pool_reserved_bytes(pool: tuple[int, int]) -> int:
    """Bytes the caching allocator holds in segments that belong to ``pool``."""
    pool = tuple(pool)
    total = 0
    for seg in torch.cuda.memory_snapshot():
        if tuple(seg.get("segment_pool_id", (0, 0))) == pool:
            total += int(seg["total_size"])
    return total


def pool_active_bytes(pool: tuple[int, int]) -> int:
    """Bytes in ``pool`` held by live blocks (graph intermediates kept for replay, outputs)."""
    pool = tuple(pool)
    return sum(int(seg.get("active_size", 0)) for seg in torch.cuda.memory_snapshot()
               if tuple(seg.get("segment_pool_id", (0, 0))) == pool)


# ---------------------------------------------------------------------------------- decode graphs


@dataclass
class GraphSet:
    """Decode-step graphs for several batch sizes over one set of static input buffers."""

    graphs: dict[int, CapturedGraph]
    tokens: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    pool_mode: PoolMode
    order: Order
    capture_order: list[int] = field(default_factory=list)
    #: static logits ``(largest size, V)`` that every graph writes its first rows of; it lies
    #: outside the graphs' pool, so a graph's output never pins pool memory
    logits: torch.Tensor | None = None
    #: ``(2, largest size)``: row 0 is ``positions``, row 1 ``slots`` (one copy fills both)
    index: torch.Tensor | None = None

    @property
    def sizes(self) -> list[int]:
        return sorted(self.graphs)

    def copy_inputs(self, tokens: torch.Tensor, positions: torch.Tensor,
                    slots: torch.Tensor) -> int:
        """Copy a batch into the first rows of the static buffers; returns its size."""
        b = tokens.shape[0]
        self.tokens[:b].copy_(tokens)
        self.positions[:b].copy_(positions)
        self.slots[:b].copy_(slots)
        return b

    def replay(self, bs: int) -> torch.Tensor:
        """Replay graph ``bs`` on what is in the static buffers; returns its static logits."""
        if isinstance(bs, bool) or not isinstance(bs, numbers.Integral):
            raise TypeError(f"bs must be an int batch size, got {bs!r}")
        if bs not in self.graphs:
            raise KeyError(f"no graph captured for batch size {bs}; captured: {self.sizes}")
        return self.graphs[bs].replay()

    def pools(self) -> dict[tuple[int, int], list[int]]:
        """Pool id → the batch sizes whose graphs live in it."""
        out: dict[tuple[int, int], list[int]] = {}
        for bs, g in self.graphs.items():
            out.setdefault(tuple(g.pool), []).append(bs)
        return out

    def memory_report(self) -> dict:
        """Per-pool reserved bytes (allocator accounting), total, and capture times."""
        pools = [{"sizes": sorted(sizes), "reserved_bytes": pool_reserved_bytes(pid),
                  "active_bytes": pool_active_bytes(pid)}
                 for pid, sizes in self.pools().items()]
        return {
            "pool_mode": self.pool_mode,
            "order": self.order,
            "capture_order": self.capture_order,
            "pools": pools,
            "total_reserved_bytes": sum(p["reserved_bytes"] for p in pools),
            "capture_s": {bs: g.capture_s for bs, g in self.graphs.items()},
            "warmup_s": {bs: g.warmup_s for bs, g in self.graphs.items()},
        }

    def release(self) -> None:
        """Drop every graph and return the pools' memory to the device."""
        self.graphs.clear()
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _progress(iterable: Sequence[int], enabled: bool | None, desc: str):
    if enabled is None:
        enabled = len(iterable) > 4
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return iterable
    return tqdm(iterable, desc=desc, unit="graph", leave=False)


def check_capture_sizes(sizes: Sequence[int], max_batch: int | None = None) -> list[int]:
    """The capture sizes, sorted; a clear error when the list is empty, an entry is not a
    positive ``int`` (``2.5``, ``"3"``, ``True`` are refused, not coerced), a size repeats, or
    one exceeds the cache's ``max_batch``."""
    if max_batch is not None:
        max_batch = as_int(max_batch, "max_batch", minimum=1)
    out = sorted(as_size_list(sizes, "capture sizes", distinct=True,
                              fix="capture sizes are positive batch sizes such as [1, 2, 4, 8]"))
    if max_batch is not None and out[-1] > max_batch:
        raise ValueError(f"capture size {out[-1]} is larger than the model's max_batch="
                         f"{max_batch}; lower the sizes or build the model with a larger "
                         "max_batch")
    return out


def _check_choice(value: object, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def release_after_failure(captured: dict, exc: BaseException, what: str) -> BaseException:
    """Release everything ``captured`` (size -> graphs) after a failed capture and return the
    exception to raise: out of memory says which sizes were released."""
    done = sorted(captured)
    captured.clear()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    if isinstance(exc, CaptureOOMError):
        return CaptureOOMError(exc.rule, exc.fix + f" ({what} already captured for sizes {done} "
                               "were released; the model and its cache are intact)", exc.detail)
    return exc


def static_buffers(model, n: int, tokens: torch.Tensor | None = None,
                   index: torch.Tensor | None = None, logits: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The static inputs (tokens; positions and slots as the two rows of ``index``) and the
    static logits buffer for graphs of up to ``n`` rows, each allocated unless given. Harmless
    values: token 0, position 0, the scratch slot. Out of memory -> :class:`CaptureOOMError`."""
    dev = model.device
    try:
        if tokens is None:
            tokens = torch.zeros(n, dtype=torch.long, device=dev)
        if index is None:
            index = torch.zeros((2, n), dtype=torch.long, device=dev)
            index[1].fill_(model.cfg.scratch_slot)
        if logits is None:
            logits = torch.empty((n, model.cfg.vocab_size), dtype=model.cfg.torch_dtype,
                                 device=dev)
    except torch.cuda.OutOfMemoryError as exc:
        raise CaptureOOMError(
            "the GPU ran out of memory allocating the graphs' static buffers (the logits "
            f"buffer alone is {n} x {model.cfg.vocab_size} values)",
            "capture fewer or smaller batch sizes, lower max_batch / max_seq, or free other "
            "GPU memory; nothing was captured and the model and its cache are intact") from exc
    return tokens, index, logits


def capture_decode_graphs(model, sizes: Sequence[int], *, pool: PoolMode = "shared",
                          order: Order = "largest_first", warmup: int = 3,
                          progress: bool | None = None, check_sync: bool = True,
                          on_captured: Callable[[int, CapturedGraph], None] | None = None,
                          tokens: torch.Tensor | None = None,
                          index: torch.Tensor | None = None,
                          logits: torch.Tensor | None = None,
                          step: str | Callable[..., torch.Tensor] = "readable") -> GraphSet:
    """Capture ``model.decode_step`` once per batch size in ``sizes`` (``step="fused"``: the
    fused step of :mod:`labkit.fused`; or any callable with ``decode_step``'s signature).

    Inputs are static buffers sized for the largest batch, filled with harmless values
    (token 0, position 0, the scratch slot) so that warm-up and capture never write into a
    live request's cache. On an error every graph captured so far is released.
    ``on_captured(bs, graph)`` is called after each capture (to read pool growth, say).
    """
    if not hasattr(model, "decode_step") or not hasattr(model, "cfg"):
        raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}")
    sizes = check_capture_sizes(sizes, model.cfg.max_batch)
    _check_choice(pool, "pool", ("shared", "private"))
    _check_choice(order, "order", ("largest_first", "smallest_first"))
    warmup = as_int(warmup, "warmup", minimum=0, fix="warm up 0 or more times (3 is usual)")
    if progress is not None:
        as_bool(progress, "progress")
    as_bool(check_sync, "check_sync")
    if on_captured is not None and not callable(on_captured):
        raise TypeError(f"on_captured must be callable (bs, graph) or None, got "
                        f"{type(on_captured).__name__}")
    if not torch.cuda.is_available() or model.device.type != "cuda":
        raise RuntimeError("capturing CUDA graphs needs the model on a CUDA GPU "
                           f"(model is on {model.device}); on CPU use eager decode_step")
    step_fn = step_function(model, step)
    n = sizes[-1]
    # positions and slots are the two rows of one buffer: host-side batch metadata arrives
    # with a single copy (PaddingDispatcher)
    tokens, index, logits = static_buffers(model, n, tokens, index, logits)
    for name, buf in (("tokens", tokens), ("index", index[0]), ("logits", logits)):
        if buf.shape[0] < n:
            raise ValueError(f"static {name} buffer holds {buf.shape[0]} rows; the largest "
                             f"size is {n}")
    positions, slots = index[0], index[1]
    seq = sizes[::-1] if order == "largest_first" else sizes
    handle = torch.cuda.graph_pool_handle() if pool == "shared" else None
    stream = torch.cuda.Stream()
    graphs: dict[int, CapturedGraph] = {}

    def one_step(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return step_fn(t, p, s, check=False, out=logits[:t.shape[0]])

    try:
        with gc_frozen():
            for bs in _progress(seq, progress, f"capturing ({pool} pool)"):
                graphs[bs] = capture_callable(
                    one_step, tokens[:bs], positions[:bs], slots[:bs], pool=handle, stream=stream,
                    warmup=warmup, check_sync=check_sync, label=bs)
                if on_captured is not None:
                    on_captured(bs, graphs[bs])
    except BaseException as exc:
        err = release_after_failure(graphs, exc, "graphs")
        if err is exc:
            raise
        raise err from exc
    return GraphSet(graphs, tokens, positions, slots, pool, order, capture_order=list(seq),
                    logits=logits, index=index)
