"""A small shipped text corpus and a byte-level tokenizer for the decode demos.

The tokenizer maps text to its UTF-8 bytes, so the vocabulary is exactly 256 ids and every
string round-trips. The corpus (``data/corpus/alice.txt``, public domain; provenance and sha256
in ``data/corpus/SOURCE.md``) ships with the repository: nothing is downloaded at run time.
torch is imported only by :func:`batches`.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence
from labkit.paths import shipped_file

if TYPE_CHECKING:  # pragma: no cover
    import torch

VOCAB_SIZE = 256
"""Byte-level vocabulary: token id = byte value."""
DEFAULT_CORPUS = "alice"
"""*Alice's Adventures in Wonderland* (Lewis Carroll, 1865), about 148 KB."""

__all__ = ["DEFAULT_CORPUS", "VOCAB_SIZE", "batches", "corpus_path", "decode", "encode",
           "load_corpus", "train_val_split"]


def encode(text: str) -> list[int]:
    """Token ids of ``text``: its UTF-8 bytes, each in ``0..255``."""
    return list(text.encode("utf-8"))


def decode(ids: Iterable[int]) -> str:
    """Text of byte ids; byte sequences that are not valid UTF-8 become U+FFFD (``errors=
    'replace'``), so model samples always decode. Ids outside ``0..255`` are a ValueError."""
    vals = [int(i) for i in ids]
    bad = [v for v in vals if not 0 <= v < VOCAB_SIZE]
    if bad:
        raise ValueError(f"token ids must be bytes in 0..{VOCAB_SIZE - 1}, got {bad[:5]}; "
                         "was the model's vocabulary larger than the byte tokenizer's?")
    return bytes(vals).decode("utf-8", errors="replace")


def corpus_path(name: str | os.PathLike[str] = DEFAULT_CORPUS) -> Path:
    """Path of a corpus: an existing file, or ``<data>/corpus/<name>.txt`` for a bare name."""
    return shipped_file("corpus", name, ".txt")


def load_corpus(name: str | os.PathLike[str] = DEFAULT_CORPUS) -> str:
    """The text of a shipped corpus (default ``"alice"``) or of a UTF-8 text file."""
    return corpus_path(name).read_text(encoding="utf-8")


def train_val_split(ids: Sequence[int], frac: float = 0.9) -> tuple[list[int], list[int]]:
    """Split a token stream in two contiguous parts: the first ``frac`` for training, the rest
    for validation (contiguous, so no validation text leaks into training windows)."""
    frac = float(frac)
    if not 0.0 < frac < 1.0:
        raise ValueError(f"frac is the training share, strictly between 0 and 1; got {frac}")
    ids = list(ids)
    if len(ids) < 2:
        raise ValueError(f"need at least 2 tokens to split, got {len(ids)}")
    cut = min(max(1, int(len(ids) * frac)), len(ids) - 1)
    return ids[:cut], ids[cut:]


def batches(ids: Sequence[int], batch: int, seq: int, seed: int = 0, *,
            steps: int | None = None, device: "str | torch.device | None" = None
            ) -> Iterator[tuple["torch.Tensor", "torch.Tensor"]]:
    """Random training windows ``(x, y)``, each a ``(batch, seq)`` int64 tensor with
    ``y[:, t] = x[:, t + 1]`` in the stream (next-token targets).

    Window starts come from ``random.Random(seed)``, so the same seed gives the same batches
    on every machine and torch version. Yields forever unless ``steps`` is given.
    """
    import torch  # noqa: PLC0415  (lazy: the rest of the module works without torch)

    batch, seq = int(batch), int(seq)
    if batch < 1 or seq < 1:
        raise ValueError(f"batch and seq must be >= 1, got batch={batch}, seq={seq}")
    if steps is not None and int(steps) < 0:
        raise ValueError(f"steps must be >= 0 or None (forever), got {steps}")
    data = torch.as_tensor(list(ids), dtype=torch.long)
    if data.numel() < seq + 1:
        raise ValueError(f"the token stream has {data.numel()} tokens; windows of seq={seq} "
                         f"need at least {seq + 1}: lower seq or use more text")
    rng = random.Random(seed)
    hi = data.numel() - seq - 1
    offsets = torch.arange(seq + 1)
    n = 0
    while steps is None or n < int(steps):
        starts = torch.tensor([rng.randint(0, hi) for _ in range(batch)], dtype=torch.long)
        win = data[starts[:, None] + offsets[None, :]]
        x, y = win[:, :-1].contiguous(), win[:, 1:].contiguous()
        if device is not None:
            x, y = x.to(device), y.to(device)
        yield x, y
        n += 1
