"""The README's numbers come from the recorded bench result, never typed in by hand."""

from pathlib import Path

from labkit.suite.bench_cli import README_END, README_START, markdown_summary
from labkit.measure.results import load_reference

ROOT = Path(__file__).resolve().parent.parent


def test_readme_block_is_generated_from_the_reference_record():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split(README_START, 1)[1].split(README_END, 1)[0].strip()
    few = load_reference("compile_small", gpu="h200")
    assert block == markdown_summary(load_reference("bench", gpu="h200"), few).strip(), (
        "README reference block is stale: run `python scripts/update_readme.py`")


def test_readme_block_names_the_gpu_and_versions():
    block = markdown_summary(load_reference("bench", gpu="h200"))
    assert "NVIDIA H200" in block and "torch" in block and "driver" in block
