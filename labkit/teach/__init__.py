"""The teaching wing: what the notebooks call to explain, chart and check.

``notebook`` (set-up, tier banner, measure-or-reference), ``statements`` (statement checks and
numbers in prose), ``lessons`` (pure helpers that turn records into numbers and table rows),
``plots`` and ``widgets`` (plotly charts, ipywidgets controls), ``exercises``, ``simulated``
(a CPU stand-in for captured graphs and their pools), ``claims`` and ``verdicts`` (the
articles' claims judged against records). It imports the measurement wing and the core.
"""
