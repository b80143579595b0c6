"""A GPT-2-style decoder with a static KV cache, small enough to read in one sitting.

The decode step can be captured in a CUDA graph: the KV cache (:mod:`labkit.kvcache`) is
allocated once; ``decode_step(tokens, positions, slots)`` reads nothing back to the host and
its shapes depend on the batch size alone. :meth:`TinyGPT.decode_step` checks its batch
(:mod:`labkit.step_checks`) and runs :meth:`TinyGPT.decode`, which checks nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn

from labkit.checks import as_int
from labkit.kvcache import LAYOUTS, KVCache, StepMeta, cache_for_config
from labkit.step_checks import (
    Check, check_batch, check_choice, check_id_tensor, check_slots, check_token_ids,
)

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: the largest value a size field of GPTConfig may take: index tensors are int32-safe below it
_MAX_DIM = 2**31 - 1
_INT_FIELDS = ("vocab_size", "n_layer", "n_head", "d_model", "max_batch", "max_seq")

#: ``step_fn(tokens, positions, slots) -> logits``: what :func:`generate` calls
StepFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
Tensor = torch.Tensor


class DecodeStep(Protocol):
    """A checked decode step (:meth:`TinyGPT.decode_step`, :mod:`labkit.fused`'s)."""

    def __call__(self, tokens: Tensor, positions: Tensor, slots: Tensor, /, *,
                 check: Check = None, out: Tensor | None = None) -> Tensor: ...


class Decode(Protocol):
    """An unchecked decode step (:meth:`TinyGPT.decode`): what graphs capture and runners run."""

    def __call__(self, tokens: Tensor, positions: Tensor, slots: Tensor,
                 out: Tensor | None = None, /) -> Tensor: ...


@dataclass
class GPTConfig:
    """Shape of a :class:`TinyGPT`; a bad value (``2.5``, ``"3"``, ``True`` for a size) raises
    naming the field and the fix. The cache holds ``max_batch + 1`` slots, the last
    the :attr:`scratch_slot` that padded rows write (never a live request's)."""

    vocab_size: int = 256
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 256
    max_batch: int = 8
    max_seq: int = 256
    dtype: str = "float32"
    #: KV-cache layout: ``'slot'`` (one row per slot) or ``'paged'`` (blocks + block table)
    kv_layout: str = "slot"
    #: positions per block (paged layout)
    block_size: int = 16
    #: blocks in the paged pool, the pad block included (None: as much room as the slots)
    num_blocks: int | None = None

    def __post_init__(self) -> None:
        for name in _INT_FIELDS:
            setattr(self, name, as_int(getattr(self, name), f"GPTConfig.{name}", minimum=1,
                                       maximum=_MAX_DIM,
                                       fix=f"give {name} as a positive whole number"))
        if not isinstance(self.dtype, str) or self.dtype not in _DTYPES:
            raise ValueError(f"GPTConfig.dtype {self.dtype!r} is not supported; use one of "
                             f"{sorted(_DTYPES)}")
        check_choice(self.kv_layout, "GPTConfig.kv_layout", LAYOUTS)
        self.block_size = as_int(self.block_size, "GPTConfig.block_size", minimum=1,
                                 maximum=_MAX_DIM, fix="give the block size as a positive "
                                 "whole number that divides max_seq")
        if self.num_blocks is not None:
            self.num_blocks = as_int(self.num_blocks, "GPTConfig.num_blocks", minimum=2,
                                     maximum=_MAX_DIM, fix="give at least 2 blocks (block 0 "
                                     "is the pad block), or None for as much room as the slots")
        if self.kv_layout == "paged" and self.max_seq % self.block_size:
            raise ValueError(f"GPTConfig.max_seq={self.max_seq} is not a multiple of "
                             f"block_size={self.block_size}; pick a block size that divides it")
        if self.d_model % self.n_head:
            raise ValueError(
                f"GPTConfig.d_model={self.d_model} is not divisible by n_head={self.n_head}; "
                "pick n_head that divides d_model")

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def scratch_slot(self) -> int:
        return self.max_batch

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: configurations used throughout the notebooks and the benchmark
PRESETS: dict[str, dict[str, int]] = {
    # trained on the corpus by `labkit train`; byte-level vocabulary
    "char": dict(vocab_size=256, n_layer=4, n_head=4, d_model=128, max_seq=256),
    # the two timing models of the design: 4 x 256 and 12 x 768 (GPT-2 small shape)
    "small": dict(vocab_size=50257, n_layer=4, n_head=4, d_model=256, max_seq=256),
    "gpt2": dict(vocab_size=50257, n_layer=12, n_head=12, d_model=768, max_seq=256),
    # fits a CPU test in milliseconds
    "test": dict(vocab_size=97, n_layer=2, n_head=2, d_model=32, max_seq=32),
}


def preset(name: str, **overrides: Any) -> GPTConfig:
    """A named configuration (``char``, ``small``, ``gpt2``, ``test``) with overrides."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return GPTConfig(**{**PRESETS[name], **overrides})


class Block(nn.Module):
    """Pre-LayerNorm transformer block: attention then GELU MLP, both residual."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.fc_out = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def _split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(self.n_head * self.head_dim, dim=-1)
        shape = (b, t, self.n_head, self.head_dim)
        return (q.view(shape).transpose(1, 2), k.view(shape).transpose(1, 2),
                v.view(shape).transpose(1, 2))

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, x + self.fc_out(F.gelu(self.fc(self.ln2(x)),
                                                         approximate="tanh")))

    def forward_full(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Causal attention over a whole sequence; returns output and this layer's k, v."""
        q, k, v = self._split(x)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(x.shape))
        return self._mlp(x), k, v

    def pre_attention(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One new token per row ``x`` ``(B, 1, D)`` -> q, k, v ``(B, H, hd)`` each."""
        q, k, v = self.qkv(self.ln1(x)).view(x.shape[0], 3, self.n_head,
                                             self.head_dim).unbind(1)
        return q, k, v

    def post_attention(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Output projection of the attention result ``y`` ``(B, H, hd)`` and the MLP, both
        residual: the next layer's input ``(B, 1, D)``."""
        return self._mlp(x + self.proj(y.reshape(x.shape)))


def attention(cache: KVCache, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              meta: StepMeta, max_query: int = 1) -> torch.Tensor:
    """The part of a step that touches the KV cache: write k, v, attend each token over its
    request's positions (piecewise capture runs this eagerly between graphs, as vLLM does)."""
    cache.write(layer, k, v, meta)
    return cache.attend(layer, q, meta, max_query=max_query)  # (T, H, hd)


class TinyGPT(nn.Module):
    """GPT-2-style decoder (learned positions, pre-LN, GELU MLP) with a static KV cache; the
    output head is not tied to the embedding, so random weights give varied tokens."""

    cache: KVCache
    _arange: torch.Tensor

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        _check_config(cfg)
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.cache = cache_for_config(cfg)
        self.register_buffer("_arange", torch.arange(cfg.max_seq), persistent=False)
        self.apply(self._init)
        self.to(cfg.torch_dtype)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    @property
    def device(self) -> torch.device:
        return self.tok_emb.weight.device

    @property
    def layers(self) -> list[Block]:
        """The blocks, typed."""
        return cast(list[Block], list(self.blocks))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def k_cache(self) -> torch.Tensor:
        """All keys: ``(layers, slots or blocks, max_seq or block_size, heads, head_dim)``."""
        return self.cache.k

    @property
    def v_cache(self) -> torch.Tensor:
        return self.cache.v

    def cache_bytes(self) -> int:
        return self.cache.nbytes()

    def reset_cache(self) -> None:
        self.cache.reset()

    def _check_room(self, slots: Sequence[int], needed: Sequence[int]) -> None:
        """Paged layout: each live slot must own blocks for the positions it writes."""
        for s, n in zip(slots, needed):
            if s != self.cfg.scratch_slot and n > self.cache.capacity(s):
                raise ValueError(
                    f"slot {s} owns room for {self.cache.capacity(s)} positions but the step "
                    f"writes position {n - 1}; reserve blocks first "
                    f"(model.cache.reserve({s}, {n}))")

    def check_step(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                   check: Check, who: str = "decode_step", host_ok: bool = False) -> int:
        """The checks of one decode step's inputs (``check`` as :mod:`labkit.step_checks` says;
        paged layout with values checked: each slot owns room; ``host_ok``: metadata may be on
        the host, to be copied in). Returns the batch size."""
        cfg = self.cfg
        b, values = check_batch(tokens, positions, slots, device=self.device,
                                vocab_size=cfg.vocab_size, max_batch=cfg.max_batch,
                                max_seq=cfg.max_seq, check=check, host_ok=host_ok, who=who)
        if cfg.kv_layout == "paged" and values is not None:
            self._check_room(values[2], [p + 1 for p in values[1]])
        return b

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Full-sequence forward pass without the cache: logits ``(B, T, V)``. Reference path."""
        check_id_tensor("tokens", tokens, 2, self.device)
        if tokens.shape[1] > self.cfg.max_seq:
            raise ValueError(f"sequence of {tokens.shape[1]} tokens is longer than "
                             f"max_seq={self.cfg.max_seq}; build the model with a larger max_seq")
        if tokens.device.type == "cpu" and tokens.numel():
            check_token_ids(int(tokens.min()), int(tokens.max()), self.cfg.vocab_size)
        x = self.tok_emb(tokens) + self.pos_emb(self._arange[: tokens.shape[1]])
        for block in self.layers:
            x, _, _ = block.forward_full(x)
        return cast(torch.Tensor, self.lm_head(self.ln_f(x)))

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Run prompts ``(B, T)`` of one length into distinct live ``slots`` at positions
        0..T-1; returns the last position's logits ``(B, V)``. Values are checked for CPU
        tensors (CUDA: check on the host first, :func:`labkit.step_checks.check_slots`)."""
        check_id_tensor("tokens", tokens, 2, self.device)
        check_id_tensor("slots", slots, 1, self.device)
        b, t = tokens.shape
        if slots.shape[0] != b:
            raise ValueError(f"slots has {slots.shape[0]} entries for {b} prompts; give one each")
        if b < 1 or t < 1:
            raise ValueError("no prompts or an empty prompt: give at least one prompt of at "
                             "least one token")
        if t > self.cfg.max_seq:
            raise ValueError(f"prompt of {t} tokens is longer than the KV cache "
                             f"(max_seq={self.cfg.max_seq}); shorten it or raise max_seq")
        if tokens.device.type == "cpu":
            check_token_ids(int(tokens.min()), int(tokens.max()), self.cfg.vocab_size)
            check_slots(slots.tolist(), self.cfg.max_batch)
        if self.cfg.kv_layout == "paged":  # blocks are known on the host: always checked
            self._check_room(slots.tolist(), [t] * b)
        x = self.tok_emb(tokens) + self.pos_emb(self._arange[:t])
        for i, block in enumerate(self.layers):
            x, k, v = block.forward_full(x)
            self.cache.write_prefill(i, k.transpose(1, 2), v.transpose(1, 2), slots)
        return cast(torch.Tensor, self.lm_head(self.ln_f(x[:, -1])))

    def decode_step(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                    *, check: Check = None, out: torch.Tensor | None = None) -> torch.Tensor:
        """One decode step, token ``tokens[i]`` at ``positions[i]`` of slot ``slots[i]``: logits
        ``(B, V)`` (into ``out`` when given). ``check`` as :mod:`labkit.step_checks` says."""
        self.check_step(tokens, positions, slots, check)
        return self.decode(tokens, positions, slots, out)

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`decode_step` without any check: for callers that checked the batch."""
        return self.forward_tokens(tokens, self.cache.step_meta(positions, slots), out=out)

    @torch.no_grad()
    def forward_tokens(self, tokens: torch.Tensor, meta: StepMeta, max_query: int = 1,
                       out: torch.Tensor | None = None) -> torch.Tensor:
        """The token-flattened step: ``T`` tokens of any requests (decode rows, prefill chunks,
        verify rows), ``meta`` from :meth:`KVCache.step_meta` (uniform) or :meth:`KVCache.
        mixed_meta`; logits ``(T, V)``. Checks nothing (:func:`labkit.mixed.check_flat` does)."""
        x = self.embed(tokens, meta.positions)
        for i, block in enumerate(self.layers):
            q, k, v = block.pre_attention(x)
            x = block.post_attention(x, attention(self.cache, i, q, k, v, meta, max_query))
        return self.head(x, out=out)

    # The pieces of a step, for piecewise capture (labkit.piecewise): no checks here.
    def embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Embeddings ``(T, 1, D)`` of one step's tokens."""
        return cast(torch.Tensor, (self.tok_emb(tokens) + self.pos_emb(positions)).unsqueeze(1))

    def embed_step(self, tokens: torch.Tensor, positions: torch.Tensor,
                   slots: torch.Tensor) -> tuple[torch.Tensor, StepMeta]:
        """Embeddings ``(B, 1, D)`` of one decode step and its cache metadata."""
        meta = self.cache.step_meta(positions, slots)
        return self.embed(tokens, positions), meta

    def head(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Final LayerNorm and output head: logits ``(B, V)`` (into ``out`` when given)."""
        h = self.ln_f(x[:, 0])
        if out is None:
            return cast(torch.Tensor, self.lm_head(h))
        return torch.mm(h, self.lm_head.weight.t(), out=out)

    def save(self, path: str | Path, extra_metadata: dict[str, str] | None = None) -> None:
        """Save weights as safetensors, the config (and any extra strings) in the metadata."""
        from safetensors.torch import save_file

        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        meta = {**(extra_metadata or {}), "config": json.dumps(self.cfg.to_dict())}
        save_file(state, str(path), metadata=meta)

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu",
             **overrides: Any) -> TinyGPT:
        """Load a model saved by :meth:`save`; ``overrides`` change e.g. ``max_batch``."""
        from safetensors import safe_open
        from safetensors.torch import load_file

        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no checkpoint at {path}; create one with `labkit train`")
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if "config" not in meta:
            raise ValueError(f"{path} has no labkit config in its metadata; was it saved by "
                             "TinyGPT.save?")
        stored = json.loads(meta["config"])
        if stored.get("extra", None) == {}:
            del stored["extra"]       # a field older checkpoints carry; it was never used
        known = {f.name for f in fields(GPTConfig)}
        unknown = sorted(set(stored) - known) + sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown config field(s) {unknown} (from {path.name} or the "
                             f"overrides); GPTConfig has {sorted(known)}")
        dev = as_device(device)
        model = cls(GPTConfig(**{**stored, **overrides}))
        model.load_state_dict(load_file(str(path)))
        return model.to(dev)


def _check_config(cfg: object) -> None:
    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"cfg must be a GPTConfig, got {type(cfg).__name__}; build one with "
                        "GPTConfig(...) or preset(name)")


def as_device(device: str | torch.device, name: str = "device") -> torch.device:
    """``device`` as a ``torch.device``; a clear error for a malformed name or a missing GPU."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"{name} must be a str such as 'cpu' or 'cuda', or a torch.device; "
                        f"got {device!r} ({type(device).__name__})")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"{name} {device!r} is not a device name; use 'cpu', 'cuda' or "
                         "'cuda:0'") from exc
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"{name} {device!r} is not supported; use 'cpu' or 'cuda'")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"{name} {device!r} asked for but torch.cuda.is_available() is "
                           "False; use device='cpu' or run on a machine with an NVIDIA GPU")
    return dev


def build_model(cfg: GPTConfig, device: str | torch.device = "cpu", seed: int = 0) -> TinyGPT:
    """A model with seeded random weights on ``device``, in eval mode."""
    _check_config(cfg)
    dev = as_device(device)
    torch.manual_seed(as_int(seed, "seed", minimum=0, maximum=2**63 - 1,
                             fix="use a seed such as 0"))
    return TinyGPT(cfg).to(dev).eval()


def _prompt_ids(p: object, i: int) -> list[int]:
    """Prompt ``i`` as a list of ints; a clear error for anything else."""
    if isinstance(p, torch.Tensor):
        if p.dim() != 1 or p.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"prompt {i} is a tensor of shape {tuple(p.shape)} and dtype "
                            f"{p.dtype}; give a 1-D integer tensor or a list of token ids")
        return cast(list[int], p.tolist())
    if isinstance(p, (str, bytes)) or not isinstance(p, Sequence):
        raise TypeError(f"prompt {i} must be a list of token ids, got {type(p).__name__}; "
                        "encode text first (list(text.encode('utf-8')) for a byte model)")
    return [as_int(t, f"prompt {i} token {j}") for j, t in enumerate(p)]


def _check_prompts(model: object, prompts: object, max_new_tokens: object,
                   step_fn: object) -> tuple[list[list[int]], int]:
    """The prompts as lists of ids and the number of new tokens, checked against the cache."""
    if not isinstance(model, TinyGPT):
        raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}")
    if isinstance(prompts, (str, bytes, torch.Tensor)) or not isinstance(prompts, Sequence):
        raise TypeError(f"prompts must be a list of prompts (each a list of token ids), got "
                        f"{type(prompts).__name__}; wrap a single prompt as [prompt]")
    n_new = as_int(max_new_tokens, "max_new_tokens", minimum=0,
                   fix="ask for 0 or more new tokens")
    if step_fn is not None and not callable(step_fn):
        raise TypeError(f"step_fn must be callable (tokens, positions, slots) -> logits, got "
                        f"{type(step_fn).__name__}")
    ids = [_prompt_ids(p, i) for i, p in enumerate(prompts)]
    cfg = model.cfg
    if len(ids) > cfg.max_batch:
        raise ValueError(f"{len(ids)} prompts but the cache holds max_batch={cfg.max_batch}; "
                         "build the model with a larger max_batch or send fewer prompts")
    for i, p in enumerate(ids):
        if not p:
            raise ValueError(f"prompt {i} is empty; give at least one token")
        need = len(p) + max(n_new - 1, 0)
        if need > cfg.max_seq:
            raise ValueError(
                f"prompt {i} ({len(p)} tokens) + {n_new} new tokens needs {need} cache "
                f"positions (the last new token is not written) but the KV cache holds "
                f"max_seq={cfg.max_seq}; raise max_seq or generate fewer tokens")
        if min(p) < 0 or max(p) >= cfg.vocab_size:
            raise ValueError(f"prompt {i} has token ids outside [0, {cfg.vocab_size}); map "
                             "them into the model's vocabulary")
    return ids, n_new


@torch.no_grad()
def generate(model: TinyGPT, prompts: Sequence[Sequence[int]], max_new_tokens: int,
             step_fn: StepFn | None = None) -> list[list[int]]:
    """Greedy decoding of several prompts (lengths may differ) in one batch: each prompt is
    prefilled alone into its own slot, then all rows decode together. ``step_fn(tokens,
    positions, slots) -> logits`` replaces ``model.decode_step``. Returns each prompt's new
    ids. ``L`` prompt tokens and ``N >= 1`` new ones write positions ``0 .. L + N - 2`` (the
    last new token is never fed back). Everything is checked before anything is written."""
    ids, n_new = _check_prompts(model, prompts, max_new_tokens, step_fn)
    if not ids or n_new == 0:
        return [[] for _ in ids]
    step = step_fn or model.decode  # the prompts were checked above; argmax stays in range
    dev, n = model.device, len(ids)
    for i, p in enumerate(ids):  # paged layout: blocks for every position written
        model.cache.reserve(i, len(p) + n_new - 1)
    try:
        first = [model.prefill(torch.tensor([p], device=dev), torch.tensor([i], device=dev))
                 .argmax(-1) for i, p in enumerate(ids)]
        tokens = torch.cat(first)
        positions = torch.tensor([len(p) for p in ids], device=dev)
        slots = torch.arange(n, device=dev)
        out = [tokens]
        for _ in range(n_new - 1):
            tokens = step(tokens, positions, slots).argmax(-1)
            positions = positions + 1
            out.append(tokens)
        return cast(list[list[int]], torch.stack(out, dim=1).tolist())
    finally:
        for i in range(n):
            model.cache.release(i)


def generate_text(model: TinyGPT, prompt: str, max_new_tokens: int = 100) -> str:
    """Greedy continuation of a text prompt with a byte-level model (``vocab_size=256``)."""
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}; for token ids "
                        "use generate(model, [ids], n)")
    if not isinstance(model, TinyGPT) or model.cfg.vocab_size != 256:
        raise ValueError("generate_text needs a byte-level TinyGPT (vocab_size=256)")
    new = generate(model, [list(prompt.encode("utf-8"))], max_new_tokens)[0]
    return bytes(new).decode("utf-8", errors="replace")
