"""The padding dispatcher: serve any batch size from a few captured graphs.

For a batch of ``b`` rows it looks up the smallest captured size ``p >= b`` in a precomputed
table, copies the inputs into persistent buffers, points the ``p - b`` padded rows at the
model's scratch cache slot, replays graph ``p`` and returns the first ``b`` rows of logits.
Batches above the largest captured size run eager (counted, never an error while the cache
has room). On a machine without CUDA the same bucketing runs with eager execution, so the
logic is tested everywhere.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, Sequence

import torch

from labkit.graphs import GraphSet, Order, PoolMode, capture_decode_graphs, check_capture_sizes
from labkit.model import TinyGPT
from labkit.sizes import padding_table

Mode = Literal["graph", "eager"]


def build_padding_table(sizes: Sequence[int], max_bs: int) -> list[int]:
    """``table[b]`` = smallest size in ``sizes`` that is >= ``b``, or 0 (run eager)."""
    return padding_table(check_capture_sizes(sizes), max_bs)


@dataclass
class DispatchCounters:
    """What the dispatcher did: graph hits per captured size, eager fallbacks, padded rows."""

    graph_hits: dict[int, int] = field(default_factory=dict)
    eager_fallbacks: int = 0
    padded_rows: int = 0
    real_rows: int = 0
    steps: int = 0

    @property
    def hit_rate(self) -> float:
        """Share of steps served by a graph."""
        return sum(self.graph_hits.values()) / self.steps if self.steps else 0.0

    @property
    def waste(self) -> float:
        """Padded rows as a share of all rows computed."""
        total = self.padded_rows + self.real_rows
        return self.padded_rows / total if total else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["graph_hits"] = {str(k): v for k, v in sorted(self.graph_hits.items())}
        d.update(hit_rate=self.hit_rate, waste=self.waste)
        return d


class PaddingDispatcher:
    """Route each decode step to the smallest captured graph that fits, padding the rest.

    ``mode='graph'`` (default on CUDA) captures one graph per size; ``mode='eager'`` (default
    on CPU) runs the same padded batches eagerly. ``copy_outputs=True`` returns a fresh
    tensor each step; with ``False`` the result is a view of the graph's static output that
    the next step overwrites (faster, but hold on to it at your own risk).
    """

    def __init__(self, model: TinyGPT, capture_sizes: Sequence[int], *, mode: Mode | None = None,
                 pool: PoolMode = "shared", order: Order = "largest_first",
                 copy_outputs: bool = True, warmup: int = 3, progress: bool | None = None,
                 graphs: GraphSet | None = None) -> None:
        self.model = model
        cfg = model.cfg
        self.sizes = check_capture_sizes(capture_sizes, cfg.max_batch)
        if mode is None:
            mode = "graph" if model.device.type == "cuda" else "eager"
        if mode == "graph" and model.device.type != "cuda":
            raise RuntimeError(f"mode='graph' needs the model on a CUDA GPU (it is on "
                               f"{model.device}); use mode='eager' to run the same bucketing")
        if mode not in ("graph", "eager"):
            raise ValueError(f"mode must be 'graph' or 'eager', got {mode!r}")
        self.mode: Mode = mode
        self.copy_outputs = copy_outputs
        self.table = build_padding_table(self.sizes, cfg.max_batch)
        self.counters = DispatchCounters()
        self._dirty = 0  # rows [0, _dirty) of the slot buffer may hold live slots
        if mode == "graph":
            self.graphs = graphs or capture_decode_graphs(model, self.sizes, pool=pool,
                                                          order=order, warmup=warmup,
                                                          progress=progress)
            if graphs is not None and sorted(graphs.graphs) != self.sizes:
                raise ValueError(f"graphs were captured for {graphs.sizes}, not {self.sizes}")
            self._tokens, self._positions, self._slots = (self.graphs.tokens,
                                                          self.graphs.positions,
                                                          self.graphs.slots)
        else:
            self.graphs = None
            n, dev = self.sizes[-1], model.device
            self._tokens = torch.zeros(n, dtype=torch.long, device=dev)
            self._positions = torch.zeros(n, dtype=torch.long, device=dev)
            self._slots = torch.full((n,), cfg.scratch_slot, dtype=torch.long, device=dev)
        self._foreach_copy = getattr(torch, "_foreach_copy_", None)

    # ------------------------------------------------------------------ lookup
    def padded_size(self, bs: int) -> int | None:
        """The graph size a batch of ``bs`` rows runs in, or ``None`` for eager."""
        if bs < 1:
            raise ValueError(f"batch size must be >= 1, got {bs}")
        p = self.table[bs] if bs < len(self.table) else 0
        return p or None

    def describe(self) -> list[dict]:
        """The padding table as rows: batch size, padded size (None = eager), padded rows."""
        rows = []
        for b in range(1, len(self.table)):
            p = self.table[b] or None
            rows.append({"batch": b, "padded_to": p, "padded_rows": (p - b) if p else 0})
        return rows

    def reset_counters(self) -> None:
        self.counters = DispatchCounters()

    # ------------------------------------------------------------------ the step
    def _validate(self, tokens: torch.Tensor, positions: torch.Tensor,
                  slots: torch.Tensor) -> int:
        m = self.model
        for name, t in (("tokens", tokens), ("positions", positions), ("slots", slots)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.dim() != 1:
                raise ValueError(f"{name} must be 1-D (one entry per row), got {tuple(t.shape)}")
            if t.dtype not in (torch.int64, torch.int32):
                raise TypeError(f"{name} has dtype {t.dtype}; use integer ids (torch.long)")
            if t.device.type not in ("cpu", m.device.type):
                raise ValueError(f"{name} is on {t.device}, the model on {m.device}; move it")
        b = tokens.shape[0]
        if positions.shape[0] != b or slots.shape[0] != b:
            raise ValueError(f"tokens, positions, slots need one entry per row; got {b}, "
                             f"{positions.shape[0]}, {slots.shape[0]}")
        if b < 1:
            raise ValueError("empty batch: give at least one row")
        if b > m.cfg.max_batch:
            raise ValueError(
                f"batch of {b} rows is larger than the KV cache's max_batch={m.cfg.max_batch} "
                f"(largest graph: {self.sizes[-1]}); build the model with max_batch >= {b}")
        if slots.device.type == "cpu":  # cheap host-side value checks
            if int(slots.min()) < 0 or int(slots.max()) >= m.cfg.max_batch:
                raise ValueError(f"slots must lie in [0, {m.cfg.max_batch}); slot "
                                 f"{m.cfg.scratch_slot} is the padding scratch slot")
            if int(positions.min()) < 0 or int(positions.max()) >= m.cfg.max_seq:
                raise ValueError(f"position {int(positions.max())} is past the KV cache "
                                 f"(max_seq={m.cfg.max_seq}); raise max_seq or stop earlier")
            if int(tokens.min()) < 0 or int(tokens.max()) >= m.cfg.vocab_size:
                raise ValueError(f"token ids must lie in [0, {m.cfg.vocab_size})")
        return b

    def load_inputs(self, tokens: torch.Tensor, positions: torch.Tensor,
                    slots: torch.Tensor) -> int:
        """Copy a batch into the persistent buffers, point padded rows at the scratch slot,
        and return the padded size (0 when the batch is above the largest graph)."""
        b = self._validate(tokens, positions, slots)
        p = self.table[b]
        if p == 0:
            return 0
        dst = (self._tokens[:b], self._positions[:b], self._slots[:b])
        src = (tokens, positions, slots)
        if self._foreach_copy is not None and tokens.device == self._tokens.device:
            self._foreach_copy(dst, src)
        else:
            for d, s in zip(dst, src):
                d.copy_(s, non_blocking=True)
        if self._dirty > b:  # rows a larger batch left behind must not point at live slots
            self._slots[b:self._dirty].fill_(self.model.cfg.scratch_slot)
        self._dirty = b
        return p

    def step(self, tokens: torch.Tensor, positions: torch.Tensor,
             slots: torch.Tensor) -> torch.Tensor:
        """Logits ``(b, V)`` for one decode step of ``b`` rows; same contract as
        :meth:`TinyGPT.decode_step`."""
        p = self.load_inputs(tokens, positions, slots)
        b = tokens.shape[0]
        c = self.counters
        c.steps += 1
        c.real_rows += b
        if p == 0:  # above the largest graph: eager, counted
            c.eager_fallbacks += 1
            return self.model.decode_step(tokens, positions, slots)
        c.graph_hits[p] = c.graph_hits.get(p, 0) + 1
        c.padded_rows += p - b
        if self.graphs is not None:
            out = self.graphs.replay(p)
        else:
            out = self.model.decode_step(self._tokens[:p], self._positions[:p],
                                         self._slots[:p], check=False)
        out = out[:b]
        return out.clone() if self.copy_outputs else out

    __call__ = step

    def release(self) -> None:
        """Free the captured graphs (eager mode: nothing to free)."""
        if self.graphs is not None:
            self.graphs.release()
