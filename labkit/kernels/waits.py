"""How a tile of the Triton step waits for what it reads (the ``WAIT`` constexpr of
:mod:`labkit.kernels`' tiles, :func:`labkit.kernels.common.wait_inputs`): plain integers,
Triton-free, so that the step's planning (:mod:`labkit.kernels.step`) and the measurements
name the codes the kernels compare against."""

#: nothing to wait for (the stream runs the kernels one after another)
STREAM = 0
#: programmatic dependent launch, releasing the next kernel at the wait
PDL = 1
#: a ready counter: volatile polls, then one acquire (the persistent step's default)
READY = 2
#: PDL's order without its instructions (Triton's interpreter, which runs kernels one by one
#: and has no ``griddepcontrol``)
PDL_ORDER = 3
#: PDL, releasing the next kernel only once the tile's stores are issued
#: (:func:`labkit.kernels.common.release_dependents`)
PDL_LATE = 4
#: PDL, waiting at the kernel's start before any load (:func:`labkit.kernels.common.wait_first`)
PDL_FIRST = 5
#: a ready counter polled with acquire loads alone (``TritonStep(poll="acquire")``)
READY_ACQUIRE = 6
