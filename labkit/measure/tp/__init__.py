"""Records ``tp_allreduce`` and ``tp_decode_<preset>``: tensor-parallel decode on ``N`` ranks
(notebook 14, ``labkit tp``).

Everything runs inside ranks started by :func:`labkit.distributed.launch.run_ranks` (NCCL,
one GPU per rank; gloo on CPU with tiny sizes, so the whole path is tested without a GPU).
Each rank runs the same *parts* in the same order (lockstep); a part that raises is recorded as
a reason (``errors``) and the next part still runs; every rank learns which parts failed on any rank
through a gloo control group (a rank never waits in a collective its peer skipped).
:func:`measure_tp` runs two launches: the process-group (NCCL) parts, then the
symmetric-memory parts (the riskier ones, which may be unavailable), each with its own
timeout, and merges them. Rank 0 writes what it has after every part, so a launch that times
out still yields the parts done before.

Parts and what they give:

* ``allreduce_pg`` / ``allreduce_symm``: all-reduce latency (µs per all-reduce, bf16) per
  message size: ``pg_eager`` (``dist.all_reduce`` issued one by one), ``pg_graph`` (the same,
  captured ``graph_ops`` times into one CUDA graph and replayed), ``one_shot_*`` and
  ``two_shot_*`` (``torch.ops.symm_mem.one_shot_all_reduce_out`` /
  ``two_shot_all_reduce_`` on a symmetric buffer, eager and captured). Every method is
  checked first (each rank adds ``rank + 1``; the sum must come out exact).
* ``check_pg`` / ``check_symm``: greedy tokens of the TP=N model equal the TP=1 model's
  (float32, the same seed) in every mode: eager, and the padding dispatcher replaying FULL
  graphs (per rank, in lockstep: host-side metadata, every rank the same bucket).
* ``decode_pg`` / ``decode_symm``: decode step time (µs, bf16) per batch size: ``tp1_eager``,
  ``tp1_graph`` (the whole model on each rank's GPU, timed at the same moment on every rank),
  ``tpN_eager``, ``tpN_graph`` (NCCL inside the graph), ``tpN_eager_noop`` and
  ``tpN_graph_noop`` (every all-reduce replaced by a no-op, the same graph otherwise: the
  compute share), ``tpN_graph_symm_mem`` (one-shot symmetric-memory all-reduce inside the
  graph). Communication per step = ``tpN_graph - tpN_graph_noop``.

The shutdown of each launch (graphs released, synchronize, barrier, destroy) is timed per
rank and stored under ``shutdown

One module per job, every name imported from ``labkit.measure.tp``:
:mod:`~labkit.measure.tp.spec` (message sizes, method and part names, :func:`default_spec`),
:mod:`~labkit.measure.tp.rank` (what one rank collects, agreement between ranks),
:mod:`~labkit.measure.tp.allreduce` and :mod:`~labkit.measure.tp.decode` (the parts),
:mod:`~labkit.measure.tp.worker` (:func:`rank_main`, what each spawned rank runs) and
:mod:`~labkit.measure.tp.parent` (:func:`measure_tp`: the launches and the merged records).
"""

from __future__ import annotations

from labkit.measure.tp.parent import measure_tp
from labkit.measure.tp.rank import _Rank
from labkit.measure.tp.spec import (ALLREDUCE_BYTES, PG_METHODS, PG_PARTS,
                                    QUICK_ALLREDUCE_BYTES, SYMM_METHODS, SYMM_PARTS,
                                    TARGET_ALLREDUCE_BYTES, decode_methods, default_spec)
from labkit.measure.tp.worker import _PARTS, rank_main

__all__ = [
    "ALLREDUCE_BYTES", "PG_METHODS", "PG_PARTS", "QUICK_ALLREDUCE_BYTES", "SYMM_METHODS",
    "SYMM_PARTS", "TARGET_ALLREDUCE_BYTES", "decode_methods", "default_spec", "measure_tp",
    "rank_main",
    # one rank and its parts, run in-process by tests
    "_PARTS", "_Rank",
]
