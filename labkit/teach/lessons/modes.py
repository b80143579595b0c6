"""Capture-mode helpers for notebook 10 (PIECEWISE vs FULL): graph launches per step, the
dispatcher's ``decide`` table, and rows and sentences from a ``modes_<preset>`` record.

Pure functions: no GPU, no measurement. The measurement is
:func:`labkit.measure.modes.measure_modes`.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from labkit.measure import records as rk
from labkit.measure.records import Modes, view

#: the modes of a ``modes_<preset>`` record, in display order, and their vLLM names
MODES: tuple[str, ...] = ("eager", "piecewise", "full", "attention_only")
VLLM_NAMES: dict[str, str] = {"eager": "NONE", "piecewise": "PIECEWISE", "full": "FULL",
                              "attention_only": "(not in vLLM: attention captured, rest eager)"}
MODE_LABELS: dict[str, str] = {"eager": "eager (NONE)", "piecewise": "PIECEWISE",
                               "full": "FULL", "attention_only": "attention-only graphs"}
MIB = 2 ** 20


def graph_launches(mode: str, n_layer: int) -> int:
    """Graph launches in one decode step of an ``n_layer`` model: ``NONE`` 0, ``FULL`` 1,
    ``PIECEWISE`` ``n_layer + 1`` (one piece before the first attention, one after each),
    ``attention_only`` ``n_layer`` (one attention graph per layer). Modes may be given by
    their record name (``eager``, ``piecewise``, ...) or vLLM's (``NONE``, ``PIECEWISE``...)."""
    if isinstance(n_layer, bool) or not isinstance(n_layer, int) or n_layer < 1:
        raise ValueError(f"n_layer must be an int >= 1 (layers of the model), got {n_layer!r}")
    key = {"NONE": "eager", "PIECEWISE": "piecewise", "FULL": "full"}.get(mode, mode)
    table = {"eager": 0, "full": 1, "piecewise": n_layer + 1, "attention_only": n_layer}
    if key not in table:
        raise ValueError(f"unknown mode {mode!r}; use one of {list(MODES)} or NONE, PIECEWISE, "
                         "FULL")
    return table[key]


def decide_rows(decide: Callable[[int], tuple[str, int]], batch_sizes: Sequence[int]) -> list[dict]:
    """One row per batch size: what ``decide(b)`` (a dispatcher's, or one written by hand)
    returns — the runtime mode and the rows computed — and the padded rows."""
    rows = []
    for b in batch_sizes:
        mode, padded = decide(b)
        rows.append({"batch": b, "runtime mode": mode, "rows computed": padded,
                     "padded rows": padded - b})
    return rows


def decide_full_and_piecewise(bs: int, capture_sizes: Sequence[int],
                              full_max_size: int) -> tuple[str, int]:
    """The ``FULL_AND_PIECEWISE`` rule on its own: pad ``bs`` to the smallest captured size
    ``p >= bs``; ``p <= full_max_size`` → ``('FULL', p)``, else ``('PIECEWISE', p)``; no such
    size → ``('NONE', bs)`` (eager)."""
    if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
        raise ValueError(f"batch size must be an int >= 1, got {bs!r}")
    fits = [s for s in sorted(capture_sizes) if s >= bs]
    if not fits:
        return "NONE", bs
    p = fits[0]
    return ("FULL" if p <= full_max_size else "PIECEWISE"), p


def summary(record: Any) -> dict:
    """The record's numbers by mode: median µs per batch size, × over eager, graph launches
    (by construction and counted), pool MiB (``None``: no pool), capture seconds."""
    d = view(record, Modes)
    modes = [m for m in MODES if m in d.times] + [m for m in d.methods if m not in MODES]
    step = {m: d.median_us(m) for m in modes}
    return {"preset": d.preset, "n_layer": d.n_layer, "batch_sizes": list(d.batch_sizes),
            "modes": modes, "step_us": step,
            "speedup_vs_eager": {m: d.speedup_vs_eager(m) for m in modes},
            "graphs_per_step": {m: d.graphs_per_step.get(m) for m in modes},
            "graph_launches_counted": {m: d.graph_launches_counted.get(m) for m in modes},
            "pool_mib": {m: None if d.pool_bytes.get(m) is None else d.pool_bytes[m] / MIB
                         for m in modes},
            "capture_s": {m: d.capture_s.get(m) for m in modes},
            "gpu_ops_per_step": d.gpu_ops_per_step, "checks": dict(d.checks)}


def mode_rows(record: Any) -> list[dict]:
    """One table row per mode and batch size: median µs, × vs eager, graph launches."""
    s = summary(record)
    rows = []
    for m in s["modes"]:
        for i, b in enumerate(s["batch_sizes"]):
            t, x = s["step_us"][m][i], s["speedup_vs_eager"][m][i]
            rows.append({"mode": MODE_LABELS.get(m, m), "batch": b,
                         "step (µs, median)": None if t is None else round(t, 1),
                         "× vs eager": None if x is None else round(x, 2),
                         "graph launches / step": s["graphs_per_step"][m]})
    return rows


def _fmt_ratio(a: float | None, b: float | None) -> str:
    r = rk.ratio(a, b)
    return "n/a" if r is None else f"{r:.2f}×"


def findings(record: Any) -> list[str]:
    """Sentences computed from the record: FULL vs PIECEWISE vs the attention-only split at the
    smallest and largest batch, launches per step, pool memory, and the token checks."""
    s = summary(record)
    step, sizes = s["step_us"], s["batch_sizes"]
    out = []
    for i in sorted({0, len(sizes) - 1}):
        b = sizes[i]
        parts = [f"{MODE_LABELS.get(m, m)} {step[m][i]:,.0f} µs" for m in s["modes"]
                 if step[m][i] is not None]
        line = f"batch {b}: " + ", ".join(parts)
        if "piecewise" in step and "full" in step:
            line += (f"; PIECEWISE takes {_fmt_ratio(step['piecewise'][i], step['full'][i])} "
                     f"the time of FULL")
        if "attention_only" in step and "piecewise" in step:
            r = _fmt_ratio(step["attention_only"][i], step["piecewise"][i])
            line += f"; attention-only takes {r} the time of PIECEWISE"
        out.append(line + ".")
    g = s["graphs_per_step"]
    out.append(f"{s['n_layer']} layers: graph launches per step " + ", ".join(
        f"{MODE_LABELS.get(m, m)} {g[m]}" for m in s["modes"] if g[m] is not None) + ".")
    pools = {m: v for m, v in s["pool_mib"].items() if v is not None}
    if pools:
        out.append(f"pool memory for {len(sizes)} batch sizes: " + ", ".join(
            f"{MODE_LABELS.get(m, m)} {v:.1f} MiB" for m, v in pools.items()) + ".")
    bad = [k for k, v in s["checks"].items() if v is not True]
    out.append("every mode's greedy tokens equal eager tokens." if s["checks"] and not bad
               else f"token checks that failed or are missing: {bad or 'all (none recorded)'}.")
    return out
