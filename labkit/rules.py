"""vLLM's CUDA-graph rules, stated once: graph keys, mode resolution, padding, spec-decode
rounding, and the default capture sizes of vLLM and SGLang (pure; no torch).

Each rule names the file and function it follows, read from the released source of
**vLLM 0.13.0** (:data:`VLLM_VERSION`) and **SGLang 0.5.6** (:data:`SGLANG_VERSION`); the
rules change between releases (vLLM 0.11 capped the default capture size at
``min(2 * max_num_seqs, 512)`` without the speculative factor). Everything in labkit that
decides a step's graph (:mod:`labkit.runner`, :mod:`labkit.mixed`), explains it
(``labkit.teach.modes``) or reads an engine's settings (:mod:`labkit.sizes.engines`)
calls these functions instead of restating them. Arguments are checked values (callers check
at their edge), except where a function says it checks.

Simplified: LoRA only in :mod:`labkit.lora` (keyed
by ``has_lora``, not by ``num_active_loras``), no sequence parallelism (vLLM then
rounds to ``max(1 + k, tp)``), no cascade attention, no data parallelism.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

VLLM_VERSION = "vLLM 0.13.0"
SGLANG_VERSION = "SGLang 0.5.6"

# ----------------------------------------------------------------------------- modes

#: vLLM's ``CUDAGraphMode`` (``vllm/config/compilation.py``)
GraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
GRAPH_MODES: tuple[GraphMode, ...] = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY",
                                      "FULL_AND_PIECEWISE")
#: the mode one step runs in (vLLM's runtime ``CUDAGraphMode``: NONE is eager)
RuntimeMode = Literal["NONE", "PIECEWISE", "FULL"]
#: ``CUDAGraphMode.decode_mode()`` and ``mixed_mode()``: (mode of uniform decode batches,
#: mode of the other batches)
ROUTINES: dict[GraphMode, tuple[RuntimeMode, RuntimeMode]] = {
    "NONE": ("NONE", "NONE"), "PIECEWISE": ("PIECEWISE", "PIECEWISE"), "FULL": ("FULL", "FULL"),
    "FULL_DECODE_ONLY": ("FULL", "NONE"), "FULL_AND_PIECEWISE": ("FULL", "PIECEWISE")}
#: the attention backend's ``AttentionCGSupport`` (``vllm/v1/attention/backends/utils.py``)
Support = Literal["NEVER", "UNIFORM_SINGLE_TOKEN_DECODE", "UNIFORM_BATCH", "ALWAYS"]
SUPPORTS: tuple[Support, ...] = ("NEVER", "UNIFORM_SINGLE_TOKEN_DECODE", "UNIFORM_BATCH",
                                 "ALWAYS")
#: labkit's attention: capturable for uniform batches only (see :mod:`labkit.mixed`), as
#: FlashAttention 2's backend (``vllm/v1/attention/backends/flash_attn.py``)
LABKIT_SUPPORT: Support = "UNIFORM_BATCH"


def separate_routine(mode: GraphMode) -> bool:
    """``CUDAGraphMode.separate_routine()``: uniform decode batches and the others run in
    different modes (FULL_DECODE_ONLY, FULL_AND_PIECEWISE)."""
    decode, mixed = ROUTINES[mode]
    return decode != mixed


def resolve_mode(mode: GraphMode, support: Support = LABKIT_SUPPORT,
                 uniform_query_len: int = 1) -> GraphMode:
    """The mode vLLM runs when ``mode`` is asked for and the attention has ``support``
    (``GPUModelRunner._check_and_update_cudagraph_mode``, ``vllm/v1/worker/gpu_model_runner.py``):
    mixed FULL graphs need ALWAYS (else FULL_AND_PIECEWISE: labkit always cuts at attention),
    FULL decode graphs need more than NEVER (else PIECEWISE), a verify batch
    (``1 + k > 1`` tokens a request) needs UNIFORM_BATCH. FULL with NEVER raises, as vLLM does."""
    if mode not in GRAPH_MODES:
        raise ValueError(f"cudagraph_mode must be one of {list(GRAPH_MODES)}, got {mode!r}")
    if support not in SUPPORTS:
        raise ValueError(f"support must be one of {list(SUPPORTS)}, got {support!r}")
    decode, mixed = ROUTINES[mode]
    if mixed == "FULL" and support != "ALWAYS":
        if support == "NEVER":
            raise ValueError(f"cudagraph_mode={mode} needs an attention that can be captured; "
                             "use cudagraph_mode='PIECEWISE'")
        mode, decode = "FULL_AND_PIECEWISE", "FULL"
    if decode == "FULL" and (support == "NEVER" or (
            uniform_query_len > 1 and support == "UNIFORM_SINGLE_TOKEN_DECODE")):
        return "PIECEWISE"
    return mode


# ----------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class BatchDescriptor:
    """vLLM's graph key (``BatchDescriptor``, ``vllm/forward_context.py``): the tokens run
    (padded), and for a uniform batch (every request ``uniform_query_len`` tokens) the
    requests ``num_tokens // uniform_query_len``; a mixed batch's key is ``num_tokens`` alone
    (``relax_for_mixed_batch_cudagraphs``). ``has_lora``: whether any request runs a LoRA adapter;
    :class:`labkit.lora.LoRAGraphs` keys its graphs by it (vLLM PR #25914,
    ``cudagraph_specialize_lora``); the other runners leave it False."""

    num_tokens: int
    num_reqs: int | None = None
    uniform: bool = False
    has_lora: bool = False

    @property
    def non_uniform(self) -> BatchDescriptor:
        """The key relaxed for mixed-batch graphs (``relax_for_mixed_batch_cudagraphs``)."""
        return BatchDescriptor(self.num_tokens, has_lora=self.has_lora)


# ----------------------------------------------------------------------------- padding


def padded_size(sizes: Sequence[int], n: int) -> int | None:
    """The smallest of the sorted ``sizes`` holding ``n`` tokens (or rows), or None above the
    largest: vLLM's ``bs_to_padded_graph_size`` (``VllmConfig.pad_for_cudagraph``,
    ``vllm/config/vllm.py``). THE padding rule: every padding in labkit calls it."""
    i = bisect.bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else None


def padding_table(sizes: Sequence[int], max_n: int) -> list[int]:
    """``table[n]`` = :func:`padded_size` of ``n`` for ``n`` in ``0..max_n``, 0 where it is None
    (eager) and at ``table[0]`` (there is no empty step); ``sizes`` sorted. vLLM precomputes
    the same table (``bs_to_padded_graph_size``) up to its largest capture size."""
    return [0] + [padded_size(sizes, n) or 0 for n in range(1, max_n + 1)]


# ----------------------------------------------------------------------------- spec decode


def rounds_for_spec_decode(mode: GraphMode, uniform_query_len: int) -> bool:
    """Whether vLLM rounds the capture sizes to multiples of ``1 + k``: only when uniform
    decode batches get FULL graphs of their own (``decode_mode() == FULL and
    separate_routine()``) and ``1 + k > 1`` (``GPUModelRunner._check_and_update_cudagraph_mode``
    in ``vllm/v1/worker/gpu_model_runner.py``, a "temp-fix" for vLLM issue #28207). ``mode``
    is the resolved mode (:func:`resolve_mode`). Under PIECEWISE or FULL the sizes stay."""
    decode, _ = ROUTINES[mode]
    return decode == "FULL" and separate_routine(mode) and uniform_query_len > 1


def spec_decode_sizes(sizes: Sequence[int], uniform_query_len: int,
                      max_size: int | None = None) -> list[int]:
    """vLLM's ``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode``
    (``vllm/config/compilation.py``, without sequence parallelism): every size rounded up to a
    multiple of ``q = uniform_query_len``, kept at or below ``max_size`` (default: the largest
    size), sorted and distinct; none left but ``q <= max_size``: ``[q]``; none left at all:
    ``ValueError`` (vLLM raises there too). ``q = 1`` leaves the sizes as they are (sorted)."""
    q = uniform_query_len
    top = max(sizes) if max_size is None else max_size
    if q <= 1:
        return sorted(set(sizes))
    up = sorted({r for r in (-(-s // q) * q for s in sizes) if r <= top})
    if not up and q <= top:
        up = [q]
    if not up:
        raise ValueError(f"no capture size is left after rounding {sorted(sizes)} up to a "
                         f"multiple of {q} (1 + num_speculative_tokens, the uniform_query_len) "
                         f"at most {top}, as vLLM's adjust_cudagraph_sizes_for_spec_decode "
                         f"raises; lower num_speculative_tokens, or capture a size >= {q}")
    return up


def capture_sizes(sizes: Sequence[int], mode: GraphMode, uniform_query_len: int) -> list[int]:
    """The sizes vLLM captures for the resolved ``mode``: :func:`spec_decode_sizes` where
    :func:`rounds_for_spec_decode`, else ``sizes`` sorted."""
    if rounds_for_spec_decode(mode, uniform_query_len):
        return spec_decode_sizes(sizes, uniform_query_len)
    return sorted(set(sizes))


def graph_keys(sizes: Sequence[int], mode: GraphMode, uniform_query_len: int,
               max_num_seqs: int) -> dict[RuntimeMode, set[BatchDescriptor]]:
    """The keys of the graphs ``mode`` captures over the (already adjusted) ``sizes``
    (``CudagraphDispatcher.initialize_cudagraph_keys``, ``vllm/v1/cudagraph_dispatcher.py``):
    mixed-mode keys ``BatchDescriptor(s)`` for every size, and with a separate routine FULL
    uniform keys ``(s, s // q, True)`` for sizes ``q <= s <= q * max_num_seqs``."""
    q = uniform_query_len
    keys: dict[RuntimeMode, set[BatchDescriptor]] = {"FULL": set(), "PIECEWISE": set()}
    decode, mixed = ROUTINES[mode]
    if mixed != "NONE":
        keys[mixed] |= {BatchDescriptor(s) for s in sizes}
    if decode == "FULL" and separate_routine(mode):
        keys["FULL"] |= {BatchDescriptor(s, s // q, True) for s in sizes
                         if q <= s <= q * max_num_seqs}
    return keys


def dispatch(keys: dict[RuntimeMode, set[BatchDescriptor]], sizes: Sequence[int],
             mode: GraphMode, uniform_query_len: int, num_tokens: int,
             uniform: bool) -> tuple[RuntimeMode, BatchDescriptor]:
    """The runtime mode and key of a step of ``num_tokens`` tokens (``uniform``: every request
    ``uniform_query_len`` of them), as ``CudagraphDispatcher.dispatch`` decides: pad
    (:func:`padded_size`); try the uniform FULL key, then the relaxed FULL key, then the relaxed
    PIECEWISE key; else NONE, unpadded (also above the largest size and in mode NONE)."""
    p = padded_size(sizes, num_tokens) if mode != "NONE" else None
    if p is None:
        return "NONE", BatchDescriptor(num_tokens)
    key = BatchDescriptor(p, p // uniform_query_len, True) if uniform else BatchDescriptor(p)
    if key in keys["FULL"]:
        return "FULL", key
    if key.non_uniform in keys["FULL"]:
        return "FULL", key.non_uniform
    if key.non_uniform in keys["PIECEWISE"]:
        return "PIECEWISE", key.non_uniform
    return "NONE", BatchDescriptor(num_tokens)


# ----------------------------------------------------------------------------- default sizes

#: vLLM 0.13.0 defaults on a GPU with >= 70 GiB that is not an A100 (H100, H200), OpenAI
#: server (``EngineArgs._set_default_args`` in ``vllm/engine/arg_utils.py``)
VLLM_DEFAULT_MAX_NUM_SEQS = 1024
VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


def vllm_default_max_capture_size(max_num_seqs: int, uniform_query_len: int = 1) -> int:
    """vLLM 0.13.0's default ``max_cudagraph_capture_size``: ``min(2 * max_num_seqs * (1 + k),
    512)`` (``VllmConfig._set_cudagraph_sizes``, ``vllm/config/vllm.py``), before the cap at
    ``max_num_batched_tokens``."""
    return min(max_num_seqs * uniform_query_len * 2, 512)


def vllm_default_capture_sizes(max_capture_size: int) -> list[int]:
    """vLLM 0.13.0's default capture sizes up to ``max_capture_size`` (tokens):
    ``[1, 2, 4]`` + multiples of 8 below 256 + multiples of 16 from 256
    (``VllmConfig._set_cudagraph_sizes``, ``vllm/config/vllm.py``)."""
    m = max_capture_size
    out = [i for i in (1, 2, 4) if i <= m]
    if m >= 8:
        out += list(range(8, min(m + 1, 256), 8))
    if m >= 256:
        out += list(range(256, m + 1, 16))
    return out


def sglang_default_max_bs(gpu_memory_mib: float | None, tp_size: int = 1) -> int:
    """SGLang 0.5.6's default ``--cuda-graph-max-bs`` for a GPU of ``gpu_memory_mib`` MiB
    (``ServerArgs._handle_gpu_memory_settings``, ``python/sglang/srt/server_args.py``, CUDA
    GPUs; ``None``: unknown -> 160)."""
    if gpu_memory_mib is None:
        return 160
    for below_gib, tp_below_4, tp_4_up in ((20, 8, 8), (35, 24, 80), (60, 32, 160),
                                           (160, 256, 512)):
        if gpu_memory_mib < below_gib * 1024:
            return tp_below_4 if tp_size < 4 else tp_4_up
    return 512


def sglang_default_capture_sizes(max_bs: int, *, disable_padding: bool = False,
                                 speculative: bool = False) -> list[int]:
    """SGLang 0.5.6's default batch sizes (``ServerArgs._generate_cuda_graph_batch_sizes``,
    ``python/sglang/srt/server_args.py``), in requests."""
    m = max_bs
    if disable_padding:
        out = list(range(1, m + 1))
    elif not speculative:
        out = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16),
               *range(512, m + 1, 32)]
    else:
        out = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
               + list(range(72, 257, 8)) + list(range(272, m + 1, 16)))
    return [b for b in out if b <= m]
