"""labkit.teach.corpus: byte tokenizer, the shipped corpus (checked against SOURCE.md), batches."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from labkit.teach.corpus import (DEFAULT_CORPUS, VOCAB_SIZE, batches, corpus_path, decode, encode,
                           load_corpus, train_val_split)

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "data" / "corpus" / "SOURCE.md"


@pytest.mark.parametrize("text", ["", "Alice", "naïve café — 中文 🐇\n\ttab", "\x00\xff"])
def test_roundtrip(text):
    ids = encode(text)
    assert all(0 <= i < VOCAB_SIZE for i in ids)
    assert decode(ids) == text
    assert len(ids) == len(text.encode("utf-8"))


def test_decode_replaces_invalid_utf8_and_rejects_non_bytes():
    assert decode([0x41, 0xE4, 0x42]) == "A\ufffdB"        # a cut multi-byte sequence
    assert decode(iter([104, 105])) == "hi"
    with pytest.raises(ValueError, match="0..255"):
        decode([65, 256])
    with pytest.raises(ValueError, match="0..255"):
        decode([-1])


def test_corpus_matches_source_md():
    text = SOURCE.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| sha256 of result"))
    expected = re.search(r"`([0-9a-f]{64})`", row).group(1)
    data = corpus_path().read_bytes()
    assert hashlib.sha256(data).hexdigest() == expected
    assert 100_000 <= len(data) <= 500_000
    assert "brotli" in text and "public domain" in text


def test_load_corpus():
    text = load_corpus()
    assert DEFAULT_CORPUS == "alice"
    assert text == load_corpus("alice") == load_corpus(corpus_path())
    assert text.startswith(" ") and "ALICE'S ADVENTURES IN WONDERLAND" in text[:200]
    assert text.rstrip().endswith("THE END") and text.endswith("\n")
    assert "\r" not in text and "gutenberg" not in text.lower()
    assert text.isascii() and decode(encode(text)) == text
    with pytest.raises(FileNotFoundError, match="alice"):
        load_corpus("no_such_corpus")


def test_load_corpus_from_a_file(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("hello", encoding="utf-8")
    assert load_corpus(p) == "hello"


def test_train_val_split():
    ids = list(range(100))
    tr, va = train_val_split(ids, 0.9)
    assert tr == ids[:90] and va == ids[90:]
    tr, va = train_val_split([1, 2], 0.99)
    assert tr == [1] and va == [2]
    for bad in (0.0, 1.0, -0.5, 2):
        with pytest.raises(ValueError, match="frac"):
            train_val_split(ids, bad)
    with pytest.raises(ValueError, match="at least 2"):
        train_val_split([5], 0.5)


def test_batches_shapes_targets_and_determinism():
    torch = pytest.importorskip("torch")
    ids = encode(load_corpus())[:5000]
    got = list(batches(ids, batch=4, seq=16, seed=3, steps=5))
    assert len(got) == 5
    stream = torch.tensor(ids)
    for x, y in got:
        assert x.shape == y.shape == (4, 16) and x.dtype == y.dtype == torch.long
        assert torch.equal(x[:, 1:], y[:, :-1])
        for row_x, row_y in zip(x, y):             # each row is a window of the stream
            starts = [s for s in range(len(ids) - 16) if ids[s] == row_x[0].item()]
            assert any(torch.equal(stream[s:s + 16], row_x)
                       and torch.equal(stream[s + 1:s + 17], row_y) for s in starts)
    again = list(batches(ids, batch=4, seq=16, seed=3, steps=5))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, again))
    other = next(batches(ids, batch=4, seq=16, seed=4))
    assert not torch.equal(other[0], got[0][0])


def test_batches_errors():
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match="seq"):
        next(batches([1, 2, 3], batch=1, seq=3))
    with pytest.raises(ValueError, match=">= 1"):
        next(batches(list(range(50)), batch=0, seq=4))
    assert list(batches(list(range(50)), batch=2, seq=4, steps=0)) == []
