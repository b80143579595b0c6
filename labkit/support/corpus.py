"""A byte-level tokenizer (token id = UTF-8 byte) and the shipped corpus ``data/corpus/alice.txt``
(public domain; provenance and sha256 in ``data/corpus/SOURCE.md``): nothing is downloaded."""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Sequence

from labkit.support.paths import shipped_file

DEFAULT_CORPUS = "alice"  # Alice's Adventures in Wonderland (Lewis Carroll, 1865), ~148 KB


def encode(text: str) -> list[int]:
    """Token ids of ``text``: its UTF-8 bytes."""
    return list(text.encode("utf-8"))


def corpus_path(name: str | os.PathLike[str] = DEFAULT_CORPUS) -> Path:
    """An existing file, or ``<data>/corpus/<name>.txt`` for a bare name."""
    return shipped_file("corpus", name, ".txt")


def load_corpus(name: str | os.PathLike[str] = DEFAULT_CORPUS) -> str:
    """The text of a shipped corpus or of a UTF-8 text file."""
    return corpus_path(name).read_text(encoding="utf-8")


def train_val_split(ids: Sequence[int], frac: float = 0.9) -> tuple[list[int], list[int]]:
    """The first ``frac`` of the stream for training, the rest for validation."""
    frac, ids = float(frac), list(ids)
    if not 0.0 < frac < 1.0:
        raise ValueError(f"frac is the training share, strictly between 0 and 1; got {frac}")
    if len(ids) < 2:
        raise ValueError(f"need at least 2 tokens to split, got {len(ids)}")
    cut = min(max(1, int(len(ids) * frac)), len(ids) - 1)
    return ids[:cut], ids[cut:]

