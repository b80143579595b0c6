"""Capture modes (notebook 10): graph launches, vLLM's runtime mode, a record's rows."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

from labkit.checks import as_int, as_int_list
from labkit.measure.records import Modes, view

MODES: tuple[str, ...] = ("eager", "piecewise", "full", "attention_only")
MODE_LABELS: dict[str, str] = {"eager": "eager (NONE)", "piecewise": "PIECEWISE",
                               "full": "FULL", "attention_only": "attention-only graphs"}
#: vLLM's ``CUDAGraphMode``: (mode of uniform decode batches, mode of the other batches)
VLLM_MODES: dict[str, tuple[str, str]] = {
    "NONE": ("NONE", "NONE"), "PIECEWISE": ("PIECEWISE", "PIECEWISE"), "FULL": ("FULL", "FULL"),
    "FULL_DECODE_ONLY": ("FULL", "NONE"), "FULL_AND_PIECEWISE": ("FULL", "PIECEWISE")}


def graph_launches(mode: str, n_layer: int) -> int:
    """Graph launches of one step: NONE 0, FULL 1, PIECEWISE ``n_layer + 1``, attention-only
    ``n_layer`` (record names or vLLM's)."""
    n = as_int(n_layer, "n_layer", minimum=1, fix="give the layers of the model")
    table = {"eager": 0, "full": 1, "piecewise": n + 1, "attention_only": n}
    key = {"NONE": "eager", "PIECEWISE": "piecewise", "FULL": "full"}.get(mode, mode)
    if key not in table:
        raise ValueError(f"unknown mode {mode!r}; use one of {list(MODES)} or NONE, PIECEWISE, "
                         "FULL")
    return table[key]


def vllm_runtime_mode(query_lens: Sequence[int], capture_sizes: Sequence[int], *,
                      max_num_seqs: int, decode_query_len: int = 1,
                      cudagraph_mode: str = "FULL_AND_PIECEWISE") -> tuple[str, int]:
    """(runtime mode, tokens run) of a vLLM V1 step of ``query_lens`` tokens per request, as
    ``CudagraphDispatcher`` (``vllm/v1/cudagraph_dispatcher.py``) decides: pad to the smallest
    capture size; FULL for a uniform batch (every request ``decode_query_len`` tokens) padded to
    at most ``decode_query_len * max_num_seqs`` (any batch in ``FULL``), else PIECEWISE, else
    NONE (eager, unpadded). Assumes a backend supporting the mode, no cascade attention."""
    lens = as_int_list(query_lens, "query_lens", minimum=1)
    sizes = sorted(as_int_list(capture_sizes, "capture_sizes", minimum=1))
    q = as_int(decode_query_len, "decode_query_len", minimum=1)
    if not 1 <= len(lens) <= as_int(max_num_seqs, "max_num_seqs", minimum=1):
        raise ValueError(f"a step holds 1 to max_num_seqs={max_num_seqs} requests, got "
                         f"{len(lens)}")
    if cudagraph_mode not in VLLM_MODES:
        raise ValueError(f"unknown cudagraph_mode {cudagraph_mode!r}; use one of "
                         f"{list(VLLM_MODES)}")
    decode, mixed = VLLM_MODES[cudagraph_mode]
    n = sum(lens)
    p = next((s for s in sizes if s >= n), None)
    if p is not None and (mixed == "FULL" or (decode == "FULL" and q <= p <= q * max_num_seqs
                                              and all(x == q for x in lens))):
        return "FULL", p
    return ("PIECEWISE", p) if p is not None and mixed == "PIECEWISE" else ("NONE", n)


def modes_of(record: Any) -> list[str]:
    """The modes of a ``modes_<preset>`` record in display order."""
    d = view(record, Modes)
    return [m for m in MODES if m in d.times] + [m for m in d.methods if m not in MODES]


def mode_rows(record: Any) -> list[dict]:
    """Per mode and batch size: median µs, × vs eager, graph launches per step, pool MiB."""
    d = view(record, Modes)
    return [{"mode": MODE_LABELS.get(m, m), "batch": b,
             "step (µs, median)": None if t is None else round(t),
             "× vs eager": None if x is None else round(x, 2),
             "graph launches / step": d.graphs_per_step.get(m),
             "launches counted": d.graph_launches_counted.get(m),
             "pool (MiB)": None if (pool := d.pool_bytes.get(m)) is None
             else round(pool / 2**20, 1)}
            for m in modes_of(d) for b, t, x in zip(d.batch_sizes, d.median_us(m),
                                                     d.speedup_vs_eager(m))]
