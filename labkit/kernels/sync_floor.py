"""The persistent step's synchronisation with no work around it (notebook 17, "What the
synchronisation costs"), for :mod:`labkit.measure.sync_floor` to time: a launch of ``P``
programs that meets at ``BARRIERS`` counter barriers and does nothing else, with the very
arrival and wait of :mod:`labkit.kernels.persistent` (:func:`labkit.kernels.common.arrive`,
``wait_inputs`` with ``READY``). ``BARRIERS = 0`` is an empty launch; with ``PDL`` (launched
with ``launch_pdl=True``) it waits for the launch before it and lets the next one start, as a
PDL kernel of the step does (``wait_inputs`` with ``PDL``). With ``ROW`` the programs also
pass an activation row between the barriers, as the layer's stages pass the residual and its
products: the dependency chain of a step with no weights to read. Imported on demand (it
needs Triton)."""

import triton
import triton.language as tl

from .common import arrive, launch_base, wait_inputs
from .waits import PDL as _PDL_WAIT, READY as _READY

#: the wait code of a PDL kernel (a constexpr: a Triton kernel reads a global only as one)
PDL_WAIT = tl.constexpr(_PDL_WAIT)


@triton.jit
def exchange_row(row_ptr, phase, pid, P, ROW: tl.constexpr, BLOCK: tl.constexpr):
    """One stage's traffic with no weights: read the whole ``ROW``-wide float32 row that every
    program wrote in the stage before (buffer ``phase % 2``), then write this program's share of
    the next one (columns ``pid, pid + P, ...`` of buffer ``(phase + 1) % 2``): half the row's
    mean plus the column, a value that depends on every element read, so that nothing is
    optimised away. Whatever the start, the row settles at ``(ROW - 1) / 2 + column`` (the
    mean's distance from it halves each stage), which :mod:`labkit.measure.sync_floor` checks
    after the timing: that the exchanges ran, not that no read was stale (a stale row early in
    a replay fades within a few stages; the step's own graphs check tokens for that). The two
    buffers alternate: a buffer is written only once every program has passed the barrier
    after reading it."""
    cols = tl.arange(0, BLOCK)
    mask = cols < ROW
    src = row_ptr + (phase % 2) * ROW
    dst = row_ptr + ((phase + 1) % 2) * ROW
    total = tl.sum(tl.load(src + cols, mask=mask, other=0.0), axis=0)
    mine = mask & (cols % P == pid)
    tl.store(dst + cols, total / ROW * 0.5 + cols.to(tl.float32), mask=mine)


@triton.jit
def sync_kernel(ready_ptr, P, BARRIERS: tl.constexpr, PDL: tl.constexpr = False,
                READY: tl.constexpr = _READY, row_ptr=None, first=0, ROW: tl.constexpr = 0,
                BLOCK_ROW: tl.constexpr = 1):
    """Meet the other ``P - 1`` programs ``BARRIERS`` times: arrive, then wait for the counter
    to reach the barrier's target. The counter only grows (``BARRIERS P`` a launch), so this
    launch's start is read from it as the layer kernel reads it (``base``); the last wait
    needs no arrival after it, since the launch's end orders the next one. ``READY``: how the
    wait polls (:mod:`labkit.kernels.waits`: ``READY``, the step's default, or
    ``READY_ACQUIRE``, acquire loads alone). ``ROW`` (``> 0``): before each arrival and after
    the last wait, :func:`exchange_row` on ``row_ptr`` (two float32 rows of ``ROW``;
    ``BLOCK_ROW`` the power of two that holds one), as the layer's five stages read what the
    stage before wrote; ``first`` is this launch's first stage counted over the launches
    before it (layer ``i``: ``5 i``), so that it reads the buffer the last launch wrote."""
    pid = tl.program_id(0)
    if PDL:
        wait_inputs(ready_ptr, 0, PDL_WAIT)  # griddepcontrol.wait, then launch_dependents
    if BARRIERS > 0:
        base = launch_base(ready_ptr, BARRIERS * P)
        for k in tl.static_range(BARRIERS):
            if ROW > 0:
                exchange_row(row_ptr, first + k, pid, P, ROW, BLOCK_ROW)
            arrive(ready_ptr)
            wait_inputs(ready_ptr, base + (k + 1) * P, READY)
        if ROW > 0:  # the last stage: no arrival, the launch's end orders the next launch
            exchange_row(row_ptr, first + BARRIERS, pid, P, ROW, BLOCK_ROW)
