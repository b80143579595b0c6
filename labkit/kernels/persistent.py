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

With ``STAGE_COUNTERS`` (``TritonStep(counters="stage")``) the grid no longer meets: each
stage has a counter of its own (``ready_ptr[1:5]``), on which only the programs with a tile of
the stage arrive (``min(P, tiles)`` a launch), and only the programs with a tile of the next
stage wait; a program with none goes straight on to the next stage it has a tile in, loads
that stage's weights and waits there, on the counter of the stage before it. A consumer's
acquire sees every producer of the stage before, and through their own waits every stage
before that, so no stage overwrites what an earlier one still reads (``x`` is read in stages
1 and 4 and written in stages 3 and 5, each writer two counters after the reader). The
counters only grow, and a launch finds its place on them from a start counter
(``ready_ptr[0]``) to which every program adds 1 first: the value it gets back, over ``P``, is
how many launches of this layer came before (:func:`stage_counter`). This is the megakernels'
counter per producer cut at stage granularity: at one row every stage still reads all of the
stage before, so the chain of dependencies is as long as with barriers; what changes is how
many programs arrive and wait at each link.

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
def arrive_after(counter, pid, tiles, STAGE_COUNTERS: tl.constexpr):
    """Count this program's work of a stage as written: at the grid's barriers every program
    arrives; with stage counters only a program that had one of the stage's ``tiles``."""
    if STAGE_COUNTERS:
        if pid < tiles:
            arrive(counter)
    else:
        arrive(counter)


@triton.jit
def wait_before(counter, target, pid, tiles, READY: tl.constexpr,
                STAGE_COUNTERS: tl.constexpr):
    """Wait for the stage before, where nothing is loaded first: at the grid's barriers every
    program waits; with stage counters only one with one of this stage's ``tiles``."""
    if STAGE_COUNTERS:
        if pid < tiles:
            wait_inputs(counter, target, READY)
    else:
        wait_inputs(counter, target, READY)


@triton.jit
def stage_counter(ready_ptr, stage, start, P, tiles, STAGE_COUNTERS: tl.constexpr):
    """The counter stage ``stage``'s producers arrive on and the next stage's consumers wait
    on, and the value it reaches once they all arrived in this launch. Barriers: the layer's
    one counter (``ready_ptr[0]``), ``start + stage P`` (``start``: the counter when the
    launch began). Stage counters: ``ready_ptr[stage]``, which each launch raises by the
    stage's programs with a tile, ``min(P, tiles)``: after ``start`` earlier launches,
    ``(start + 1) min(P, tiles)``."""
    if STAGE_COUNTERS:
        counter = ready_ptr + stage
        target = (start + 1) * tl.minimum(tiles, P)
    else:
        counter = ready_ptr
        target = start + stage * P
    return counter, target


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
                 HEADS: tl.constexpr, GROUPS: tl.constexpr, READY: tl.constexpr = _READY,
                 STAGE_COUNTERS: tl.constexpr = False):
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
    a wait polls the counter (:mod:`labkit.kernels.waits`): ``READY``, volatile loads, then one
    acquire (the default), or ``READY_ACQUIRE``, acquire loads alone
    (``TritonStep(poll="acquire")``, :func:`labkit.kernels.common.wait_inputs`).
    ``STAGE_COUNTERS``: one counter per stage instead of the layer's barriers (the module
    docstring).
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
    # each stage's tiles: a program has one iff its pid is below (tiles pid, pid + P, ...)
    tiles_1 = QKV_COLS * ROW_TILES
    tiles_2 = B * H * NSPLIT if HEADS == 1 else B * GROUPS
    tiles_3 = OUT_COLS * ROW_TILES
    tiles_4 = UP_COLS * ROW_TILES
    if PREFETCH:  # weights only: written by no stage, so no wait needed before asking
        prefetch_stage(qkv_w_ptr, pid, P, 3 * D, D, QKV_COLS, ROW_TILES, QKV_W, LANES)
        prefetch_stage(proj_w_ptr, pid, P, D, D, OUT_COLS, ROW_TILES, OUT_W, LANES)
        prefetch_stage(fc_w_ptr, pid, P, 4 * D, D, UP_COLS, ROW_TILES, UP_W, LANES)
        prefetch_stage(out_w_ptr, pid, P, D, 4 * D, OUT_COLS, ROW_TILES, OUT_W, LANES)
        if NEXT:
            prefetch_stage(next_qkv_w_ptr, pid, P, 3 * D, D, QKV_COLS, ROW_TILES, QKV_W, LANES)
    # where this launch starts on its counters (:func:`stage_counter`)
    if STAGE_COUNTERS:
        # this layer's launches before this one: each adds P to the start counter
        # (ready_ptr[0]), and fewer than P of this launch's arrivals precede this one
        start = tl.atomic_add(ready_ptr, 1, sem="relaxed", scope="gpu") // P
    else:
        # before this program's first arrival: this launch's start, a multiple of 4 P
        start = launch_base(ready_ptr, BARRIERS * P)
    # stage 1: LN1 + QKV + bias + k, v into the cache (layer 0: + the embeddings). It reads
    # what the previous launch wrote: the stream ordered that, nothing to wait for here
    for t in tl.range(pid, tiles_1, P):
        ln_qkv_tile(t % QKV_COLS, t // QKV_COLS, x_ptr, tok_ptr, pos_ptr, slot_ptr,
                    tok_emb_ptr, pos_emb_ptr, ln1_w_ptr, ln1_b_ptr, qkv_w_ptr, qkv_b_ptr,
                    q_ptr, k_cache_ptr, v_cache_ptr, table_ptr, B, eps1, ready_ptr, 0, 0, D,
                    MAX_SEQ, PAGED, BLOCK_SIZE, MAX_BLOCKS, EMBED, BLOCK_B, BLOCK_N, BLOCK_K,
                    DOT, UNROLL, UPCAST, PRECISION, QKV_W)
    counter, target = stage_counter(ready_ptr, 1, start, P, tiles_1, STAGE_COUNTERS)
    arrive_after(counter, pid, tiles_1, STAGE_COUNTERS)
    stamp(stamp_ptr, pid * STAMPS + 1, STAMP)
    # stage 2: attention; waits for every q, k and v of stage 1 (no weights to load first)
    wait_before(counter, target, pid, tiles_2, READY, STAGE_COUNTERS)
    if HEADS == 1:  # the plain kernel's tiles: one (row, head, split) each
        for t in tl.range(pid, tiles_2, P):
            attention_tile(t // (H * NSPLIT), (t // NSPLIT) % H, t % NSPLIT, q_ptr,
                           k_cache_ptr, v_cache_ptr, pos_ptr, slot_ptr, table_ptr, m_ptr,
                           l_ptr, acc_ptr, count_ptr, y_ptr, scale, ready_ptr, target, 0, H,
                           HD, D, MAX_SEQ, PAGED, BLOCK_SIZE, MAX_BLOCKS, NSPLIT, SPLIT,
                           BLOCK_T, BLOCK_S, BLOCK_HD)
    else:  # HEADS heads of a row per tile, unsplit (GROUPS tiles a row)
        for t in tl.range(pid, tiles_2, P):
            attention_heads_tile(t // GROUPS, (t % GROUPS) * HEADS, q_ptr, k_cache_ptr,
                                 v_cache_ptr, pos_ptr, slot_ptr, table_ptr, y_ptr, scale, H,
                                 HD, D, MAX_SEQ, PAGED, BLOCK_SIZE, MAX_BLOCKS, SPLIT, BLOCK_T,
                                 BLOCK_HD, HEADS)
    counter, target = stage_counter(ready_ptr, 2, start, P, tiles_2, STAGE_COUNTERS)
    arrive_after(counter, pid, tiles_2, STAGE_COUNTERS)
    stamp(stamp_ptr, pid * STAMPS + 2, STAMP)
    # stage 3: out-projection + residual; loads W_proj, then waits for every y (the first
    # tile; the later ones again only with LATER)
    if pid < tiles_3:
        linear_residual_tile(pid % OUT_COLS, pid // OUT_COLS, y_ptr, proj_w_ptr, proj_b_ptr,
                             x_ptr, B, counter, target, READY, D, D, BLOCK_B, BLOCK_N_OUT,
                             BLOCK_K, DOT, UNROLL, UPCAST, PRECISION, OUT_W)
    elif not STAGE_COUNTERS:
        wait_inputs(counter, target, READY)
    for t in tl.range(pid + P, tiles_3, P):
        linear_residual_tile(t % OUT_COLS, t // OUT_COLS, y_ptr, proj_w_ptr, proj_b_ptr, x_ptr,
                             B, counter, target, LATER, D, D, BLOCK_B, BLOCK_N_OUT, BLOCK_K,
                             DOT, UNROLL, UPCAST, PRECISION, OUT_W)
    counter, target = stage_counter(ready_ptr, 3, start, P, tiles_3, STAGE_COUNTERS)
    arrive_after(counter, pid, tiles_3, STAGE_COUNTERS)
    stamp(stamp_ptr, pid * STAMPS + 3, STAMP)
    # stage 4: LN2 + up-projection + GELU; loads W_fc, then waits for the whole residual
    if pid < tiles_4:
        ln_linear_tile(pid % UP_COLS, pid // UP_COLS, x_ptr, ln2_w_ptr, ln2_b_ptr, fc_w_ptr,
                       fc_b_ptr, hidden_ptr, 4 * D, B, eps2, counter, target, READY, D, 4 * D,
                       True, True, BLOCK_B, BLOCK_N_UP, BLOCK_K, DOT, UNROLL, UPCAST, PRECISION,
                       UP_W)
    elif not STAGE_COUNTERS:
        wait_inputs(counter, target, READY)
    for t in tl.range(pid + P, tiles_4, P):
        ln_linear_tile(t % UP_COLS, t // UP_COLS, x_ptr, ln2_w_ptr, ln2_b_ptr, fc_w_ptr,
                       fc_b_ptr, hidden_ptr, 4 * D, B, eps2, counter, target, LATER, D,
                       4 * D, True, True, BLOCK_B, BLOCK_N_UP, BLOCK_K, DOT, UNROLL, UPCAST,
                       PRECISION, UP_W)
    counter, target = stage_counter(ready_ptr, 4, start, P, tiles_4, STAGE_COUNTERS)
    arrive_after(counter, pid, tiles_4, STAGE_COUNTERS)
    stamp(stamp_ptr, pid * STAMPS + 4, STAMP)
    # stage 5: down-projection + residual; loads W_out, then waits for every GELU row
    if pid < tiles_3:
        linear_residual_tile(pid % OUT_COLS, pid // OUT_COLS, hidden_ptr, out_w_ptr, out_b_ptr,
                             x_ptr, B, counter, target, READY, 4 * D, D, BLOCK_B, BLOCK_N_OUT,
                             BLOCK_K, DOT, UNROLL, UPCAST, PRECISION, OUT_W)
    for t in tl.range(pid + P, tiles_3, P):
        linear_residual_tile(t % OUT_COLS, t // OUT_COLS, hidden_ptr, out_w_ptr, out_b_ptr,
                             x_ptr, B, counter, target, LATER, 4 * D, D, BLOCK_B,
                             BLOCK_N_OUT, BLOCK_K, DOT, UNROLL, UPCAST, PRECISION, OUT_W)
    # no arrival, and nothing for a program without a tile here to wait for: the launch's
    # end orders this layer before the next launch
    stamp(stamp_ptr, pid * STAMPS + 5, STAMP)
