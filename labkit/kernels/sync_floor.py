"""The persistent step's synchronisation with no work around it (notebook 17, "What the
synchronisation costs"), for :mod:`labkit.measure.sync_floor` to time: a launch of ``P``
programs that meets at ``BARRIERS`` counter barriers and does nothing else, with the very
arrival and wait of :mod:`labkit.kernels.persistent` (:func:`labkit.kernels.common.arrive`,
``wait_inputs`` with ``READY``). ``BARRIERS = 0`` is an empty launch; with ``PDL`` (launched
with ``launch_pdl=True``) it waits for the launch before it and lets the next one start, as a
PDL kernel of the step does (``wait_inputs`` with ``PDL``). Imported on demand (it needs
Triton)."""

import triton
import triton.language as tl

from .common import arrive, launch_base, wait_inputs
from .waits import PDL as _PDL_WAIT, READY as _READY

#: the wait code of a PDL kernel (a constexpr: a Triton kernel reads a global only as one)
PDL_WAIT = tl.constexpr(_PDL_WAIT)


@triton.jit
def sync_kernel(ready_ptr, P, BARRIERS: tl.constexpr, PDL: tl.constexpr = False,
                READY: tl.constexpr = _READY):
    """Meet the other ``P - 1`` programs ``BARRIERS`` times: arrive, then wait for the counter
    to reach the barrier's target. The counter only grows (``BARRIERS P`` a launch), so this
    launch's start is read from it as the layer kernel reads it (``base``); the last wait
    needs no arrival after it, since the launch's end orders the next one. ``READY``: how the
    wait polls (:mod:`labkit.kernels.waits`: ``READY``, the step's default, or
    ``READY_ACQUIRE``, acquire loads alone)."""
    if PDL:
        wait_inputs(ready_ptr, 0, PDL_WAIT)  # griddepcontrol.wait, then launch_dependents
    if BARRIERS > 0:
        base = launch_base(ready_ptr, BARRIERS * P)
        for k in tl.static_range(BARRIERS):
            arrive(ready_ptr)
            wait_inputs(ready_ptr, base + (k + 1) * P, READY)
