"""labkit: CUDA Graphs for LLM decode, as a teaching workbook and experiment suite.

The package holds the reusable logic the notebooks call: a tiny GPT with a static KV cache
(``labkit.model``), launch-overhead timers (``labkit.timing``), pooled multi-graph capture
(``labkit.graphs``), a padding dispatcher (``labkit.dispatch``), capture-size choice
(``labkit.sizes``), the hardware tier and environment record (``labkit.env``) and result
records with provenance (``labkit.results``). Importing ``labkit`` itself is cheap: submodules
are imported explicitly.
"""

__version__ = "0.1.0"
