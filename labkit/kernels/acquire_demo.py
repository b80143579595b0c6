"""Two waits on a ready counter that differ only in whether the acquire's value is used
(notebook 17), for :func:`labkit.kernels.aot.acquire_sass` to compile and read: Triton 3.6
drops an acquire whose value is unused, and with it the SM's L1 invalidation, which is what
made the persistent step read stale rows on an H100. Imported on demand (it needs Triton)."""

import triton
import triton.language as tl

from .common import wait_inputs
from .waits import READY

#: the ready counter's wait (a constexpr: a Triton kernel reads a global only as one)
READY_WAIT = tl.constexpr(READY)


@triton.jit
def wait_value_unused(ready_ptr, x_ptr, out_ptr, target):
    """Spin until the counter reaches ``target``, one acquire whose value nothing reads, then
    copy 128 values that another program wrote (the persistent step's first wait)."""
    seen = tl.load(ready_ptr, volatile=True)
    while seen < target:
        seen = tl.load(ready_ptr, volatile=True)
    tl.atomic_add(ready_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()
    offs = tl.arange(0, 128)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


@triton.jit
def wait_value_used(ready_ptr, x_ptr, out_ptr, target):
    """The same through labkit's :func:`labkit.kernels.common.wait_inputs`, whose acquire's
    value decides a loop."""
    wait_inputs(ready_ptr, target, READY_WAIT)
    offs = tl.arange(0, 128)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))
