"""LoRA under CUDA graphs: adapters in stacked static buffers, the decode step with their deltas,
and graphs keyed by ``has_lora`` as vLLM keys them.

vLLM's mechanism, which this module follows in miniature:

* **Static adapter slots.** Weights of up to ``max_loras`` adapters live in stacked buffers
  allocated once (``lora_a_stacked`` / ``lora_b_stacked`` of the ``*WithLoRA`` layers,
  ``vllm/lora/layers/*.py``); loading an adapter copies into a slot (``set_lora``), the LoRA
  scaling folded into B (``LoRALayerWeights.optimize``, ``vllm/lora/lora_weights.py``). Here:
  :class:`LoRAAdapters`, targets ``qkv``, ``proj``, ``fc``, ``fc_out`` of every block.
* **Per-token adapter indices in a static tensor**, written before each step outside the graph
  (``PunicaWrapperGPU.update_metadata``, ``vllm/lora/punica_wrapper/punica_gpu.py``, reached
  from ``WorkerLoRAManager.set_active_adapters`` through ``LoRAModelManager.set_adapter_mapping``);
  index ``-1`` means no adapter. Here:
  :attr:`LoRAAdapters.index`, one entry per batch row, written by :meth:`LoRAAdapters.set_index`.
* **The graph key carries ``has_lora``** (``BatchDescriptor``, ``vllm/forward_context.py``): with
  ``CompilationConfig.cudagraph_specialize_lora`` (vLLM PR #25914) every capture size gets a
  LoRA graph and a plain one, so a batch without adapters replays a graph without the LoRA
  kernels; without it only LoRA graphs exist (``CudagraphDispatcher.initialize_cudagraph_keys``,
  ``vllm/v1/cudagraph_dispatcher.py``; capture order ``product(reversed(sizes), [True, False])``
  in ``GPUModelRunner.capture_model``, ``vllm/v1/worker/gpu_model_runner.py``). Here:
  :class:`LoRAGraphs`, all in one shared pool.

Simplified: the delta is a gathered batched matmul per target (``x @ A[id] @ B[id]``, masked to
exactly zero where ``id`` is ``-1``), which does the full work for rows without an adapter;
vLLM's Triton ``lora_shrink`` / ``lora_expand`` kernels (``vllm/lora/ops/triton_ops/``) skip
them. Adapters apply to decode steps only (prompts are prefilled by the plain model; vLLM
applies them to every token). Later vLLM keys graphs by the number of active adapters too
(``num_active_loras``, PR #32005); labkit keys by ``has_lora`` alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F

from labkit.batch import StaticBatch
from labkit.checks import as_bool, as_int, as_number
from labkit.graphs import (
    CapturedGraph, PoolId, capture_unchecked, capturing, check_capture, new_batch,
    pool_active_bytes, pool_reserved_bytes, progress_bar, release, require_cuda,
)
from labkit.model import Decode, TinyGPT, attention
from labkit.rules import BatchDescriptor, RuntimeMode, padded_size
from labkit.runner import check_capture_flag
from labkit.step_checks import Check

Tensor = torch.Tensor

#: the projections an adapter may target: (input, output) width in multiples of ``d_model``
TARGETS: dict[str, tuple[int, int]] = {"qkv": (1, 3), "proj": (1, 1), "fc": (1, 4),
                                       "fc_out": (4, 1)}
#: the targets an adapter has unless told otherwise: attention's qkv and the MLP's up projection
DEFAULT_TARGETS: tuple[str, ...] = ("qkv", "fc")
#: the graph sets :func:`pool_bytes_by_case` captures, each into a pool of its own
POOL_CASES: dict[str, tuple[bool, ...]] = {"plain": (False,), "lora": (True,),
                                           "both": (True, False)}


class LoRAAdapters:
    """Static slots for up to ``max_loras`` adapters of rank ``rank`` on ``model`` (its dtype and
    device): per target, ``A`` ``(n_layer, max_loras, d_in, rank)`` and ``B`` ``(n_layer,
    max_loras, rank, d_out)`` with the scale folded in, and :attr:`index`, the adapter id of each
    batch row (``-1``: none). Empty slots hold zeros and may not be named by a row."""

    def __init__(self, model: TinyGPT, max_loras: int = 4, rank: int = 8,
                 targets: Sequence[str] = DEFAULT_TARGETS) -> None:
        if not isinstance(model, TinyGPT):
            raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}; build one "
                            "with labkit.model.build_model")
        cfg = model.cfg
        self.max_loras = as_int(max_loras, "max_loras", minimum=1, maximum=1024,
                                fix="give the number of adapter slots, such as 4")
        self.rank = as_int(rank, "rank", minimum=1, maximum=cfg.d_model,
                           fix=f"give a LoRA rank between 1 and d_model={cfg.d_model}, such as 8")
        self.targets = _check_targets(targets)
        self.model = model
        self.dtype, self.device = cfg.torch_dtype, model.device
        self.rows = cfg.max_batch
        self.A: dict[str, Tensor] = {}
        self.B: dict[str, Tensor] = {}
        for t in self.targets:
            d_in, d_out = self.dims(t)
            self.A[t] = torch.zeros((cfg.n_layer, self.max_loras, d_in, self.rank),
                                    dtype=self.dtype, device=self.device)
            self.B[t] = torch.zeros((cfg.n_layer, self.max_loras, self.rank, d_out),
                                    dtype=self.dtype, device=self.device)
        #: the adapter id of each batch row, ``-1`` for none: what the LoRA step reads
        self.index = torch.full((self.rows,), -1, dtype=torch.long, device=self.device)
        on_gpu = self.device.type == "cuda"
        self._host = torch.full((self.rows,), -1, dtype=torch.long)
        if on_gpu:
            self._host = self._host.pin_memory()
        self._copied = torch.cuda.Event() if on_gpu else None
        #: slot -> the scale its adapter was loaded with (the loaded slots)
        self.scales: dict[int, float] = {}

    def dims(self, target: str) -> tuple[int, int]:
        """(input, output) width of ``target``'s projection."""
        a, b = TARGETS[target]
        return a * self.model.cfg.d_model, b * self.model.cfg.d_model

    def nbytes(self) -> int:
        """Bytes of the stacked A and B buffers (outside any graph pool)."""
        return sum(t.numel() * t.element_size() for t in (*self.A.values(), *self.B.values()))

    @torch.no_grad()
    def load(self, slot: int, A: Mapping[str, Tensor], B: Mapping[str, Tensor],
             scale: float = 1.0) -> None:
        """Copy an adapter into ``slot``: per target, ``A[t]`` ``(n_layer, d_in, rank)`` and
        ``B[t]`` ``(n_layer, rank, d_out)``, floating point, on the host or the model's device;
        ``scale`` (LoRA's ``alpha / r``) is folded into B as vLLM does. All checked first."""
        slot = self._check_slot(slot)
        scale = as_number(scale, "scale", fix="give the LoRA scale (alpha / rank), such as 1.0")
        for name, given, which in (("A", A, 0), ("B", B, 1)):
            if not isinstance(given, Mapping) or set(given) != set(self.targets):
                got = sorted(given) if isinstance(given, Mapping) else type(given).__name__
                raise ValueError(f"{name} must map each target {list(self.targets)} to a "
                                 f"tensor, got {got}; give one {name} tensor per target")
            for t in self.targets:
                d_in, d_out = self.dims(t)
                shape = ((self.model.cfg.n_layer, d_in, self.rank) if which == 0 else
                         (self.model.cfg.n_layer, self.rank, d_out))
                self._check_weight(f"{name}[{t!r}]", given[t], shape)
        for t in self.targets:
            self.A[t][:, slot].copy_(A[t])
            self.B[t][:, slot].copy_(B[t].to(torch.float32) * scale)
        self.scales[slot] = scale

    def random_adapter(self, slot: int, *, seed: int = 0, scale: float = 1.0) -> None:
        """Load a seeded random adapter into ``slot``: ``A ~ N(0, 1/d_in)``, ``B ~ N(0, 0.02^2
        d_in / rank)``, so that at ``scale`` 1 a delta is as large as the projection's own output
        on the model's random weights (std 0.02): greedy tokens change."""
        slot = self._check_slot(slot)
        seed = as_int(seed, "seed", minimum=0, maximum=2**63 - 1, fix="use a seed such as 0")
        g = torch.Generator().manual_seed(seed)
        n, r = self.model.cfg.n_layer, self.rank
        A, B = {}, {}
        for t in self.targets:
            d_in, d_out = self.dims(t)
            A[t] = torch.randn((n, d_in, r), generator=g) / d_in ** 0.5
            B[t] = torch.randn((n, r, d_out), generator=g) * 0.02 * (d_in / r) ** 0.5
        self.load(slot, A, B, scale=scale)

    def check_ids(self, lora_ids: object, rows: int) -> list[int]:
        """``lora_ids`` (a list of ints or a 1-D integer CPU tensor, one per row) as a list:
        each ``-1`` or a loaded slot. Device tensors are refused: ``has_lora`` is decided on
        the host, and reading ids back from the GPU would wait for it."""
        if isinstance(lora_ids, Tensor):
            if lora_ids.device.type != "cpu":
                raise ValueError(f"lora_ids is on {lora_ids.device}; give it on the host (a "
                                 "list or a CPU tensor): the graph key (has_lora) is chosen "
                                 "there, and reading device ids would synchronise")
            if lora_ids.dtype not in (torch.int64, torch.int32) or lora_ids.dim() != 1:
                raise TypeError(f"lora_ids must be a 1-D integer tensor, got dtype "
                                f"{lora_ids.dtype} and shape {tuple(lora_ids.shape)}")
            lora_ids = lora_ids.tolist()
        if isinstance(lora_ids, (str, bytes)) or not isinstance(lora_ids, Sequence):
            raise TypeError(f"lora_ids must be a list of adapter ids (-1 for none), got "
                            f"{type(lora_ids).__name__}")
        ids = [as_int(v, f"lora_ids[{i}]", minimum=-1, maximum=self.max_loras - 1,
                      fix=f"give -1 (no adapter) or a slot in [0, {self.max_loras})")
               for i, v in enumerate(lora_ids)]
        if len(ids) != rows:
            raise ValueError(f"lora_ids has {len(ids)} entries for {rows} rows; give one "
                             "adapter id (-1 for none) per row")
        empty = sorted({i for i in ids if i >= 0 and i not in self.scales})
        if empty:
            raise ValueError(f"lora_ids name slot(s) {empty} that hold no adapter; load one "
                             "first (adapters.load or adapters.random_adapter) or use -1")
        return ids

    def index_for(self, ids: Sequence[int]) -> Tensor:
        """A device copy of the whole index for checked ``ids`` (rows past them ``-1``): to
        copy into :attr:`index` device to device (as a timing loop does)."""
        host = torch.full((self.rows,), -1, dtype=torch.long)
        host[:len(ids)] = torch.tensor(list(ids), dtype=torch.long)
        return host.to(self.device)

    def set_index(self, ids: Sequence[int]) -> None:
        """Write checked ``ids`` into the first rows of :attr:`index`, ``-1`` into the rest
        (padded rows): outside any graph, through a pinned buffer that is reused only after its
        last copy ran."""
        if self._copied is not None:
            self._copied.synchronize()
        self._host.fill_(-1)
        self._host[:len(ids)] = torch.tensor(list(ids), dtype=torch.long)
        self.index.copy_(self._host, non_blocking=self._copied is not None)
        if self._copied is not None:
            self._copied.record()

    def delta(self, target: str, layer: int, y: Tensor, h: Tensor, live: Tensor,
              safe: Tensor) -> Tensor:
        """``y`` plus each row's adapter delta on the projection ``target`` of ``layer``:
        ``(h @ A[id]) @ B[id]`` for ``id >= 0``, exactly zero for ``-1`` (``live`` the rows
        with an adapter, ``safe`` the ids with ``-1`` as 0). A target not adapted: ``y``.
        Gathers and batched matmuls: no host sync, shapes by the batch size alone."""
        if target not in self.A:
            return y
        a = self.A[target][layer].index_select(0, safe)  # (b, d_in, r)
        b = self.B[target][layer].index_select(0, safe)  # (b, r, d_out)
        d = torch.bmm(torch.bmm(h.reshape(h.shape[0], 1, -1), a), b).view(y.shape)
        return y + torch.where(live.view(-1, *[1] * (y.dim() - 1)), d, 0.0)

    def _check_slot(self, slot: object) -> int:
        return as_int(slot, "slot", minimum=0, maximum=self.max_loras - 1,
                      fix=f"give a slot in [0, {self.max_loras}) (max_loras={self.max_loras})")

    def _check_weight(self, name: str, w: object, shape: tuple[int, ...]) -> None:
        if not isinstance(w, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(w).__name__}")
        if not w.is_floating_point():
            raise TypeError(f"{name} has dtype {w.dtype}; adapter weights are floating point: "
                            f"pass {name}.float()")
        if w.device.type != "cpu" and w.device != self.device:
            raise ValueError(f"{name} is on {w.device} but the adapters are on {self.device}; "
                             f"move it with .to({str(self.device)!r}) or give it on the host")
        if tuple(w.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(w.shape)}, expected {shape} (n_layer, "
                             f"in, rank) for A or (n_layer, rank, out) for B at rank "
                             f"{self.rank}")


def _check_targets(targets: object) -> tuple[str, ...]:
    if isinstance(targets, str) or not isinstance(targets, Sequence) or not targets:
        raise TypeError(f"targets must be a non-empty list of projection names from "
                        f"{list(TARGETS)}, got {targets!r}")
    bad = [t for t in targets if t not in TARGETS]
    if bad or len(set(targets)) != len(targets):
        raise ValueError(f"targets {list(targets)} must be distinct names from {list(TARGETS)}"
                         f"; unknown: {bad}")
    return tuple(targets)


def _check_pair(model: object, adapters: object) -> TinyGPT:
    """``adapters`` must be :class:`LoRAAdapters` built for ``model``, still on its dtype and
    device."""
    if not isinstance(adapters, LoRAAdapters):
        raise TypeError(f"adapters must be LoRAAdapters, got {type(adapters).__name__}")
    if not isinstance(model, TinyGPT) or adapters.model is not model:
        raise ValueError("adapters were built for another model; build LoRAAdapters(model, "
                         "...) for this one")
    dtype = model.tok_emb.weight.dtype
    if (dtype, model.device) != (adapters.dtype, adapters.device):
        raise ValueError(f"the adapters are {adapters.dtype} on {adapters.device} but the "
                         f"model is {dtype} on {model.device}; build the adapters after "
                         "moving or casting the model")
    return model


def make_lora_step(model: TinyGPT, adapters: LoRAAdapters) -> Decode:
    """The readable decode step (the Decode contract: ``(tokens, positions, slots, out=None)
    -> logits``) with each row's adapter delta added on the adapted projections, the row's
    adapter read from ``adapters.index``. Built from the model's parts as
    :mod:`labkit.piecewise` builds its pieces: the same operations as ``Block.pre_attention`` /
    ``post_attention``, so rows with id ``-1`` get the plain step's logits exactly. Capture-safe;
    checks nothing."""
    _check_pair(model, adapters)
    blocks, cache = model.layers, model.cache
    ad = adapters

    @torch.no_grad()
    def step(tokens: Tensor, positions: Tensor, slots: Tensor,
             out: Tensor | None = None) -> Tensor:
        n = tokens.shape[0]
        ids = ad.index[:n]
        live, safe = ids >= 0, ids.clamp(min=0)
        x, meta = model.embed_step(tokens, positions, slots)
        for i, blk in enumerate(blocks):
            h = blk.ln1(x)
            qkv = ad.delta("qkv", i, blk.qkv(h), h, live, safe)
            q, k, v = qkv.view(n, 3, blk.n_head, blk.head_dim).unbind(1)
            y = attention(cache, i, q, k, v, meta).reshape(x.shape)
            x = x + ad.delta("proj", i, blk.proj(y), y, live, safe)
            h = blk.ln2(x)
            f = F.gelu(ad.delta("fc", i, blk.fc(h), h, live, safe), approximate="tanh")
            x = x + ad.delta("fc_out", i, blk.fc_out(f), f, live, safe)
        return model.head(x, out=out)

    return step


def lora_key(rows: int, has_lora: bool) -> BatchDescriptor:
    """The key of a uniform decode graph of ``rows`` rows (one token each)."""
    return BatchDescriptor(rows, rows, True, has_lora)


def _capture(batch: StaticBatch, steps: Mapping[bool, Decode], sizes: list[int],
             cases: Sequence[bool], pool: Any, warmup: int, progress: bool | None
             ) -> dict[BatchDescriptor, CapturedGraph]:
    """Capture ``steps[has_lora]`` per size (largest first) and case, into ``pool``."""
    stream = torch.cuda.Stream()
    logits = batch.logits
    done: dict[tuple[int, bool], CapturedGraph] = {}
    order = [(bs, h) for bs in reversed(sizes) for h in cases]
    with capturing(done, "LoRA graphs"):
        for bs, h in progress_bar(order, progress, "capturing LoRA graphs"):
            fn, out = steps[h], None if logits is None else logits[:bs]

            def one(t: Tensor, p: Tensor, s: Tensor, fn: Decode = fn,
                    out: Tensor | None = out) -> Tensor:
                return fn(t, p, s, out)

            done[(bs, h)] = capture_unchecked(one, batch.view(bs), pool, stream, warmup, True,
                                              label=lora_key(bs, h))
    return {lora_key(bs, h): g for (bs, h), g in done.items()}


class LoRAGraphs:
    """FULL decode graphs keyed by ``BatchDescriptor(n, n, uniform=True, has_lora=...)``: for
    each capture size a plain graph (``has_lora=False``) and a LoRA graph, all in one shared
    pool; ``specialize=False`` captures LoRA graphs only, which every batch then replays (vLLM
    before PR #25914, or ``cudagraph_specialize_lora=False``). :meth:`step` decides, stages and
    replays. Without CUDA (``capture=False``) the same decisions run eagerly."""

    def __init__(self, model: TinyGPT, adapters: LoRAAdapters, capture_sizes: Sequence[int], *,
                 specialize: bool = True, capture: bool | None = None, warmup: int = 3,
                 progress: bool | None = None) -> None:
        _check_pair(model, adapters)
        self.sizes = check_capture(model, capture_sizes, "shared", "largest_first", warmup,
                                   progress, True)
        self.specialize = as_bool(specialize, "specialize")
        self.capture = check_capture_flag(model, capture)
        self.model, self.adapters = model, adapters
        #: has_lora values with graphs, in vLLM's capture order
        self.cases: tuple[bool, ...] = (True, False) if self.specialize else (True,)
        #: every key, in capture order (largest size first)
        self.keys = [lora_key(bs, h) for bs in reversed(self.sizes) for h in self.cases]
        self.steps: dict[bool, Decode] = {False: model.decode,
                                          True: make_lora_step(model, adapters)}
        self.batch = new_batch(model, self.sizes[-1]) if self.capture else StaticBatch(model)
        self.graphs: dict[BatchDescriptor, CapturedGraph] = (
            _capture(self.batch, self.steps, self.sizes, self.cases,
                     torch.cuda.graph_pool_handle(), warmup, progress) if self.capture else {})
        #: steps run per key (mode NONE: the unpadded key)
        self.counts: dict[BatchDescriptor, int] = {}
        self.last: tuple[RuntimeMode, BatchDescriptor] | None = None

    def dispatch(self, lora_ids: Sequence[int]) -> tuple[RuntimeMode, BatchDescriptor]:
        """The runtime mode and key of a step whose rows carry checked ``lora_ids``:
        ``has_lora`` is whether any id is ``>= 0`` (always True without specialisation), the
        rows padded by :func:`labkit.rules.padded_size`; above the largest size NONE, unpadded."""
        rows = len(lora_ids)
        has_lora = not self.specialize or any(i >= 0 for i in lora_ids)
        p = padded_size(self.sizes, rows)
        if p is None:
            return "NONE", lora_key(rows, has_lora)
        return "FULL", lora_key(p, has_lora)

    def replay(self, key: BatchDescriptor) -> Tensor:
        """Run ``key``'s step on what the static batch and the index hold (its graph, or eagerly
        without capture): logits of ``key.num_tokens`` rows; a graph's are a static buffer."""
        if key not in self.keys:
            raise KeyError(f"no graph for {key}; keys: {self.keys}")
        if not self.capture:
            return self.steps[key.has_lora](*self.batch.view(key.num_tokens))
        if key not in self.graphs:
            raise KeyError(f"the graph for {key} was released; build LoRAGraphs again")
        return cast(Tensor, self.graphs[key].replay())

    @torch.no_grad()
    def step(self, tokens: Tensor, positions: Tensor, slots: Tensor, lora_ids: object, *,
             check: Check = True) -> Tensor:
        """Logits ``(b, V)`` of one decode step whose row ``i`` uses adapter ``lora_ids[i]``
        (``-1``: none): check, decide (:meth:`dispatch`), stage the index and the batch, replay
        (or run eagerly above the largest size), return a copy."""
        b = self.model.check_step(tokens, positions, slots, check, who="LoRAGraphs.step",
                                  host_ok=True)
        ids = self.adapters.check_ids(lora_ids, b)
        mode, key = self.dispatch(ids)
        if key.has_lora:
            self.adapters.set_index(ids)
        self.batch.load(tokens, positions, slots)
        out = (self.replay(key) if mode == "FULL" else
               self.steps[key.has_lora](*self.batch.view(b)))
        self.counts[key] = self.counts.get(key, 0) + 1
        self.last = (mode, key)
        return out[:b].clone() if mode == "FULL" and self.capture else out[:b]

    def pools(self) -> set[PoolId]:
        """The pool ids the graphs live in (one when captured)."""
        return {g.pool for g in self.graphs.values()}

    def memory_report(self) -> dict[str, Any]:
        """The graphs' pool (allocator accounting) and the adapters' buffers, in bytes."""
        if not self.graphs:
            raise RuntimeError("no graphs are held (capture=False, or released); build "
                               "LoRAGraphs on a CUDA model with capture=True")
        pool = next(iter(self.pools()))
        return {"specialize": self.specialize, "graphs": len(self.graphs),
                "pool_reserved_bytes": pool_reserved_bytes(pool),
                "pool_active_bytes": pool_active_bytes(pool),
                "adapter_bytes": self.adapters.nbytes()}

    def release(self) -> None:
        """Drop every graph and return the pool's memory to the device."""
        release(self.graphs)


def pool_bytes_by_case(model: TinyGPT, adapters: LoRAAdapters, capture_sizes: Sequence[int],
                       *, warmup: int = 3) -> dict[str, dict[str, int]]:
    """Pool bytes of the plain graphs alone, the LoRA graphs alone and both (as
    :class:`LoRAGraphs` captures them), each set captured into a fresh pool, measured by the
    allocator's per-pool accounting and released before the next: ``{case: {reserved_bytes,
    active_bytes, graphs}}`` for the cases of :data:`POOL_CASES`."""
    _check_pair(model, adapters)
    sizes = check_capture(model, capture_sizes, "shared", "largest_first", warmup, False, True)
    require_cuda("pool_bytes_by_case captures CUDA graphs; build the model on a CUDA GPU", model)
    batch = new_batch(model, sizes[-1])
    steps: dict[bool, Decode] = {False: model.decode, True: make_lora_step(model, adapters)}
    out: dict[str, dict[str, int]] = {}
    for name, cases in POOL_CASES.items():
        graphs = _capture(batch, steps, sizes, cases, torch.cuda.graph_pool_handle(), warmup,
                          False)
        pool = next(iter(graphs.values())).pool
        out[name] = {"reserved_bytes": pool_reserved_bytes(pool),
                     "active_bytes": pool_active_bytes(pool), "graphs": len(graphs)}
        release(graphs)
    return out
