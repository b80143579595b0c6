"""The checks of the decode engine's public edge, in one place: a decode batch (kinds, dtypes,
devices and shapes, safe during capture; then values, read on the host), the capture sizes and
the named choices. What the edge calls inside takes checked values.

``check`` means one thing wherever a step takes it (:meth:`labkit.model.TinyGPT.decode_step`,
:meth:`labkit.runner.PaddingDispatcher.step`): kinds and shapes are always checked; values
with ``True`` (read on the host: a sync for device tensors, refused during capture), with
``None`` only when they are on the host already (no sync), never with ``False`` (the caller
vouches for the batch, as graph capture and benchmarks of the replay path do).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

import torch

from labkit.checks import as_int, as_size_list

Check = bool | None
S = TypeVar("S", bound=str)


def check_choice(value: object, name: str, choices: Sequence[S]) -> S:
    """``value`` if it is one of ``choices``; else ``ValueError`` listing them."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value  # type: ignore[return-value]


def check_capture_sizes(sizes: Iterable[int], max_batch: int | None = None) -> list[int]:
    """The capture sizes, sorted; an error when the list is empty, an entry is not a positive
    ``int`` (``2.5``, ``"3"``, ``True`` are refused), a size repeats or exceeds ``max_batch``."""
    if max_batch is not None:
        max_batch = as_int(max_batch, "max_batch", minimum=1)
    out = sorted(as_size_list(sizes, "capture sizes", distinct=True,
                              fix="capture sizes are positive batch sizes such as [1, 2, 4, 8]"))
    if max_batch is not None and out[-1] > max_batch:
        raise ValueError(f"capture size {out[-1]} is larger than the model's max_batch="
                         f"{max_batch}; lower the sizes or build the model with a larger "
                         "max_batch")
    return out


def check_slots(slots: Sequence[int], max_batch: int) -> None:
    """Refuse host-side cache slots of one batch outside ``[0, max_batch)`` (``max_batch`` is
    the scratch slot) or repeated (two rows writing one slot overwrite each other's cache)."""
    slots = list(slots)
    if len(set(slots)) == len(slots) and all(0 <= x < max_batch for x in slots):
        return
    bad = [x for x in slots if not 0 <= x < max_batch]
    if bad:
        why = (f" (slot {max_batch} is the scratch slot that padded rows write, never a live "
               "request's)") if max_batch in bad else ""
        raise ValueError(f"cache slots must lie in [0, {max_batch}){why}; got slots={slots}; "
                         f"give each request its own slot below max_batch={max_batch}")
    dup = sorted({x for x in slots if slots.count(x) > 1})
    raise ValueError(f"cache slot(s) {dup} appear more than once in slots={slots}: rows "
                     "sharing a slot overwrite each other's KV cache; give every row of a "
                     "batch a distinct slot")


def check_id_tensor(name: str, t: object, ndim: int, device: torch.device, *,
                    host_ok: bool = False) -> None:
    """``t`` must be an int64/int32 tensor with ``ndim`` dimensions on ``device`` (with
    ``host_ok`` also on the CPU or another device of that type: metadata to copy in)."""
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


def host_values(tensors: Sequence[torch.Tensor]) -> list[list[int]]:
    """The values of small 1-D integer tensors as lists, with at most one device-to-host copy
    (one host sync) for those not on the CPU."""
    on_dev = [t for t in tensors if t.device.type != "cpu"]
    parts = iter(torch.cat([t.long() for t in on_dev]).cpu().split(
        [t.shape[0] for t in on_dev])) if on_dev else iter(())
    return [t.tolist() if t.device.type == "cpu" else next(parts).tolist() for t in tensors]


def check_batch(tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, *,
                device: torch.device, vocab_size: int, max_batch: int, max_seq: int,
                check: Check, host_ok: bool = False, who: str = "the step"
                ) -> tuple[int, list[list[int]] | None]:
    """All the checks of one decode batch (``check`` as in the module docstring): kinds,
    dtypes, devices and shapes (1-D, one entry per row, 1 to ``max_batch`` rows), then values;
    raises before anything is written. Returns the batch size and the values read (tokens,
    positions, slots as lists; ``None`` when values were not checked)."""
    if check is not None and not isinstance(check, bool):
        raise TypeError(f"check must be True, False or None, got {check!r}; pass True to "
                        "check values, None for host values only, False to skip")
    host = (tokens, positions, slots)
    for name, t in zip(("tokens", "positions", "slots"), host):
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
    if check is False or (check is None and any(t.device.type != "cpu" for t in host)):
        return b, None
    if any(t.is_cuda for t in host) and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"{who} with check=True reads values on the host, which a CUDA "
                           "graph capture forbids; capture with check=False and check the "
                           "batch before copying it into the static buffers")
    tok, pos, slo = host_values(host)
    check_token_ids(min(tok), max(tok), vocab_size)
    check_positions(min(pos), max(pos), max_seq)
    check_slots(slo, max_batch)
    return b, [tok, pos, slo]
