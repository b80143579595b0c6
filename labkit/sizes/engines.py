"""What the real engines' CUDA-graph settings mean in labkit's terms (pure; no torch).

Read from the released source of **vLLM 0.13.0** and **SGLang 0.5.6**; each function names the
file and function it follows. The rules themselves (default sizes, padding, spec-decode
rounding, graph keys) are stated once in :mod:`labkit.rules`; the functions here check their
arguments and put the rules together as an engine's settings. The rules change between releases
(vLLM 0.11 capped the default at ``min(2 * max_num_seqs, 512)`` without the speculative factor;
SGLang 0.5.2x renamed ``--cuda-graph-max-bs`` to ``--cuda-graph-max-bs-decode``). Notebook 13
explains each setting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast
from collections.abc import Sequence

from labkit import rules
from labkit.checks import as_bool, as_int, as_number, as_size_list
from labkit.rules import (  # offered here, as before
    SGLANG_VERSION, VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS, VLLM_DEFAULT_MAX_NUM_SEQS, VLLM_VERSION,
)

VLLM_CUDAGRAPH_MODES = rules.GRAPH_MODES


@dataclass(frozen=True)
class LabkitSettings:
    """An engine's settings in labkit terms: ``capture_sizes`` in tokens (vLLM) or requests
    (SGLang), ``1 + k`` tokens per request (``k`` speculative), ``padding`` (else exact sizes
    only), the labkit ``mode`` of a decode step, and (FULL_AND_PIECEWISE, FULL_DECODE_ONLY) the
    largest FULL graph for uniform decode batches; above it, or for a mixed batch,
    ``CudagraphDispatcher`` picks PIECEWISE (FULL_AND_PIECEWISE) or none."""

    engine: str
    mode: str
    cudagraph_mode: str
    capture_sizes: tuple[int, ...]
    max_capture_size: int
    max_batch: int
    tokens_per_request: int = 1
    padding: bool = True
    full_max_size: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def padded(self, n: int) -> int | None:
        """The captured size ``n`` runs at (vLLM's ``bs_to_padded_graph_size``); ``None``: eager."""
        n = as_int(n, "n", minimum=1)
        if not self.padding:
            return n if n in self.capture_sizes else None
        return rules.padded_size(self.capture_sizes, n)

    def dispatcher_kwargs(self, max_batch: int) -> dict | None:
        """:class:`labkit.runner.PaddingDispatcher` arguments decoding as this engine would
        with ``max_batch`` slots (labkit's steps are pure decode batches); ``None``: eager."""
        max_batch = as_int(max_batch, "max_batch", minimum=1)
        sizes = [s for s in self.capture_sizes if s <= max_batch]
        if self.mode == "eager" or not sizes:
            return None
        mode = self.cudagraph_mode
        if mode in ("PIECEWISE", "FULL"):
            return {"capture_sizes": sizes, "cudagraph_mode": mode}
        full = [s for s in sizes if s <= (self.full_max_size or 0)]
        if mode == "FULL_DECODE_ONLY":
            return {"capture_sizes": full, "cudagraph_mode": "FULL"} if full else None
        if full == sizes or not full:
            return {"capture_sizes": sizes, "cudagraph_mode": "FULL" if full else "PIECEWISE"}
        return {"capture_sizes": sizes, "cudagraph_mode": "FULL_AND_PIECEWISE",
                "max_num_seqs": full[-1]}


# ----------------------------------------------------------------------------- vLLM


def vllm_default_capture_sizes(max_capture_size: int) -> list[int]:
    """vLLM 0.13.0's default capture sizes up to ``max_capture_size`` (tokens), checked:
    :func:`labkit.rules.vllm_default_capture_sizes`."""
    return rules.vllm_default_capture_sizes(as_int(max_capture_size, "max_capture_size",
                                                   minimum=1))


def vllm_spec_decode_sizes(sizes: Sequence[int], max_capture_size: int,
                           tokens_per_request: int) -> list[int]:
    """The sizes rounded up to a multiple of ``1 + k`` tokens and kept at or below
    ``max_capture_size``, checked: :func:`labkit.rules.spec_decode_sizes` (vLLM's
    ``adjust_cudagraph_sizes_for_spec_decode``; raises when no size is left)."""
    q = as_int(tokens_per_request, "tokens_per_request", minimum=1)
    m = as_int(max_capture_size, "max_capture_size", minimum=1)
    return rules.spec_decode_sizes(as_size_list(sizes, "sizes"), q, m)


def from_vllm(*, enforce_eager: bool = False, cudagraph_mode: str = "FULL_AND_PIECEWISE",
              cudagraph_capture_sizes: Sequence[int] | None = None,
              max_cudagraph_capture_size: int | None = None,
              max_num_seqs: int = VLLM_DEFAULT_MAX_NUM_SEQS,
              max_num_batched_tokens: int = VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS,
              num_speculative_tokens: int = 0) -> LabkitSettings:
    """vLLM 0.13.0's CUDA-graph settings as labkit sees them: the sizes vLLM captures
    (``VllmConfig._set_cudagraph_sizes``; with speculative decoding and separate full decode
    graphs, ``GPUModelRunner._check_and_update_cudagraph_mode`` then calls
    ``adjust_cudagraph_sizes_for_spec_decode``), its mode and the largest FULL decode graph
    (``GPUModelRunner.capture_model``: up to ``max_num_seqs * (1 + k)``). Defaults: an H200
    serving the OpenAI API. A bad or inconsistent setting raises as vLLM does, naming it."""
    as_bool(enforce_eager, "enforce_eager")
    mode = str(cudagraph_mode).upper()
    if mode not in VLLM_CUDAGRAPH_MODES:
        raise ValueError(f"cudagraph_mode {cudagraph_mode!r} is not one of "
                         f"{list(VLLM_CUDAGRAPH_MODES)}")
    seqs = as_int(max_num_seqs, "max_num_seqs", minimum=1)
    tokens = as_int(max_num_batched_tokens, "max_num_batched_tokens", minimum=1)
    q = 1 + as_int(num_speculative_tokens, "num_speculative_tokens", minimum=0,
                   fix="give 0 without speculative decoding")
    if enforce_eager or mode == "NONE":
        why = "enforce_eager=True" if enforce_eager else "cudagraph_mode=NONE"
        return LabkitSettings("vLLM", "eager", "NONE", (), 0, seqs, q, True, None,
                              (f"{why}: no graphs ({VLLM_VERSION})",))
    cap = min(tokens, rules.vllm_default_max_capture_size(seqs, q)
              if max_cudagraph_capture_size is None
              else as_int(max_cudagraph_capture_size, "max_cudagraph_capture_size", minimum=1))
    if cudagraph_capture_sizes is not None:
        sizes = sorted({s for s in as_size_list(cudagraph_capture_sizes,
                                                "cudagraph_capture_sizes") if s <= tokens})
        if not sizes:
            raise ValueError(f"cudagraph_capture_sizes {list(cudagraph_capture_sizes)} are "
                             f"all above max_num_batched_tokens={tokens}; give smaller sizes")
        if max_cudagraph_capture_size is not None and max_cudagraph_capture_size != sizes[-1]:
            raise ValueError(f"max_cudagraph_capture_size={max_cudagraph_capture_size} must "
                             f"equal the largest of cudagraph_capture_sizes ({sizes[-1]}); "
                             "give one of the two")
    else:
        sizes = vllm_default_capture_sizes(cap)
    graph_mode = cast(rules.GraphMode, mode)
    if rules.rounds_for_spec_decode(graph_mode, q):
        # the model runner rounds for separate full decode graphs (a "temp-fix")
        sizes = rules.spec_decode_sizes(sizes, q, sizes[-1])
    full_max = None
    notes = [f"sizes count tokens per step: {q} token(s) per request"]
    if rules.separate_routine(graph_mode):
        full = sorted(k.num_tokens for k in rules.graph_keys(sizes, graph_mode, q, seqs)["FULL"]
                      if k.uniform)
        full_max = full[-1] if full else None
        notes.append(f"uniform decode steps: FULL graphs up to {full_max} tokens; mixed "
                     "prefill/decode steps: "
                     + ("PIECEWISE graphs" if mode == "FULL_AND_PIECEWISE" else "eager"))
    # labkit decodes pure decode batches: FULL graphs in vLLM's FULL_AND_PIECEWISE too
    labkit_mode = "piecewise" if mode == "PIECEWISE" else "full"
    return LabkitSettings("vLLM", labkit_mode, mode, tuple(sizes), sizes[-1], seqs, q, True,
                          full_max, tuple(notes))


# ----------------------------------------------------------------------------- SGLang


def sglang_default_max_bs(gpu_memory_mib: float | None, tp_size: int = 1) -> int:
    """SGLang 0.5.6's default ``--cuda-graph-max-bs`` for a GPU of ``gpu_memory_mib`` MiB
    (``ServerArgs._handle_gpu_memory_settings``, CUDA GPUs; ``None``: unknown -> 160)."""
    tp = as_int(tp_size, "tp_size", minimum=1)
    if gpu_memory_mib is not None and (
            isinstance(gpu_memory_mib, bool) or not isinstance(gpu_memory_mib, (int, float))
            or not gpu_memory_mib > 0):
        raise ValueError(f"gpu_memory_mib must be a positive number, got {gpu_memory_mib!r}")
    return rules.sglang_default_max_bs(gpu_memory_mib, tp)


def sglang_default_capture_sizes(max_bs: int, *, disable_padding: bool = False,
                                 speculative: bool = False) -> list[int]:
    """SGLang 0.5.6's default batch sizes, checked:
    :func:`labkit.rules.sglang_default_capture_sizes`."""
    return rules.sglang_default_capture_sizes(
        as_int(max_bs, "max_bs", minimum=1), disable_padding=as_bool(disable_padding,
                                                                     "disable_padding"),
        speculative=as_bool(speculative, "speculative"))


def from_sglang(*, disable_cuda_graph: bool = False, cuda_graph_max_bs: int | None = None,
                cuda_graph_bs: Sequence[int] | None = None,
                disable_cuda_graph_padding: bool = False,
                gpu_memory_mib: float | None = 143771.0, tp_size: int = 1,
                speculative_num_draft_tokens: int | None = None,
                max_running_requests: int | None = None) -> LabkitSettings:
    """SGLang 0.5.6's CUDA-graph settings as labkit sees them: sizes count requests, each of
    ``speculative_num_draft_tokens`` tokens (``CudaGraphRunner.num_tokens_per_bs``);
    ``max_running_requests`` adds its size and cuts the list (``get_batch_sizes_to_capture``).
    Default GPU: an H200 (143771 MiB)."""
    as_bool(disable_cuda_graph, "disable_cuda_graph")
    as_bool(disable_cuda_graph_padding, "disable_cuda_graph_padding")
    spec = speculative_num_draft_tokens is not None
    q = (as_int(speculative_num_draft_tokens, "speculative_num_draft_tokens", minimum=1)
         if spec else 1)
    if cuda_graph_bs is not None:
        sizes = as_size_list(cuda_graph_bs, "cuda_graph_bs")
        max_bs = max(sizes)
    else:
        max_bs = (sglang_default_max_bs(gpu_memory_mib, tp_size) if cuda_graph_max_bs is None
                  else as_int(cuda_graph_max_bs, "cuda_graph_max_bs", minimum=1))
        sizes = sglang_default_capture_sizes(max_bs, disable_padding=disable_cuda_graph_padding,
                                             speculative=spec)
    running = max_bs
    if max_running_requests is not None:  # the request pool adds its size and cuts the list
        running = as_int(max_running_requests, "max_running_requests", minimum=1)
        sizes = [b for b in sizes if b <= running] + ([running] if max(sizes) > running else [])
    sizes = sorted(set(sizes))
    if disable_cuda_graph:
        return LabkitSettings("SGLang", "eager", "NONE", (), 0, running, q, True, None,
                              (f"--disable-cuda-graph: no graphs ({SGLANG_VERSION})",))
    notes = ["sizes count requests" + (f"; each graph holds {q} tokens per request "
                                       "(speculative verify)" if spec else "")]
    exact = disable_cuda_graph_padding
    if exact:
        notes.append("--disable-cuda-graph-padding: a batch size not captured runs eager")
    return LabkitSettings("SGLang", "exact" if exact else "full", "FULL", tuple(sizes),
                          sizes[-1], running, q, not exact, None, tuple(notes))


# ----------------------------------------------------------------------------- budgets


def vllm_kv_budget(total_bytes: float, gpu_memory_utilization: float, non_kv_bytes: float,
                   graph_bytes: float) -> dict[str, float]:
    """vLLM 0.13.0's memory split (``Worker.determine_available_memory``,
    ``compile_or_warm_up_model``): KV cache = ``total * utilization - non_kv``; the graphs,
    captured after it, take ``graph_bytes`` of the headroom (``headroom_left < 0``: no fit)."""
    for name, v in (("total_bytes", total_bytes), ("non_kv_bytes", non_kv_bytes),
                    ("graph_bytes", graph_bytes)):
        as_number(v, name, minimum=0, fix="give a number of bytes >= 0")
    u = gpu_memory_utilization
    if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0 < u <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {u!r}")
    requested = total_bytes * u
    return {"requested": requested, "kv_cache": requested - non_kv_bytes,
            "headroom": total_bytes - requested, "graphs": graph_bytes,
            "headroom_left": total_bytes - requested - graph_bytes}


def sglang_mem_fraction_static(gpu_memory_mib: float, *, chunked_prefill_size: int = 8192,
                               cuda_graph_max_bs: int = 256, tp_size: int = 1,
                               pp_size: int = 1) -> float:
    """SGLang 0.5.6's default ``mem_fraction_static`` (weights + KV pool share of the GPU),
    ``(gpu - reserved) / gpu`` with the graphs' room reserved up front (no DP attention, no
    speculative decoding)."""
    g = gpu_memory_mib
    if isinstance(g, bool) or not isinstance(g, (int, float)) or not g > 0:
        raise ValueError(f"gpu_memory_mib must be a positive number, got {g!r}")
    chunk = as_int(chunked_prefill_size, "chunked_prefill_size", minimum=1)
    max_bs = as_int(cuda_graph_max_bs, "cuda_graph_max_bs", minimum=1)
    ranks = as_int(tp_size, "tp_size", minimum=1) * as_int(pp_size, "pp_size", minimum=1)
    reserved = 512 + max(chunk, 2048) * 1.5 + max_bs * 2 + ranks / 8 * 1024
    if g > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((g - reserved) / g, 3)


def labkit_num_blocks(kv_bytes: float, *, n_layer: int, n_head: int, head_dim: int,
                      block_size: int = 16, dtype_bytes: int = 2) -> int:
    """``GPTConfig.num_blocks`` for ``kv_bytes`` of paged cache (K and V, every layer, + pad)."""
    per = 2
    for name, v in (("n_layer", n_layer), ("block_size", block_size), ("n_head", n_head),
                    ("head_dim", head_dim), ("dtype_bytes", dtype_bytes)):
        per *= as_int(v, name, minimum=1)
    if isinstance(kv_bytes, bool) or not isinstance(kv_bytes, (int, float)) or kv_bytes < per:
        raise ValueError(f"kv_bytes={kv_bytes!r} holds no block of {per} bytes; give more")
    return int(kv_bytes // per) + 1


#: the least vLLM counts per graph after the first (``GPUModelRunner.profile_cudagraph_memory``)
VLLM_MIN_PER_GRAPH_BYTES = 1 << 20


def vllm_sample_sizes(sizes: Sequence[int]) -> list[int]:
    """The sizes vLLM captures to estimate graph memory: the first two of its largest-first
    capture list (``descs[:2]`` in ``GPUModelRunner.profile_cudagraph_memory``,
    vllm/v1/worker/gpu_model_runner.py, added by vLLM PR #30515), largest first."""
    return sorted(set(as_size_list(sizes, "sizes")), reverse=True)[:2]


def vllm_graph_estimate(sample_bytes: Sequence[int], n_graphs: int) -> int:
    """vLLM's graph-memory estimate from the bytes the two sampled captures took (largest
    first): the first, plus the second (at least 1 MiB) for each of the other ``n_graphs - 1``
    graphs; linear in the number of graphs (``profile_cudagraph_memory``, as above)."""
    n = as_int(n_graphs, "n_graphs", minimum=1)
    samples = [as_int(b, "sample_bytes", minimum=0) for b in sample_bytes]
    if len(samples) != min(n, 2):
        raise ValueError(f"sample_bytes holds {len(samples)} samples; {n} graph(s) need "
                         f"{min(n, 2)}: the bytes of the largest capture, then the next")
    per_graph = max(samples[1], VLLM_MIN_PER_GRAPH_BYTES) if n > 1 else 0
    return samples[0] + per_graph * (n - 1)


def max_concurrent_requests(num_blocks: int, context: int, block_size: int = 16) -> int:
    """Requests of ``context`` tokens a paged cache of ``num_blocks`` (the pad block included)
    holds at once, in whole requests (vLLM logs the same ratio as a float:
    ``get_max_concurrency_for_kv_cache_config``, vllm/v1/core/kv_cache_utils.py)."""
    blocks = as_int(num_blocks, "num_blocks", minimum=0)
    per_request = -(-as_int(context, "context", minimum=1) // as_int(block_size, "block_size",
                                                                    minimum=1))
    return max(blocks - 1, 0) // per_request


def kv_plan(total_bytes: int, utilization: float, other_bytes: int, reserved_graph_bytes: int,
            graph_bytes: int | None, *, n_layer: int, n_head: int, head_dim: int,
            block_size: int, dtype_bytes: int, context: int) -> dict[str, int | None]:
    """The paged KV cache an engine sizes after profiling: ``kv_bytes = total * utilization -
    other (weights, peak activations) - reserved_graph_bytes``, its blocks
    (:func:`labkit_num_blocks`; 0 when no block fits), the requests of ``context`` tokens they
    hold, and the bytes left on the GPU once graphs of ``graph_bytes`` are captured after it
    (< 0: the capture runs out of memory; ``None``: ``graph_bytes`` unknown)."""
    u = as_number(utilization, "utilization", minimum=0, fix="give a fraction in (0, 1]")
    if not 0 < u <= 1:
        raise ValueError(f"utilization must be in (0, 1], got {utilization!r}")
    kv = int(as_int(total_bytes, "total_bytes", minimum=0) * u) - as_int(
        other_bytes, "other_bytes", minimum=0) - as_int(reserved_graph_bytes,
                                                        "reserved_graph_bytes", minimum=0)
    per_block = 2 * n_layer * n_head * head_dim * block_size * dtype_bytes
    blocks = 0 if kv < per_block else labkit_num_blocks(
        kv, n_layer=n_layer, n_head=n_head, head_dim=head_dim, block_size=block_size,
        dtype_bytes=dtype_bytes)
    left = None if graph_bytes is None else (
        total_bytes - other_bytes - max(kv, 0) - as_int(graph_bytes, "graph_bytes", minimum=0))
    return {"reserved_bytes": reserved_graph_bytes, "kv_bytes": kv, "kv_blocks": blocks,
            "requests": max_concurrent_requests(blocks, context, block_size),
            "headroom_left_bytes": left}
