"""A shared graph pool overwriting a kept output: a constructed case, shown live on a GPU.

PyTorch's CUDA Graphs notes ("Graph memory management" → "Sharing memory across captures")
call sharing a pool safe for graphs "always replayed in the same order they were captured";
a decode engine replays in any order, so its rule is: in one shared pool, a graph's output is
valid only until the next replay of ANY graph in the pool, unless copied. When graph A's
capture frees a temporary, A still writes that block on every replay, and graph B, captured
later, can get it for its output. :func:`measure_pool_overwrite` builds that case with plain
``torch.cuda.graph(..., pool=...)``, checks with ``data_ptr()`` that it really happened (else
raises), and shows both fixes (clone B's output; keep A's temporary alive). Needs a CUDA GPU.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from labkit.measure.bench import _free
from labkit.measure.pitfalls.common import _require_cuda

#: the record name
RECORD = "pool_overwrite"
#: graph A computes ``tmp = x_a * A_SCALE`` (its temporary) and ``out_a = tmp + A_SHIFT``
A_SCALE, A_SHIFT = 2.0, 1.0
#: graph B computes ``out_b = x_b + B_SHIFT``
B_SHIFT = 100.0
_XA, _XB = 1.0, 5.0


class OverwriteNotReproduced(RuntimeError):
    """The caching allocator did not place B's output where the construction needs it (or
    the replay did not overwrite it): the demonstration refuses to report an overwrite."""


def _values(t: torch.Tensor) -> list[float]:
    """The distinct values of ``t`` (one value when every element agrees)."""
    return [float(v) for v in torch.unique(t).tolist()]


def _capture_pair(xa: torch.Tensor, xb: torch.Tensor, *, keep_a_temporary: bool,
                  stream: torch.cuda.Stream) -> dict:
    """Capture A then B into one new pool on ``stream`` (A's temporary freed at the end of its
    capture unless ``keep_a_temporary``): the graphs, outputs and pointers."""
    pool = torch.cuda.graph_pool_handle()
    # warm-up on the capture stream, as the PyTorch notes ask (these allocations are not pooled)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        xa * A_SCALE + A_SHIFT
        xb + B_SHIFT
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()

    ga, gb = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    kept = None
    with torch.cuda.graph(ga, pool=pool, stream=stream):
        tmp = xa * A_SCALE                 # A's temporary
        a_tmp_ptr = tmp.data_ptr()
        out_a = tmp + A_SHIFT
        if keep_a_temporary:
            kept = tmp                     # a live reference: the block stays A's
        del tmp                            # otherwise: freed now, a free block of the pool
    with torch.cuda.graph(gb, pool=pool, stream=stream):   # same pool, same stream
        out_b = xb + B_SHIFT
    torch.cuda.synchronize()
    return {"ga": ga, "gb": gb, "out_a": out_a, "out_b": out_b, "kept": kept,
            "a_tmp_ptr": a_tmp_ptr, "b_out_ptr": out_b.data_ptr()}


def measure_pool_overwrite(device: str | torch.device = "cuda", numel: int = 1 << 20) -> dict:
    """Show, live, graph A's replay overwriting graph B's kept output in one shared pool, and
    the two fixes; the data of a ``pool_overwrite`` record. ``numel``: float32 elements of
    A's temporary and B's output (equal: the allocator's best fit). Raises
    :class:`OverwriteNotReproduced` when B's output did not get A's freed block or A's
    replay did not change it."""
    if isinstance(numel, bool) or not isinstance(numel, int) or numel < 1:
        raise ValueError(f"numel must be a positive int (elements of A's temporary and B's "
                         f"output), got {numel!r}; the default is {1 << 20}")
    dev = _require_cuda(device, "measure_pool_overwrite", "pool_overwrite", "reference_or_none")
    expected_a_tmp, expected_b = _XA * A_SCALE, _XB + B_SHIFT
    with torch.no_grad():
        xa = torch.full((numel,), _XA, device=dev)       # static inputs, outside the pool
        xb = torch.full((numel,), _XB, device=dev)
        stream = torch.cuda.Stream(device=dev)

        # 1. the overwrite: A's temporary freed, B's output gets its block
        p = _capture_pair(xa, xb, keep_a_temporary=False, stream=stream)
        same_block = p["a_tmp_ptr"] == p["b_out_ptr"]
        if not same_block:
            pointers = f"A's temporary at {p['a_tmp_ptr']:#x}, B's output at {p['b_out_ptr']:#x}"
            del p
            _free()
            raise OverwriteNotReproduced(
                f"the caching allocator did not give B's output the block A's temporary freed "
                f"({pointers}), so this construction cannot show the overwrite on this "
                f"PyTorch/allocator set-up (PYTORCH_CUDA_ALLOC_CONF="
                f"{os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')!r}); run it with the default "
                "allocator settings, or try another numel")
        a_ptr, b_ptr = p["a_tmp_ptr"], p["b_out_ptr"]
        out_b = p["out_b"]                         # the Python reference we keep throughout
        p["ga"].replay()                           # capture order: A, then B
        p["gb"].replay()
        in_capture_order = _values(out_b)
        p["gb"].replay()
        b_before = _values(out_b)
        p["ga"].replay()                           # replaying A writes its temporary ...
        b_after = _values(out_b)                   # ... into B's output
        overwritten = b_after != b_before
        if not overwritten:
            del p, out_b
            _free()
            raise OverwriteNotReproduced(
                "B's output shares A's temporary block, yet replaying A did not change it "
                f"(it reads {b_after}); the construction is broken, report it")

        # fix 1: copy B's output before the next replay of any graph of the pool
        p["gb"].replay()
        copied = out_b.clone()
        p["ga"].replay()
        clone: dict[str, Any] = {"copy_after_replay_a": _values(copied),
                                 "kept_output_after_replay_a": _values(out_b)}
        clone["ok"] = clone["copy_after_replay_a"] == [expected_b]
        del p, out_b, copied
        _free()

        # fix 2: keep A's temporary alive, so its block is never free for B
        q = _capture_pair(xa, xb, keep_a_temporary=True, stream=stream)
        q["gb"].replay()
        q["ga"].replay()
        keep_values = _values(q["out_b"])
        keep = {"a_temporary_ptr": q["a_tmp_ptr"], "b_output_ptr": q["b_out_ptr"],
                "same_block": q["a_tmp_ptr"] == q["b_out_ptr"],
                "b_after_replay_a": keep_values, "ok": keep_values == [expected_b]}
        del q
        _free()

    return {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
            "numel": numel, "dtype": "float32",
            "a_temporary_value": expected_a_tmp, "b_expected_value": expected_b,
            "a_temporary_ptr": a_ptr, "b_output_ptr": b_ptr, "same_block": same_block,
            "b_in_capture_order": in_capture_order, "b_after_replay_b": b_before,
            "b_after_replay_a": b_after, "overwritten": overwritten,
            "fix_clone": clone, "fix_keep_a_temporary": keep,
            "fixed": bool(clone["ok"] and keep["ok"])}
