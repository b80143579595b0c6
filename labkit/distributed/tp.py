"""Tensor-parallel decode: one :class:`~labkit.model.TinyGPT` split across ``N`` ranks.

:class:`TensorParallelGPT` keeps this rank's share of the same full model (Megatron-LM's
split, as vLLM's ``ColumnParallelLinear`` / ``RowParallelLinear`` in
``vllm/model_executor/layers/linear.py``): QKV and MLP-in column-parallel (``n_head / N``
heads, ``4 d / N`` units), the attention-out and MLP-out projections row-parallel (a partial
product, an all-reduce, the bias: two all-reduces a layer), the KV cache of its heads;
embeddings, LayerNorms and the vocabulary head replicated. A split head would add a third
collective on the step's largest tensor ``(B, V)`` to save a small weight read (gpt2: 77 MB
in bf16, ~20 us on an H200); replicated, the logits are bit-identical on all ranks. vLLM
splits it (``VocabParallelEmbedding`` / ``ParallelLMHead``) for its large vocabularies.

Capture safety: the step interface is TinyGPT's and the collectives work in place on fixed
shapes without reading the host. NCCL makes its communicator on the first collective, which
must not happen in a capture: :meth:`TensorParallelGPT.warmup_collectives` first. vLLM's
``graph_capture()`` (``vllm/distributed/parallel_state.py``) prepares each communicator, and
its ``CustomAllreduce`` (``vllm/distributed/device_communicators/custom_all_reduce.py``)
registers the graph's buffers (``register_graph_buffers``) so replays read each peer's memory;
the PyTorch analogue is ``torch.distributed._symmetric_memory`` (``allreduce='symm_mem'``).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import warnings
from dataclasses import replace
from typing import Any, Literal
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from labkit.checks import as_int
from labkit.runner import PaddingDispatcher
from labkit.kvcache import cache_for_config
from labkit.model import Block, GPTConfig, TinyGPT, as_device, build_model, generate

AllReduceKind = Literal["process_group", "symm_mem"]
ALLREDUCE_KINDS: tuple[str, ...] = ("process_group", "symm_mem")


def check_tp_split(cfg: GPTConfig, world_size: int) -> int:
    """Heads per rank for ``world_size`` ranks; a clear error when ``n_head`` does not split."""
    world_size = as_int(world_size, "world_size", minimum=1, fix="give 1 or more ranks")
    if cfg.n_head % world_size:
        ok = [n for n in range(1, cfg.n_head + 1) if cfg.n_head % n == 0]
        raise ValueError(f"n_head={cfg.n_head} is not divisible by world_size={world_size}: "
                         "tensor parallelism gives each rank whole attention heads; use a "
                         f"world size in {ok} or a model whose n_head is a multiple of "
                         f"{world_size}")
    return cfg.n_head // world_size


class ProcessGroupAllReduce:
    """In-place sum over the group with ``torch.distributed.all_reduce`` (NCCL or gloo)."""

    def __init__(self, group: dist.ProcessGroup | None) -> None:
        self.group = group

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(x, op=dist.ReduceOp.SUM, group=self.group)
        return x


class SymmMemAllReduce:
    """One-shot all-reduce through ``torch.distributed._symmetric_memory`` (CUDA, NCCL): each
    rank copies into a symmetric buffer of ``max_numel`` elements (fixed addresses, so a graph
    may capture it) that the kernel reads on every peer; larger tensors use ``dist.all_reduce``."""

    def __init__(self, group: dist.ProcessGroup | None, max_numel: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        why = symm_mem_unavailable(device)
        if why:
            raise RuntimeError(f"allreduce='symm_mem' is unavailable: {why}; use "
                               "allreduce='process_group'")
        symm_mem = importlib.import_module("torch.distributed._symmetric_memory")
        world = group if group is not None else dist.group.WORLD
        assert world is not None  # symm_mem_unavailable checked that the group is initialised
        self.group_name = world.group_name
        enable_symm_mem(symm_mem, self.group_name)
        self.buffer = symm_mem.empty(max_numel, dtype=dtype, device=device)
        self.handle = symm_mem.rendezvous(self.buffer, self.group_name)
        self.fallback = ProcessGroupAllReduce(group)
        #: ``one_shot_all_reduce_out`` where this torch has it (writes the sum into ``x``)
        self._out = getattr(torch.ops.symm_mem, "one_shot_all_reduce_out", None)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        if n > self.buffer.numel():
            return self.fallback(x)
        buf = self.buffer[:n]
        buf.copy_(x.reshape(-1))
        if self._out is not None and x.is_contiguous():  # the sum lands in x: no extra copy
            self._out(buf, "sum", self.group_name, x.view(-1))
            return x
        summed = torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", self.group_name)
        x.copy_(summed.view(x.shape))
        return x


def enable_symm_mem(symm_mem: Any, group_name: str) -> None:
    """``enable_symm_mem_for_group`` where this torch has it (needed before 2.9)."""
    fn = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if fn is None:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(Exception):
            fn(group_name)


def symm_mem_unavailable(device: torch.device) -> str | None:
    """Why the symmetric-memory all-reduce cannot run here, or ``None`` when it can."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return f"it needs CUDA tensors (the model is on {device})"
    if not dist.is_initialized() or dist.get_backend() != "nccl":
        return "it needs an initialised NCCL process group"
    try:  # importlib: an `import torch.x` here would make `torch` local to this function
        importlib.import_module("torch.distributed._symmetric_memory")
    except ImportError as exc:
        return f"torch.distributed._symmetric_memory cannot be imported ({exc})"
    if not hasattr(torch.ops.symm_mem, "one_shot_all_reduce"):
        return f"this torch ({torch.__version__}) has no torch.ops.symm_mem.one_shot_all_reduce"
    return None


class TPBlock(Block):
    """This rank's share of one :class:`~labkit.model.Block` (the module docstring)."""

    def __init__(self, full: Block, rank: int, world_size: int,
                 allreduce: Callable[[torch.Tensor], torch.Tensor]) -> None:
        nn.Module.__init__(self)
        heads, hd = full.n_head, full.head_dim
        h = heads // world_size
        d = heads * hd
        self.n_head, self.head_dim = h, hd
        self.allreduce = allreduce
        self.ln1, self.ln2 = copy.deepcopy(full.ln1), copy.deepcopy(full.ln2)
        with torch.no_grad():
            # QKV rows are [q heads | k heads | v heads]: keep heads rank*h .. rank*h+h of each
            sl = slice(rank * h, (rank + 1) * h)
            w = full.qkv.weight.view(3, heads, hd, d)[:, sl].reshape(3 * h * hd, d)
            b = full.qkv.bias.view(3, heads, hd)[:, sl].reshape(-1)
            self.qkv = _linear(w, b)
            cols = slice(rank * h * hd, (rank + 1) * h * hd)
            self.proj = _linear(full.proj.weight[:, cols], None)
            self.proj_bias = nn.Parameter(full.proj.bias.detach().clone())
            f = full.fc.weight.shape[0] // world_size
            units = slice(rank * f, (rank + 1) * f)
            self.fc = _linear(full.fc.weight[units], full.fc.bias[units])
            self.fc_out = _linear(full.fc_out.weight[:, units], None)
            self.fc_out_bias = nn.Parameter(full.fc_out.bias.detach().clone())

    def _row_parallel(self, layer: nn.Linear, bias: torch.Tensor,
                      x: torch.Tensor) -> torch.Tensor:
        """Partial product on this rank's input slice, all-reduce (sum), then the bias."""
        return self.allreduce(layer(x)) + bias

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc(self.ln2(x)), approximate="tanh")
        return x + self._row_parallel(self.fc_out, self.fc_out_bias, h)

    def forward_full(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self._split(x)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        b, t, _ = x.shape
        x = x + self._row_parallel(self.proj, self.proj_bias, y.transpose(1, 2).reshape(b, t, -1))
        return self._mlp(x), k, v

    def post_attention(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = x + self._row_parallel(self.proj, self.proj_bias, y.reshape(x.shape[0], 1, -1))
        return self._mlp(x)


def _linear(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    out_f, in_f = weight.shape
    layer = nn.Linear(in_f, out_f, bias=bias is not None, dtype=weight.dtype,
                      device=weight.device)
    layer.weight.copy_(weight)
    if bias is not None:
        layer.bias.copy_(bias)
    return layer


class TensorParallelGPT(TinyGPT):
    """This rank's share of a full :class:`~labkit.model.TinyGPT` (the module docstring),
    built on every rank of ``group`` (default: the world) from the same full model.
    ``allreduce``: ``'process_group'`` or ``'symm_mem'``; ``cfg`` stays the full model's,
    ``tp_heads`` is the heads per rank."""

    def __init__(self, full: TinyGPT, group: dist.ProcessGroup | None = None, *,
                 device: str | torch.device | None = None,
                 allreduce: AllReduceKind = "process_group") -> None:
        nn.Module.__init__(self)
        if not isinstance(full, TinyGPT) or isinstance(full, TensorParallelGPT):
            raise TypeError(f"full must be a full TinyGPT, got {type(full).__name__}; build it "
                            "with labkit.model.build_model (same seed on every rank)")
        if allreduce not in ALLREDUCE_KINDS:
            raise ValueError(f"allreduce must be one of {list(ALLREDUCE_KINDS)}, got "
                             f"{allreduce!r}")
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("TensorParallelGPT needs an initialised torch.distributed "
                               "process group; start the ranks with "
                               "labkit.distributed.launch.run_ranks (or call "
                               "dist.init_process_group first)")
        cfg = replace(full.cfg)
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.tp_heads = check_tp_split(cfg, self.world_size)
        self.group = group
        dev = as_device(device) if device is not None else full.device
        self.cfg = cfg
        self.allreduce: Callable[[torch.Tensor], torch.Tensor] = ProcessGroupAllReduce(group)
        self.tok_emb = copy.deepcopy(full.tok_emb)
        self.pos_emb = copy.deepcopy(full.pos_emb)
        self.blocks = nn.ModuleList(TPBlock(b, self.rank, self.world_size, self._reduce)
                                    for b in full.layers)
        self.ln_f = copy.deepcopy(full.ln_f)
        self.lm_head = copy.deepcopy(full.lm_head)  # replicated: see the module docstring
        self.cache = cache_for_config(cfg, heads=self.tp_heads)
        self.register_buffer("_arange", torch.arange(cfg.max_seq), persistent=False)
        self.to(cfg.torch_dtype)
        self.to(dev)
        self.eval()
        if allreduce == "symm_mem":  # decode steps: (max_batch, 1, d_model) at most
            self.allreduce = SymmMemAllReduce(group, cfg.max_batch * cfg.d_model,
                                              cfg.torch_dtype, dev)

    def _reduce(self, x: torch.Tensor) -> torch.Tensor:
        return self.allreduce(x)

    @torch.no_grad()
    def warmup_collectives(self) -> None:
        """One all-reduce, waited for: NCCL's communicator must exist before a capture."""
        x = torch.zeros((1, 1, self.cfg.d_model), dtype=self.cfg.torch_dtype,
                        device=self.device)
        self._reduce(x)
        if x.device.type == "cuda":
            torch.cuda.synchronize()

    @classmethod
    def load(cls, *args, **kwargs) -> TensorParallelGPT:
        raise TypeError("TensorParallelGPT is built from a full model: load it with "
                        "TinyGPT.load(path) on every rank, then TensorParallelGPT(full)")


def rank_check(rank: int, world_size: int, cfg: dict, seed: int = 0, steps: int = 4,
               prompts: list[list[int]] | None = None, new_tokens: int = 6,
               dispatch_sizes: tuple[int, ...] = (1, 2, 4),
               allreduce: AllReduceKind = "process_group") -> dict:
    """Run on every rank (:func:`labkit.distributed.launch.run_ranks`): the tensor-parallel
    model against the full one of the same seed. Returns (full, TP) pairs of the prefill and
    decode logits (on the host) with their max differences, the greedy tokens of each step,
    ``generate``'s tokens and the padding dispatcher's over ``dispatch_sizes`` (graphs on CUDA);
    ``allreduce`` picks the tensor-parallel model's all-reduce."""
    device = torch.device("cuda", torch.cuda.current_device()) if (
        dist.get_backend() == "nccl") else torch.device("cpu")
    config = GPTConfig(**cfg)
    full = build_model(config, device, seed=seed)
    tp = TensorParallelGPT(full, allreduce=allreduce)
    if device.type == "cuda":
        tp.warmup_collectives()
    if prompts is None:
        prompts = [[1, 2, 3, 4], [5, 6], [7, 8, 9]]
    b = len(prompts)
    g = torch.Generator().manual_seed(seed + 1)
    batch = torch.randint(0, config.vocab_size, (b, 5), generator=g).to(device)
    slots = torch.arange(b, device=device)
    out: dict = {"rank": rank, "world_size": world_size, "tp_heads": tp.tp_heads,
                 "cache_heads": tp.cache.heads, "full_cache_heads": full.cache.heads}
    for model in (full, tp):  # paged layout: blocks for the prompt and the decode steps
        for i in range(b):
            model.cache.reserve(i, 5 + steps)
    ref, par = full.prefill(batch, slots), tp.prefill(batch, slots)
    out["prefill_diff"] = float((ref - par).abs().max())
    out["prefill_logits"] = (ref.cpu(), par.cpu())
    logits = []
    tokens = [(ref.argmax(-1).tolist(), par.argmax(-1).tolist())]
    diffs = []
    t_ref, t_par = ref.argmax(-1), par.argmax(-1)
    pos = torch.full((b,), 5, device=device)
    for _ in range(steps):
        r, p = full.decode_step(t_ref, pos, slots), tp.decode_step(t_par, pos, slots)
        diffs.append(float((r - p).abs().max()))
        logits.append((r.cpu(), p.cpu()))
        t_ref, t_par = r.argmax(-1), p.argmax(-1)
        tokens.append((t_ref.tolist(), t_par.tolist()))
        pos = pos + 1
    out["decode_diffs"], out["step_tokens"], out["decode_logits"] = diffs, tokens, logits
    for model in (full, tp):
        for i in range(b):
            model.cache.release(i)
        model.reset_cache()
    out["generate"] = (generate(full, prompts, new_tokens), generate(tp, prompts, new_tokens))
    disp = PaddingDispatcher(tp, dispatch_sizes, capture=device.type == "cuda")
    out["dispatch"] = generate(tp, prompts, new_tokens,  # host-side metadata, as documented
                               step_fn=lambda t, p, s: disp.step(t, p.cpu(), s.cpu()))
    out["dispatch_steps"] = disp.counters.steps
    return out
