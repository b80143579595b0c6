"""``labkit train``: train the tiny byte-level checkpoint used by the decode demos,
reproducibly (fixed seed and data order, the corpus in ``data/corpus``).

Learned positions do not extrapolate: the shipped checkpoint (``--seq 128``) degrades into
noise past position 128; train with ``--seq 256`` for the full cache.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from labkit.model import TinyGPT, build_model, preset
from labkit.support.corpus import encode, load_corpus, train_val_split


def _sample(ids: torch.Tensor, batch: int, seq: int, gen: torch.Generator):
    starts = torch.randint(0, ids.numel() - seq - 1, (batch,), generator=gen)
    x = torch.stack([ids[s:s + seq] for s in starts.tolist()])
    y = torch.stack([ids[s + 1:s + seq + 1] for s in starts.tolist()])
    return x, y


@torch.no_grad()
def evaluate(model: TinyGPT, ids: torch.Tensor, batch: int, seq: int, iters: int = 10,
             seed: int = 1) -> float:
    """Mean cross-entropy (nats per byte) on random windows of ``ids``."""
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    losses = []
    for _ in range(iters):
        x, y = (t.to(model.device) for t in _sample(ids, batch, seq, gen))
        logits = model(x).float()
        losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item())
    return sum(losses) / len(losses)


def _readable(path: Path) -> None:
    """Give ``path`` the mode a new file gets here (the save's temporary file is 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def train_char_model(out: Path = Path("data/checkpoints/char.safetensors"), steps: int = 1500,
                     seed: int = 0, device: str | None = None, batch: int = 32, seq: int = 128,
                     lr: float = 3e-3, log_every: int = 100) -> dict:
    """Train the ``char`` preset on the shipped corpus; save to ``out``; return the record."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    train_ids, val_ids = (torch.tensor(part, dtype=torch.long)
                          for part in train_val_split(encode(load_corpus()), 0.9))
    cfg = preset("char", max_batch=8)
    model = build_model(cfg, device, seed=seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        lr_now = lr * min(1.0, step / 100) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for g in opt.param_groups:
            g["lr"] = max(lr_now, lr * 0.05)
        x, y = (t.to(device) for t in _sample(train_ids, batch, seq, gen))
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % log_every == 0 or step == steps:
            print(f"step {step:5d}/{steps}  loss {loss.item():.3f}  "
                  f"{time.perf_counter() - t0:.0f}s", flush=True)
    val = evaluate(model, val_ids, batch, seq)
    model.eval()
    record = {"steps": steps, "seed": seed, "batch": batch, "seq": seq, "lr": lr,
              "device": str(device), "torch": torch.__version__, "val_loss": val,
              "train_seconds": time.perf_counter() - t0}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out, extra_metadata={"training": json.dumps(record)})
    _readable(out)
    print(f"saved {out} (val loss {val:.3f} nats/byte)")
    return record
