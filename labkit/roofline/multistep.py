"""Several decode steps in one CUDA graph: the argmax fed back on the device.

A server replaying one graph per step goes back to the host between steps. Here each step's
``argmax`` feeds the next and the positions advance on the device, so nothing is read back and
the loop captures once (:func:`capture_multistep`): one replay, ``n_steps`` tokens per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from labkit.checks import as_int
from labkit.graphs import CapturedGraph, capture_callable
from labkit.model import TinyGPT

__all__ = ["multistep_decode", "single_steps", "MultiStepGraph", "capture_multistep"]


def _check(model: TinyGPT, n_steps: int) -> int:
    if not isinstance(model, TinyGPT):
        raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}")
    return as_int(n_steps, "n_steps", minimum=1, maximum=model.cfg.max_seq,
                  fix="run at least one step and no more than the cache holds (max_seq)")


def _check_room(model: TinyGPT, positions: torch.Tensor, n_steps: int) -> None:
    """Host-side: every position written (``positions + 0 .. n_steps - 1``) fits the cache."""
    if positions.numel() and int(positions.max()) + n_steps > model.cfg.max_seq:
        raise ValueError(f"{n_steps} steps from position {int(positions.max())} write past the "
                         f"KV cache (max_seq={model.cfg.max_seq}); run fewer steps or build the "
                         "model with a larger max_seq")


@torch.no_grad()
def multistep_decode(model: TinyGPT, tokens: torch.Tensor, positions: torch.Tensor,
                     slots: torch.Tensor, n_steps: int, *,
                     out: torch.Tensor | None = None, advance: bool = True) -> torch.Tensor:
    """``n_steps`` greedy decode steps (inputs as for ``decode_step``), each argmax fed to the
    next on the device; the new tokens ``(B, n_steps)``, into ``out`` when given (a static
    buffer for capture). Capture-safe on CUDA; CPU inputs are checked first. ``advance=False``
    keeps every step at the same positions, as a one-step graph replayed ``n_steps`` times
    does (a measurement's control, not decoding: each step overwrites the last one's keys)."""
    n_steps = _check(model, n_steps)
    on_cpu = tokens.device.type == "cpu"
    if on_cpu:
        _check_room(model, positions, n_steps)
    b = tokens.shape[0]
    if out is not None and (out.shape != (b, n_steps) or out.dtype != torch.int64):
        raise ValueError(f"out must be an int64 tensor of shape ({b}, {n_steps}), got "
                         f"{out.dtype} {tuple(out.shape)}; allocate it with torch.empty(({b}, "
                         f"{n_steps}), dtype=torch.long, device=...)")
    steps = []
    t, p = tokens, positions
    for i in range(n_steps):
        t = model.decode_step(t, p, slots, check=on_cpu).argmax(-1)
        if out is not None:
            out[:, i].copy_(t)
        else:
            steps.append(t)
        if advance:
            p = p + 1
    return out if out is not None else torch.stack(steps, dim=1)


@torch.no_grad()
def single_steps(model: TinyGPT, tokens: torch.Tensor, positions: torch.Tensor,
                 slots: torch.Tensor, n_steps: int) -> torch.Tensor:
    """The reference: ``n_steps`` ``decode_step`` calls, each argmax read on the host."""
    n_steps = _check(model, n_steps)
    _check_room(model, positions.cpu(), n_steps)
    dev = tokens.device
    t, p = tokens, positions
    rows = []
    for _ in range(n_steps):
        ids = model.decode_step(t, p, slots).argmax(-1).tolist()  # host round trip
        rows.append(ids)
        t = torch.tensor(ids, device=dev)
        p = p + 1
    return torch.tensor(rows, dtype=torch.long).T.contiguous().to(dev)


@dataclass
class MultiStepGraph:
    """A captured :func:`multistep_decode` of one batch size: fill ``tokens``, ``positions``,
    ``slots`` (:meth:`load`), replay, read ``out`` ``(B, n_steps)``."""

    captured: CapturedGraph
    n_steps: int
    tokens: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    out: torch.Tensor

    def load(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> None:
        """Copy a batch into the static inputs (the same batch size as captured)."""
        if tokens.shape[0] != self.tokens.shape[0]:
            raise ValueError(f"this graph was captured for {self.tokens.shape[0]} rows, got "
                             f"{tokens.shape[0]}; capture one per batch size")
        self.tokens.copy_(tokens)
        self.positions.copy_(positions)
        self.slots.copy_(slots)

    def replay(self) -> torch.Tensor:
        """Run the ``n_steps`` steps; returns ``out`` (overwritten by the next replay)."""
        self.captured.graph.replay()
        return self.out

    def feed_back(self) -> None:
        """Make the last token of ``out`` the next replay's input (a device copy, no host)."""
        self.tokens.copy_(self.out[:, -1])


def capture_multistep(model: TinyGPT, batch_size: int, n_steps: int, *, pool=None,
                      warmup: int = 2, advance: bool = True) -> MultiStepGraph:
    """Capture ``n_steps`` decode steps of ``batch_size`` rows in one CUDA graph
    (``advance``: as :func:`multistep_decode`)."""
    n_steps = _check(model, n_steps)
    batch_size = as_int(batch_size, "batch_size", minimum=1, maximum=model.cfg.max_batch,
                        fix="capture a batch size the cache holds (<= max_batch)")
    if model.device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError("capture_multistep needs the model on a CUDA GPU (model is on "
                           f"{model.device}); on CPU call multistep_decode eagerly")
    dev = model.device
    tokens = torch.zeros(batch_size, dtype=torch.long, device=dev)
    positions = torch.zeros(batch_size, dtype=torch.long, device=dev)
    slots = torch.full((batch_size,), model.cfg.scratch_slot, dtype=torch.long, device=dev)
    out = torch.zeros((batch_size, n_steps), dtype=torch.long, device=dev)

    def run(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        return multistep_decode(model, t, p, s, n_steps, out=o, advance=advance)

    with torch.no_grad():
        captured = capture_callable(run, tokens, positions, slots, out, pool=pool,
                                    warmup=warmup, label=(batch_size, n_steps))
    return MultiStepGraph(captured, n_steps, tokens, positions, slots, out)
