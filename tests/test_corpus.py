"""labkit.support.corpus: byte tokenizer, the shipped corpus (checked against SOURCE.md), split."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from labkit.support.corpus import DEFAULT_CORPUS, corpus_path, encode, load_corpus, train_val_split

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "data" / "corpus" / "SOURCE.md"


@pytest.mark.parametrize("text", ["", "Alice", "naïve café — 中文 🐇\n\ttab", "\x00\xff"])
def test_encode_gives_the_utf8_bytes(text):
    ids = encode(text)
    assert all(0 <= i < 256 for i in ids) and bytes(ids).decode("utf-8") == text


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
    assert text.isascii() and bytes(encode(text)).decode("utf-8") == text
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

