"""Device helpers shared by the Triton kernels of :mod:`labkit.kernels.step`, inlined where
called; imported through :func:`labkit.kernels.load` (it needs Triton)."""

import triton
import triton.language as tl

from . import waits

# the codes of :mod:`labkit.kernels.waits` that ``WAIT`` is compared with below, as constexprs
# (a Triton kernel reads a global only as one)
_PDL = tl.constexpr(waits.PDL)
_READY = tl.constexpr(waits.READY)
_PDL_LATE = tl.constexpr(waits.PDL_LATE)
_PDL_FIRST = tl.constexpr(waits.PDL_FIRST)
_READY_ACQUIRE = tl.constexpr(waits.READY_ACQUIRE)


@triton.jit
def cache_index(slot, pos, table_ptr, MAX_SEQ: tl.constexpr, PAGED: tl.constexpr,
                BLOCK_SIZE: tl.constexpr, MAX_BLOCKS: tl.constexpr):
    """Flat cache row (the cache viewed as ``(-1, heads, head_dim)``) of position ``pos`` of
    ``slot``: ``slot * max_seq + pos``, or through the block table (paged; rows owning nothing
    point at the pad block), as ``labkit.kvcache``'s ``write_index``."""
    if PAGED:
        block = tl.load(table_ptr + slot * MAX_BLOCKS + pos // BLOCK_SIZE).to(tl.int64)
        index = block * BLOCK_SIZE + pos % BLOCK_SIZE
    else:
        index = slot * MAX_SEQ + pos
    return index


@triton.jit
def dot_acc(acc, a, w, DOT: tl.constexpr, UPCAST: tl.constexpr,
            PRECISION: tl.constexpr):
    """``acc + a @ w.T`` in float32: ``a`` (rows, k), ``w`` (n, k) a tile of an ``nn.Linear``
    weight. ``DOT``: on the tensor cores (``tl.dot``: rows, n and k at least 16); else as a
    broadcast product summed over k on the CUDA cores, which any tile shape takes: at one to
    two rows a step only streams the weights, and small tiles let many programs share them.
    ``UPCAST``: multiply in float32 (Triton's interpreter multiplies bf16 tiles as raw 16-bit
    patterns; a bf16 product is exact in float32). ``PRECISION="ieee"``: full float32 products
    (Triton's default is TF32, which ``torch.mm`` does not use)."""
    if DOT:
        if UPCAST:
            a = a.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(a, tl.trans(w), acc, input_precision=PRECISION)
    else:
        acc += tl.sum(a.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :], axis=2)
    return acc


@triton.jit
def gelu_tanh(z):
    """GPT-2's tanh GELU, ``0.5 z (1 + tanh(u))`` with ``u = sqrt(2/pi) (z + 0.044715 z^3)``,
    written as ``z * sigmoid(2u)`` (the same function: ``sigmoid(2u) = (1 + tanh u) / 2``)."""
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    return z * tl.sigmoid(2.0 * u)


@triton.jit
def tile(pid_n, pid_b, B, N, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
         WIDTH: tl.constexpr):
    """Tile ``(pid_n, pid_b)`` of a ``(B, N)`` output cut into ``(N tiles, B tiles)``: its rows
    and output columns, with their masks (a kernel's program ids, or a persistent program's
    work item). Tiles are ``WIDTH`` columns apart: ``BLOCK_N``, or fewer (a persistent
    step's stripes, ``BLOCK_N`` the power of two that holds ``WIDTH``), the rest masked."""
    rows = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    lanes = tl.arange(0, BLOCK_N)
    ns = pid_n * WIDTH + lanes
    n_mask = ns < N
    if WIDTH < BLOCK_N:
        n_mask = n_mask & (lanes < WIDTH)
    return rows, rows < B, ns, n_mask


@triton.jit
def wait_inputs(ready_ptr, target, WAIT: tl.constexpr):
    """Wait until what the tile reads next has been written; everything before this call may
    read only what no earlier work writes (the weights).

    ``STREAM``: nothing to do. ``PDL``: ``griddepcontrol.wait`` returns once the previous
    kernel has finished and its stores are visible; then ``griddepcontrol.launch_dependents``
    lets the next kernel start its own programs, which run up to their own wait (Triton's
    tutorial ``11-programmatic-dependent-launch.py``). ``READY``: spin on the ready counter
    until it reaches ``target`` (volatile loads, from L2), then one acquire, which orders this
    program's later loads after the stores the counter's releases published and invalidates
    the SM's L1 (which is not kept coherent); the CTA barrier holds every thread until then.
    ``PDL_ORDER``: nothing (the interpreter's stand-in).
    ``PDL_LATE``: ``griddepcontrol.wait`` only (the tile's end releases the next kernel).
    ``READY_ACQUIRE``: as ``READY``, but every poll is the acquire (each also invalidates the
    SM's L1): no volatile loads first, so the wait can end on the load that saw the target
    instead of one more trip to L2 after it. Built to be timed against ``READY``
    (:mod:`labkit.measure.sync_floor`); not measured on a GPU yet, so not the default."""
    if WAIT == _PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    if WAIT == _PDL_LATE:
        tl.extra.cuda.gdc_wait()
    if WAIT == _READY:
        seen = tl.load(ready_ptr, volatile=True)
        while seen < target:
            seen = tl.load(ready_ptr, volatile=True)
    if WAIT == _READY or WAIT == _READY_ACQUIRE:  # noqa: SIM109 (Triton compares constexprs)
        # the acquire's value must be used: Triton 3.6 drops an acquire whose value is not,
        # and with it the SM's L1 invalidation (CCTL.IVALL), so a tile read a stale sector of
        # a row another SM had just written (found on an H100; see notebook 17). The loop
        # keeps it; after READY's volatile loads it never turns (the counter reached target
        # and only grows), with READY_ACQUIRE it is the poll
        seen = tl.atomic_add(ready_ptr, 0, sem="acquire", scope="gpu")
        while seen < target:
            seen = tl.atomic_add(ready_ptr, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()


@triton.jit
def wait_first(WAIT: tl.constexpr):
    """At a kernel's start, ``PDL_FIRST``: wait for the previous kernel, then let the next one
    start, before any load (no weights stream in during the wait; the tile then runs as in the
    stream, ``WAIT % 5``)."""
    if WAIT == _PDL_FIRST:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def release_dependents(WAIT: tl.constexpr):
    """At a tile's end, ``PDL_LATE``: let the next kernel start its programs now that this
    one's stores are issued (``griddepcontrol.launch_dependents``): they load their first
    weights while the last programs here finish, but do not hold an SM's registers and
    shared memory while programs of this kernel still wait to start. Their own wait still
    returns only once this kernel has finished."""
    if WAIT == _PDL_LATE:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def launch_base(ready_ptr, per_launch):
    """This launch's start on a counter that grows by ``per_launch`` arrivals a launch and is
    never reset, read before this program's first arrival: the counter then holds whole
    earlier launches plus fewer than ``per_launch`` arrivals of this one."""
    seen = tl.load(ready_ptr, volatile=True)
    return seen - seen % per_launch


@triton.jit
def arrive(ready_ptr):
    """Count this program's work as written: the CTA barrier holds until every thread's stores
    are issued, then one thread adds 1 with release semantics at GPU scope (the pattern of
    CUTLASS's semaphore, ``include/cutlass/semaphore.h``). The counter only grows: a step
    never resets it, so nothing inside a graph must."""
    tl.debug_barrier()
    tl.atomic_add(ready_ptr, 1, sem="release", scope="gpu")


@triton.jit
def prefetch_l2(w_ptr, start, end, LANES: tl.constexpr):
    """Ask L2 for elements ``[start, end)`` of ``w_ptr`` without waiting for them: one
    ``prefetch.global.L2`` per 128-byte line, ``LANES`` lines per pass (one per thread; lanes
    past ``end`` repeat its last line). Nothing is loaded into registers, so the program goes
    on at once while the bytes stream from HBM into L2, where its later loads find them.
    Compiled kernels only (inline PTX; the interpreter has none)."""
    line = 128 // (w_ptr.dtype.element_ty.primitive_bitwidth // 8)
    for first in tl.range(start, end, LANES * line):
        offsets = tl.minimum(first + tl.arange(0, LANES) * line, end - 1)
        tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l",
                                  [w_ptr + offsets], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def stamp(stamp_ptr, index, STAMP: tl.constexpr):
    """With ``STAMP``: store the GPU's global clock (ns, ``%globaltimer``) at ``stamp_ptr +
    index``, after the CTA barrier so that it marks when every thread got here. Compiled
    kernels only (the interpreter has no such clock); without ``STAMP`` nothing."""
    if STAMP:
        tl.debug_barrier()
        tl.store(stamp_ptr + index, tl.extra.cuda.globaltimer())
