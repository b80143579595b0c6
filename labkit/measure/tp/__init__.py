"""Records ``tp_allreduce`` and ``tp_decode_<preset>``: tensor-parallel decode on ``N`` ranks
(notebook 14, ``labkit tp``).

Every rank (:func:`labkit.distributed.launch.run_ranks`: NCCL, one GPU each; gloo on CPU with
tiny sizes, so the whole path is tested without a GPU) runs the same *parts* in lockstep; a part
that raises on any rank is recorded in ``errors`` on every rank (agreed over a gloo control
group) and the next part still runs. :func:`measure_tp` runs two launches, the process-group
parts then the riskier symmetric-memory ones, each with its own timeout; rank 0 saves what it
has after every part. The parts: ``check_*`` (TP=N greedy tokens equal TP=1's, float32, eager
and through the dispatcher's FULL graphs), ``allreduce_*`` (µs per all-reduce per message size:
``pg_eager``, ``pg_graph``, symmetric-memory ``one_shot_*``, ``two_shot_*``; sums checked) and
``decode_*`` (step µs per batch size, TP=1 and TP=N, eager, graph, with a no-op all-reduce: the
compute share, and with the one-shot all-reduce in the graph). The shutdown of each launch is
timed per rank (``shutdown``).

Modules: :mod:`~labkit.measure.tp.spec` (sizes, names, :func:`default_spec`),
:mod:`~labkit.measure.tp.rank` (one rank's results), :mod:`~labkit.measure.tp.allreduce` and
:mod:`~labkit.measure.tp.decode` (the parts), :mod:`~labkit.measure.tp.worker`
(:func:`rank_main`) and :mod:`~labkit.measure.tp.parent` (:func:`measure_tp`).
"""

from __future__ import annotations

from labkit.measure.tp.parent import measure_tp
from labkit.measure.tp.rank import _Rank
from labkit.measure.tp.spec import TARGET_ALLREDUCE_BYTES, decode_methods, default_spec
from labkit.measure.tp.worker import _PARTS, rank_main

__all__ = ["TARGET_ALLREDUCE_BYTES", "decode_methods", "default_spec", "measure_tp",
           "rank_main", "_PARTS", "_Rank"]
