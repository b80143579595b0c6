"""The KV cache, kept apart from the model (as gpt-fast keeps its ``KVCache``): two layouts
behind one interface.

* :class:`SlotKVCache` -- one row of ``max_seq`` positions per request slot, shape
  ``(layers, slots, max_seq, heads, head_dim)``. Slot ``max_batch`` is the *scratch* slot that
  padded rows write to.
* :class:`PagedKVCache` -- fixed-size blocks in one pool, shape
  ``(layers, blocks, block_size, heads, head_dim)``, and a block table
  ``(slots, max_blocks_per_seq)`` saying which blocks hold a slot's positions (vLLM's
  ``BlockTable``, ``vllm/v1/worker/block_table.py``). Block 0 is the *pad block*: rows of the
  table that own nothing point at it, so a padded row or an unreserved position writes there
  and never into a live request's blocks (the idea of vLLM's ``PAD_SLOT_ID``). Blocks are
  handed out on the host by a :class:`BlockAllocator`.

Both take one step's batch metadata as a :class:`StepMeta` of device tensors whose shapes
depend on the batch size only, so a step that uses them can be captured in a CUDA graph:
:meth:`KVCache.write` stores this step's k and v, :meth:`KVCache.attend` attends each row over
its own positions ``0..pos``.

How the cache is read (no copy of a whole row per layer):

* slot layout on CUDA: the cache is read **in place** by PyTorch's memory-efficient attention
  kernel (``aten::_efficient_attention_forward``) with the layer's cache flattened to
  ``(slots * max_seq, heads, head_dim)``, each row's keys starting at ``slot * max_seq``
  (``cu_seqlens_k``) and ``pos + 1`` of them used (``seqlen_k``). Measured on an H200 (torch
  2.11): capture-safe, equal to the gathered reference (bitwise in float32), in bf16 and
  float32. The fused step (:mod:`labkit.fused`) may read it with FlashAttention 2's
  variable-length kernel instead (``aten::_flash_attention_forward``, the same offsets as
  ``cu_seqlens_k`` and ``seqused_k``; bf16/fp16 only). vLLM and SGLang use paged-attention
  kernels driven by block tables instead (FlashAttention / FlashInfer backends).
* paged layout, and every layout on CPU: the plain-math reference -- the row's keys are
  gathered (through the block table when paged) and attended with a mask. Paging in plain
  PyTorch buys memory, not speed: reading blocks in place needs a kernel that takes a block
  table (``block_table`` of ``_flash_attention_forward`` in newer torch releases, vLLM's paged
  attention kernels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from labkit.checks import as_int

Layout = Literal["slot", "paged"]
LAYOUTS: tuple[str, ...] = ("slot", "paged")
PAD_BLOCK = 0


AttentionKernel = Literal["efficient", "flash"]
ATTENTION_KERNELS: tuple[str, ...] = ("efficient", "flash")


def flash_supported(dtype: torch.dtype, head_dim: int) -> bool:
    """Whether PyTorch's FlashAttention kernel takes queries of ``dtype`` and ``head_dim``
    (fp16/bf16, head_dim a multiple of 8 up to 256; the memory-efficient kernel also takes
    float32)."""
    return dtype in (torch.float16, torch.bfloat16) and head_dim % 8 == 0 and head_dim <= 256


def _check_kernel(kernel: object) -> None:
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f"kernel must be one of {list(ATTENTION_KERNELS)}, got {kernel!r}")


class CacheFullError(RuntimeError):
    """No free block is left in the paged cache's pool."""


@dataclass
class StepMeta:
    """One decode step's batch metadata on the device (shapes fixed by the batch size ``B``).

    ``positions`` (B,) int64: where each row's new token sits; ``rows`` (B,) int64: the cache
    slot of each row; ``write_index`` (B,) int64: flat index of the row's new k/v in the
    layer's cache viewed as ``(-1, heads, head_dim)``; ``seq_lens`` (B,) int32: ``pos + 1``;
    ``key_start`` (B+1,) int32: flat index of each row's first key (slot layout; the last entry
    is the end of the cache); ``query_start`` (B+1,) int32: ``0..B``.
    """

    positions: torch.Tensor
    rows: torch.Tensor
    write_index: torch.Tensor
    seq_lens: torch.Tensor
    key_start: torch.Tensor
    query_start: torch.Tensor


class BlockAllocator:
    """Hands out the blocks of a paged cache on the host. Block 0 (the pad block) is never
    handed out. Not thread-safe: one allocator belongs to one engine loop."""

    def __init__(self, num_blocks: int) -> None:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 2:
            raise ValueError(f"num_blocks must be an int >= 2 (block 0 is the pad block), "
                             f"got {num_blocks!r}")
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
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
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
    """Common interface. ``slots`` request slots plus one scratch slot, ``max_seq`` positions
    each, ``layers`` layers of ``heads x head_dim`` keys and values."""

    layout: Layout

    def __init__(self, layers: int, max_batch: int, max_seq: int, heads: int, head_dim: int,
                 dtype: torch.dtype) -> None:
        super().__init__()
        self.layers, self.max_batch, self.max_seq = layers, max_batch, max_seq
        self.heads, self.head_dim, self.dtype = heads, head_dim, dtype
        self.register_buffer("_arange", torch.arange(max_seq), persistent=False)

    def _allocate(self, shape: tuple[int, ...]) -> None:
        """Keys and values in ONE buffer ``kv`` ``(2, *shape)``: ``k = kv[0]``, ``v = kv[1]``
        (views, so moving or casting the module moves both). One step can then write a row's
        k and v with a single indexed copy (:meth:`write_kv`)."""
        self.register_buffer("kv", torch.zeros((2, *shape), dtype=self.dtype),
                             persistent=False)

    @property
    def k(self) -> torch.Tensor:
        """All keys (a view of ``kv[0]``)."""
        return self.kv[0]

    @property
    def v(self) -> torch.Tensor:
        """All values (a view of ``kv[1]``)."""
        return self.kv[1]

    @property
    def scratch_slot(self) -> int:
        return self.max_batch

    # ------------------------------------------------------------------ to implement
    def write_index(self, positions: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def gathered(self, layer: int, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of ``rows``, ``(B, max_seq, heads, head_dim)`` each (a copy)."""
        raise NotImplementedError

    def flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's keys and values viewed as ``(-1, heads, head_dim)`` (no copy)."""
        raise NotImplementedError

    def reserve(self, slot: int, n_tokens: int) -> None:
        """Make room for positions ``0..n_tokens-1`` of ``slot`` (host side)."""

    def release(self, slot: int) -> None:
        """Free what ``slot`` holds (host side)."""

    def capacity(self, slot: int) -> int:
        """Positions of ``slot`` that may be written (host side)."""
        return self.max_seq

    def reset(self) -> None:
        """Zero every key and value."""
        self.kv.zero_()

    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    # ------------------------------------------------------------------ the step
    def step_meta(self, positions: torch.Tensor, rows: torch.Tensor) -> StepMeta:
        """Build a step's metadata from positions and slots on the same device (a few tiny
        kernels, no host sync; capture-safe)."""
        b = positions.shape[0]
        i32 = torch.int32
        key_start = torch.cat([rows * self.max_seq,
                               rows.new_full((1,), (self.max_batch + 1) * self.max_seq)])
        return StepMeta(positions=positions, rows=rows,
                        write_index=self.write_index(positions, rows),
                        seq_lens=(positions + 1).to(i32), key_start=key_start.to(i32),
                        query_start=torch.arange(b + 1, device=positions.device, dtype=i32))

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, meta: StepMeta) -> None:
        """Store this step's ``k``, ``v`` ``(B, heads, head_dim)`` at each row's position."""
        kf, vf = self.flat(layer)
        kf.index_copy_(0, meta.write_index, k)
        vf.index_copy_(0, meta.write_index, v)

    def flat_kv(self, layer: int) -> torch.Tensor:
        """The layer's keys and values together, ``(2, -1, heads, head_dim)`` (no copy)."""
        return self.kv[:, layer].view(2, -1, self.heads, self.head_dim)

    def write_kv(self, layer: int, kv: torch.Tensor, meta: StepMeta) -> None:
        """Store this step's keys and values, ``kv`` ``(2, B, heads, head_dim)`` (any strides,
        e.g. a transposed view of the QKV output), with ONE indexed copy: the fused step's
        cache write (:mod:`labkit.fused`). Same result as :meth:`write`. (``index_copy_`` by
        the flat ``write_index``, not ``index_put_`` by (slot, position): the latter's kernel
        was the slower of the two on an H200, by more than the one kernel that computes
        ``write_index``.)"""
        self.flat_kv(layer).index_copy_(1, meta.write_index, kv)

    def attend(self, layer: int, q: torch.Tensor, meta: StepMeta,
               kernel: AttentionKernel = "efficient") -> torch.Tensor:
        """Attention of each row's query ``(B, heads, head_dim)`` over its positions
        ``0..pos``; returns ``(B, heads, head_dim)``. Plain math over gathered rows; a cache
        read in place (:meth:`SlotKVCache.attend`) runs ``kernel`` instead."""
        _check_kernel(kernel)
        keys, values = self.gathered(layer, meta.rows)  # (B, T, H, hd)
        mask = (self._arange[None, :] <= meta.positions[:, None])[:, None, None, :]
        y = F.scaled_dot_product_attention(q[:, :, None], keys.transpose(1, 2),
                                           values.transpose(1, 2), attn_mask=mask)
        return y[:, :, 0]

    def write_prefill(self, layer: int, k: torch.Tensor, v: torch.Tensor,
                      rows: torch.Tensor) -> None:
        """Store a prompt's ``k``, ``v`` ``(B, T, heads, head_dim)`` at positions 0..T-1."""
        b, t = k.shape[:2]
        pos = self._arange[:t].expand(b, t).reshape(-1)
        idx = self.write_index(pos, rows.repeat_interleave(t))
        kf, vf = self.flat(layer)
        kf.index_copy_(0, idx, k.reshape(b * t, self.heads, self.head_dim))
        vf.index_copy_(0, idx, v.reshape(b * t, self.heads, self.head_dim))


class SlotKVCache(KVCache):
    """``(layers, max_batch + 1, max_seq, heads, head_dim)``: one row per slot, read in place
    on CUDA."""

    layout: Layout = "slot"

    def __init__(self, layers: int, max_batch: int, max_seq: int, heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, *, in_place: bool = True) -> None:
        super().__init__(layers, max_batch, max_seq, heads, head_dim, dtype)
        self._allocate((layers, max_batch + 1, max_seq, heads, head_dim))
        #: read the cache in place with the memory-efficient kernel on CUDA (else gather)
        self.in_place = in_place

    def write_index(self, positions: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``rows * max_seq + positions`` in one kernel."""
        return torch.add(positions, rows, alpha=self.max_seq)

    def flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = (self.max_batch + 1) * self.max_seq
        return (self.k[layer].view(n, self.heads, self.head_dim),
                self.v[layer].view(n, self.heads, self.head_dim))

    def gathered(self, layer: int, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[layer][rows], self.v[layer][rows]

    def attend(self, layer: int, q: torch.Tensor, meta: StepMeta,
               kernel: AttentionKernel = "efficient") -> torch.Tensor:
        """Attention read in place on CUDA: ``kernel`` ``"efficient"`` (PyTorch's
        memory-efficient kernel, any dtype) or ``"flash"`` (FlashAttention 2's variable-length
        kernel, bf16/fp16 only: :func:`flash_supported`); the gathered reference on CPU, or
        when the cache is not read in place, or when the kernel does not take this query."""
        _check_kernel(kernel)
        if not (self.in_place and q.is_cuda and self.head_dim % 8 == 0):
            # the memory-efficient kernel wants head_dim a multiple of 8: else the reference
            return super().attend(layer, q, meta, kernel)
        kf, vf = self.flat(layer)
        scale = 1.0 / math.sqrt(self.head_dim)
        if kernel == "flash" and flash_supported(q.dtype, self.head_dim):
            # cu_seqlens_k = each row's first key, seqused_k = how many of them it attends
            return torch.ops.aten._flash_attention_forward(
                q, kf, vf, meta.query_start, meta.key_start, 1, self.max_seq, 0.0, False,
                False, scale=scale, seqused_k=meta.seq_lens)[0]
        out = torch.ops.aten._efficient_attention_forward(
            q[None], kf[None], vf[None], None, meta.query_start, meta.key_start, 1,
            self.max_seq, 0.0, 0, False, scale=scale, seqlen_k=meta.seq_lens)[0]
        return out[0]


class PagedKVCache(KVCache):
    """Blocks of ``block_size`` positions in one pool ``(layers, num_blocks, block_size,
    heads, head_dim)``; a block table maps each slot's logical blocks to pool blocks.

    The table lives twice, as in vLLM: a host copy that :meth:`reserve` and :meth:`release`
    edit (with the :class:`BlockAllocator`), and a device buffer of the same shape that the
    step reads (updated with one copy after each edit, never during a step).
    """

    layout: Layout = "paged"

    def __init__(self, layers: int, max_batch: int, max_seq: int, heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, *, block_size: int = 16,
                 num_blocks: int | None = None) -> None:
        super().__init__(layers, max_batch, max_seq, heads, head_dim, dtype)
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {block_size!r}")
        if max_seq % block_size:
            raise ValueError(f"max_seq={max_seq} is not a multiple of block_size={block_size}; "
                             "pick a block size that divides max_seq")
        self.block_size = block_size
        self.max_blocks = max_seq // block_size
        if num_blocks is None:  # as much room as the slot layout, plus the pad block
            num_blocks = max_batch * self.max_blocks + 1
        self.allocator = BlockAllocator(num_blocks)
        self.num_blocks = num_blocks
        self._allocate((layers, num_blocks, block_size, heads, head_dim))
        self.host_table = torch.full((max_batch + 1, self.max_blocks), PAD_BLOCK,
                                     dtype=torch.int64)
        self.register_buffer("block_table", self.host_table.clone(), persistent=False)
        self._owned: dict[int, list[int]] = {}

    # ------------------------------------------------------------------ host side
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
        self._sync_table()

    def release(self, slot: int) -> None:
        blocks = self._owned.pop(slot, [])
        if blocks:
            self.allocator.release(blocks)
            self.host_table[slot] = PAD_BLOCK
            self._sync_table()

    def _sync_table(self) -> None:
        self.block_table.copy_(self.host_table, non_blocking=False)

    # ------------------------------------------------------------------ device side
    def write_index(self, positions: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        block = self.block_table[rows, positions // self.block_size]
        return block * self.block_size + positions % self.block_size

    def flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = self.num_blocks * self.block_size
        return (self.k[layer].view(n, self.heads, self.head_dim),
                self.v[layer].view(n, self.heads, self.head_dim))

    def gathered(self, layer: int, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        table = self.block_table[rows]  # (B, max_blocks)
        b = rows.shape[0]
        shape = (b, self.max_seq, self.heads, self.head_dim)
        return self.k[layer][table].view(shape), self.v[layer][table].view(shape)


def make_cache(layout: str, layers: int, max_batch: int, max_seq: int, heads: int,
               head_dim: int, dtype: torch.dtype, **options) -> KVCache:
    """A cache of ``layout`` ``'slot'`` or ``'paged'`` (``options``: ``block_size``,
    ``num_blocks`` for paged, ``in_place`` for slot)."""
    if layout == "slot":
        return SlotKVCache(layers, max_batch, max_seq, heads, head_dim, dtype, **options)
    if layout == "paged":
        return PagedKVCache(layers, max_batch, max_seq, heads, head_dim, dtype, **options)
    raise ValueError(f"kv layout must be one of {LAYOUTS}, got {layout!r}")


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
    """The float32 cache a model with config ``cfg`` decodes into, on the CPU (the model moves
    it with ``.to``): ``cfg.kv_layout``, one layer per block, ``max_batch`` slots of
    ``max_seq`` positions, ``heads`` heads (default ``cfg.n_head``; a tensor-parallel rank
    passes its share) of ``cfg.head_dim``; a paged cache takes ``cfg.block_size`` and
    ``cfg.num_blocks``."""
    if heads is not None:
        heads = as_int(heads, "heads", minimum=1, maximum=cfg.n_head,
                       fix=f"give the heads this cache holds, 1 to n_head={cfg.n_head}")
    options = ({"block_size": cfg.block_size, "num_blocks": cfg.num_blocks}
               if cfg.kv_layout == "paged" else {})
    return make_cache(cfg.kv_layout, cfg.n_layer, cfg.max_batch, cfg.max_seq,
                      cfg.n_head if heads is None else heads, cfg.head_dim, torch.float32,
                      **options)
