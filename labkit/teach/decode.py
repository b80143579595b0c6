"""Notebooks 02-03: the eager decode step, the KV cache, where each number comes from, and the
step-time charts.

One module per notebook topic: its lessons (pure: records and numbers to rows) and its
charts (plotly figures from records).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import torch

from labkit.measure.records import Decode, view
from labkit.model import GPTConfig
from labkit.teach.plots import (
    check_methods, color, finish, label, plotly_go, provenances, stats_bar,
)


# ---------------------------------------------------------------------- lessons decode
# Decode-step numbers for notebooks 00–03: the KV cache's size, a decode record's table.

def kv_cache_bytes(cfg: GPTConfig) -> int:
    """Bytes of a :class:`TinyGPT`'s static K and V caches: ``2 × n_layer × (max_batch + 1)
    × n_head × max_seq × head_dim × element`` (``+ 1``: the slot padded rows write to)."""
    element = torch.empty((), dtype=cfg.torch_dtype).element_size()
    return (2 * cfg.n_layer * (cfg.max_batch + 1) * cfg.n_head * cfg.max_seq * cfg.head_dim
            * element)


def decode_rows(record: Any, methods: Sequence[str] | None = None) -> list[dict]:
    """A rounded row per batch size: µs, tokens/s, speed-up, eager µs per GPU op."""
    dec = view(record, Decode)
    eager = dec.median_us("eager") if "eager" in dec.methods else None
    rows = []
    for i, bs in enumerate(dec.batch_sizes):
        row: dict = {"batch": bs}
        for m, t in ((m, dec.median_us(m)[i]) for m in methods or dec.methods):
            row.update({f"{m} µs": t and round(t, 1), f"{m} tok/s": t and round(bs * 1e6 / t)})
            if m != "eager" and eager is not None:
                row[f"{m} speed-up"] = t and round(eager[i] / t, 2)
        if eager is not None and dec.kernels_per_step:
            row["eager µs per GPU op"] = round(eager[i] / dec.kernels_per_step, 1)
        rows.append(row)
    return rows


# ---------------------------------------------------------------------- lessons provenance
# Where and when records were made, read from their environment blocks, so that prose about ...

#: the environment fields that name a machine: a record made elsewhere differs in one of them
MACHINE_FIELDS = ("gpu_name", "cpu", "cpu_count", "platform")


def _env(record: Any) -> dict:
    env = getattr(record, "env", None)
    if not isinstance(env, dict):
        raise TypeError(f"expected a labkit Result with an environment record, got "
                        f"{type(record).__name__}")
    return env


def recorded_at(record: Any) -> datetime:
    """When ``record`` was made (its environment's ``date``, ISO 8601 with a time zone)."""
    date = _env(record).get("date")
    if not isinstance(date, str):
        raise ValueError("the record's environment holds no date: re-record it with labkit")
    return datetime.fromisoformat(date)


def same_machine(*records: Any) -> bool:
    """True when every record names the same GPU, CPU, core count and platform (kernel build);
    a field missing from any record makes it False (unknown is not the same)."""
    if len(records) < 2:
        raise ValueError(f"compare at least two records, got {len(records)}")
    envs = [_env(r) for r in records]
    return all(envs[0].get(k) is not None and all(e.get(k) == envs[0][k] for e in envs[1:])
               for k in MACHINE_FIELDS)


def same_commit(*records: Any) -> bool:
    """True when every record was made at one git commit (abbreviations match their full
    hashes); a missing commit makes it False."""
    if len(records) < 2:
        raise ValueError(f"compare at least two records, got {len(records)}")
    commits = [c for c in (_env(r).get("git_commit") for r in records)
               if isinstance(c, str) and c]
    if len(commits) < len(records):
        return False
    short = min(len(c) for c in commits)
    return len({c[:short] for c in commits}) == 1


def hours_between(earlier: Any, later: Any) -> float:
    """Hours from ``earlier``'s recording to ``later``'s (negative when ``later`` is older)."""
    return (recorded_at(later) - recorded_at(earlier)).total_seconds() / 3600


def minutes_apart(a: Any, b: Any) -> float:
    """Minutes between the two recordings, whichever came first."""
    return abs(hours_between(a, b)) * 60


# ---------------------------------------------------------------------- plots decode
# Charts of ``decode_<preset>`` records: step time per batch size and method or preset.

PRESET_COLORS = {"small": "#6baed6", "gpt2": "#08519c", "char": "#9ecae1", "test": "#c6dbef"}


def _bar(x: Sequence, stats: Sequence, name: str, colour: str):
    return stats_bar(x, stats, name, colour, texttemplate="%{y:,.0f}", textposition="auto",
                     insidetextanchor="middle")


def step_time_chart(record: Any, *, methods: Sequence[str] | None = None,
                    subtitle: str | None = None, log_y: bool = False):
    """Median decode-step time per batch size, one bar per method (p10–p90 whiskers)."""
    data = view(record, Decode)
    check_methods("decode", methods or (), data.methods)
    fig = plotly_go().Figure([_bar(data.batch_sizes, data.times[m], label(m), color(m))
                              for m in methods or data.methods])
    cfg = data.config
    shape = f" ({cfg['n_layer']} layers, d={cfg['d_model']})" if {"n_layer", "d_model"} <= set(
        cfg) else ""
    fig.update_layout(barmode="group")
    return finish(fig, f"Decode step time: {data.preset}{shape}, {data.dtype}".rstrip(", "),
                  "batch size", "µs per step (median)", log_y=log_y, subtitle=subtitle,
                  record=record)


def eager_step_chart(records: Mapping[str, Any], *, cpu_times: Mapping[int, Any] | None = None,
                     cpu_label: str = "CPU eager (this machine, live)",
                     subtitle: str | None = None):
    """Eager step time per batch size of several presets, beside live CPU ``cpu_times``."""
    fig, cats = plotly_go().Figure(), set()
    for name, rec in records.items():
        data = view(rec, Decode)
        gpu = (getattr(rec, "env", None) or {}).get("gpu_name") or "GPU"
        fig.add_trace(_bar(data.batch_sizes, data.times["eager"], f"{gpu} eager, {name}",
                           PRESET_COLORS.get(name, "#3182bd")))
        cats |= set(data.batch_sizes)
    if cpu_times:
        fig.add_trace(_bar(list(cpu_times), list(cpu_times.values()), cpu_label, color("cpu")))
        cats |= set(cpu_times)
    fig.update_layout(barmode="group")
    fig.update_xaxes(type="category", categoryorder="array",
                     categoryarray=[str(c) for c in sorted(cats)])
    return finish(fig, "Eager decode step time", "batch size", "µs per step (median)",
                  subtitle=provenances(list(records.values())) if subtitle is None else subtitle,
                  log_y=True)
