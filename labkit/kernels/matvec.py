"""The matrix kernels of the Triton decode step (:mod:`labkit.kernels.step`): each one reads a
weight matrix once and does everything around it that needs no other kernel's output.

A decode step multiplies a few rows (the batch) by each weight matrix: the work is reading
the matrix, so each kernel below reads its matrix once (spread over its programs) and folds
the small elementwise work before and after it into the same pass -- the LayerNorm into the
loads (prologue), the bias, GELU, residual add or cache write into the stores (epilogue).

Grid of every kernel here: ``(output column blocks, batch row blocks)``. A program owns
``BLOCK_N`` output features for ``BLOCK_B`` rows; it loops over the reduction dimension in
chunks of ``BLOCK_K`` and accumulates in float32 with ``tl.dot`` (``BLOCK_B >= 16``: padded
rows are masked, never stored). A LayerNorm needs whole rows, so each program computes its
rows' mean and variance itself (``D`` values per row, a re-read from L2, not from HBM).

Bytes each kernel must read from memory, per launch (``B`` rows, ``D`` = d_model, ``e`` bytes
per element; :func:`labkit.roofline.kernel_plan.kernel_plan` adds them up):

* :func:`ln_qkv_kernel`: LN1 (``2D e``), the QKV weight and bias (``(3D^2 + 3D) e``), the
  rows (``B D e``; the first layer reads two embedding rows per row instead); writes q
  (``B D e``) and this step's k and v into the cache (``2 B D e``).
* :func:`ln_linear_kernel` as LN2 + up-projection + GELU: ``(2D + 4D^2 + 4D) e`` of
  weights, the rows; writes the hidden rows (``4 B D e``). As final LayerNorm + LM head:
  ``(2D + V D) e`` of weights (the largest matrix of the step), writes the logits (``B V e``).
* :func:`linear_residual_kernel` (down-projection + bias + residual): ``(4D^2 + D) e`` of
  weights, the hidden rows (``4 B D e``) and the residual (``B D e``); writes the residual.
"""

import triton
import triton.language as tl

from .common import cache_index, dot_acc, gelu_tanh


@triton.jit
def _input_tile(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows, row_mask, cols,
                D: tl.constexpr, EMBED: tl.constexpr):
    """Rows ``rows``, columns ``cols`` of a layer's input as float32: the residual stream
    ``x`` ``(B, D)``, or (``EMBED``, the first layer) the token plus position embedding of
    each row, rounded to the model dtype as ``tok_emb(tokens) + pos_emb(positions)`` is."""
    mask = row_mask[:, None] & (cols < D)[None, :]
    if EMBED:
        tok = tl.load(tok_ptr + rows, mask=row_mask, other=0).to(tl.int64)
        pos = tl.load(pos_ptr + rows, mask=row_mask, other=0).to(tl.int64)
        t = tl.load(tok_emb_ptr + tok[:, None] * D + cols[None, :], mask=mask, other=0.0)
        p = tl.load(pos_emb_ptr + pos[:, None] * D + cols[None, :], mask=mask, other=0.0)
        x = (t.to(tl.float32) + p.to(tl.float32)).to(t.dtype).to(tl.float32)
    else:
        x = tl.load(x_ptr + rows[:, None] * D + cols[None, :], mask=mask,
                    other=0.0).to(tl.float32)
    return x


@triton.jit
def _ln_stats(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows, row_mask, eps,
              D: tl.constexpr, EMBED: tl.constexpr, BLOCK_B: tl.constexpr,
              BLOCK_K: tl.constexpr):
    """Mean and ``1 / sqrt(var + eps)`` of each row (two passes over the row: the mean,
    then the squared deviations, as ``nn.LayerNorm`` normalises with the biased variance)."""
    total = tl.zeros([BLOCK_B], dtype=tl.float32)
    for k0 in range(0, D, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        total += tl.sum(_input_tile(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows,
                                    row_mask, cols, D, EMBED), axis=1)
    mean = total / D
    squares = tl.zeros([BLOCK_B], dtype=tl.float32)
    for k0 in range(0, D, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        x = _input_tile(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows, row_mask,
                        cols, D, EMBED)
        dev = tl.where((cols < D)[None, :], x - mean[:, None], 0.0)
        squares += tl.sum(dev * dev, axis=1)
    return mean, tl.rsqrt(squares / D + eps)


@triton.jit
def _ln_matmul(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, ln_w_ptr, ln_b_ptr, eps,
               w_ptr, rows, row_mask, ns, n_mask, D: tl.constexpr, EMBED: tl.constexpr,
               BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """``LayerNorm(x) @ W[ns].T`` for the block's rows, float32 ``(BLOCK_B, BLOCK_N)``: the
    LayerNorm is applied to each chunk of ``x`` as it is loaded (rounded to the model dtype,
    as ``nn.LayerNorm``'s output is) and never stored."""
    mean, rstd = _ln_stats(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows, row_mask,
                           eps, D, EMBED, BLOCK_B, BLOCK_K)
    acc = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, D, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        c_mask = cols < D
        x = _input_tile(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows, row_mask,
                        cols, D, EMBED)
        gamma = tl.load(ln_w_ptr + cols, mask=c_mask, other=0.0).to(tl.float32)
        beta = tl.load(ln_b_ptr + cols, mask=c_mask, other=0.0).to(tl.float32)
        a = (x - mean[:, None]) * rstd[:, None] * gamma[None, :] + beta[None, :]
        w = tl.load(w_ptr + ns[:, None] * D + cols[None, :],
                    mask=n_mask[:, None] & c_mask[None, :], other=0.0)
        acc = dot_acc(acc, a.to(w.dtype), w, UPCAST, PRECISION)
    return acc


@triton.jit
def ln_qkv_kernel(x_ptr, tok_ptr, pos_ptr, slot_ptr, tok_emb_ptr, pos_emb_ptr, ln_w_ptr,
                  ln_b_ptr, w_ptr, b_ptr, q_ptr, k_cache_ptr, v_cache_ptr, table_ptr, B, eps,
                  D: tl.constexpr, MAX_SEQ: tl.constexpr, PAGED: tl.constexpr,
                  BLOCK_SIZE: tl.constexpr, MAX_BLOCKS: tl.constexpr, EMBED: tl.constexpr,
                  BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """Fuses LN1 + QKV projection + bias + the cache write (+ the embeddings, first layer).

    Replaces, per layer of the readable step: ``layer_norm``, the QKV GEMM, its bias, the
    write-index kernel and the two cache writes (``index_copy_``). Output columns
    ``[0, D)`` are q, stored to ``q_ptr`` ``(B, D)`` for the attention kernel; ``[D, 2D)``
    and ``[2D, 3D)`` are k and v, stored straight into the layer's cache at the row's
    ``(slot, position)`` (:func:`labkit.kernels.common.cache_index`), so a padded row (the
    scratch slot) writes only the scratch slot. With ``EMBED`` the input rows are the
    embeddings, and the programs of the first column block also store them as the residual
    stream ``x``. Reads: LN1, ``W_qkv`` ``(3D, D)`` and its bias once, the rows once per
    program (L2)."""
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1)
    rows = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    row_mask = rows < B
    ns = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = ns < 3 * D
    acc = _ln_matmul(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, ln_w_ptr, ln_b_ptr,
                     eps, w_ptr, rows, row_mask, ns, n_mask, D, EMBED, BLOCK_B, BLOCK_N,
                     BLOCK_K, UPCAST, PRECISION)
    acc += tl.load(b_ptr + ns, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    out = acc.to(q_ptr.dtype.element_ty)
    # where each output column goes: q, or the k / v cache row of (slot, position)
    part = ns // D
    within = ns % D
    slot = tl.load(slot_ptr + rows, mask=row_mask, other=0).to(tl.int64)
    pos = tl.load(pos_ptr + rows, mask=row_mask, other=0).to(tl.int64)
    index = cache_index(slot, pos, table_ptr, MAX_SEQ, PAGED, BLOCK_SIZE, MAX_BLOCKS)
    mask = row_mask[:, None] & n_mask[None, :]
    tl.store(q_ptr + rows[:, None] * D + within[None, :], out, mask=mask & (part == 0)[None, :])
    cache_offset = index[:, None] * D + within[None, :]
    tl.store(k_cache_ptr + cache_offset, out, mask=mask & (part == 1)[None, :])
    tl.store(v_cache_ptr + cache_offset, out, mask=mask & (part == 2)[None, :])
    if EMBED:  # noqa: SIM102 - decided at compile time; the inner test at run time
        if pid_n == 0:  # one program per row block writes the residual stream
            for k0 in range(0, D, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                x = _input_tile(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows,
                                row_mask, cols, D, EMBED)
                tl.store(x_ptr + rows[:, None] * D + cols[None, :],
                         x.to(x_ptr.dtype.element_ty),
                         mask=row_mask[:, None] & (cols < D)[None, :])


@triton.jit
def ln_linear_kernel(x_ptr, ln_w_ptr, ln_b_ptr, w_ptr, b_ptr, out_ptr, out_stride, B, eps,
                     D: tl.constexpr, N: tl.constexpr, HAS_BIAS: tl.constexpr,
                     GELU: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """Fuses a LayerNorm + a projection (+ bias) (+ tanh GELU): ``out = act(LN(x) @ W.T + b)``.

    Used twice: LN2 + MLP up-projection + bias + GELU (``N = 4D``; replaces
    ``layer_norm``, the GEMM, its bias and ``gelu``), and the final LayerNorm + LM head
    (``N = V``, no bias; replaces ``layer_norm`` and the GEMM). Reads ``W`` ``(N, D)`` once
    (the LM head is the largest matrix of the step), the rows once per program (L2); writes
    ``(B, N)`` in the model dtype, rows ``out_stride`` apart (the caller's logits buffer)."""
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1)
    rows = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    row_mask = rows < B
    ns = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = ns < N
    acc = _ln_matmul(x_ptr, x_ptr, x_ptr, x_ptr, x_ptr, ln_w_ptr, ln_b_ptr, eps, w_ptr, rows,
                     row_mask, ns, n_mask, D, False, BLOCK_B, BLOCK_N, BLOCK_K, UPCAST,
                     PRECISION)
    if HAS_BIAS:
        acc += tl.load(b_ptr + ns, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    if GELU:
        acc = gelu_tanh(acc)
    tl.store(out_ptr + rows[:, None] * out_stride + ns[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=row_mask[:, None] & n_mask[None, :])


@triton.jit
def linear_residual_kernel(a_ptr, w_ptr, b_ptr, x_ptr, B, K: tl.constexpr, N: tl.constexpr,
                           BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr, UPCAST: tl.constexpr,
                           PRECISION: tl.constexpr):
    """Fuses a projection + bias + the residual add, in place: ``x += a @ W.T + b``.

    The MLP down-projection (``a`` the GELU rows ``(B, 4D)``, ``W`` ``(D, 4D)``); replaces the
    GEMM, its bias and the residual add. In place is safe: a program reads and writes only
    its own ``(rows, columns)`` of ``x``, and no program reads another's. Reads ``W`` and its
    bias once, ``a`` once per program (L2), its tile of ``x``."""
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1)
    rows = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    row_mask = rows < B
    ns = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = ns < N
    acc = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        c_mask = cols < K
        a = tl.load(a_ptr + rows[:, None] * K + cols[None, :],
                    mask=row_mask[:, None] & c_mask[None, :], other=0.0)
        w = tl.load(w_ptr + ns[:, None] * K + cols[None, :],
                    mask=n_mask[:, None] & c_mask[None, :], other=0.0)
        acc = dot_acc(acc, a, w, UPCAST, PRECISION)
    acc += tl.load(b_ptr + ns, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    mask = row_mask[:, None] & n_mask[None, :]
    offset = rows[:, None] * N + ns[None, :]
    x = tl.load(x_ptr + offset, mask=mask, other=0.0).to(tl.float32)
    tl.store(x_ptr + offset, (x + acc).to(x_ptr.dtype.element_ty), mask=mask)
