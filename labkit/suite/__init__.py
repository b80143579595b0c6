"""The suite tooling: the ``labkit`` command line (``cli``, the only place that prints and picks
exit codes) and what it drives: ``engine`` (finding and executing notebooks), ``params``,
``runner``, ``report``, ``slides``, ``lab``, ``images``, ``bench_cli``, ``serve_cli``, ``tp_cli``
and ``train``. Nothing in the package imports this wing.
"""
