"""The matrix kernels of the Triton decode step (:mod:`labkit.kernels.step`): each reads one
weight matrix once and folds the elementwise work around it into the same pass -- LayerNorm
into the loads, bias, GELU, residual add or cache write into the stores.

Grid: ``(output column blocks, batch row blocks)``; a program owns ``BLOCK_N`` features of
``BLOCK_B`` rows (padded rows masked) and accumulates in float32 over ``BLOCK_K`` chunks: on
the tensor cores (``DOT``, 16-row tiles) or, for one or two rows, on the CUDA cores with the
loops unrolled (``UNROLL``), so that a program has all its weight loads in flight at once
and a few columns per program spread the weights over every SM. A LayerNorm needs whole rows,
so each program computes its rows' statistics itself (from L2, not HBM; once, when the row
fits in one chunk). Bytes per launch below: ``B`` rows, ``D`` =
d_model, ``e`` bytes per element (:func:`labkit.roofline.kernel_plan.kernel_plan` sums them).

Each kernel is a thin wrapper over a *tile* function of its program ids, so the persistent
step (:mod:`labkit.kernels.persistent`) runs the same tiles as work items. ``WAIT``
(:func:`labkit.kernels.common.wait_inputs`) says how a tile waits for its inputs: with a wait
(PDL or a ready counter) it loads its first chunk of weights *before* waiting, since no kernel
writes weights, so those bytes stream in while the previous work finishes.
"""

import triton
import triton.language as tl

from .common import (cache_index, dot_acc, gelu_tanh, release_dependents, tile, wait_first,
                     wait_inputs)


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
def _w_chunk(w_ptr, ns, n_mask, cols, K: tl.constexpr):
    """Columns ``cols`` of rows ``ns`` of a ``(N, K)`` weight (zero where masked)."""
    return tl.load(w_ptr + ns[:, None] * K + cols[None, :],
                   mask=n_mask[:, None] & (cols < K)[None, :], other=0.0)


@triton.jit
def _ln_stats(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows, row_mask, eps,
              D: tl.constexpr, EMBED: tl.constexpr, BLOCK_B: tl.constexpr,
              BLOCK_K: tl.constexpr, UNROLL: tl.constexpr):
    """Mean and ``1 / sqrt(var + eps)`` of each row (two passes over the row: the mean,
    then the squared deviations, as ``nn.LayerNorm`` normalises with the biased variance)."""
    total = tl.zeros([BLOCK_B], dtype=tl.float32)
    for k0 in tl.range(0, D, BLOCK_K, loop_unroll_factor=UNROLL):
        cols = k0 + tl.arange(0, BLOCK_K)
        total += tl.sum(_input_tile(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows,
                                    row_mask, cols, D, EMBED), axis=1)
    mean = total / D
    squares = tl.zeros([BLOCK_B], dtype=tl.float32)
    for k0 in tl.range(0, D, BLOCK_K, loop_unroll_factor=UNROLL):
        cols = k0 + tl.arange(0, BLOCK_K)
        x = _input_tile(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows, row_mask,
                        cols, D, EMBED)
        dev = tl.where((cols < D)[None, :], x - mean[:, None], 0.0)
        squares += tl.sum(dev * dev, axis=1)
    return mean, tl.rsqrt(squares / D + eps)


@triton.jit
def _ln_times_w(acc, x, mean, rstd, cols, ln_w_ptr, ln_b_ptr, w, D: tl.constexpr,
                DOT: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """``acc`` plus one chunk of ``LayerNorm(x) @ W[ns].T``: the chunk ``x`` (its columns
    ``cols``) normalised with the rows' ``mean`` and ``rstd``, rounded to the model dtype,
    times ``w``, the same columns of the weight rows."""
    c_mask = cols < D
    gamma = tl.load(ln_w_ptr + cols, mask=c_mask, other=0.0).to(tl.float32)
    beta = tl.load(ln_b_ptr + cols, mask=c_mask, other=0.0).to(tl.float32)
    a = (x - mean[:, None]) * rstd[:, None] * gamma[None, :] + beta[None, :]
    return dot_acc(acc, a.to(w.dtype), w, DOT, UPCAST, PRECISION)


@triton.jit
def _ln_matmul(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, ln_w_ptr, ln_b_ptr, eps,
               w_ptr, rows, row_mask, ns, n_mask, ready_ptr, target, WAIT: tl.constexpr,
               D: tl.constexpr, EMBED: tl.constexpr, BLOCK_B: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
               UNROLL: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """``LayerNorm(x) @ W[ns].T`` for the block's rows, float32 ``(BLOCK_B, BLOCK_N)``: the
    LayerNorm is applied to each chunk of ``x`` as it is loaded (rounded to the model dtype,
    as ``nn.LayerNorm``'s output is) and never stored. With a wait, the first chunk of ``W``
    is loaded before it and every read of ``x`` after it."""
    acc = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
    cols = tl.arange(0, BLOCK_K)
    if WAIT != 0:
        w = _w_chunk(w_ptr, ns, n_mask, cols, D)  # weights: written by no kernel
        wait_inputs(ready_ptr, target, WAIT)     # x: written by the work before
    if BLOCK_K >= D:  # the row fits in one chunk: loaded once, normalised in registers
        x = _input_tile(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows, row_mask,
                        cols, D, EMBED)
        mean = tl.sum(x, axis=1) / D
        dev = tl.where((cols < D)[None, :], x - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(dev * dev, axis=1) / D + eps)
        if WAIT == 0:
            w = _w_chunk(w_ptr, ns, n_mask, cols, D)
        acc = _ln_times_w(acc, x, mean, rstd, cols, ln_w_ptr, ln_b_ptr, w, D, DOT, UPCAST,
                          PRECISION)
    else:  # statistics first (re-reading the rows from L2), then chunk by chunk
        mean, rstd = _ln_stats(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows,
                               row_mask, eps, D, EMBED, BLOCK_B, BLOCK_K, UNROLL)
        if WAIT != 0:  # the chunk whose weights are already loaded
            x = _input_tile(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows,
                            row_mask, cols, D, EMBED)
            acc = _ln_times_w(acc, x, mean, rstd, cols, ln_w_ptr, ln_b_ptr, w, D, DOT,
                              UPCAST, PRECISION)
            for k0 in tl.range(BLOCK_K, D, BLOCK_K, loop_unroll_factor=UNROLL):
                acc = _ln_chunk(acc, x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr,
                                ln_w_ptr, ln_b_ptr, w_ptr, rows, row_mask, ns, n_mask, mean,
                                rstd, k0, D, EMBED, BLOCK_K, DOT, UPCAST, PRECISION)
        else:
            for k0 in tl.range(0, D, BLOCK_K, loop_unroll_factor=UNROLL):
                acc = _ln_chunk(acc, x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr,
                                ln_w_ptr, ln_b_ptr, w_ptr, rows, row_mask, ns, n_mask, mean,
                                rstd, k0, D, EMBED, BLOCK_K, DOT, UPCAST, PRECISION)
    return acc


@triton.jit
def _ln_chunk(acc, x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, ln_w_ptr, ln_b_ptr,
              w_ptr, rows, row_mask, ns, n_mask, mean, rstd, k0, D: tl.constexpr,
              EMBED: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
              UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """``acc`` plus the chunk of ``LayerNorm(x) @ W[ns].T`` at columns ``k0 + [0, BLOCK_K)``."""
    cols = k0 + tl.arange(0, BLOCK_K)
    x = _input_tile(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows, row_mask, cols,
                    D, EMBED)
    w = _w_chunk(w_ptr, ns, n_mask, cols, D)
    return _ln_times_w(acc, x, mean, rstd, cols, ln_w_ptr, ln_b_ptr, w, D, DOT, UPCAST,
                       PRECISION)


@triton.jit
def ln_qkv_tile(pid_n, pid_b, x_ptr, tok_ptr, pos_ptr, slot_ptr, tok_emb_ptr, pos_emb_ptr,
                ln_w_ptr, ln_b_ptr, w_ptr, b_ptr, q_ptr, k_cache_ptr, v_cache_ptr, table_ptr,
                B, eps, ready_ptr, target, WAIT: tl.constexpr, D: tl.constexpr,
                MAX_SEQ: tl.constexpr, PAGED: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                MAX_BLOCKS: tl.constexpr, EMBED: tl.constexpr, BLOCK_B: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
                UNROLL: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
                WIDTH: tl.constexpr):
    """Tile ``(pid_n, pid_b)`` of :func:`ln_qkv_kernel`."""
    rows, row_mask, ns, n_mask = tile(pid_n, pid_b, B, 3 * D, BLOCK_B, BLOCK_N, WIDTH)
    acc = _ln_matmul(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, ln_w_ptr, ln_b_ptr,
                     eps, w_ptr, rows, row_mask, ns, n_mask, ready_ptr, target, WAIT, D,
                     EMBED, BLOCK_B, BLOCK_N, BLOCK_K, DOT, UNROLL, UPCAST, PRECISION)
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
        if pid_n == 0:  # one tile per row block writes the residual stream
            for k0 in tl.range(0, D, BLOCK_K, loop_unroll_factor=UNROLL):
                cols = k0 + tl.arange(0, BLOCK_K)
                x = _input_tile(x_ptr, tok_ptr, pos_ptr, tok_emb_ptr, pos_emb_ptr, rows,
                                row_mask, cols, D, EMBED)
                tl.store(x_ptr + rows[:, None] * D + cols[None, :],
                         x.to(x_ptr.dtype.element_ty),
                         mask=row_mask[:, None] & (cols < D)[None, :])
    release_dependents(WAIT)


@triton.jit
def ln_qkv_kernel(x_ptr, tok_ptr, pos_ptr, slot_ptr, tok_emb_ptr, pos_emb_ptr, ln_w_ptr,
                  ln_b_ptr, w_ptr, b_ptr, q_ptr, k_cache_ptr, v_cache_ptr, table_ptr, B, eps,
                  WAIT: tl.constexpr, D: tl.constexpr, MAX_SEQ: tl.constexpr,
                  PAGED: tl.constexpr, BLOCK_SIZE: tl.constexpr, MAX_BLOCKS: tl.constexpr,
                  EMBED: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, DOT: tl.constexpr, UNROLL: tl.constexpr,
                  UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """Fuses LN1 + QKV projection + bias + the cache write (+ the embeddings, first layer):
    replaces ``layer_norm``, the QKV GEMM, its bias, the write index and two ``index_copy_``.

    Columns ``[0, D)`` are q, stored to ``q_ptr`` ``(B, D)``; ``[D, 3D)`` are k and v, stored
    into the cache at the row's ``(slot, position)`` (a padded row writes the scratch slot).
    With ``EMBED`` the rows are the embeddings, which the first column block also stores as
    the residual stream ``x``. Reads LN1, ``W_qkv`` and bias (``(2D + 3D^2 + 3D) e``) once and
    the rows (``B D e``; layer 0: two embedding rows each); writes q (``B D e``) and k, v
    (``2 B D e``)."""
    wait_first(WAIT)
    ln_qkv_tile(tl.program_id(0), tl.program_id(1), x_ptr, tok_ptr, pos_ptr, slot_ptr,
                tok_emb_ptr, pos_emb_ptr, ln_w_ptr, ln_b_ptr, w_ptr, b_ptr, q_ptr,
                k_cache_ptr, v_cache_ptr, table_ptr, B, eps, x_ptr, 0, WAIT % 5, D, MAX_SEQ,
                PAGED, BLOCK_SIZE, MAX_BLOCKS, EMBED, BLOCK_B, BLOCK_N, BLOCK_K, DOT, UNROLL,
                UPCAST, PRECISION, BLOCK_N)


@triton.jit
def ln_linear_tile(pid_n, pid_b, x_ptr, ln_w_ptr, ln_b_ptr, w_ptr, b_ptr, out_ptr,
                   out_stride, B, eps, ready_ptr, target, WAIT: tl.constexpr,
                   D: tl.constexpr, N: tl.constexpr, HAS_BIAS: tl.constexpr,
                   GELU: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, DOT: tl.constexpr, UNROLL: tl.constexpr,
                   UPCAST: tl.constexpr, PRECISION: tl.constexpr,
                   WIDTH: tl.constexpr):
    """Tile ``(pid_n, pid_b)`` of :func:`ln_linear_kernel`."""
    rows, row_mask, ns, n_mask = tile(pid_n, pid_b, B, N, BLOCK_B, BLOCK_N, WIDTH)
    acc = _ln_matmul(x_ptr, x_ptr, x_ptr, x_ptr, x_ptr, ln_w_ptr, ln_b_ptr, eps, w_ptr, rows,
                     row_mask, ns, n_mask, ready_ptr, target, WAIT, D, False, BLOCK_B,
                     BLOCK_N, BLOCK_K, DOT, UNROLL, UPCAST, PRECISION)
    if HAS_BIAS:
        acc += tl.load(b_ptr + ns, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    if GELU:
        acc = gelu_tanh(acc)
    tl.store(out_ptr + rows[:, None] * out_stride + ns[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=row_mask[:, None] & n_mask[None, :])
    release_dependents(WAIT)


@triton.jit
def ln_linear_kernel(x_ptr, ln_w_ptr, ln_b_ptr, w_ptr, b_ptr, out_ptr, out_stride, B, eps,
                     WAIT: tl.constexpr, D: tl.constexpr, N: tl.constexpr,
                     HAS_BIAS: tl.constexpr, GELU: tl.constexpr, BLOCK_B: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
                     UNROLL: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """Fuses a LayerNorm + a projection (+ bias) (+ tanh GELU): ``out = act(LN(x) @ W.T + b)``.

    As LN2 + MLP up-projection + bias + GELU (``N = 4D``; replaces ``layer_norm``, the GEMM,
    its bias and ``gelu``) it reads ``(2D + 4D^2 + 4D) e`` of weights and the rows, writes
    ``4 B D e``; as final LayerNorm + LM head (``N = V``, no bias) it reads ``(2D + V D) e``
    (the step's largest matrix) and writes the logits (``B V e``, rows ``out_stride`` apart)."""
    wait_first(WAIT)
    ln_linear_tile(tl.program_id(0), tl.program_id(1), x_ptr, ln_w_ptr, ln_b_ptr, w_ptr,
                   b_ptr, out_ptr, out_stride, B, eps, x_ptr, 0, WAIT % 5, D, N, HAS_BIAS, GELU,
                   BLOCK_B, BLOCK_N, BLOCK_K, DOT, UNROLL, UPCAST, PRECISION, BLOCK_N)


@triton.jit
def _linear_chunk(acc, a_ptr, w_ptr, rows, row_mask, ns, n_mask, k0, K: tl.constexpr,
                  BLOCK_K: tl.constexpr, DOT: tl.constexpr, UPCAST: tl.constexpr,
                  PRECISION: tl.constexpr):
    """``acc`` plus the chunk of ``a @ W[ns].T`` at columns ``k0 + [0, BLOCK_K)``."""
    cols = k0 + tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + rows[:, None] * K + cols[None, :],
                mask=row_mask[:, None] & (cols < K)[None, :], other=0.0)
    w = _w_chunk(w_ptr, ns, n_mask, cols, K)
    return dot_acc(acc, a, w, DOT, UPCAST, PRECISION)


@triton.jit
def linear_residual_tile(pid_n, pid_b, a_ptr, w_ptr, b_ptr, x_ptr, B, ready_ptr, target,
                         WAIT: tl.constexpr, K: tl.constexpr, N: tl.constexpr,
                         BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, DOT: tl.constexpr, UNROLL: tl.constexpr,
                         UPCAST: tl.constexpr, PRECISION: tl.constexpr,
                         WIDTH: tl.constexpr):
    """Tile ``(pid_n, pid_b)`` of :func:`linear_residual_kernel`."""
    rows, row_mask, ns, n_mask = tile(pid_n, pid_b, B, N, BLOCK_B, BLOCK_N, WIDTH)
    acc = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
    if WAIT != 0:
        cols = tl.arange(0, BLOCK_K)
        w = _w_chunk(w_ptr, ns, n_mask, cols, K)  # weights: written by no kernel
        wait_inputs(ready_ptr, target, WAIT)     # a and x: written by the work before
        a = tl.load(a_ptr + rows[:, None] * K + cols[None, :],
                    mask=row_mask[:, None] & (cols < K)[None, :], other=0.0)
        acc = dot_acc(acc, a, w, DOT, UPCAST, PRECISION)
        for k0 in tl.range(BLOCK_K, K, BLOCK_K, loop_unroll_factor=UNROLL):
            acc = _linear_chunk(acc, a_ptr, w_ptr, rows, row_mask, ns, n_mask, k0, K,
                                BLOCK_K, DOT, UPCAST, PRECISION)
    else:
        for k0 in tl.range(0, K, BLOCK_K, loop_unroll_factor=UNROLL):
            acc = _linear_chunk(acc, a_ptr, w_ptr, rows, row_mask, ns, n_mask, k0, K,
                                BLOCK_K, DOT, UPCAST, PRECISION)
    acc += tl.load(b_ptr + ns, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    mask = row_mask[:, None] & n_mask[None, :]
    offset = rows[:, None] * N + ns[None, :]
    x = tl.load(x_ptr + offset, mask=mask, other=0.0).to(tl.float32)
    tl.store(x_ptr + offset, (x + acc).to(x_ptr.dtype.element_ty), mask=mask)
    release_dependents(WAIT)


@triton.jit
def linear_residual_kernel(a_ptr, w_ptr, b_ptr, x_ptr, B, WAIT: tl.constexpr,
                           K: tl.constexpr, N: tl.constexpr, BLOCK_B: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
                           UNROLL: tl.constexpr, UPCAST: tl.constexpr,
                           PRECISION: tl.constexpr):
    """Fuses a projection + bias + the residual add, in place: ``x += a @ W.T + b``.

    The attention output projection (``a`` the attention output ``(B, D)``, ``K = D``) and the
    MLP down-projection (``a`` the GELU rows ``(B, 4D)``, ``K = 4D``); replaces the GEMM, its
    bias and the residual add (in place is safe: a program reads and writes only its own tile
    of ``x``). Reads ``(K D + D) e`` of weights, ``a`` (``B K e``) and the residual
    (``B D e``); writes the residual."""
    wait_first(WAIT)
    linear_residual_tile(tl.program_id(0), tl.program_id(1), a_ptr, w_ptr, b_ptr, x_ptr, B,
                         x_ptr, 0, WAIT % 5, K, N, BLOCK_B, BLOCK_N, BLOCK_K, DOT, UNROLL,
                         UPCAST, PRECISION, BLOCK_N)
