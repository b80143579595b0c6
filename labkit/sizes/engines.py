"""What the real engines' CUDA-graph settings mean in labkit's terms (pure; no torch).

Read from the released source of **vLLM 0.13.0** and **SGLang 0.5.6** (each row of
:data:`SETTINGS` names its file and function). The rules change between releases (vLLM
0.11 capped the default at ``min(2 * max_num_seqs, 512)`` without the speculative factor;
SGLang 0.5.2x renamed ``--cuda-graph-max-bs`` to ``--cuda-graph-max-bs-decode``), so every
helper here says which version it follows.

* :func:`from_vllm` / :func:`from_sglang` turn an engine's settings into
  :class:`LabkitSettings`: the labkit step mode, the capture sizes the engine would capture
  (its default rule when none are given), how a batch is padded, and the budgets.
* :func:`vllm_kv_budget`, :func:`sglang_kv_budget` and :func:`sglang_mem_fraction_static`
  show where graph memory comes from: vLLM 0.13 sizes the KV cache from a profile run that
  does not include the graphs (captured afterwards, out of the ``1 - gpu_memory_utilization``
  headroom); SGLang reserves room for activations and graphs up front
  (``mem_fraction_static``).
* :data:`SPEC_DECODE_PADDING` says why speculative decoding pads by tokens (``1 + k`` per
  request).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from labkit.checks import as_bool, as_int, as_size_list

__all__ = ["VLLM_VERSION", "SGLANG_VERSION", "SettingRow", "SETTINGS", "LabkitSettings",
           "vllm_default_capture_sizes", "vllm_spec_decode_sizes", "vllm_padded_size",
           "from_vllm", "sglang_default_max_bs", "sglang_default_capture_sizes",
           "from_sglang", "vllm_kv_budget", "sglang_mem_fraction_static",
           "sglang_kv_budget", "labkit_num_blocks", "settings_rows", "SPEC_DECODE_PADDING",
           "GRAPH_MEMORY"]

VLLM_VERSION = "vLLM 0.13.0"
SGLANG_VERSION = "SGLang 0.5.6"
_VCFG = f"{VLLM_VERSION} vllm/config"
_SARGS = f"{SGLANG_VERSION} python/sglang/srt/server_args.py"
_SRUN = f"{SGLANG_VERSION} python/sglang/srt/model_executor/cuda_graph_runner.py"

#: vLLM 0.13.0 defaults on a GPU with >= 70 GiB that is not an A100 (H100, H200), OpenAI
#: server (``EngineArgs._set_default_args`` in vllm/engine/arg_utils.py)
VLLM_DEFAULT_MAX_NUM_SEQS = 1024
VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
VLLM_CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


@dataclass(frozen=True)
class SettingRow:
    """One engine setting: what it is, its default, what it means in labkit, and where that
    was read."""

    engine: str
    name: str
    default: str
    meaning: str
    labkit: str
    source: str


SETTINGS: tuple[SettingRow, ...] = (
    SettingRow("vLLM", "enforce_eager (--enforce-eager)", "False",
               "no CUDA graphs at all: cudagraph_mode is set to NONE",
               "mode 'eager' (model.decode_step every step)",
               f"{_VCFG}/vllm.py VllmConfig.__post_init__ ('Cudagraph is disabled under "
               "eager mode')"),
    SettingRow("vLLM", "compilation_config.cudagraph_mode", "FULL_AND_PIECEWISE (-O2)",
               "NONE, PIECEWISE (attention eager between captured pieces), FULL (whole step "
               "captured), FULL_DECODE_ONLY (full graphs for decode batches, mixed batches "
               "eager), FULL_AND_PIECEWISE (full graphs for uniform decode batches, piecewise "
               "for the rest)",
               "PaddingDispatcher(cudagraph_mode=...): NONE -> 'none'/'eager', PIECEWISE -> "
               "'piecewise', FULL / FULL_DECODE_ONLY -> 'full' (labkit's prefill is always "
               "eager), FULL_AND_PIECEWISE -> cudagraph_mode='FULL_AND_PIECEWISE' with "
               "full_max_size",
               f"{_VCFG}/compilation.py CUDAGraphMode; vllm.py OPTIMIZATION_LEVEL_02"),
    SettingRow("vLLM", "compilation_config.cudagraph_capture_sizes "
               "(--cudagraph-capture-sizes)", "None: the default rule",
               "the token counts to capture; sorted, de-duplicated, those above "
               "max_num_batched_tokens dropped",
               "capture_sizes of the dispatcher (labkit counts rows = tokens at 1 token per "
               "request)",
               f"{_VCFG}/vllm.py VllmConfig._set_cudagraph_sizes"),
    SettingRow("vLLM", "compilation_config.max_cudagraph_capture_size "
               "(--max-cudagraph-capture-size)",
               "min(max_num_seqs * (1 + k) * 2, 512), then at most max_num_batched_tokens",
               "largest captured size; the default list is [1, 2, 4] + range(8, 256, 8) + "
               "range(256, max + 1, 16); a larger batch runs without a graph",
               "largest capture size; above it the dispatcher runs eager (an eager fallback)",
               f"{_VCFG}/vllm.py VllmConfig._set_cudagraph_sizes"),
    SettingRow("vLLM", "max_num_seqs (--max-num-seqs)",
               "1024 on >= 70 GiB GPUs other than A100 (256 otherwise)",
               "most requests in one step; sets the default largest capture size; full "
               "decode graphs go up to max_num_seqs * (1 + k) tokens",
               "max_batch (cache slots) = ServingEngine max_running",
               f"{VLLM_VERSION} vllm/engine/arg_utils.py EngineArgs._set_default_args; "
               "vllm/v1/worker/gpu_model_runner.py GPUModelRunner.capture_model"),
    SettingRow("vLLM", "gpu_memory_utilization (--gpu-memory-utilization)", "0.9",
               "share of the GPU's total memory vLLM may use; KV cache = that minus "
               "weights, profiled activation peak and non-torch memory; the graphs are "
               "captured after the KV cache is allocated and are not in that profile, so "
               "they take from the remaining 1 - utilization",
               "the KV budget: labkit sizes its cache explicitly (max_batch slots, or "
               "num_blocks of a paged cache); graph pools come on top",
               f"{VLLM_VERSION} vllm/config/cache.py CacheConfig; vllm/v1/worker/"
               "gpu_worker.py Worker.determine_available_memory, compile_or_warm_up_model"),
    SettingRow("SGLang", "--disable-cuda-graph", "False", "no CUDA graphs",
               "mode 'eager'", f"{_SARGS} ServerArgs.add_cli_args"),
    SettingRow("SGLang", "--cuda-graph-max-bs",
               "by GPU memory: 8 (< 20 GiB), 24/80 (< 35 GiB, tp < 4 / >= 4), 32/160 "
               "(< 60 GiB), 256/512 (< 160 GiB: H100, H200), 512 (larger), 160 (unknown)",
               "largest captured batch (requests); also reserves cuda_graph_max_bs * 2 MiB "
               "in mem_fraction_static",
               "largest capture size; bigger batches run eager",
               f"{_SARGS} ServerArgs._handle_gpu_memory_settings"),
    SettingRow("SGLang", "--cuda-graph-bs", "None: the default rule",
               "the batch sizes to capture (max_bs becomes their max); the default is "
               "[1, 2, 4, 8, 12] + range(16, 257, 8) + range(272, 512, 16) + range(512, max + "
               "1, 32), cut at max_bs; capture and replay pick a graph by bisect",
               "capture_sizes",
               f"{_SARGS} ServerArgs._generate_cuda_graph_batch_sizes; {_SRUN} "
               "get_batch_sizes_to_capture, CudaGraphRunner.replay_prepare"),
    SettingRow("SGLang", "--disable-cuda-graph-padding", "False",
               "use a graph only when the batch size was captured exactly; then the "
               "default list is every size 1..max_bs",
               "mode 'exact' (graphs of every size, no padding) or a dispatcher whose "
               "misses run eager",
               f"{_SARGS} ServerArgs._generate_cuda_graph_batch_sizes; {_SRUN} "
               "CudaGraphRunner.can_run"),
)


def settings_rows() -> list[dict[str, str]]:
    """:data:`SETTINGS` as dicts (for a table)."""
    return [{"engine": r.engine, "setting": r.name, "default": r.default,
             "meaning": r.meaning, "labkit": r.labkit, "source": r.source} for r in SETTINGS]


@dataclass(frozen=True)
class LabkitSettings:
    """An engine's settings in labkit terms. ``capture_sizes`` count tokens per step (vLLM)
    or requests (SGLang); ``tokens_per_request`` is ``1 + k`` with ``k`` speculative
    tokens. ``padding``: a batch between two sizes runs the next larger graph; otherwise
    only exact sizes use a graph. ``full_max_size``: largest size with a FULL graph when
    the rest are piecewise."""

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
        """The captured size a step of ``n`` tokens (vLLM) or requests (SGLang) runs at;
        ``None``: no graph (eager)."""
        n = as_int(n, "n", minimum=1)
        if not self.capture_sizes:
            return None
        if not self.padding:
            return n if n in self.capture_sizes else None
        return next((s for s in self.capture_sizes if s >= n), None)

    def dispatcher_kwargs(self, max_batch: int) -> dict | None:
        """Keyword arguments of :class:`labkit.dispatch.PaddingDispatcher` that do the same
        on a labkit model with ``max_batch`` slots (``capture_sizes`` cut at ``max_batch``,
        ``cudagraph_mode``, ``full_max_size``); ``None``: run eager. labkit counts rows,
        one token per request, so with ``tokens_per_request > 1`` the sizes are read as
        token counts."""
        max_batch = as_int(max_batch, "max_batch", minimum=1)
        sizes = [s for s in self.capture_sizes if s <= max_batch]
        if self.mode == "eager" or not sizes:
            return None
        out: dict = {"capture_sizes": sizes, "cudagraph_mode": self.cudagraph_mode}
        if self.cudagraph_mode == "FULL_DECODE_ONLY":
            out["cudagraph_mode"] = "FULL"
        elif self.cudagraph_mode == "FULL_AND_PIECEWISE":
            out["full_max_size"] = min(self.full_max_size or sizes[-1], sizes[-1])
        return out


# ----------------------------------------------------------------------------- vLLM


def vllm_default_capture_sizes(max_capture_size: int) -> list[int]:
    """vLLM 0.13.0's default capture sizes up to ``max_capture_size`` (tokens):
    ``[1, 2, 4]`` + multiples of 8 below 256 + multiples of 16 from 256
    (``VllmConfig._set_cudagraph_sizes``)."""
    m = as_int(max_capture_size, "max_capture_size", minimum=1)
    out = [i for i in (1, 2, 4) if i <= m]
    if m >= 8:
        out += list(range(8, min(m + 1, 256), 8))
    if m >= 256:
        out += list(range(256, m + 1, 16))
    return out


def vllm_spec_decode_sizes(sizes: Sequence[int], max_capture_size: int,
                           tokens_per_request: int) -> list[int]:
    """The sizes rounded up to a multiple of ``1 + k`` tokens and kept at or below
    ``max_capture_size`` (``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode``,
    without sequence parallelism)."""
    q = as_int(tokens_per_request, "tokens_per_request", minimum=1)
    m = as_int(max_capture_size, "max_capture_size", minimum=1)
    sizes = as_size_list(sizes, "sizes")
    if q <= 1:
        return sorted(set(sizes))
    up = sorted({-(-s // q) * q for s in sizes if -(-s // q) * q <= m})
    if not up and q <= m:
        up = [q]
    if not up:
        raise ValueError(f"no capture size is left after rounding to a multiple of {q} "
                         f"(1 + num_speculative_tokens) at most {m}; lower "
                         "num_speculative_tokens or raise max_cudagraph_capture_size")
    return up


def vllm_padded_size(sizes: Sequence[int], n: int) -> int | None:
    """The captured size a step of ``n`` tokens is padded to (vLLM's
    ``bs_to_padded_graph_size``: the smallest size >= n); ``None`` above the largest."""
    n = as_int(n, "n", minimum=1)
    return next((s for s in sorted(as_size_list(sizes, "sizes")) if s >= n), None)


def from_vllm(*, enforce_eager: bool = False, cudagraph_mode: str = "FULL_AND_PIECEWISE",
              cudagraph_capture_sizes: Sequence[int] | None = None,
              max_cudagraph_capture_size: int | None = None,
              max_num_seqs: int = VLLM_DEFAULT_MAX_NUM_SEQS,
              max_num_batched_tokens: int = VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS,
              num_speculative_tokens: int = 0) -> LabkitSettings:
    """vLLM 0.13.0's CUDA-graph settings as labkit sees them: the sizes vLLM captures
    (``VllmConfig._set_cudagraph_sizes``; with speculative decoding and separate full decode
    graphs, ``GPUModelRunner._check_and_update_cudagraph_mode`` then calls
    ``adjust_cudagraph_sizes_for_spec_decode``),
    its mode and the largest FULL decode graph (``GPUModelRunner.capture_model``: uniform
    decode sizes up to ``max_num_seqs * (1 + k)``). Defaults: an H200 serving the OpenAI
    API. A bad or inconsistent setting raises as vLLM does, naming it."""
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
    cap = (min(seqs * q * 2, 512) if max_cudagraph_capture_size is None
           else as_int(max_cudagraph_capture_size, "max_cudagraph_capture_size", minimum=1))
    cap = min(tokens, cap)
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
    if q > 1 and mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"):
        # the model runner rounds for separate full decode graphs (a "temp-fix")
        sizes = vllm_spec_decode_sizes(sizes, sizes[-1], q)
    full_max = None
    notes = [f"sizes count tokens per step: {q} token(s) per request"]
    if mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"):
        full = [s for s in sizes if q <= s <= seqs * q]
        full_max = full[-1] if full else None
        notes.append(f"FULL graphs for uniform decode steps up to {full_max} tokens"
                     + ("; piecewise graphs for the other steps"
                        if mode == "FULL_AND_PIECEWISE" else "; other steps eager"))
    labkit_mode = {"PIECEWISE": "piecewise", "FULL": "full", "FULL_DECODE_ONLY": "full",
                   "FULL_AND_PIECEWISE": "piecewise"}[mode]
    return LabkitSettings("vLLM", labkit_mode, mode, tuple(sizes), sizes[-1], seqs, q, True,
                          full_max, tuple(notes))


# ----------------------------------------------------------------------------- SGLang


def sglang_default_max_bs(gpu_memory_mib: float | None, tp_size: int = 1) -> int:
    """SGLang 0.5.6's default ``--cuda-graph-max-bs`` for a GPU of ``gpu_memory_mib`` MiB
    (``ServerArgs._handle_gpu_memory_settings``, CUDA GPUs; ``None``: unknown -> 160)."""
    tp = as_int(tp_size, "tp_size", minimum=1)
    if gpu_memory_mib is None:
        return 160
    if isinstance(gpu_memory_mib, bool) or not isinstance(gpu_memory_mib, (int, float)) \
            or not gpu_memory_mib > 0:
        raise ValueError(f"gpu_memory_mib must be a positive number, got {gpu_memory_mib!r}")
    g = gpu_memory_mib
    if g < 20 * 1024:
        return 8
    if g < 35 * 1024:
        return 24 if tp < 4 else 80
    if g < 60 * 1024:
        return 32 if tp < 4 else 160
    if g < 160 * 1024:
        return 256 if tp < 4 else 512
    return 512


def sglang_default_capture_sizes(max_bs: int, *, disable_padding: bool = False,
                                 speculative: bool = False) -> list[int]:
    """SGLang 0.5.6's default capture batch sizes up to ``max_bs``
    (``ServerArgs._generate_cuda_graph_batch_sizes``)."""
    m = as_int(max_bs, "max_bs", minimum=1)
    if disable_padding:
        out = list(range(1, m + 1))
    elif not speculative:
        out = ([1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16))
               + list(range(512, m + 1, 32)))
    else:
        out = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
               + list(range(72, 257, 8)) + list(range(272, m + 1, 16)))
    return [b for b in out if b <= m]


def from_sglang(*, disable_cuda_graph: bool = False, cuda_graph_max_bs: int | None = None,
                cuda_graph_bs: Sequence[int] | None = None,
                disable_cuda_graph_padding: bool = False,
                gpu_memory_mib: float | None = 143771.0, tp_size: int = 1,
                speculative_num_draft_tokens: int | None = None,
                max_running_requests: int | None = None) -> LabkitSettings:
    """SGLang 0.5.6's CUDA-graph settings as labkit sees them. Sizes count requests; with
    speculative decoding each graph holds ``speculative_num_draft_tokens`` tokens per
    request (``CudaGraphRunner.num_tokens_per_bs``). ``max_running_requests`` (the
    request-to-token pool) adds its own size and cuts the list
    (``get_batch_sizes_to_capture``). Default GPU: an H200 (143771 MiB)."""
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
    pool = (None if max_running_requests is None
            else as_int(max_running_requests, "max_running_requests", minimum=1))
    if pool is not None:
        if max(sizes) > pool:
            sizes = sizes + [pool]
        sizes = [b for b in sizes if b <= pool]
    sizes = sorted(set(sizes))
    running = pool if pool is not None else max_bs
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
    """vLLM 0.13.0's memory split: ``requested = total * utilization``; KV cache =
    ``requested - non_kv`` (weights + profiled activation peak + non-torch memory); the
    graphs, captured after the KV cache is allocated, take ``graph_bytes`` from the
    headroom ``total - requested``; ``headroom_left`` < 0 means they do not fit
    (``Worker.determine_available_memory``, ``compile_or_warm_up_model``)."""
    for name, v in (("total_bytes", total_bytes), ("non_kv_bytes", non_kv_bytes),
                    ("graph_bytes", graph_bytes)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 \
                or not math.isfinite(v):
            raise ValueError(f"{name} must be a number of bytes >= 0, got {v!r}")
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
    """SGLang 0.5.6's default ``mem_fraction_static`` (weights + KV pool share of the GPU):
    ``reserved = 512 + max(chunked_prefill, 2048) * 1.5 + cuda_graph_max_bs * 2 +
    tp * pp / 8 * 1024`` MiB, at least 10 GiB on GPUs above 60 GiB; fraction =
    ``round((gpu - reserved) / gpu, 3)`` (no DP attention, no speculative decoding)."""
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


def sglang_kv_budget(total_bytes: float, mem_fraction_static: float,
                     weight_bytes: float) -> dict[str, float]:
    """SGLang's split: weights + KV pool = ``total * mem_fraction_static``; the rest
    (activations and CUDA graphs) is reserved up front."""
    f = mem_fraction_static
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1:
        raise ValueError(f"mem_fraction_static must be in (0, 1], got {f!r}")
    static = total_bytes * f
    return {"static": static, "kv_cache": static - weight_bytes,
            "reserved": total_bytes - static}


def labkit_num_blocks(kv_bytes: float, *, n_layer: int, n_head: int, head_dim: int,
                      block_size: int = 16, dtype_bytes: int = 2) -> int:
    """Blocks of a labkit paged cache that ``kv_bytes`` hold (K and V, every layer), plus
    labkit's pad block: the ``num_blocks`` to give ``GPTConfig``."""
    per = 2
    for name, v in (("n_layer", n_layer), ("block_size", block_size), ("n_head", n_head),
                    ("head_dim", head_dim), ("dtype_bytes", dtype_bytes)):
        per *= as_int(v, name, minimum=1)
    if isinstance(kv_bytes, bool) or not isinstance(kv_bytes, (int, float)) or kv_bytes < per:
        raise ValueError(f"kv_bytes={kv_bytes!r} holds no block of {per} bytes; give more")
    return int(kv_bytes // per) + 1


# ----------------------------------------------------------------------------- explanations

GRAPH_MEMORY = (
    "Where graph memory comes from. vLLM 0.13.0 (vllm/v1/worker/gpu_worker.py): "
    "determine_available_memory runs a profile forward pass and gives the KV cache "
    "gpu_memory_utilization x total memory minus weights, the activation peak and non-torch "
    "memory; compile_or_warm_up_model captures the graphs afterwards "
    "(GPUModelRunner.capture_model logs 'Graph capturing finished ..., took X GiB'), so the "
    "graphs are not in that budget and live in the 1 - gpu_memory_utilization headroom (the "
    "debug log suggests --kv-cache-memory values that count them). Later vLLM releases add an "
    "optional estimate of graph memory to the profile (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, "
    "off by default where it was read). SGLang 0.5.6 (server_args.py) reserves room first: "
    "mem_fraction_static = (GPU - reserved) / GPU with reserved = activations for a "
    "chunked prefill + cuda_graph_max_bs x 2 MiB + ..., and the KV pool gets "
    "mem_fraction_static x GPU minus the weights. labkit sizes its cache explicitly "
    "(max_batch slots or num_blocks) and the graph pools come on top: measure them with "
    "labkit.graphs pool bytes (notebook 04).")

SPEC_DECODE_PADDING = (
    "Why speculative decoding pads by tokens. With k draft tokens, every request in a "
    "verify step feeds 1 + k tokens (its last token and the k drafts) through the target "
    "model, so a step of b requests is a batch of b x (1 + k) tokens. A CUDA graph is "
    "captured for fixed tensor shapes, i.e. a fixed token count: vLLM 0.13.0 counts its "
    "capture sizes in tokens, raises the default largest size to min(max_num_seqs x (1 + k) "
    "x 2, 512) and, when decode steps get their own FULL graphs (FULL_AND_PIECEWISE, "
    "FULL_DECODE_ONLY), rounds every size up to a multiple of 1 + k "
    "(CompilationConfig.adjust_cudagraph_sizes_for_spec_decode, called from "
    "GPUModelRunner._check_and_update_cudagraph_mode: 'num_speculative_tokens + 1 required "
    "by spec-decode') so that a graph holds a whole number of requests; SGLang 0.5.6 "
    "keys its graphs by request count and gives each num_tokens_per_bs = "
    "speculative_num_draft_tokens tokens (CudaGraphRunner), with a denser default list for "
    "speculative runs. A padded request is 1 + k padded tokens of work.")
