"""Notebook 10: PIECEWISE against FULL, vLLM's runtime mode per batch, and the charts.

One module per notebook topic: its lessons (pure: records and numbers to rows) and its
charts (plotly figures from records).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from labkit import rules
from labkit.checks import as_int, as_int_list
from labkit.measure.records import Mixed, Modes, view
from labkit.mixed import BatchDescriptor, TokenDispatcher
from labkit.teach.plots import check_methods, color, finish, plotly_go, series_colors, stats_bar


# ---------------------------------------------------------------------- lessons modes
# Capture modes (notebook 10): graph launches, vLLM's runtime mode, attention launches, rows.

MODES: tuple[str, ...] = ("eager", "piecewise", "full", "attention_only")
MODE_LABELS: dict[str, str] = {"eager": "eager (NONE)", "piecewise": "PIECEWISE",
                               "full": "FULL", "attention_only": "attention-only graphs"}
#: vLLM's ``CUDAGraphMode``: (mode of uniform decode batches, mode of the other batches)
VLLM_MODES: dict[str, tuple[str, str]] = dict(cast(Mapping[str, tuple[str, str]],
                                                   rules.ROUTINES))


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
    ``CudagraphDispatcher`` (``vllm/v1/cudagraph_dispatcher.py``) decides, by
    :func:`labkit.rules.dispatch` over the sizes as given (no rounding): pad to the smallest
    capture size; FULL for a uniform batch (every request ``decode_query_len`` tokens) padded to
    at most ``decode_query_len * max_num_seqs`` (any batch in ``FULL``), else PIECEWISE, else
    NONE (eager, unpadded). Assumes a backend supporting the mode, no cascade attention."""
    lens = as_int_list(query_lens, "query_lens", minimum=1)
    sizes = sorted(as_int_list(capture_sizes, "capture_sizes", minimum=1))
    q = as_int(decode_query_len, "decode_query_len", minimum=1)
    seqs = as_int(max_num_seqs, "max_num_seqs", minimum=1)
    if not 1 <= len(lens) <= seqs:
        raise ValueError(f"a step holds 1 to max_num_seqs={max_num_seqs} requests, got "
                         f"{len(lens)}")
    if cudagraph_mode not in VLLM_MODES:
        raise ValueError(f"unknown cudagraph_mode {cudagraph_mode!r}; use one of "
                         f"{list(VLLM_MODES)}")
    graph_mode = cast(rules.GraphMode, cudagraph_mode)
    keys = rules.graph_keys(sizes, graph_mode, q, seqs)
    mode, key = rules.dispatch(keys, sizes, graph_mode, q, sum(lens),
                               all(x == q for x in lens))
    return mode, key.num_tokens


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


def step_rows(steps: Mapping[str, tuple[Sequence[int], int]],
              checks: Mapping[str, Mapping[str, Any]]) -> list[dict]:
    """Per step ``name -> (tokens per request, 1 + k)``: its shape and its check
    (:func:`labkit.measure.lesson_runs.check_mixed_step`) against the full forward pass."""
    rows = []
    for name, (lens, q) in steps.items():
        c = checks[name]
        key: BatchDescriptor = c["descriptor"]
        rows.append({"step": name, "requests": len(lens), "tokens": sum(lens),
                     "uniform": all(n == q for n in lens), "num_tokens": key.num_tokens,
                     "num_reqs": key.num_reqs, "runtime mode": c["runtime mode"],
                     "max |logit diff|": f"{c['max |logit diff|']:.1e}",
                     "greedy tokens equal": c["greedy tokens equal"]})
    return rows


def attention_launch(mode: str, key: BatchDescriptor, query_lens: Sequence[int],
                     uniform_query_len: int = 1) -> tuple[int, int]:
    """(requests, longest query) of the attention launch :meth:`labkit.mixed.MixedRunner.step`
    stages: FULL ``num_tokens // q`` requests of ``q``, PIECEWISE the padded tokens as one-token
    requests, NONE the requests as they are."""
    lens = as_int_list(query_lens, "query_lens", minimum=1)
    if mode == "FULL":
        return key.num_tokens // uniform_query_len, uniform_query_len
    pad = key.num_tokens - sum(lens) if mode == "PIECEWISE" else 0
    return len(lens) + pad, max(lens)


def attention_rows(dispatcher: TokenDispatcher,
                   batches: Mapping[str, Sequence[int]]) -> list[dict]:
    """Per batch ``name -> tokens per request``: the key and runtime mode ``dispatcher``
    gives, and the requests and longest query its attention is launched with."""
    q = dispatcher.uniform_query_len
    rows = []
    for name, lens in batches.items():
        uniform = all(n == q for n in lens)
        mode, key = dispatcher.dispatch(sum(lens), uniform)
        reqs, longest = attention_launch(mode, key, lens, q)
        rows.append({"batch": name, "tokens per request": str(list(lens)),
                     "uniform": uniform, "num_tokens": key.num_tokens, "num_reqs": key.num_reqs,
                     "runtime mode": mode, "attention: requests": reqs,
                     "attention: longest query": longest})
    return rows


#: the ways a ``mixed_<preset>`` record times a step: table -> method -> (runtime mode, path)
MIXED_WAYS: dict[str, dict[str, tuple[str, str]]] = {
    "uniform": {"today_step": ("FULL", "decode engine (PaddingDispatcher)"),
                "new_step": ("FULL", "token-flattened (MixedRunner)")},
    "mixed": {"piecewise": ("PIECEWISE", "token-flattened (MixedRunner)"),
              "eager": ("NONE", "token-flattened, eager")}}


def mixed_rows(record: Any) -> list[dict]:
    """Per batch kind and way of a ``mixed_<preset>`` record: runtime mode, tokens, step µs."""
    d = view(record, Mixed)
    kinds = {"uniform": [f"decode, {b} row{'s' * (b != 1)}" for b in d.batch_sizes],
             "mixed": [f"{r} decode row{'s' * (r != 1)} + {c}-token chunk" for r, c in d.shapes]}
    tokens = {"uniform": d.batch_sizes, "mixed": d.mixed_tokens}
    rows = []
    for table, ways in MIXED_WAYS.items():
        times = getattr(d, table)
        for i, (kind, n) in enumerate(zip(kinds[table], tokens[table])):
            for method, (mode, path) in ways.items():
                t = times[method][i]
                rows.append({"batch": kind, "tokens": n, "runtime mode": mode, "path": path,
                             "step (µs, median)": round(t.median),
                             "p10–p90 (µs)": f"{t.p10:.0f}–{t.p90:.0f}"})
    return rows


# ---------------------------------------------------------------------- plots modes
# Chart of a ``modes_<preset>`` record: decode-step time per capture mode and batch size.

MODE_COLORS: dict[str, str] = {"eager": color("eager"), "piecewise": "#ff7f0e",
                               "full": color("graph"), "attention_only": "#8c564b"}


def step_time_bars(record: Any, *, modes: Sequence[str] | None = None,
                   subtitle: str | None = None, log_y: bool = False):
    """Median µs per step and batch size, one bar per mode (p10–p90, × over eager)."""
    d = view(record, Modes)
    modes = list(modes or modes_of(d))
    check_methods("modes", modes, d.times, "mode")
    fig, colours = plotly_go().Figure(), series_colors(modes, MODE_COLORS)
    for m in modes:
        text = ["" if t is None else f"{t:,.0f} µs" + (f"<br>{x:.1f}×" if x and m != "eager"
                                                       else "")
                for t, x in zip(d.median_us(m), d.speedup_vs_eager(m))]
        fig.add_trace(stats_bar(d.batch_sizes, d.times[m], MODE_LABELS.get(m, m),
                                colours[m], text=text,
                                textposition="outside"))
    fig.update_layout(barmode="group")
    return finish(fig, f"Decode step per capture mode ({d.preset}, {d.n_layer} layers)",
                  "batch size", "µs per step (median)", log_y=log_y,
                  subtitle=subtitle, record=record)
