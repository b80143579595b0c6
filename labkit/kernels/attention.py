"""Decode attention of the Triton step (:mod:`labkit.kernels.step`), split along the sequence
as FlashDecoding does, over the KV cache in place (slot or paged layout).

One program per (row, head) leaves the GPU idle at small batches, so each (row, head, split)
program computes a partial softmax (largest score ``m``, ``l = sum exp(score - m)``,
``acc = sum exp(score - m) v``), and the last of a (row, head)'s programs to finish combines
them exactly::

    M = max_s m_s,   y = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s

FlashDecoding combines in a kernel of its own; here a counter per (row, head) elects the last
program instead (the "semaphore" of split-K matrix kernels), so the split costs no launch.
Splits are fixed by ``max_seq`` (a graph cannot pick them from the positions): a split past a
row's last position loads nothing and writes ``m = -inf, l = 0``.
"""

import triton
import triton.language as tl

from .common import cache_index, release_dependents, wait_first, wait_inputs


@triton.jit
def attention_split_kernel(q_ptr, k_cache_ptr, v_cache_ptr, pos_ptr, slot_ptr, table_ptr,
                           m_ptr, l_ptr, acc_ptr, count_ptr, y_ptr, scale,
                           WAIT: tl.constexpr, H: tl.constexpr, HD: tl.constexpr,
                           D: tl.constexpr, MAX_SEQ: tl.constexpr, PAGED: tl.constexpr,
                           BLOCK_SIZE: tl.constexpr, MAX_BLOCKS: tl.constexpr,
                           NSPLIT: tl.constexpr, SPLIT: tl.constexpr, BLOCK_T: tl.constexpr,
                           BLOCK_S: tl.constexpr, BLOCK_HD: tl.constexpr):
    """Partial softmax attention of one (row, head, split) over positions
    ``[s * SPLIT, min((s + 1) * SPLIT, pos + 1))`` of the row's slot, read in place; the last
    split of the (row, head) to finish writes the combined output ``y``.

    Fuses the readable step's attention with its metadata kernels (offsets and lengths come
    from ``positions`` and ``slots``); online softmax over chunks of ``BLOCK_T`` positions.
    Reads q (``B D e``) and the keys and values attended (``2 B c D e``, the only bytes that
    grow with the context ``c``); writes the partials (``B NSPLIT (D + 2 H)`` float32, read
    back from L2 by the last split) and ``y`` (``B D e``). ``count`` (``(B, H)`` int32, zero)
    counts the splits done and is zero again when the step ends."""
    wait_first(WAIT)
    attention_tile(tl.program_id(0), tl.program_id(1), tl.program_id(2), q_ptr, k_cache_ptr,
                   v_cache_ptr, pos_ptr, slot_ptr, table_ptr, m_ptr, l_ptr, acc_ptr, count_ptr,
                   y_ptr, scale, q_ptr, 0, WAIT % 5, H, HD, D, MAX_SEQ, PAGED, BLOCK_SIZE,
                   MAX_BLOCKS, NSPLIT, SPLIT, BLOCK_T, BLOCK_S, BLOCK_HD)


@triton.jit
def attention_tile(b, h, s, q_ptr, k_cache_ptr, v_cache_ptr, pos_ptr, slot_ptr, table_ptr,
                   m_ptr, l_ptr, acc_ptr, count_ptr, y_ptr, scale, ready_ptr, target,
                   WAIT: tl.constexpr, H: tl.constexpr, HD: tl.constexpr, D: tl.constexpr,
                   MAX_SEQ: tl.constexpr, PAGED: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                   MAX_BLOCKS: tl.constexpr, NSPLIT: tl.constexpr, SPLIT: tl.constexpr,
                   BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_HD: tl.constexpr):
    """Split ``s`` of row ``b``, head ``h`` of :func:`attention_split_kernel` (no weights to
    load first: it waits before its first load)."""
    wait_inputs(ready_ptr, target, WAIT)
    slot = tl.load(slot_ptr + b).to(tl.int64)
    pos = tl.load(pos_ptr + b).to(tl.int64)
    d = tl.arange(0, BLOCK_HD)
    d_mask = d < HD
    q = tl.load(q_ptr + b * D + h * HD + d, mask=d_mask, other=0.0).to(tl.float32)
    start = s * SPLIT
    end = tl.minimum(start + SPLIT, pos + 1)
    m_i = tl.full([], float("-inf"), tl.float32)
    l_i = tl.full([], 0.0, tl.float32)
    acc = tl.zeros([BLOCK_HD], dtype=tl.float32)
    # a fixed number of chunks (SPLIT / BLOCK_T), masked past the row's last position: a
    # masked load reads no memory (and Triton's interpreter takes no loop bounds read from
    # memory under numpy 2)
    for c in range(0, SPLIT, BLOCK_T):
        t = start + c + tl.arange(0, BLOCK_T)
        t_mask = t < end
        index = cache_index(slot, t, table_ptr, MAX_SEQ, PAGED, BLOCK_SIZE, MAX_BLOCKS)
        offset = index[:, None] * D + h * HD + d[None, :]
        kv_mask = t_mask[:, None] & d_mask[None, :]
        k = tl.load(k_cache_ptr + offset, mask=kv_mask, other=0.0).to(tl.float32)
        scores = tl.sum(k * q[None, :], axis=1) * scale
        scores = tl.where(t_mask, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=0))
        # while nothing is attended yet (m_new = -inf) subtract 0, not -inf: no NaN
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_sub)  # rescales what the earlier chunks summed
        p = tl.exp(scores - m_sub)
        v = tl.load(v_cache_ptr + offset, mask=kv_mask, other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    part = b * NSPLIT + s
    tl.store(m_ptr + part * H + h, m_i)
    tl.store(l_ptr + part * H + h, l_i)
    tl.store(acc_ptr + part * D + h * HD + d, acc, mask=d_mask)
    # the barrier orders every thread's stores of the partials before the count, and acq_rel
    # makes them visible with it (one thread adds); the last split sees every other split's
    # partials after it reads the count (as CUTLASS's split-K semaphore releases:
    # __syncthreads, then one thread's release store, include/cutlass/semaphore.h)
    tl.debug_barrier()
    done = tl.atomic_add(count_ptr + b * H + h, 1, sem="acq_rel")
    if done == NSPLIT - 1:
        ss = tl.arange(0, BLOCK_S)
        s_mask = ss < NSPLIT
        parts = b * NSPLIT + ss
        # ".cg": from L2, where the other SMs' stores are (an SM's L1 is not kept coherent)
        m_s = tl.load(m_ptr + parts * H + h, mask=s_mask, other=-float("inf"),
                      cache_modifier=".cg")
        l_s = tl.load(l_ptr + parts * H + h, mask=s_mask, other=0.0, cache_modifier=".cg")
        acc_s = tl.load(acc_ptr + parts[:, None] * D + h * HD + d[None, :],
                        mask=s_mask[:, None] & d_mask[None, :], other=0.0,
                        cache_modifier=".cg")
        weight = tl.exp(m_s - tl.max(m_s, axis=0))  # split 0 is never empty
        y = tl.sum(weight[:, None] * acc_s, axis=0) / tl.sum(weight * l_s, axis=0)
        tl.store(y_ptr + b * D + h * HD + d, y.to(y_ptr.dtype.element_ty), mask=d_mask)
        tl.store(count_ptr + b * H + h, 0)  # ready for the next step
    release_dependents(WAIT)


@triton.jit
def attention_heads_tile(b, h0, q_ptr, k_cache_ptr, v_cache_ptr, pos_ptr, slot_ptr, table_ptr,
                         y_ptr, scale, H: tl.constexpr, HD: tl.constexpr, D: tl.constexpr,
                         MAX_SEQ: tl.constexpr, PAGED: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                         MAX_BLOCKS: tl.constexpr, SPLIT: tl.constexpr, BLOCK_T: tl.constexpr,
                         BLOCK_HD: tl.constexpr, HEADS: tl.constexpr):
    """Heads ``[h0, h0 + HEADS)`` of row ``b`` in one tile, unsplit (the persistent layer
    kernel's attention stage with ``heads=``; no split, so no partials and no counter: it
    writes ``y``). Per chunk of ``BLOCK_T`` positions it loads the keys and values of all
    ``HEADS`` heads at once -- ``HEADS`` times the bytes of :func:`attention_tile`'s chunk in
    flight -- and runs one online softmax per head, the same arithmetic per head as
    ``attention_tile`` with one split (``y = acc / l``). Called after the stage's wait: every
    q, k and v it reads is written. Reads q (``HEADS HD e``) and the row's keys and values of
    those heads (``2 c HEADS HD e``); writes ``y`` (``HEADS HD e``)."""
    slot = tl.load(slot_ptr + b).to(tl.int64)
    pos = tl.load(pos_ptr + b).to(tl.int64)
    g = h0 + tl.arange(0, HEADS)        # the tile's heads; past the last head: masked
    g_mask = g < H
    d = tl.arange(0, BLOCK_HD)
    gd = g[:, None] * HD + d[None, :]   # (HEADS, BLOCK_HD) offsets in a D-wide row
    gd_mask = g_mask[:, None] & (d < HD)[None, :]
    q = tl.load(q_ptr + b * D + gd, mask=gd_mask, other=0.0).to(tl.float32)
    end = tl.minimum(SPLIT, pos + 1)
    m_i = tl.full([HEADS], float("-inf"), tl.float32)
    l_i = tl.zeros([HEADS], dtype=tl.float32)
    acc = tl.zeros([HEADS, BLOCK_HD], dtype=tl.float32)
    for c in range(0, SPLIT, BLOCK_T):  # fixed chunks, masked past the last position
        t = c + tl.arange(0, BLOCK_T)
        t_mask = t < end
        index = cache_index(slot, t, table_ptr, MAX_SEQ, PAGED, BLOCK_SIZE, MAX_BLOCKS)
        offset = index[:, None, None] * D + gd[None, :, :]          # (BLOCK_T, HEADS, HD)
        kv_mask = t_mask[:, None, None] & gd_mask[None, :, :]
        k = tl.load(k_cache_ptr + offset, mask=kv_mask, other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + offset, mask=kv_mask, other=0.0).to(tl.float32)
        scores = tl.sum(k * q[None, :, :], axis=2) * scale          # (BLOCK_T, HEADS)
        scores = tl.where(t_mask[:, None], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=0))
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)        # no NaN before any key
        alpha = tl.exp(m_i - m_sub)
        p = tl.exp(scores - m_sub[None, :])
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    y = acc / l_i[:, None]  # position 0 is always attended: l > 0 for every real head
    tl.store(y_ptr + b * D + gd, y.to(y_ptr.dtype.element_ty), mask=gd_mask)
