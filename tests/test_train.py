"""labkit.suite.train: a few CPU steps are reproducible and save a loadable checkpoint."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import torch
from safetensors import safe_open

from labkit.model import TinyGPT
from labkit.suite.train import train_char_model


def _train(out: Path, seed: int = 0) -> dict:
    return train_char_model(out=out, steps=3, seed=seed, device="cpu", batch=2, seq=16,
                            log_every=10)


def test_training_is_reproducible_and_saves_its_record(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.safetensors", tmp_path / "b.safetensors", tmp_path / "c.safetensors"
    rec_a, rec_b, rec_c = _train(a), _train(b), _train(c, seed=1)
    assert rec_a["val_loss"] == rec_b["val_loss"]
    assert rec_a["val_loss"] != rec_c["val_loss"]
    assert (rec_a["steps"], rec_a["batch"], rec_a["seq"], rec_a["device"]) == (3, 2, 16, "cpu")
    ma, mb, mc = (TinyGPT.load(p) for p in (a, b, c))
    same = [torch.equal(x, y) for x, y in zip(ma.state_dict().values(), mb.state_dict().values())]
    assert all(same)
    assert not all(torch.equal(x, y) for x, y in zip(ma.state_dict().values(),
                                                      mc.state_dict().values()))
    with safe_open(str(a), framework="pt") as f:
        saved = json.loads(f.metadata()["training"])
    assert saved["val_loss"] == rec_a["val_loss"] and saved["seed"] == 0
    assert ma.cfg.vocab_size == 256
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(a.stat().st_mode) == 0o666 & ~mask  # 0644 like other files, not 0600
