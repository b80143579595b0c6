"""labkit: CUDA Graphs for LLM decode, as a teaching workbook and experiment suite.

The decode engine sits at the top of the package (model, KV cache, static batch, capture,
piecewise, dispatcher, fused and Triton steps, timers); the rooms built on it and the wings
around it import only what lies below them::

    labkit.suite        the command line: run, bench, slides, lab, images, train
    labkit.teach        notebook helpers: set-up, statements, lessons, plots, widgets
    labkit.measure      GPU measurements, pitfall demos, result records
    labkit.serving      continuous batching over request traces
    labkit.distributed  tensor-parallel decode and its launcher
    labkit.roofline     the roofline probes: step cost, multistep graphs, conditional nodes
    labkit.*            the decode engine (and labkit.sizes, labkit.kernels)
    labkit.support      plumbing: environment record, LABKIT_* variables, paths, corpus

CONTRIBUTING.md lists every module with its one job. Importing ``labkit`` itself is cheap:
submodules are imported explicitly.
"""

__version__ = "0.1.0"
