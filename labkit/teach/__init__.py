"""The teaching wing: what the notebooks call to explain, chart and check (its modules are
listed in CONTRIBUTING.md). It imports the measurement wing and the core."""
