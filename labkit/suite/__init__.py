"""The suite tooling: the ``labkit`` command line and what it drives.

``cli`` (the entry point), ``runner`` (``labkit run``: papermill suites and sweeps), ``report``
(run index pages), ``slides``, ``lab``, ``images``, ``bench_cli`` (``labkit bench``) and
``train``. Nothing in the package imports this wing.
"""
