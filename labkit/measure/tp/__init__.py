"""Records ``tp_allreduce`` and ``tp_decode_<preset>``: tensor-parallel decode on ``N`` ranks
(notebook 14, ``labkit tp``).

Every rank runs the same parts in lockstep (NCCL, one GPU each; gloo on CPU with tiny sizes);
a part that raises on any rank is recorded in ``errors`` and the next part still runs. The parts:
``check_*`` (TP=N tokens equal TP=1's), ``allreduce_*`` (µs per all-reduce per message size)
and ``decode_*`` (step µs per batch size). Modules: :mod:`~labkit.measure.tp.spec`,
:mod:`~labkit.measure.tp.rank`, :mod:`~labkit.measure.tp.allreduce`,
:mod:`~labkit.measure.tp.decode`, :mod:`~labkit.measure.tp.worker`,
:mod:`~labkit.measure.tp.parent`.
"""

from __future__ import annotations

from labkit.measure.tp.parent import measure_tp
from labkit.measure.tp.rank import _Rank
from labkit.measure.tp.spec import TARGET_ALLREDUCE_BYTES, decode_methods, default_spec
from labkit.measure.tp.worker import _PARTS, rank_main

__all__ = ["TARGET_ALLREDUCE_BYTES", "decode_methods", "default_spec", "measure_tp",
           "rank_main", "_PARTS", "_Rank"]
