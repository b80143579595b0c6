"""A fused decode step in plain PyTorch: the readable step's arithmetic in fewer, fatter kernels.

Same weights (read live), same KV cache, same interface as ``TinyGPT.decode_step``
(:func:`make_fused_step`). Per layer: LN1; QKV as one GEMM with its bias in the cuBLASLt
epilogue; k and v into the cache in one ``index_copy_``; attention over the cache in place;
the out-projection GEMM added onto the residual (``addmm_``, ``beta=1``); LN2; the MLP
up-projection with bias and GELU in the epilogue (``torch._addmm_activation``); the
down-projection added onto the residual; one broadcast add of the residual's biases: 9
kernels against the readable step's 12 to 15, ``9 L + 11`` a step (gpt2: 119) when cuBLAS runs
each GEMM as one kernel. For gpt2's down-projection at small batches it adds split-K
reductions (12 more); forbidding split-K made the step twice as slow on an H200, so labkit
keeps cuBLAS's choice (:func:`labkit.measure.opcount.op_counts` counts them).

``attention=``: ``"efficient"`` (the readable step's kernel), ``"flash"`` (FlashAttention 2's
variable-length kernel, bf16/fp16) or ``"auto"``: flash up to ``FLASH_MAX_ROW_HEADS``.
``branches=``: the bias pairs and metadata (5 kernels) run on a side stream joined by events,
parallel branches of a captured graph (``None``: only while capturing; ``True``: eagerly too).

The residual stream is kept as two rows ``s = [x, x + b_proj]``: row 1 is the ``C`` of the
out-projection, which so yields the middle stream with its bias in; after the down-projection
one broadcast add ``s' = x + [b_fc_out, b_fc_out + b_proj(next)]`` writes both rows of the next
layer (the pairs come from the live parameters: one stack, one cumsum). cuBLASLt fuses bias
and GELU only for GEMMs of at least 2 rows (``isInputCompliesAddmmCudaLt``,
``aten/src/ATen/native/cuda/Blas.cpp``), so a batch of 1 is carried as 2 rows.

A captured graph reads the step's small buffers on every replay, so
:class:`labkit.graphs.CapturedGraph` keeps the step alive (freed, it gave NaN logits and an
illegal memory access on the H200). float32 tokens equal the readable step's; bf16 agreement:
:func:`agreement`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from labkit.checks import as_int
from labkit.kvcache import AttentionKernel, StepMeta, flash_supported
from labkit.model import StepFn, TinyGPT, generate
from labkit.step_checks import Check, check_choice

#: ``attention=`` choices of :class:`FusedStep`
Attention = Literal["auto", "flash", "efficient"]
ATTENTION: tuple[Attention, ...] = ("auto", "flash", "efficient")
#: ``"auto"`` attention takes FlashAttention up to this many (row, head) pairs per step (H200,
#: bf16: faster for gpt2 at 12 and 96 pairs, slower at 384 and 768; small: faster up to 256)
FLASH_MAX_ROW_HEADS = 256


class FusedStep:
    """The fused decode step of one model (the module docstring), called like decode_step."""

    def __init__(self, model: TinyGPT, *, attention: Attention = "auto",
                 branches: bool | None = None) -> None:
        if not isinstance(model, TinyGPT):
            raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}; build one "
                            "with labkit.model.build_model")
        if branches is not None and not isinstance(branches, bool):
            raise TypeError(f"branches must be True, False or None, got {branches!r}")
        check_choice(attention, "attention", ATTENTION)
        if attention == "flash" and not flash_supported(model.cfg.torch_dtype,
                                                        model.cfg.head_dim):
            raise ValueError(f"attention='flash' needs a bf16 or fp16 model with head_dim a "
                             f"multiple of 8 up to 256; this one is {model.cfg.dtype} with "
                             f"head_dim {model.cfg.head_dim}: use attention='auto' or "
                             "'efficient'")
        self.model = model
        self.attention = attention
        self.branches = branches
        self._side: torch.cuda.Stream | None = None
        cfg = model.cfg
        self._zero = torch.zeros(cfg.d_model, dtype=cfg.torch_dtype, device=model.device)
        # (max_batch + 2,) int32 0, 1, 2, ...: query_start of a batch of B is its first B + 1
        self._arange32 = torch.arange(cfg.max_batch + 2, dtype=torch.int32,
                                      device=model.device)
        self._key_start: dict[int, torch.Tensor] = {}

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, *,
                 check: Check = None, out: torch.Tensor | None = None) -> torch.Tensor:
        self._check(tokens, positions, slots, check, out)
        return self.decode(tokens, positions, slots, out)

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """The step without any check (the dispatcher and graph capture checked the batch)."""
        return self._step(tokens, positions, slots, out)

    def _check(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
               check: Check, out: torch.Tensor | None) -> None:
        """The readable step's checks (shared code: same errors, same rules)."""
        m = self.model
        w = m.tok_emb.weight
        if self._zero.device != w.device or self._zero.dtype != w.dtype:
            raise RuntimeError(f"the model moved to {m.device} after its fused step was built "
                               f"on {self._zero.device}; build it again with "
                               "make_fused_step(model)")
        m.check_step(tokens, positions, slots, check, who="the fused step")
        b = tokens.shape[0]
        if out is not None and (not isinstance(out, torch.Tensor)
                                or tuple(out.shape) != (b, m.cfg.vocab_size)
                                or out.dtype != m.cfg.torch_dtype or out.device != m.device):
            raise ValueError(f"out must be a ({b}, {m.cfg.vocab_size}) {m.cfg.torch_dtype} "
                             f"tensor on {m.device}; got "
                             f"{getattr(out, 'shape', type(out).__name__)}")

    def attention_kernel(self, batch: int) -> AttentionKernel:
        """The attention kernel a step of ``batch`` rows uses (see ``attention=``)."""
        if self.attention != "auto":
            return self.attention
        cfg = self.model.cfg
        small = batch * cfg.n_head <= FLASH_MAX_ROW_HEADS
        return "flash" if small and flash_supported(cfg.torch_dtype, cfg.head_dim) \
            else "efficient"

    def _meta(self, positions: torch.Tensor, slots: torch.Tensor) -> StepMeta:
        """The step's cache metadata in 3 kernels (slot layout): key starts into a per-size
        buffer whose last entry (the end of the cache) is filled once, ``pos + 1`` and the
        write index. ``query_start`` is a slice of a constant."""
        cache = self.model.cache
        b = positions.shape[0]
        key_start = self._key_start.get(b)
        capturing = positions.is_cuda and torch.cuda.is_current_stream_capturing()
        if key_start is None:
            key_start = torch.full((b + 1,), cache.num_slots * cache.max_seq,
                                   dtype=torch.int32, device=positions.device)
            if not capturing:  # a buffer made during capture is not filled until replay
                self._key_start[b] = key_start
        torch.mul(slots, cache.max_seq, out=key_start[:b])
        seq_lens = torch.empty(b, dtype=torch.int32, device=positions.device)
        torch.add(positions, 1, out=seq_lens)
        return StepMeta(positions=positions, slots=slots,
                        write_index=cache.write_index(positions, slots),
                        seq_lens=seq_lens, key_start=key_start,
                        query_start=self._arange32[:b + 1])

    def _bias_pairs(self) -> torch.Tensor:
        """``(L + 1, 2, D)``: row ``l`` = ``[b_fc_out(l-1), b_fc_out(l-1) + b_proj(l)]`` (zero
        where a layer does not exist), from the live parameters: one stack, one cumsum."""
        blocks = self.model.layers
        z = self._zero
        pieces: list[torch.Tensor] = []
        for i in range(len(blocks) + 1):
            pieces.append(blocks[i - 1].fc_out.bias if i > 0 else z)
            pieces.append(blocks[i].proj.bias if i < len(blocks) else z)
        return torch.stack(pieces).view(len(blocks) + 1, 2, -1).cumsum(1)

    def _fork(self, tokens: torch.Tensor) -> tuple[torch.cuda.Stream, torch.cuda.Stream,
                                                   torch.cuda.Event, torch.cuda.Event] | None:
        """``(main, side, pairs_done, meta_done)`` when this step branches, else ``None``."""
        use = self.branches
        if use is None:
            use = tokens.is_cuda and torch.cuda.is_current_stream_capturing()
        if not (use and tokens.is_cuda):
            return None
        if self._side is None or self._side.device != tokens.device:
            self._side = torch.cuda.Stream(device=tokens.device)
        main = torch.cuda.current_stream(tokens.device)
        self._side.wait_stream(main)  # the inputs were written on the main stream
        return main, self._side, torch.cuda.Event(), torch.cuda.Event()

    @staticmethod
    def _keep_for(stream: torch.cuda.Stream, pairs: torch.Tensor, meta: StepMeta) -> None:
        """Eager branches: keep the side stream's tensors alive for ``stream`` too."""
        for t in (pairs, meta.seq_lens, meta.write_index):
            t.record_stream(stream)

    @staticmethod
    def _up(h: torch.Tensor, fc: torch.nn.Linear) -> torch.Tensor:
        """Up-projection + bias + tanh GELU: in the GEMM's epilogue on CUDA (on CPU torch's
        ``_addmm_activation`` applies the exact GELU, so plain ops there)."""
        if h.is_cuda:
            return torch._addmm_activation(fc.bias, h, fc.weight.t(), use_gelu=True)
        return F.gelu(torch.addmm(fc.bias, h, fc.weight.t()), approximate="tanh")

    def _step(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
              out: torch.Tensor | None) -> torch.Tensor:
        m = self.model
        cfg = m.cfg
        b, d, h, hd = tokens.shape[0], cfg.d_model, cfg.n_head, cfg.head_dim
        rows = max(b, 2)  # cuBLASLt fuses bias and GELU only for GEMMs of >= 2 rows
        kernel = self.attention_kernel(b)
        fork = self._fork(tokens)
        if fork is None:
            meta, pairs = self._meta(positions, slots), self._bias_pairs()
        else:  # bias pairs, then metadata, on the side stream; the embeddings meanwhile here
            main, side, pairs_done, meta_done = fork
            with torch.cuda.stream(side):
                pairs = self._bias_pairs()
                pairs_done.record(side)
                meta = self._meta(positions, slots)
                meta_done.record(side)
        x = torch.add(F.embedding(tokens, m.tok_emb.weight),
                      F.embedding(positions, m.pos_emb.weight))            # (B, D)
        if fork is not None:
            main.wait_event(pairs_done)
        s = torch.add(x, pairs[0, :, None].expand(2, rows, d))             # (2, R, D)
        for i, blk in enumerate(m.layers):
            a = F.layer_norm(s[0], (d,), blk.ln1.weight, blk.ln1.bias, blk.ln1.eps)
            qkv = torch.addmm(blk.qkv.bias, a, blk.qkv.weight.t()).view(rows, 3, h, hd)[:b]
            if fork is not None and i == 0:
                main.wait_event(meta_done)  # the side stream rejoins before its first reader
                if not torch.cuda.is_current_stream_capturing():
                    self._keep_for(main, pairs, meta)
            m.cache.write_kv(i, qkv[:, 1:].transpose(0, 1), meta)
            y = m.cache.attend(i, qkv[:, 0], meta, kernel).reshape(b, d)
            mid = s[1]                                                      # x + b_proj
            mid[:b].addmm_(y, blk.proj.weight.t())
            g = self._up(F.layer_norm(mid, (d,), blk.ln2.weight, blk.ln2.bias, blk.ln2.eps),
                         blk.fc)
            mid.addmm_(g, blk.fc_out.weight.t())
            if i + 1 < m.cfg.n_layer:
                s = torch.add(mid, pairs[i + 1, :, None].expand(2, rows, d))
            else:
                x = torch.add(mid[:b], pairs[i + 1, 0])
        x = F.layer_norm(x, (d,), m.ln_f.weight, m.ln_f.bias, m.ln_f.eps)
        if out is None:
            return torch.mm(x, m.lm_head.weight.t())
        return torch.mm(x, m.lm_head.weight.t(), out=out)


def make_fused_step(model: TinyGPT, *, attention: Attention = "auto",
                    branches: bool | None = None) -> FusedStep:
    """The fused decode step of ``model`` (see :class:`FusedStep`)."""
    return FusedStep(model, attention=attention, branches=branches)


@dataclass
class Agreement:
    """How the fused step's greedy decode compares with the readable step's."""

    tokens: int
    equal: int
    #: largest |logit difference| over the first step of every prompt
    max_logit_diff: float

    @property
    def fraction(self) -> float:
        """Share of equal greedy tokens (1.0 = identical)."""
        return self.equal / self.tokens if self.tokens else 1.0

    def to_dict(self) -> dict[str, float]:
        return {"tokens": self.tokens, "equal": self.equal, "fraction": self.fraction,
                "max_logit_diff": self.max_logit_diff}


def agreement(model: TinyGPT, prompts: Sequence[Sequence[int]], new_tokens: int = 8,
              step: StepFn | None = None) -> Agreement:
    """Greedy-decode ``prompts`` with the readable step and with ``step`` (default: the fused
    step), and compare: share of equal tokens, and the largest logit difference of one
    decode step from identical caches (both prompts prefilled, the same first token)."""
    new_tokens = as_int(new_tokens, "new_tokens", minimum=2,
                        fix="decode at least 2 new tokens (the first comes from prefill)")
    step = step or make_fused_step(model)
    ref = generate(model, prompts, new_tokens)
    got = generate(model, prompts, new_tokens, step_fn=step)
    pairs = [(a, c) for r, g in zip(ref, got) for a, c in zip(r, g)]
    diff = _first_step_diff(model, prompts, step)
    return Agreement(tokens=len(pairs), equal=sum(a == c for a, c in pairs),
                     max_logit_diff=diff)


@torch.no_grad()
def _first_step_diff(model: TinyGPT, prompts: Sequence[Sequence[int]], step: StepFn) -> float:
    """Max |readable - step| logits of one step after prefilling every prompt."""
    dev = model.device
    n = len(prompts)
    model.reset_cache()
    try:
        for i, p in enumerate(prompts):
            model.cache.reserve(i, len(p) + 1)
        first = [model.prefill(torch.tensor([list(p)], device=dev), torch.tensor([i], device=dev))
                 .argmax(-1) for i, p in enumerate(prompts)]
        tokens = torch.cat(first)
        positions = torch.tensor([len(p) for p in prompts], device=dev)
        slots = torch.arange(n, device=dev)
        a = model.decode_step(tokens, positions, slots).float()
        c = step(tokens, positions, slots).float()
        return float((a - c).abs().max())
    finally:
        for i in range(n):
            model.cache.release(i)
        model.reset_cache()
