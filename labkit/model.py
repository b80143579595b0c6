"""A GPT-2-style decoder with a static KV cache, small enough to read in one sitting.

The decode step is written so that it can be captured in a CUDA graph:

* the KV cache (:mod:`labkit.kvcache`) is allocated once: ``(layers, slots, max_seq, heads,
  head_dim)`` in the slot layout, or blocks of a pool with a block table in the paged layout;
  each step reads it in place (no copy of a whole row per layer);
* ``decode_step(tokens, positions, slots)`` takes device tensors only, never reads a value
  back to the host, and every shape depends on the batch size alone;
* each row of a batch may sit at its own position and use its own cache slot;
* slot ``config.max_batch`` is a *scratch* slot: padded rows write there, so padding never
  touches a live request's cache.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from labkit.kvcache import LAYOUTS, KVCache, StepMeta, make_cache

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class GPTConfig:
    """Shape of a :class:`TinyGPT`. ``max_batch`` live cache slots plus one scratch slot."""

    vocab_size: int = 256
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 256
    max_batch: int = 8
    max_seq: int = 256
    dtype: str = "float32"
    extra: dict = field(default_factory=dict)
    #: KV-cache layout: ``'slot'`` (one row per slot) or ``'paged'`` (blocks + block table)
    kv_layout: str = "slot"
    #: positions per block (paged layout)
    block_size: int = 16
    #: blocks in the paged pool, the pad block included (None: as much room as the slots)
    num_blocks: int | None = None

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not supported; use one of {sorted(_DTYPES)}")
        if self.kv_layout not in LAYOUTS:
            raise ValueError(f"kv_layout {self.kv_layout!r} is not supported; use one of "
                             f"{list(LAYOUTS)}")
        if self.d_model % self.n_head:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_head={self.n_head}; "
                "pick n_head that divides d_model"
            )
        for name in ("vocab_size", "n_layer", "n_head", "d_model", "max_batch", "max_seq"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def scratch_slot(self) -> int:
        """Cache slot that padded rows write to (never given to a request)."""
        return self.max_batch

    def to_dict(self) -> dict:
        return asdict(self)


# Configurations used throughout the notebooks and the benchmark.
PRESETS: dict[str, dict] = {
    # trained on the corpus by `labkit train`; byte-level vocabulary
    "char": dict(vocab_size=256, n_layer=4, n_head=4, d_model=128, max_seq=256),
    # the two timing models of the design: 4 x 256 and 12 x 768 (GPT-2 small shape)
    "small": dict(vocab_size=50257, n_layer=4, n_head=4, d_model=256, max_seq=256),
    "gpt2": dict(vocab_size=50257, n_layer=12, n_head=12, d_model=768, max_seq=256),
    # fits a CPU test in milliseconds
    "test": dict(vocab_size=97, n_layer=2, n_head=2, d_model=32, max_seq=32),
}


def preset(name: str, **overrides) -> GPTConfig:
    """A named configuration (``char``, ``small``, ``gpt2``, ``test``) with overrides."""
    if name not in PRESETS:
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
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    def forward_full(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Causal attention over a whole sequence; returns output and this layer's k, v."""
        q, k, v = self._split(x)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(x.shape))
        return self._mlp(x), k, v

    def forward_step(self, x: torch.Tensor, cache: KVCache, layer: int,
                     meta: StepMeta) -> torch.Tensor:
        """One new token per row ``x`` ``(B, 1, D)``: write k, v into the cache, attend over
        the row's positions in place."""
        b = x.shape[0]
        q, k, v = self.qkv(self.ln1(x)).view(b, 3, self.n_head, self.head_dim).unbind(1)
        cache.write(layer, k, v, meta)
        y = cache.attend(layer, q, meta)  # (B, H, hd)
        x = x + self.proj(y.reshape(x.shape))
        return self._mlp(x)


class TinyGPT(nn.Module):
    """GPT-2-style decoder (learned positions, pre-LN, GELU MLP) with a static KV cache.

    Unlike GPT-2 the output head is not tied to the embedding: random weights then give
    varied tokens, which makes token-for-token comparisons meaningful.
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        options = ({"block_size": cfg.block_size, "num_blocks": cfg.num_blocks}
                   if cfg.kv_layout == "paged" else {})
        self.cache = make_cache(cfg.kv_layout, cfg.n_layer, cfg.max_batch, cfg.max_seq,
                                cfg.n_head, cfg.head_dim, torch.float32, **options)
        self.register_buffer("_arange", torch.arange(cfg.max_seq), persistent=False)
        self.apply(self._init)
        self.to(cfg.torch_dtype)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    # ------------------------------------------------------------------ helpers
    @property
    def device(self) -> torch.device:
        return self.tok_emb.weight.device

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def k_cache(self) -> torch.Tensor:
        """All keys: ``(layers, slots, max_seq, heads, head_dim)`` (slot layout) or
        ``(layers, blocks, block_size, heads, head_dim)`` (paged)."""
        return self.cache.k

    @property
    def v_cache(self) -> torch.Tensor:
        return self.cache.v

    def cache_bytes(self) -> int:
        return self.cache.nbytes()

    def reset_cache(self) -> None:
        self.cache.reset()

    def _check_tensor(self, name: str, t: torch.Tensor, ndim: int) -> None:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device != self.device:
            raise ValueError(
                f"{name} is on {t.device} but the model is on {self.device}; "
                f"move it with {name}.to({str(self.device)!r})"
            )
        if t.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"{name} has dtype {t.dtype}; it must hold integer ids (torch.long)")
        if t.dim() != ndim:
            raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")

    def _check_values(self, tokens: torch.Tensor, positions: torch.Tensor | None,
                      slots: torch.Tensor, extra_len: int = 0) -> None:
        """Value checks; they read values on the host, so only for CPU tensors or on request."""
        cfg = self.cfg
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= cfg.vocab_size):
            raise ValueError(f"token ids must lie in [0, {cfg.vocab_size}); "
                             f"got min {int(tokens.min())}, max {int(tokens.max())}")
        if slots.numel() and (int(slots.min()) < 0 or int(slots.max()) > cfg.max_batch):
            raise ValueError(f"cache slots must lie in [0, {cfg.max_batch}] "
                             f"(slot {cfg.max_batch} is the scratch slot); got {slots.tolist()}")
        if positions is not None and positions.numel():
            last = int(positions.max()) + extra_len
            if int(positions.min()) < 0 or last >= cfg.max_seq:
                raise ValueError(
                    f"position {last} is past the KV cache (max_seq={cfg.max_seq}); "
                    f"build the model with a larger max_seq or generate fewer tokens")
        if cfg.kv_layout == "paged" and positions is not None:
            self._check_room(slots.tolist(), [p + extra_len + 1 for p in positions.tolist()])

    def _check_room(self, slots: list[int], needed: list[int]) -> None:
        """Paged layout: each live slot must own blocks for the positions it writes."""
        for s, n in zip(slots, needed):
            if s != self.cfg.scratch_slot and n > self.cache.capacity(s):
                raise ValueError(
                    f"slot {s} owns room for {self.cache.capacity(s)} positions but the step "
                    f"writes position {n - 1}; reserve blocks first "
                    f"(model.cache.reserve({s}, {n}))")

    # ------------------------------------------------------------------ forward passes
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Full-sequence forward pass without the cache: logits ``(B, T, V)``. Reference path."""
        self._check_tensor("tokens", tokens, 2)
        if tokens.shape[1] > self.cfg.max_seq:
            raise ValueError(f"sequence of {tokens.shape[1]} tokens is longer than "
                             f"max_seq={self.cfg.max_seq}; build the model with a larger max_seq")
        x = self.tok_emb(tokens) + self.pos_emb(self._arange[: tokens.shape[1]])
        for block in self.blocks:
            x, _, _ = block.forward_full(x)
        return self.lm_head(self.ln_f(x))

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Run prompts ``(B, T)`` of one length, fill cache slots ``slots`` at positions 0..T-1.

        Returns the logits of the last prompt position, ``(B, V)``.
        """
        self._check_tensor("tokens", tokens, 2)
        self._check_tensor("slots", slots, 1)
        b, t = tokens.shape
        if slots.shape[0] != b:
            raise ValueError(f"slots has {slots.shape[0]} entries for {b} prompts; give one each")
        if t < 1:
            raise ValueError("prompt is empty; give at least one token")
        if t > self.cfg.max_seq:
            raise ValueError(f"prompt of {t} tokens is longer than the KV cache "
                             f"(max_seq={self.cfg.max_seq}); shorten it or raise max_seq")
        if tokens.device.type == "cpu":
            self._check_values(tokens, None, slots)
            if self.cfg.kv_layout == "paged":
                self._check_room(slots.tolist(), [t] * b)
        x = self.tok_emb(tokens) + self.pos_emb(self._arange[:t])
        for i, block in enumerate(self.blocks):
            x, k, v = block.forward_full(x)
            self.cache.write_prefill(i, k.transpose(1, 2), v.transpose(1, 2), slots)
        return self.lm_head(self.ln_f(x[:, -1]))

    @torch.no_grad()
    def decode_step(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                    *, check: bool | None = None,
                    out: torch.Tensor | None = None) -> torch.Tensor:
        """One decode step for a batch: token ``tokens[i]`` sits at ``positions[i]`` of slot
        ``slots[i]``. Returns logits ``(B, V)``.

        Capture-safe: shapes depend on ``B`` only and nothing is read back to the host.
        ``out`` (``(B, V)``, the model's dtype) receives the logits instead of a new tensor:
        graphs write into one static buffer allocated outside their memory pool.

        Value checks (ids in range, position inside the cache) read values on the host, so
        they run by default only for CPU tensors; pass ``check=True`` to force them on CUDA
        (outside capture), ``check=False`` to skip them.
        """
        self._check_tensor("tokens", tokens, 1)
        self._check_tensor("positions", positions, 1)
        self._check_tensor("slots", slots, 1)
        b = tokens.shape[0]
        if positions.shape[0] != b or slots.shape[0] != b:
            raise ValueError(f"tokens, positions and slots must have one entry per row; got "
                             f"{b}, {positions.shape[0]}, {slots.shape[0]}")
        if b > self.cfg.max_batch:
            raise ValueError(f"batch of {b} rows is larger than the cache's max_batch="
                             f"{self.cfg.max_batch}; build the model with a larger max_batch")
        if check is None:
            check = tokens.device.type == "cpu"
        if check:
            self._check_values(tokens, positions, slots)
        meta = self.cache.step_meta(positions, slots)
        x = (self.tok_emb(tokens) + self.pos_emb(positions)).unsqueeze(1)  # (B, 1, D)
        for i, block in enumerate(self.blocks):
            x = block.forward_step(x, self.cache, i, meta)
        h = self.ln_f(x[:, 0])
        if out is None:
            return self.lm_head(h)
        return torch.mm(h, self.lm_head.weight.t(), out=out)

    # ------------------------------------------------------------------ weights
    def save(self, path: str | Path, extra_metadata: dict[str, str] | None = None) -> None:
        """Save weights and config as safetensors (config, and any extra strings, in the
        metadata)."""
        import json

        from safetensors.torch import save_file

        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        meta = {**(extra_metadata or {}), "config": json.dumps(self.cfg.to_dict())}
        save_file(state, str(path), metadata=meta)

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu", **overrides) -> "TinyGPT":
        """Load a model saved by :meth:`save`; ``overrides`` change e.g. ``max_batch``."""
        import json

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
        cfg = GPTConfig(**{**json.loads(meta["config"]), **overrides})
        model = cls(cfg)
        state = load_file(str(path))
        model.load_state_dict(state)
        return model.to(device)


def build_model(cfg: GPTConfig, device: str | torch.device = "cpu", seed: int = 0) -> TinyGPT:
    """A model with seeded random weights on ``device``, in eval mode."""
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' asked for but torch.cuda.is_available() is False; "
                           "use device='cpu' or run on a machine with an NVIDIA GPU")
    torch.manual_seed(seed)
    return TinyGPT(cfg).to(device).eval()


StepFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@torch.no_grad()
def generate(model: TinyGPT, prompts: Sequence[Sequence[int]], max_new_tokens: int,
             step_fn: StepFn | None = None) -> list[list[int]]:
    """Greedy decoding of several prompts (lengths may differ) in one batch.

    Each prompt is prefilled alone into its own cache slot, then all rows decode together,
    each at its own position. ``step_fn(tokens, positions, slots) -> logits`` replaces
    ``model.decode_step`` (a graph replay or a padding dispatcher, say). Returns the new
    token ids of each prompt.
    """
    cfg = model.cfg
    n = len(prompts)
    if n == 0:
        return []
    if n > cfg.max_batch:
        raise ValueError(f"{n} prompts but the cache holds max_batch={cfg.max_batch}; "
                         "build the model with a larger max_batch or send fewer prompts")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty; give at least one token")
        if len(p) + max_new_tokens - 1 >= cfg.max_seq:
            raise ValueError(
                f"prompt {i} ({len(p)} tokens) + {max_new_tokens} new tokens needs "
                f"{len(p) + max_new_tokens} positions but the KV cache holds "
                f"max_seq={cfg.max_seq}; raise max_seq or generate fewer tokens")
        if min(p) < 0 or max(p) >= cfg.vocab_size:
            raise ValueError(f"prompt {i} has token ids outside [0, {cfg.vocab_size})")
    if max_new_tokens == 0:
        return [[] for _ in prompts]
    step = step_fn or model.decode_step
    dev = model.device
    for i, p in enumerate(prompts):  # paged layout: blocks for every position written
        model.cache.reserve(i, len(p) + max_new_tokens - 1)
    try:
        first = []
        for i, p in enumerate(prompts):
            logits = model.prefill(torch.tensor([list(p)], device=dev),
                                   torch.tensor([i], device=dev))
            first.append(logits.argmax(-1))
        tokens = torch.cat(first)
        positions = torch.tensor([len(p) for p in prompts], device=dev)
        slots = torch.arange(n, device=dev)
        out = [tokens]
        for _ in range(max_new_tokens - 1):
            tokens = step(tokens, positions, slots).argmax(-1)
            positions = positions + 1
            out.append(tokens)
        return torch.stack(out, dim=1).tolist()
    finally:
        for i in range(n):
            model.cache.release(i)


def generate_text(model: TinyGPT, prompt: str, max_new_tokens: int = 100) -> str:
    """Greedy continuation of a text prompt with a byte-level model (``vocab_size=256``)."""
    if model.cfg.vocab_size != 256:
        raise ValueError("generate_text needs a byte-level model (vocab_size=256)")
    ids = list(prompt.encode("utf-8"))
    new = generate(model, [ids], max_new_tokens)[0]
    return bytes(new).decode("utf-8", errors="replace")


def perplexity_hint(loss: float) -> float:
    """exp(loss), guarded against overflow, for training logs."""
    return math.exp(min(loss, 50.0))
