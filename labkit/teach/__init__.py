"""The teaching wing: what the notebooks call to explain, chart and check.

``notebook`` (set-up, tier banner, measure-or-reference), ``lessons`` (pure helpers that turn
records into numbers and sentences), ``plots`` and ``widgets`` (plotly charts, ipywidgets
controls), ``exercises`` (self-checking exercises), ``simulated`` (a CPU stand-in for a
captured graph), ``claims`` (the articles' claims judged against records), ``corpus`` (the
demo text). It imports the measurement wing and the core; lessons/ never measures.
"""
