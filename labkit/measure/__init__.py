"""The measurement wing: what labkit measures on a GPU and how results are kept.

Its modules are listed in ``CONTRIBUTING.md``. It imports only the core (``labkit.model``,
``timing``, ``graphs``, ``dispatch``, ``sizes``, ``env``, ``paths``); the teaching and suite
wings import it, never the other way round.
"""
