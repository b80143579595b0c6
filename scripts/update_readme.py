"""Regenerate the README's reference-results block from data/reference/<gpu>/bench.json."""

import sys
from pathlib import Path

from labkit.suite.bench_cli import markdown_summary, update_readme
from labkit.measure.results import load_reference

gpu = sys.argv[1] if len(sys.argv) > 1 else "h200"
readme = Path(__file__).resolve().parent.parent / "README.md"
try:
    few = load_reference("compile_small", gpu=gpu)
except FileNotFoundError:
    few = None
changed = update_readme(readme, markdown_summary(load_reference("bench", gpu=gpu), few))
print("README updated" if changed else "README already up to date")
