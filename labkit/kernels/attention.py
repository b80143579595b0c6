"""Decode attention of the Triton step (:mod:`labkit.kernels.step`), split along the sequence
as FlashDecoding does, over the KV cache in place (slot or paged layout).

One program per (row, head) leaves the GPU idle at small batches, so each (row, head, split)
program computes a partial softmax (largest score ``m``, ``l = sum exp(score - m)``,
``acc = sum exp(score - m) v``), combined exactly in :func:`attn_out_kernel`::

    M = max_s m_s,   y = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s

Splits are fixed by ``max_seq`` (a graph cannot pick them from the positions): a split past a
row's last position loads nothing and writes ``m = -inf, l = 0``.
"""

import triton
import triton.language as tl

from .common import cache_index, dot_acc, tile


@triton.jit
def attention_split_kernel(q_ptr, k_cache_ptr, v_cache_ptr, pos_ptr, slot_ptr, table_ptr,
                           m_ptr, l_ptr, acc_ptr, scale, H: tl.constexpr, HD: tl.constexpr,
                           D: tl.constexpr, MAX_SEQ: tl.constexpr, PAGED: tl.constexpr,
                           BLOCK_SIZE: tl.constexpr, MAX_BLOCKS: tl.constexpr,
                           NSPLIT: tl.constexpr, SPLIT: tl.constexpr, BLOCK_T: tl.constexpr,
                           BLOCK_HD: tl.constexpr):
    """Partial softmax attention of one (row, head, split) over positions
    ``[s * SPLIT, min((s + 1) * SPLIT, pos + 1))`` of the row's slot, read in place.

    Fuses the readable step's attention with its metadata kernels (offsets and lengths come
    from ``positions`` and ``slots``); online softmax over chunks of ``BLOCK_T`` positions.
    Reads q (``B D e``) and the keys and values attended (``2 B c D e``, the only bytes that
    grow with the context ``c``); writes the partials (``B NSPLIT (D + 2 H)`` float32: ``m``
    and ``l`` laid out ``(B, NSPLIT, H)``, ``acc`` ``(B, NSPLIT, D)``, a split's heads side by
    side as in ``x``)."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.program_id(2)
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


@triton.jit
def _combined(m_ptr, l_ptr, acc_ptr, rows, row_mask, cols, H: tl.constexpr,
              HD: tl.constexpr, D: tl.constexpr, NSPLIT: tl.constexpr, BLOCK_S: tl.constexpr):
    """The attention output of ``rows`` at columns ``cols`` of ``D``, float32
    ``(BLOCK_B, BLOCK_K)``: each column's splits combined with its head's ``m`` and ``l``."""
    s = tl.arange(0, BLOCK_S)
    head = cols // HD
    mask = (row_mask[:, None, None] & (s < NSPLIT)[None, :, None]
            & (cols < D)[None, None, :])
    part = rows[:, None, None] * NSPLIT + s[None, :, None]           # (BLOCK_B, BLOCK_S, 1)
    m = tl.load(m_ptr + part * H + head[None, None, :], mask=mask, other=-float("inf"))
    l = tl.load(l_ptr + part * H + head[None, None, :], mask=mask, other=0.0)
    acc = tl.load(acc_ptr + part * D + cols[None, None, :], mask=mask, other=0.0)
    m_max = tl.max(m, axis=1)
    m_max = tl.where(m_max == -float("inf"), 0.0, m_max)  # padded rows and columns only
    weight = tl.exp(m - m_max[:, None, :])
    denom = tl.sum(weight * l, axis=1)
    denom = tl.where(denom > 0, denom, 1.0)
    return tl.sum(weight * acc, axis=1) / denom


@triton.jit
def attn_out_kernel(m_ptr, l_ptr, acc_ptr, w_ptr, b_ptr, x_ptr, B, H: tl.constexpr,
                    HD: tl.constexpr, D: tl.constexpr, NSPLIT: tl.constexpr,
                    BLOCK_S: tl.constexpr, BLOCK_HD: tl.constexpr, BLOCK_B: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
                    UNROLL: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """Fuses the split combine + output projection + bias + residual add, in place:
    ``x += combine(partials) @ W_proj.T + b_proj``.

    Replaces the out-projection GEMM, its bias, the residual add (and FlashDecoding's separate
    reduction kernel): the attention output is combined from its splits as it is loaded
    (rounded to the model dtype) and multiplied by the same columns of ``W_proj``: on the
    tensor cores head by head, on the CUDA cores a chunk of columns at a time (the combine is
    redone by every program, so it is kept to one pass over the partials).
    Reads ``W_proj`` and bias (``(D^2 + D) e``) once, the partials (from L2) and its tile of
    ``x``; writes the residual."""
    rows, row_mask, ns, n_mask = tile(B, D, BLOCK_B, BLOCK_N)
    out = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
    if DOT:  # head by head: (rows, splits, head_dim) partials, then the head's columns
        s = tl.arange(0, BLOCK_S)
        d = tl.arange(0, BLOCK_HD)
        d_mask = d < HD
        part_mask = row_mask[:, None] & (s < NSPLIT)[None, :]
        part = rows[:, None] * NSPLIT + s[None, :]                      # (BLOCK_B, BLOCK_S)
        for h in tl.range(0, H):
            m = tl.load(m_ptr + part * H + h, mask=part_mask, other=-float("inf"))
            l = tl.load(l_ptr + part * H + h, mask=part_mask, other=0.0)
            m_max = tl.where(row_mask, tl.max(m, axis=1), 0.0)  # split 0 is never empty
            weight = tl.exp(m - m_max[:, None])
            denom = tl.sum(weight * l, axis=1)
            denom = tl.where(denom > 0, denom, 1.0)  # padded rows of the block
            acc = tl.load(acc_ptr + part[:, :, None] * D + h * HD + d[None, None, :],
                          mask=part_mask[:, :, None] & d_mask[None, None, :], other=0.0)
            y = tl.sum(weight[:, :, None] * acc, axis=1) / denom[:, None]  # (BLOCK_B, BLOCK_HD)
            w = tl.load(w_ptr + ns[:, None] * D + h * HD + d[None, :],
                        mask=n_mask[:, None] & d_mask[None, :], other=0.0)
            out = dot_acc(out, y.to(w.dtype), w, DOT, UPCAST, PRECISION)
    else:  # a chunk of columns at a time, each column combined with its head's m and l
        for k0 in tl.range(0, D, BLOCK_K, loop_unroll_factor=UNROLL):
            cols = k0 + tl.arange(0, BLOCK_K)
            y = _combined(m_ptr, l_ptr, acc_ptr, rows, row_mask, cols, H, HD, D, NSPLIT,
                          BLOCK_S)
            w = tl.load(w_ptr + ns[:, None] * D + cols[None, :],
                        mask=n_mask[:, None] & (cols < D)[None, :], other=0.0)
            out = dot_acc(out, y.to(w.dtype), w, DOT, UPCAST, PRECISION)
    out += tl.load(b_ptr + ns, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    mask = row_mask[:, None] & n_mask[None, :]
    offset = rows[:, None] * D + ns[None, :]
    x = tl.load(x_ptr + offset, mask=mask, other=0.0).to(tl.float32)
    tl.store(x_ptr + offset, (x + out).to(x_ptr.dtype.element_ty), mask=mask)
