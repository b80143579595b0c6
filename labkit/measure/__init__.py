"""The measurement wing: what labkit measures on a GPU and how results are kept.

``bench`` measures (launch costs, decode steps, pool memory, the dispatcher, torch.compile),
``pitfalls`` reproduces the capture pitfalls live, ``pool_overwrite`` shows one shared pool
overwriting a kept output (notebook 04), ``fused_bench`` compares the readable and
the fused decode step, ``opcount`` counts a call's kernels by name with the profiler (and
ATen operators on a CPU), ``lesson_runs`` holds the small live runs
the notebooks make (timing eager steps, counting ops, capturing a few graphs, driving a
dispatcher), ``records`` defines every record kind (fields, derived values, default
parameters) and ``results`` stores records with provenance.
It imports only the core (``labkit.model``, ``timing``, ``graphs``, ``dispatch``, ``sizes``,
``env``, ``paths``); the teaching and suite wings import it, never the other way round.
"""
