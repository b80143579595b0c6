"""The suite tooling: the ``labkit`` command line and what it drives.

``cli`` (the entry point, the only place that turns results and errors into messages and exit
codes), ``engine`` (finding and executing notebooks, shared by run, slides and lab), ``params``
(notebook parameters, checked before a run), ``runner`` (``labkit run``), ``report`` (run index
pages), ``slides``, ``lab``, ``images``, ``bench_cli``, ``serve_cli``, ``tp_cli`` and ``train``.
Nothing in the package imports this wing.
"""
