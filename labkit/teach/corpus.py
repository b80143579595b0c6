"""A small shipped text corpus and a byte-level tokenizer (token id = UTF-8 byte, 256 ids).

The corpus (``data/corpus/alice.txt``, public domain; provenance and sha256 in
``data/corpus/SOURCE.md``) ships with the repository: nothing is downloaded. torch is
imported only by :func:`batches`."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from labkit.paths import shipped_file

if TYPE_CHECKING:  # pragma: no cover
    import torch

VOCAB_SIZE = 256
DEFAULT_CORPUS = "alice"  # Alice's Adventures in Wonderland (Lewis Carroll, 1865), ~148 KB


def encode(text: str) -> list[int]:
    """Token ids of ``text``: its UTF-8 bytes."""
    return list(text.encode("utf-8"))


def decode(ids: Iterable[int]) -> str:
    """Text of byte ids; invalid UTF-8 becomes U+FFFD; ids outside ``0..255`` raise."""
    vals = [int(i) for i in ids]
    bad = [v for v in vals if not 0 <= v < VOCAB_SIZE]
    if bad:
        raise ValueError(f"token ids must be bytes in 0..{VOCAB_SIZE - 1}, got {bad[:5]}; "
                         "was the model's vocabulary larger than the byte tokenizer's?")
    return bytes(vals).decode("utf-8", errors="replace")


def corpus_path(name: str | os.PathLike[str] = DEFAULT_CORPUS) -> Path:
    """An existing file, or ``<data>/corpus/<name>.txt`` for a bare name."""
    return shipped_file("corpus", name, ".txt")


def load_corpus(name: str | os.PathLike[str] = DEFAULT_CORPUS) -> str:
    """The text of a shipped corpus or of a UTF-8 text file."""
    return corpus_path(name).read_text(encoding="utf-8")


def train_val_split(ids: Sequence[int], frac: float = 0.9) -> tuple[list[int], list[int]]:
    """The first ``frac`` of the stream for training, the rest for validation (contiguous,
    so no validation text leaks into training windows)."""
    frac, ids = float(frac), list(ids)
    if not 0.0 < frac < 1.0:
        raise ValueError(f"frac is the training share, strictly between 0 and 1; got {frac}")
    if len(ids) < 2:
        raise ValueError(f"need at least 2 tokens to split, got {len(ids)}")
    cut = min(max(1, int(len(ids) * frac)), len(ids) - 1)
    return ids[:cut], ids[cut:]


def batches(ids: Sequence[int], batch: int, seq: int, seed: int = 0, *,
            steps: int | None = None, device: "str | torch.device | None" = None
            ) -> Iterator[tuple["torch.Tensor", "torch.Tensor"]]:
    """Random ``(batch, seq)`` int64 windows ``(x, y)`` with ``y[:, t] = x[:, t + 1]``; starts
    from ``random.Random(seed)`` (the same batches everywhere); forever unless ``steps``."""
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
    rng, hi, offsets, n = random.Random(seed), data.numel() - seq - 1, torch.arange(seq + 1), 0
    while steps is None or n < int(steps):
        starts = torch.tensor([rng.randint(0, hi) for _ in range(batch)], dtype=torch.long)
        win = data[starts[:, None] + offsets[None, :]]
        x, y = win[:, :-1].contiguous(), win[:, 1:].contiguous()
        yield (x, y) if device is None else (x.to(device), y.to(device))
        n += 1
