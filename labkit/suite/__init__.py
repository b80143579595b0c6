"""The suite tooling: the ``labkit`` command line and what it drives (see CONTRIBUTING.md)."""
