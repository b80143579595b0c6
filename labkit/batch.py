"""The static batch: the buffers every captured graph of one model reads, and the only code that
writes them (vLLM keeps them apart from capture too: ``InputBatch``/``BlockTable`` in
``vllm/v1/worker`` stage inputs; ``CUDAGraphWrapper`` "does not store persistent buffers or copy
any runtime inputs"). Tokens, positions and slots are the rows of one ``(3, max_batch)`` int64
buffer; the logits lie outside every graph pool. A row that holds no request holds the *pad
row* (token 0, position 0, the scratch slot). Host metadata goes through a ring of
:data:`STAGING_RING` pinned buffers, each with an event, so the host prepares the next steps
while the GPU runs earlier ones (with one buffer the H200 doubled the small model's step).
"""

from __future__ import annotations

import torch

from labkit.model import TinyGPT

#: staging buffers for host metadata: how many steps the host may run ahead of the GPU
STAGING_RING = 4


def _copy(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
    """``dst[i].copy_(src[i])`` for all ``i``: one ``_foreach_copy_`` when the pairs allow it."""
    if all(s.device == d.device and s.dtype == d.dtype for s, d in zip(src, dst)):
        torch._foreach_copy_(dst, src)
    else:
        for d, s in zip(dst, src):
            d.copy_(s, non_blocking=True)


class StaticBatch:
    """The static inputs of one model's graphs (``max_batch`` rows) and, with ``logits_rows``,
    the static logits ``(logits_rows, vocab)`` the graphs write. ``stage``: send host metadata
    through the staging ring (``None``: when on a GPU). ``rows``: rows other than ``max_batch``
    (a token-flattened step's tokens, :mod:`labkit.mixed`)."""

    def __init__(self, model: TinyGPT, logits_rows: int = 0, stage: bool | None = None,
                 rows: int | None = None) -> None:
        cfg, dev = model.cfg, model.device
        n = rows or cfg.max_batch
        self.stage = dev.type == "cuda" if stage is None else stage
        #: the pad row, once per column: token 0, position 0, the scratch slot (on the host)
        self.pad = torch.tensor([0, 0, cfg.scratch_slot]).repeat_interleave(n).view(3, n)
        self.inputs = self.pad.to(dev, copy=True)
        self._pad = self.inputs.clone()  # the pad rows on the device: one copy resets rows
        self.logits = (torch.empty((logits_rows, cfg.vocab_size), dtype=cfg.torch_dtype,
                                   device=dev) if logits_rows else None)
        self._ring: list[torch.Tensor] = []  # made at the first staged load
        self._staged: list[torch.cuda.Event | None] = []
        self._ring_rows = [0] * STAGING_RING  # rows [0, k) of each staging buffer are live
        self._next = 0
        self._live = 0  # device rows [0, _live) may differ from the pad row

    @property
    def tokens(self) -> torch.Tensor:
        return self.inputs[0]

    @property
    def positions(self) -> torch.Tensor:
        return self.inputs[1]

    @property
    def slots(self) -> torch.Tensor:
        return self.inputs[2]

    def view(self, rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The first ``rows`` rows: (tokens, positions, slots) as a graph of ``rows`` reads them."""
        return self.inputs[0, :rows], self.inputs[1, :rows], self.inputs[2, :rows]

    def load(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> int:
        """Copy a checked batch of ``b`` rows into rows ``0..b-1`` (rows past it: the pad row);
        host metadata for a GPU is staged, device metadata copied directly. Returns ``b``."""
        b = tokens.shape[0]
        if self.stage and positions.device.type == "cpu" and slots.device.type == "cpu":
            self._stage(tokens, positions, slots, b)
        else:
            _copy(list(self.inputs[:, :b]), [tokens, positions, slots])
            if self._live > b:
                self.inputs[:, b:self._live].copy_(self._pad[:, b:self._live])
        self._live = b
        return b

    def _stage(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
               b: int) -> None:
        """Fill the next staging buffer of the ring (rows past ``b``: the pad row) and copy it
        in at once; tokens on the GPU (the last step's argmax) are copied on their own."""
        if not self._ring:
            pin = self.inputs.is_cuda
            self._ring = [self.pad.clone().pin_memory() if pin else self.pad.clone()
                          for _ in range(STAGING_RING)]
            self._staged = [torch.cuda.Event() if pin else None for _ in range(STAGING_RING)]
        k = self._next
        self._next = (k + 1) % STAGING_RING
        st, event = self._ring[k], self._staged[k]
        if event is not None:
            event.synchronize()  # the copy that last read this buffer is done
        host_tokens = tokens.device.type == "cpu"
        rows = 0 if host_tokens else 1
        _copy([st[r, :b] for r in range(rows, 3)], [tokens, positions, slots][rows:])
        if self._ring_rows[k] > b:  # rows a larger batch left here: back to the pad row
            st[:, b:self._ring_rows[k]].copy_(self.pad[:, b:self._ring_rows[k]])
        self._ring_rows[k] = b
        self.inputs[rows:].copy_(st[rows:], non_blocking=True)
        if not host_tokens:
            self.inputs[0, :b].copy_(tokens, non_blocking=True)
            if self._live > b:
                self.inputs[0, b:self._live].copy_(self._pad[0, b:self._live])
        if event is not None:
            event.record()
