"""Device helpers shared by the Triton kernels of :mod:`labkit.kernels.step` (``@triton.jit``
functions, inlined into the kernels that call them).

Loaded through :func:`labkit.kernels.load`, which decorates them for the GPU or for Triton's
interpreter; this file imports ``triton`` at the top, so import it only where Triton is.
"""

import triton
import triton.language as tl


@triton.jit
def cache_index(slot, pos, table_ptr, MAX_SEQ: tl.constexpr, PAGED: tl.constexpr,
                BLOCK_SIZE: tl.constexpr, MAX_BLOCKS: tl.constexpr):
    """Flat row of the cache viewed as ``(-1, heads, head_dim)`` where position ``pos`` of
    ``slot`` lives (``slot`` int64, ``pos`` int64 scalars or blocks that broadcast).

    Slot layout: ``slot * max_seq + pos`` (:meth:`labkit.kvcache.SlotKVCache.write_index`).
    Paged layout: the slot's block table row says which pool block holds ``pos``
    (:meth:`labkit.kvcache.PagedKVCache.write_index`); rows that own nothing point at the pad
    block, so the scratch slot of padded rows writes there."""
    if PAGED:
        block = tl.load(table_ptr + slot * MAX_BLOCKS + pos // BLOCK_SIZE).to(tl.int64)
        index = block * BLOCK_SIZE + pos % BLOCK_SIZE
    else:
        index = slot * MAX_SEQ + pos
    return index


@triton.jit
def dot_acc(acc, a, w, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """``acc + a @ w.T``: ``a`` (rows, k) activations, ``w`` (n, k) a tile of an
    ``nn.Linear`` weight (rows are output features), float32 accumulator.

    ``UPCAST``: multiply in float32. Triton's interpreter (CPU tests) multiplies bf16 tiles as
    their raw 16-bit patterns, so under the interpreter both operands go to float32 first: the
    same products (a bf16 product is exact in float32), the same float32 accumulation. On the
    GPU bf16 tiles go to the tensor cores as they are. ``PRECISION`` ``"ieee"`` keeps a
    float32 model's products in full float32 (Triton's default there is TF32, which
    ``torch.mm`` does not use)."""
    if UPCAST:
        a = a.to(tl.float32)
        w = w.to(tl.float32)
    return tl.dot(a, tl.trans(w), acc, input_precision=PRECISION)


@triton.jit
def gelu_tanh(z):
    """GPT-2's tanh GELU, ``0.5 z (1 + tanh(u))`` with ``u = sqrt(2/pi) (z + 0.044715 z^3)``,
    written as ``z * sigmoid(2u)`` (the same function: ``sigmoid(2u) = (1 + tanh u) / 2``)."""
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    return z * tl.sigmoid(2.0 * u)
