"""labkit: CUDA Graphs for LLM decode, as a teaching workbook and experiment suite.

The core sits at the top of the package: a tiny GPT with a static KV cache (``labkit.model``),
launch-overhead timers (``labkit.timing``), pooled multi-graph capture (``labkit.graphs``), the
padding dispatcher (``labkit.dispatch``), a fused decode step (``labkit.fused``), GPT-2 weights
(``labkit.weights``), capture-size choice (``labkit.sizes``), the hardware
tier and environment record (``labkit.env``), where files are (``labkit.paths``) and the
``LABKIT_*`` environment variables, each checked where it is read (``labkit.envvars``). Around it
three wings, each importing only the ones below it::

    labkit.suite    the command line: run, bench, slides, lab, images, train
    labkit.teach    notebook helpers: set-up, lessons, plots, widgets, exercises, claims
    labkit.measure  GPU measurements, pitfall demos, result records
    labkit.*        the core

Importing ``labkit`` itself is cheap: submodules are imported explicitly.
"""

__version__ = "0.1.0"
