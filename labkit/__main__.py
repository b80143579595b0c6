"""``python -m labkit``: the same command line as the ``labkit`` script."""

from labkit.suite.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
