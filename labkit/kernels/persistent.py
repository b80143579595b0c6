"""The persistent layer kernel of the Triton decode step (:mod:`labkit.kernels.step`,
``launch="persistent"``): one launch runs a whole transformer layer.

The five kernels of a layer become five *stages* of one kernel. The grid is one program per
SM (``P`` programs); in each stage a program takes the stage's tiles ``pid, pid + P, ...``
(the same tile functions the five kernels run, so the same arithmetic) and, between stages,
meets the others at a barrier made of one counter per layer that only grows::

    stage 1  LN1 + QKV + cache write   (tiles of ln_qkv_kernel)
    ---- barrier: every q, k, v of this step is written ----
    stage 2  split attention          (tiles of attention_split_kernel)
    ---- barrier: every attention output y is written ----
    stage 3  out-projection + residual (tiles of linear_residual_kernel)
    ---- barrier: the residual x is updated ----
    stage 4  LN2 + up-projection + GELU (tiles of ln_linear_kernel)
    ---- barrier: the GELU rows are written ----
    stage 5  down-projection + residual

At a barrier a program *arrives* (CTA barrier, then one release add of 1), then its first tile
of the next stage loads its weights -- written by no stage -- and only then *waits* for the
counter to reach the barrier's target (volatile loads, then one acquire whose value the wait
uses, or Triton 3.6 drops it with its L1 invalidation: :func:`labkit.kernels.common.wait_inputs`):
the weight bytes stream in while the slowest program finishes. A program with no tile in a
stage still waits, so no program arrives twice before every program arrived once.

The counter is never reset (nothing inside a graph must reset it): each launch adds ``4 P``.
A program reads it before it first arrives, when it holds ``n * 4 P`` plus fewer than ``P``
arrivals of this launch, so ``base = c - c % 4P`` is this launch's start and the barriers'
targets are ``base + P, base + 2P, ...`` (an int64 counter: it cannot wrap). Every program
must be resident at once, or a waiting program holds the SM a missing one needs: launched
cooperatively (``launch_cooperative_grid``), a grid the GPU cannot hold at once fails instead
of hanging. In Triton's interpreter programs run one after another, so the step runs one
program there (``P = 1``), whose barriers it reaches alone: the same code and tile order, the
waiting untested (see notebook 17 for what a missing acquire does).

With ``PREFETCH`` (``make_triton_step(..., prefetch=True)``, compiled kernels only) a program
first asks L2 for every weight row its tiles of the layer will read, and for the next layer's
QKV rows, with ``prefetch.global.L2`` (no registers, no wait): only the first tile of a stage
otherwise has its weights in flight before the barrier, and each further tile waits a round
trip to HBM for its own (the stage table of notebook 17 put the persistent step's extra time
there, inside the matrix stages). On an H100 it made the step slower (notebook 17: stage 1,
which issues every prefetch, grows by more than the later stages shrink), so it is off by
default. ``LATER`` says whether a stage's later tiles of a program wait at the barrier again
(``TritonStep(waits="tile")``) or only its first (``waits="stage"``, the default).

``HEADS`` (``TritonStep(heads=...)``) changes stage 2's tiles. The plain attention kernel's
``B H splits`` programs are resident together, several per SM, each with one (row, head,
split)'s chunk of keys and values in flight; one persistent program walks those tiles one
after another, so at a large batch far fewer bytes are in flight (on an H100 the attention
stage took 2 to 2.7 times its kernel at batch 64, notebook 17). With ``HEADS`` above one a
tile is that many heads of one row, unsplit, loading all their keys and values of a chunk at
once. On an H100 two heads a tile made the step faster at batch 64 and slower at batch 8, and
never faster than the plain kernels (notebook 17, ``data/sweeps/h100-80gb-hbm3/
persistent_heads.jsonl``), so it is an option, off (``1``) by default.
"""

import triton
import triton.language as tl

from .attention import attention_heads_tile, attention_tile
from .common import arrive, launch_base, prefetch_l2, stamp, wait_inputs
from .matvec import linear_residual_tile, ln_linear_tile, ln_qkv_tile
from .step import BARRIERS as LAYER_BARRIERS
from .waits import READY as _READY

#: the barriers between the five stages of a layer launch
BARRIERS = tl.constexpr(LAYER_BARRIERS)
#: clock stamps per program with ``STAMP``: start, the four arrivals, end
STAMPS = tl.constexpr(6)


@triton.jit
def prefetch_stage(w_ptr, pid, P, N: tl.constexpr, K: tl.constexpr, COLS: tl.constexpr,
                   ROW_TILES: tl.constexpr, W: tl.constexpr, LANES: tl.constexpr):
    """Ask L2 for the weight rows of this program's tiles of one stage: tile ``t`` (``pid, pid
    + P, ...``) multiplies rows ``[c W, c W + W)`` of the ``(N, K)`` weight, ``c = t % COLS``,
    one contiguous run of ``W K`` elements (tiles of other row blocks ask again for the same
    run; an L2 hit)."""
    for t in tl.range(pid, COLS * ROW_TILES, P):
        c = t % COLS
        prefetch_l2(w_ptr, c * W * K, tl.minimum(c * W + W, N) * K, LANES)


@triton.jit
def layer_kernel(x_ptr, tok_ptr, pos_ptr, slot_ptr, tok_emb_ptr, pos_emb_ptr,
                 ln1_w_ptr, ln1_b_ptr, qkv_w_ptr, qkv_b_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
                 table_ptr, B, eps1, m_ptr, l_ptr, acc_ptr, count_ptr, y_ptr, scale,
                 proj_w_ptr, proj_b_ptr, ln2_w_ptr, ln2_b_ptr, eps2, fc_w_ptr, fc_b_ptr,
                 hidden_ptr, out_w_ptr, out_b_ptr, next_qkv_w_ptr, ready_ptr, stamp_ptr, P,
                 D: tl.constexpr, H: tl.constexpr, HD: tl.constexpr,
                 MAX_SEQ: tl.constexpr, PAGED: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                 MAX_BLOCKS: tl.constexpr, EMBED: tl.constexpr, ROW_TILES: tl.constexpr,
                 QKV_COLS: tl.constexpr, OUT_COLS: tl.constexpr, UP_COLS: tl.constexpr,
                 BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_N_OUT: tl.constexpr,
                 BLOCK_N_UP: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
                 UNROLL: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
                 NSPLIT: tl.constexpr,
                 SPLIT: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr,
                 BLOCK_HD: tl.constexpr, QKV_W: tl.constexpr, OUT_W: tl.constexpr,
                 UP_W: tl.constexpr, STAMP: tl.constexpr, PREFETCH: tl.constexpr,
                 NEXT: tl.constexpr, LANES: tl.constexpr, LATER: tl.constexpr,
                 HEADS: tl.constexpr, GROUPS: tl.constexpr, READY: tl.constexpr = _READY):
    """One layer of a decode step in one launch of ``P`` programs (the module docstring);
    ``*_COLS`` are the column tiles of the QKV, the D-wide and the up-projections, ``*_W``
    their widths (each at most its ``BLOCK_N*``: the heuristic's tiles, or one stripe per
    program, :func:`labkit.kernels.step.stripes`), ``ROW_TILES`` the row tiles.
    Reads and writes what the layer's five kernels do, plus ``4`` atomic adds and a few
    counter loads per program. ``STAMP`` (compiled only): each program writes the GPU's
    clock (ns) at its start, after each of its four arrivals and at its end into
    ``stamp_ptr[pid, 0:6]`` (:data:`STAMPS`), where the stage table of notebook 17 reads it.
    A stage's first tile loads its weights, then waits at the barrier; ``LATER`` is how the
    stage's later tiles of this program wait: ``READY`` each again, ``0`` not at all (the
    first tile's acquire already ordered every later load of this program). ``READY`` is how
    a wait polls the counter: ``2`` volatile loads, then one acquire (the default), or ``6``
    acquire loads alone (``TritonStep(poll="acquire")``,
    :func:`labkit.kernels.common.wait_inputs`).
    ``HEADS`` (``TritonStep(heads=)``): attention heads per tile of stage 2; above ``1`` a
    tile is ``HEADS`` heads of one row, unsplit (:func:`attention_heads_tile`; ``GROUPS`` =
    ``ceil(H / HEADS)`` tiles a row), so a program has that many times the key and value
    bytes of a chunk in flight.
    ``PREFETCH`` (compiled only): first, each program asks L2 for the weight rows of all its
    tiles of the layer's four matrix stages (:func:`prefetch_stage`, ``LANES`` lines a pass)
    and, ``NEXT`` (every layer but the last), for those of the next layer's QKV stage
    (``next_qkv_w_ptr``; the same tiles, whose launch then finds them in L2), so that the
    weights stream from HBM while stage 1 and the barriers run, and each later tile finds
    its weights in L2 instead of waiting a round trip to HBM for them."""
    pid = tl.program_id(0)
    stamp(stamp_ptr, pid * STAMPS, STAMP)
    if PREFETCH:  # weights only: written by no stage, so no wait needed before asking
        prefetch_stage(qkv_w_ptr, pid, P, 3 * D, D, QKV_COLS, ROW_TILES, QKV_W, LANES)
        prefetch_stage(proj_w_ptr, pid, P, D, D, OUT_COLS, ROW_TILES, OUT_W, LANES)
        prefetch_stage(fc_w_ptr, pid, P, 4 * D, D, UP_COLS, ROW_TILES, UP_W, LANES)
        prefetch_stage(out_w_ptr, pid, P, D, 4 * D, OUT_COLS, ROW_TILES, OUT_W, LANES)
        if NEXT:
            prefetch_stage(next_qkv_w_ptr, pid, P, 3 * D, D, QKV_COLS, ROW_TILES, QKV_W, LANES)
    # before this program's first arrival: this launch's start, a multiple of 4 P
    base = launch_base(ready_ptr, BARRIERS * P)
    # stage 1: LN1 + QKV + bias + k, v into the cache (layer 0: + the embeddings). It reads
    # what the previous launch wrote: the stream ordered that, nothing to wait for here
    for t in tl.range(pid, QKV_COLS * ROW_TILES, P):
        ln_qkv_tile(t % QKV_COLS, t // QKV_COLS, x_ptr, tok_ptr, pos_ptr, slot_ptr,
                    tok_emb_ptr, pos_emb_ptr, ln1_w_ptr, ln1_b_ptr, qkv_w_ptr, qkv_b_ptr,
                    q_ptr, k_cache_ptr, v_cache_ptr, table_ptr, B, eps1, ready_ptr, 0, 0, D,
                    MAX_SEQ, PAGED, BLOCK_SIZE, MAX_BLOCKS, EMBED, BLOCK_B, BLOCK_N, BLOCK_K,
                    DOT, UNROLL, UPCAST, PRECISION, QKV_W)
    arrive(ready_ptr)
    stamp(stamp_ptr, pid * STAMPS + 1, STAMP)
    # stage 2: attention; waits for every q, k and v of stage 1 (no weights to load first)
    target = base + P
    wait_inputs(ready_ptr, target, READY)
    if HEADS == 1:  # the plain kernel's tiles: one (row, head, split) each
        for t in tl.range(pid, B * H * NSPLIT, P):
            attention_tile(t // (H * NSPLIT), (t // NSPLIT) % H, t % NSPLIT, q_ptr,
                           k_cache_ptr, v_cache_ptr, pos_ptr, slot_ptr, table_ptr, m_ptr,
                           l_ptr, acc_ptr, count_ptr, y_ptr, scale, ready_ptr, target, 0, H,
                           HD, D, MAX_SEQ, PAGED, BLOCK_SIZE, MAX_BLOCKS, NSPLIT, SPLIT,
                           BLOCK_T, BLOCK_S, BLOCK_HD)
    else:  # HEADS heads of a row per tile, unsplit (GROUPS tiles a row)
        for t in tl.range(pid, B * GROUPS, P):
            attention_heads_tile(t // GROUPS, (t % GROUPS) * HEADS, q_ptr, k_cache_ptr,
                                 v_cache_ptr, pos_ptr, slot_ptr, table_ptr, y_ptr, scale, H,
                                 HD, D, MAX_SEQ, PAGED, BLOCK_SIZE, MAX_BLOCKS, SPLIT, BLOCK_T,
                                 BLOCK_HD, HEADS)
    arrive(ready_ptr)
    stamp(stamp_ptr, pid * STAMPS + 2, STAMP)
    # stage 3: out-projection + residual; loads W_proj, then waits for every y (the first
    # tile; the later ones again only with LATER)
    target = base + 2 * P
    if pid < OUT_COLS * ROW_TILES:
        linear_residual_tile(pid % OUT_COLS, pid // OUT_COLS, y_ptr, proj_w_ptr, proj_b_ptr,
                             x_ptr, B, ready_ptr, target, READY, D, D, BLOCK_B, BLOCK_N_OUT,
                             BLOCK_K, DOT, UNROLL, UPCAST, PRECISION, OUT_W)
    else:
        wait_inputs(ready_ptr, target, READY)
    for t in tl.range(pid + P, OUT_COLS * ROW_TILES, P):
        linear_residual_tile(t % OUT_COLS, t // OUT_COLS, y_ptr, proj_w_ptr, proj_b_ptr, x_ptr,
                             B, ready_ptr, target, LATER, D, D, BLOCK_B, BLOCK_N_OUT, BLOCK_K,
                             DOT, UNROLL, UPCAST, PRECISION, OUT_W)
    arrive(ready_ptr)
    stamp(stamp_ptr, pid * STAMPS + 3, STAMP)
    # stage 4: LN2 + up-projection + GELU; loads W_fc, then waits for the whole residual
    target = base + 3 * P
    if pid < UP_COLS * ROW_TILES:
        ln_linear_tile(pid % UP_COLS, pid // UP_COLS, x_ptr, ln2_w_ptr, ln2_b_ptr, fc_w_ptr,
                       fc_b_ptr, hidden_ptr, 4 * D, B, eps2, ready_ptr, target, READY, D, 4 * D,
                       True, True, BLOCK_B, BLOCK_N_UP, BLOCK_K, DOT, UNROLL, UPCAST, PRECISION,
                       UP_W)
    else:
        wait_inputs(ready_ptr, target, READY)
    for t in tl.range(pid + P, UP_COLS * ROW_TILES, P):
        ln_linear_tile(t % UP_COLS, t // UP_COLS, x_ptr, ln2_w_ptr, ln2_b_ptr, fc_w_ptr,
                       fc_b_ptr, hidden_ptr, 4 * D, B, eps2, ready_ptr, target, LATER, D,
                       4 * D, True, True, BLOCK_B, BLOCK_N_UP, BLOCK_K, DOT, UNROLL, UPCAST,
                       PRECISION, UP_W)
    arrive(ready_ptr)
    stamp(stamp_ptr, pid * STAMPS + 4, STAMP)
    # stage 5: down-projection + residual; loads W_out, then waits for every GELU row
    target = base + 4 * P
    if pid < OUT_COLS * ROW_TILES:
        linear_residual_tile(pid % OUT_COLS, pid // OUT_COLS, hidden_ptr, out_w_ptr, out_b_ptr,
                             x_ptr, B, ready_ptr, target, READY, 4 * D, D, BLOCK_B, BLOCK_N_OUT,
                             BLOCK_K, DOT, UNROLL, UPCAST, PRECISION, OUT_W)
    for t in tl.range(pid + P, OUT_COLS * ROW_TILES, P):
        linear_residual_tile(t % OUT_COLS, t // OUT_COLS, hidden_ptr, out_w_ptr, out_b_ptr,
                             x_ptr, B, ready_ptr, target, LATER, 4 * D, D, BLOCK_B,
                             BLOCK_N_OUT, BLOCK_K, DOT, UNROLL, UPCAST, PRECISION, OUT_W)
    # no arrival, and nothing for a program without a tile here to wait for: the launch's
    # end orders this layer before the next launch
    stamp(stamp_ptr, pid * STAMPS + 5, STAMP)
