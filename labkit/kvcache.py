"""The KV cache, apart from the model (as gpt-fast keeps its ``KVCache``): two layouts, one
interface, each holding ``num_slots = max_batch + 1`` slots: the live ones and the *scratch
slot* ``max_batch`` that padded rows write. :class:`SlotKVCache`: one row of ``max_seq``
positions per slot. :class:`PagedKVCache`: blocks of one pool and a block table per slot
(vLLM's ``BlockTable``, ``vllm/v1/worker/block_table.py``); block 0 is the *pad block* that
entries owning nothing point at (the idea of vLLM's ``PAD_SLOT_ID``). A step's metadata is a
:class:`StepMeta` of device tensors shaped by the batch size only (capture-safe).

The slot layout on CUDA is read **in place** by PyTorch's memory-efficient kernel
(``aten::_efficient_attention_forward``, or FlashAttention 2's with ``kernel="flash"``) over
the flattened layer, row keys from ``slot * max_seq`` (``cu_seqlens_k``), ``pos + 1`` of them:
on an H200 capture-safe and bitwise equal to the gathered reference in float32. The paged
layout, and CPU, run the plain-math reference over gathered rows (paging in plain PyTorch buys
memory, not speed: vLLM's FlashAttention / FlashInfer backends read the block table).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn

from labkit.checks import as_int
from labkit.step_checks import check_choice

Layout = Literal["slot", "paged"]
LAYOUTS: tuple[Layout, ...] = ("slot", "paged")
PAD_BLOCK = 0
AttentionKernel = Literal["efficient", "flash"]
ATTENTION_KERNELS: tuple[AttentionKernel, ...] = ("efficient", "flash")


def flash_supported(dtype: torch.dtype, head_dim: int) -> bool:
    """Whether PyTorch's FlashAttention kernel takes ``dtype`` (fp16/bf16) and ``head_dim`` (a
    multiple of 8 up to 256)."""
    return dtype in (torch.float16, torch.bfloat16) and head_dim % 8 == 0 and head_dim <= 256


class CacheFullError(RuntimeError):
    """No free block is left in the paged cache's pool."""


@dataclass
class StepMeta:
    """One step's metadata on the device, per token: ``positions``, ``slots`` (T,) int64 (the
    request's slot), ``write_index`` (T,) int64 (the token's new k/v in the layer viewed as
    ``(-1, heads, head_dim)``: vLLM's ``slot_mapping``); per request: ``seq_lens`` (R,) int32
    (its last position + 1), ``key_start`` (R+1,) int32 (its first key, slot layout; the last
    entry ends the cache), ``query_start`` (R+1,) int32 (its first token: vLLM's
    ``query_start_loc``). A decode step has one token per request: T = R."""

    positions: torch.Tensor
    slots: torch.Tensor
    write_index: torch.Tensor
    seq_lens: torch.Tensor
    key_start: torch.Tensor
    query_start: torch.Tensor


class BlockAllocator:
    """Hands out the blocks ``1..num_blocks-1`` of a paged cache on the host (never block 0, the
    pad block); one allocator belongs to one engine loop (not thread-safe)."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, 0, -1))  # pop() gives 1, 2, 3, ...

    @property
    def free(self) -> int:
        """Blocks not handed out."""
        return len(self._free)

    @property
    def used(self) -> int:
        return self.num_blocks - 1 - len(self._free)

    def allocate(self, n: int) -> list[int]:
        """``n`` free blocks, or :class:`CacheFullError` (nothing is taken then)."""
        if n > len(self._free):
            raise CacheFullError(
                f"the paged KV cache needs {n} more block(s) but only {len(self._free)} of "
                f"{self.num_blocks - 1} are free; finish or release requests first, or build "
                "the cache with more blocks (num_blocks)")
        return [self._free.pop() for _ in range(n)]

    def release(self, blocks: Sequence[int]) -> None:
        """Give blocks back; a block that is not handed out is an error (double free)."""
        blocks = list(blocks)
        held = set(range(1, self.num_blocks)) - set(self._free)
        bad = [b for b in blocks if b not in held]
        if bad or len(set(blocks)) != len(blocks):
            raise ValueError(f"blocks {bad or blocks} are not handed out (double free?)")
        self._free.extend(reversed(blocks))


class KVCache(nn.Module):
    """The common interface: ``max_batch`` live slots plus the scratch slot, ``max_seq``
    positions each, ``layers`` layers of ``heads x head_dim`` keys and values."""

    layout: Layout
    kv: torch.Tensor
    _arange: torch.Tensor

    def __init__(self, layers: int, max_batch: int, max_seq: int, heads: int, head_dim: int,
                 dtype: torch.dtype) -> None:
        super().__init__()
        self.layers, self.max_batch, self.max_seq = layers, max_batch, max_seq
        self.heads, self.head_dim, self.dtype = heads, head_dim, dtype
        #: slots the cache holds: the live ones and the scratch slot
        self.num_slots = max_batch + 1
        #: the slot padded rows write to, never a live request's
        self.scratch_slot = max_batch
        self.register_buffer("_arange", torch.arange(max_seq), persistent=False)

    def _allocate(self, shape: tuple[int, ...]) -> None:
        """Keys and values in ONE buffer ``kv`` ``(2, *shape)``: one indexed copy writes both."""
        self.register_buffer("kv", torch.zeros((2, *shape), dtype=self.dtype),
                             persistent=False)

    @property
    def k(self) -> torch.Tensor:
        return self.kv[0]

    @property
    def v(self) -> torch.Tensor:
        return self.kv[1]

    def write_index(self, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Flat index of each (slot, position) in a layer's cache viewed as
        ``(-1, heads, head_dim)``."""
        raise NotImplementedError

    def gathered(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of ``slots``, ``(B, max_seq, heads, head_dim)`` each (a copy)."""
        raise NotImplementedError

    def reserve(self, slot: int, n_tokens: int) -> None:
        """Make room for positions ``0..n_tokens-1`` of ``slot`` (host side)."""

    def release(self, slot: int) -> None:
        """Free what ``slot`` holds (host side)."""

    def capacity(self, slot: int) -> int:
        """Positions of ``slot`` that may be written (host side)."""
        return self.max_seq

    def _in_place(self, layer: int, q: torch.Tensor, meta: StepMeta,
                  kernel: AttentionKernel, max_query: int) -> torch.Tensor | None:
        """Attention read in place, or ``None`` where this cache cannot (the reference runs)."""
        return None

    def reset(self) -> None:
        """Zero every key and value."""
        self.kv.zero_()

    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def flat_kv(self, layer: int) -> torch.Tensor:
        """The layer's keys and values together, ``(2, -1, heads, head_dim)`` (no copy)."""
        return self.kv[:, layer].view(2, -1, self.heads, self.head_dim)

    def flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's keys and values viewed as ``(-1, heads, head_dim)`` each (no copy)."""
        kv = self.flat_kv(layer)
        return kv[0], kv[1]

    def step_meta(self, positions: torch.Tensor, slots: torch.Tensor,
                  query_len: int = 1) -> StepMeta:
        """A uniform step's metadata from per-token positions and slots on one device: each
        request ``query_len`` consecutive tokens (decode 1, speculative verify ``1 + k``). A few
        tiny kernels, no host sync, shapes set by the token count: capture-safe."""
        q = query_len
        return self._meta(positions, slots, slice(q - 1, None, q), torch.arange(
            0, positions.shape[0] + 1, q, device=positions.device, dtype=torch.int32))

    def mixed_meta(self, positions: torch.Tensor, slots: torch.Tensor,
                   query_lens: Sequence[int]) -> StepMeta:
        """A mixed step's metadata: request ``r`` holds the next ``query_lens[r]`` tokens
        (host ints). Its query starts go host to device each step, as vLLM's attention
        metadata builders (``vllm/v1/attention/backends/utils.py``, ``query_start_loc``) do."""
        query_start = torch.tensor([0, *itertools.accumulate(query_lens)], dtype=torch.int32)
        if positions.is_cuda:  # from pinned memory: no wait for the GPU
            query_start = query_start.pin_memory().to(positions.device, non_blocking=True)
        return self._meta(positions, slots, (query_start[1:] - 1).long(), query_start)

    def _meta(self, positions: torch.Tensor, slots: torch.Tensor, last: slice | torch.Tensor,
              query_start: torch.Tensor) -> StepMeta:
        """The metadata of tokens at ``positions`` of ``slots``, requests ending at ``last``."""
        key_start = torch.cat([slots[last] * self.max_seq,
                               slots.new_full((1,), self.num_slots * self.max_seq)])
        return StepMeta(positions=positions, slots=slots,
                        write_index=self.write_index(positions, slots),
                        seq_lens=(positions[last] + 1).to(torch.int32),
                        key_start=key_start.to(torch.int32), query_start=query_start)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, meta: StepMeta) -> None:
        """Store this step's ``k``, ``v`` ``(B, heads, head_dim)`` at each row's position."""
        kf, vf = self.flat(layer)
        kf.index_copy_(0, meta.write_index, k)
        vf.index_copy_(0, meta.write_index, v)

    def write_kv(self, layer: int, kv: torch.Tensor, meta: StepMeta) -> None:
        """:meth:`write` of ``kv`` ``(2, B, heads, head_dim)`` in ONE indexed copy (the fused
        step's; ``index_put_`` by (slot, position) was slower on an H200)."""
        self.flat_kv(layer).index_copy_(1, meta.write_index, kv)

    def attend(self, layer: int, q: torch.Tensor, meta: StepMeta,
               kernel: AttentionKernel = "efficient", max_query: int = 1) -> torch.Tensor:
        """Each token's query ``(T, heads, head_dim)`` over its request's positions ``0..pos``
        (causal inside a request; ``max_query``, the longest request, shapes the kernel's launch),
        read in place where the cache can (``kernel``), else the reference over gathered keys."""
        check_choice(kernel, "kernel", ATTENTION_KERNELS)
        out = self._in_place(layer, q, meta, kernel, max_query)
        if out is not None:
            return out
        keys, values = self.gathered(layer, meta.slots)  # (T, max_seq, H, hd)
        mask = (self._arange[None, :] <= meta.positions[:, None])[:, None, None, :]
        y = F.scaled_dot_product_attention(q[:, :, None], keys.transpose(1, 2),
                                           values.transpose(1, 2), attn_mask=mask)
        return y[:, :, 0]

    def write_prefill(self, layer: int, k: torch.Tensor, v: torch.Tensor,
                      slots: torch.Tensor) -> None:
        """Store a prompt's ``k``, ``v`` ``(B, T, heads, head_dim)`` at positions 0..T-1."""
        b, t = k.shape[:2]
        pos = self._arange[:t].expand(b, t).reshape(-1)
        idx = self.write_index(pos, slots.repeat_interleave(t))
        kf, vf = self.flat(layer)
        kf.index_copy_(0, idx, k.reshape(b * t, self.heads, self.head_dim))
        vf.index_copy_(0, idx, v.reshape(b * t, self.heads, self.head_dim))


class SlotKVCache(KVCache):
    """``(layers, num_slots, max_seq, heads, head_dim)``: one row per slot, read in place
    on CUDA (``in_place=False``: the gathered reference everywhere)."""

    layout: Layout = "slot"

    def __init__(self, layers: int, max_batch: int, max_seq: int, heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, *, in_place: bool = True) -> None:
        super().__init__(layers, max_batch, max_seq, heads, head_dim, dtype)
        self._allocate((layers, self.num_slots, max_seq, heads, head_dim))
        self.in_place = in_place

    def write_index(self, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """``slots * max_seq + positions`` as int64, what ``index_copy_`` takes, for int32
        metadata too (the paged index is int64 through its block table); int64: one kernel."""
        return torch.add(positions.long(), slots, alpha=self.max_seq)

    def gathered(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[layer][slots], self.v[layer][slots]

    def _in_place(self, layer: int, q: torch.Tensor, meta: StepMeta,
                  kernel: AttentionKernel, max_query: int) -> torch.Tensor | None:
        """On CUDA with head_dim a multiple of 8 (the efficient kernel's rule) only. Several
        queries per request: causal from the bottom right (query ``i`` of ``n`` over
        ``seq_len - n + i + 1`` keys), FlashAttention's alignment."""
        if not (self.in_place and q.is_cuda and self.head_dim % 8 == 0):
            return None
        kf, vf = self.flat(layer)
        scale = 1.0 / math.sqrt(self.head_dim)
        causal = max_query > 1
        if kernel == "flash" and flash_supported(q.dtype, self.head_dim):
            # cu_seqlens_k = each request's first key, seqused_k = how many of them it attends
            out: Any = torch.ops.aten._flash_attention_forward(
                q, kf, vf, meta.query_start, meta.key_start, max_query, self.max_seq, 0.0,
                causal, False, scale=scale, seqused_k=meta.seq_lens)
            return cast(torch.Tensor, out[0])
        out = torch.ops.aten._efficient_attention_forward(
            q[None], kf[None], vf[None], None, meta.query_start, meta.key_start, max_query,
            self.max_seq, 0.0, 2 if causal else 0, False, scale=scale, seqlen_k=meta.seq_lens)
        return cast(torch.Tensor, out[0][0])


class PagedKVCache(KVCache):
    """Blocks of ``block_size`` positions in one pool ``(layers, num_blocks, block_size, heads,
    head_dim)``; a block table maps each slot's blocks to pool blocks, twice as in vLLM: a host
    copy :meth:`reserve` and :meth:`release` edit, and a device copy the step reads."""

    layout: Layout = "paged"
    block_table: torch.Tensor

    def __init__(self, layers: int, max_batch: int, max_seq: int, heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, *, block_size: int = 16,
                 num_blocks: int | None = None) -> None:
        super().__init__(layers, max_batch, max_seq, heads, head_dim, dtype)
        self.block_size = block_size
        self.max_blocks = max_seq // block_size
        self.num_blocks = num_blocks or max_batch * self.max_blocks + 1
        self.allocator = BlockAllocator(self.num_blocks)
        self._allocate((layers, self.num_blocks, block_size, heads, head_dim))
        self.host_table = torch.full((self.num_slots, self.max_blocks), PAD_BLOCK,
                                     dtype=torch.int64)
        self.register_buffer("block_table", self.host_table.clone(), persistent=False)
        self._owned: dict[int, list[int]] = {}

    def capacity(self, slot: int) -> int:
        return len(self._owned.get(slot, ())) * self.block_size

    def blocks_of(self, slot: int) -> list[int]:
        return list(self._owned.get(slot, ()))

    def reserve(self, slot: int, n_tokens: int) -> None:
        if not 0 <= slot < self.max_batch:
            raise ValueError(f"slot {slot} is not a request slot: use 0..{self.max_batch - 1}")
        if n_tokens > self.max_seq:
            raise ValueError(f"{n_tokens} positions do not fit max_seq={self.max_seq}")
        have = self._owned.setdefault(slot, [])
        need = -(-n_tokens // self.block_size) - len(have)
        if need <= 0:
            return
        new = self.allocator.allocate(need)
        self.host_table[slot, len(have):len(have) + need] = torch.tensor(new)
        have.extend(new)
        self.block_table.copy_(self.host_table)

    def release(self, slot: int) -> None:
        blocks = self._owned.pop(slot, [])
        if blocks:
            self.allocator.release(blocks)
            self.host_table[slot] = PAD_BLOCK
            self.block_table.copy_(self.host_table)

    def write_index(self, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        block = self.block_table[slots, positions // self.block_size]
        return block * self.block_size + positions % self.block_size

    def gathered(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        table = self.block_table[slots]  # (B, max_blocks)
        shape = (slots.shape[0], self.max_seq, self.heads, self.head_dim)
        return self.k[layer][table].view(shape), self.v[layer][table].view(shape)


class CacheConfig(Protocol):
    """What :func:`cache_for_config` reads from a model config (a ``labkit.model.GPTConfig``)."""

    kv_layout: str
    n_layer: int
    max_batch: int
    max_seq: int
    n_head: int
    block_size: int
    num_blocks: int | None

    @property
    def head_dim(self) -> int: ...


def cache_for_config(cfg: CacheConfig, heads: int | None = None) -> KVCache:
    """The float32 CPU cache a model of (checked) config ``cfg`` decodes into, with ``heads``
    heads (default ``cfg.n_head``; a tensor-parallel rank passes its share)."""
    if heads is not None:
        heads = as_int(heads, "heads", minimum=1, maximum=cfg.n_head,
                       fix=f"give the heads this cache holds, 1 to n_head={cfg.n_head}")
    shape = (cfg.n_layer, cfg.max_batch, cfg.max_seq, cfg.n_head if heads is None else heads,
             cfg.head_dim)
    if cfg.kv_layout == "paged":
        return PagedKVCache(*shape, block_size=cfg.block_size, num_blocks=cfg.num_blocks)
    return SlotKVCache(*shape)
