"""The checks of one decode step's inputs, apart from the model: tensor kinds, dtypes, devices
and shapes (no values read, so safe during capture), and the host-side value checks of token
ids, cache positions and cache slots. :class:`labkit.model.TinyGPT` and
:class:`labkit.dispatch.PaddingDispatcher` both use them; each raises an error that names
the input, the problem and the fix."""

from __future__ import annotations

from typing import Sequence

import torch


def check_slots(slots: Sequence[int], max_batch: int) -> None:
    """Refuse cache slots of one batch that are outside ``[0, max_batch)`` (slot
    ``max_batch`` is the scratch slot, never a live request's) or repeated (two rows writing
    one slot overwrite each other's cache and get wrong logits). Host-side ints only."""
    slots = list(slots)
    bad = [x for x in slots if not 0 <= x < max_batch]
    if bad:
        why = (f" (slot {max_batch} is the scratch slot that padded rows write, never a live "
               "request's)") if max_batch in bad else ""
        raise ValueError(f"cache slots must lie in [0, {max_batch}){why}; got slots={slots}; "
                         f"give each request its own slot below max_batch={max_batch}")
    seen: set[int] = set()
    dup = sorted({x for x in slots if x in seen or seen.add(x)})
    if dup:
        raise ValueError(f"cache slot(s) {dup} appear more than once in slots={slots}: rows "
                         "sharing a slot overwrite each other's KV cache; give every row of a "
                         "batch a distinct slot")


def check_id_tensor(name: str, t: torch.Tensor, ndim: int, device: torch.device, *,
                    host_ok: bool = False) -> None:
    """``t`` must be a tensor of integer ids (int64 or int32) with ``ndim`` dimensions on
    ``device``; with ``host_ok`` also on the CPU or another device of the same type (batch
    metadata that :class:`labkit.dispatch.PaddingDispatcher` copies in)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    on_device = (t.device.type in ("cpu", device.type)) if host_ok else t.device == device
    if not on_device:
        raise ValueError(f"{name} is on {t.device} but the model is on {device}; "
                         f"move it with {name}.to({str(device)!r})")
    if t.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} has dtype {t.dtype}; it must hold integer ids: pass "
                        f"{name}.long()")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")


def check_step_shapes(tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                      device: torch.device, max_batch: int, *, host_ok: bool = False) -> int:
    """The kinds, dtypes, devices and shapes of one decode step's ``tokens``, ``positions``
    and ``slots`` (1-D, one entry per row, between 1 and ``max_batch`` rows; ``host_ok`` as
    in :func:`check_id_tensor`). Reads no values. Returns the batch size."""
    for name, t in (("tokens", tokens), ("positions", positions), ("slots", slots)):
        check_id_tensor(name, t, 1, device, host_ok=host_ok)
    b = tokens.shape[0]
    if positions.shape[0] != b or slots.shape[0] != b:
        raise ValueError(f"tokens, positions and slots must have one entry per row; got "
                         f"{b}, {positions.shape[0]}, {slots.shape[0]}")
    if b < 1:
        raise ValueError("empty batch: give at least one row")
    if b > max_batch:
        raise ValueError(f"batch of {b} rows is larger than the cache's max_batch="
                         f"{max_batch}; build the model with a larger max_batch")
    return b


def check_token_ids(lo: int, hi: int, vocab_size: int) -> None:
    """Token ids (their smallest ``lo`` and largest ``hi``) must lie in ``[0, vocab_size)``."""
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"token ids must lie in [0, {vocab_size}); got min {lo}, max {hi}; "
                         "map them into the model's vocabulary")


def check_positions(lo: int, hi: int, max_seq: int) -> None:
    """Cache positions (smallest ``lo``, largest ``hi``) must lie in ``[0, max_seq)``."""
    if lo < 0:
        raise ValueError(f"position {lo} is negative; positions count from 0 (the first token "
                         "of a sequence sits at position 0); give positions >= 0")
    if hi >= max_seq:
        raise ValueError(f"position {hi} is past the KV cache (max_seq={max_seq}); build the "
                         "model with a larger max_seq or generate fewer tokens")
