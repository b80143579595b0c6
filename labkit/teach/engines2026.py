"""Notebook 18: what the engines shipped in 2026 -- breakable capture, a WHILE node around the
decode steps, LoRA graphs keyed by ``has_lora``, the graph-memory estimate both ways: the rows,
verdicts and charts of the records ``breakable_<preset>``, ``while_decode_<preset>``,
``lora_graphs_<preset>`` and ``graph_memory_<preset>``, and a CPU stand-in of breakable capture.

One module per notebook topic: its lessons (pure: records and numbers to rows), its charts,
and :func:`capture_standin`, labkit's breakable recorder (:mod:`labkit.breakable`) run on the
CPU stand-in graphs of :mod:`labkit.teach.simulated` (what a segment reads and writes, never its
speed), with a guard that refuses a host read during a segment's capture as sync debug mode does
on a GPU. :class:`ToyStep` is a small step of named functions, one of which reads a value on the
host, for exercise 18.2. A verdict is a word only where interleaved samples' p10-p90 spreads
separate; otherwise "no clear difference", or "untested" with its reason.
"""

from __future__ import annotations

import inspect
import math
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from labkit import breakable as bk
from labkit.sizes.graph_estimate import estimate_error_pct, labkit_graph_estimate, vllm_estimate
from labkit.teach.lessons import record_data, stat
from labkit.teach.plots import PALETTE, finish, plotly_go, stats_bar, stats_error_bars
from labkit.teach.simulated import Pool, StandInGraph, graph
from labkit.teach.verdicts import Difference, compare_stats

MiB = 2**20
#: labkit's target for its graph-memory estimate: within this many percent of the measured pool
TARGET_PCT = 10.0


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(float(x), nd)


def _spread(stats: Mapping | None, nd: int = 1, unit: str = "") -> str:
    """``"p10–p90"`` of a Stats dict, as text ("" when missing)."""
    lo, hi = stat(stats, "p10"), stat(stats, "p90")
    if lo is None or hi is None:
        return ""
    return f"{lo:.{nd}f}–{hi:.{nd}f}{unit}"


# ---------------------------------------------------------------------- verdicts

def compare(a: Mapping | None, b: Mapping | None, *, interleaved: bool = True
            ) -> Difference | None:
    """``a`` against ``b`` (timing Stats dicts): medians, p10–p90, samples (``None``: one
    side was not timed)."""
    if a is None or b is None:
        return None
    return compare_stats(a, b, interleaved=interleaved)


def verdict_word(d: Difference | None, lower: str = "faster", higher: str = "slower") -> str:
    """``lower`` where ``a``'s p90 lies below ``b``'s p10, ``higher`` where its p10 lies above
    ``b``'s p90, ``no clear difference`` where the spreads overlap, ``untested (...)`` with
    fewer than two samples or samples not interleaved, ``not timed`` without a side."""
    if d is None:
        return "not timed"
    return {"a lower": lower, "a higher": higher,
            "no difference measured": "no clear difference"}.get(d.word, d.word)


def verdict_phrase(d: Difference | None, subject: str, other: str, lower: str = "faster",
                   higher: str = "slower", *, bold: bool = True) -> str:
    """The verdict of :func:`verdict_word` as a clause: ``subject is faster than other``,
    ``no clear difference between subject and other``, or ``subject against other: untested
    (...)`` (the verdict in bold for markdown unless ``bold=False``)."""
    word = verdict_word(d, lower, higher)
    w = f"**{word}**" if bold else word
    if word in (lower, higher):
        return f"{subject} is {w} than {other}"
    if word == "no clear difference":
        return f"{w} between {subject} and {other}"
    return f"{subject} against {other}: {w}"


def change_words(values: Sequence[float | None]) -> str:
    """Percent changes in words, one per run: ``50.0% smaller``, ``3.1% larger``, ``the same``
    (within 0.05%)."""
    out = []
    for v in values:
        if v is None:
            continue
        side = "smaller" if v < 0 else "larger"
        out.append("the same" if abs(v) < 0.05 else f"{abs(v):.1f}% {side}")
    return ", ".join(out) or "n/a"


def percents(values: Sequence[float | None]) -> str:
    """Signed percents, one per run, to one decimal: ``-72.7%, +3.1%`` (``n/a`` when none)."""
    return ", ".join(f"{v:+.1f}%" for v in values if v is not None) or "n/a"


def spread_agrees(d: Difference | None) -> bool:
    """The raw condition behind :func:`verdict_word`, from the spreads alone: a direction only
    if they do not overlap, none if they do; an untested or untimed comparison agrees with
    no direction."""
    if d is None:
        return False
    if d.runs < 2 or not d.interleaved:
        return d.word.startswith("untested")
    below, above = d.a_range[1] < d.b_range[0], d.a_range[0] > d.b_range[1]
    return {"a lower": below, "a higher": above}.get(d.word, not (below or above))


def difference_text(d: Difference | None, unit: str = "µs", nd: int = 1) -> str:
    """Both sides of a comparison in words: medians, p10–p90, samples, interleaved or not."""
    if d is None:
        return "not timed"
    return (f"{d.a:.{nd}f} {unit} (p10–p90 {d.a_range[0]:.{nd}f}–{d.a_range[1]:.{nd}f}) against "
            f"{d.b:.{nd}f} {unit} ({d.b_range[0]:.{nd}f}–{d.b_range[1]:.{nd}f}), {d.runs} "
            f"samples{'' if d.interleaved else ', not interleaved'}")


# ---------------------------------------------------------------------- breakable capture
# Rows of a ``breakable_<preset>`` record (labkit.measure.breakable).

def _series(record: Any, key: str, variant: str, batch: int) -> Mapping | None:
    d = record_data(record)
    values = d.get(key, {}).get(variant)
    if values is None or batch not in d["batch_sizes"]:
        return None
    value = values[d["batch_sizes"].index(batch)]
    return value if isinstance(value, Mapping) else None


def breakable_stats(record: Any, variant: str, batch: int) -> Mapping | None:
    """The replay Stats of ``variant`` (``full``, ``breaks_<n>``, ``piecewise``) at ``batch``
    rows (``None``: not timed, its tokens differed from eager's)."""
    return _series(record, "times", variant, batch)


def breakable_host_stats(record: Any, variant: str, batch: int) -> Mapping | None:
    """The host's µs to issue one step of ``variant`` at ``batch`` rows (``None``: not timed,
    or a record made before the host's time was recorded)."""
    return _series(record, "host_times", variant, batch)


#: who sets the pace of a step (:func:`pace`), from the host's time to issue it against the GPU's
PACES = ("the host", "the GPU (the host close behind)", "the GPU")


def _pace_bounds(record: Any, variant: str, batch: int) -> tuple[float | None, float | None]:
    """The host's p90 to issue ``variant``'s step and the GPU's p10 to run it."""
    return (stat(breakable_host_stats(record, variant, batch), "p90"),
            stat(breakable_stats(record, variant, batch), "p10"))


def pace(record: Any, variant: str, batch: int) -> str | None:
    """Who sets the pace of ``variant``'s step at ``batch`` rows, by the spreads: ``"the host"``
    where issuing a step takes as long as running it (host p90 at or above GPU p10: Python
    issuing the segments and eager calls keeps the GPU waiting), ``"the GPU"`` where the host
    needs less than half the step's time (host p90 below half the GPU p10), else ``"the GPU
    (the host close behind)"`` (a slower or busier CPU would make it the host's);
    ``None`` without the host's time."""
    hi, lo = _pace_bounds(record, variant, batch)
    if hi is None or lo is None:
        return None
    return PACES[0] if hi >= lo else PACES[2] if hi < lo / 2 else PACES[1]


def pace_holds(record: Any, variant: str, batch: int, who: str) -> bool:
    """Whether the record's spreads say ``who`` (one of :data:`PACES`) sets the pace: the raw
    condition behind :func:`pace`, each side stated (as :func:`spread_agrees` is for
    :func:`verdict_word`), for the check beside a sentence."""
    hi, lo = _pace_bounds(record, variant, batch)
    if hi is None or lo is None or who not in PACES:
        return False
    return {PACES[0]: hi >= lo, PACES[1]: lo / 2 <= hi < lo, PACES[2]: hi < lo / 2}[who]


def _slope(points: Sequence[tuple[int, float | None]]) -> float | None:
    """Least-squares slope of ``y`` over ``n`` (``None`` with fewer than two distinct ``n``)."""
    known = [(float(n), float(y)) for n, y in points if y is not None]
    if len({n for n, _ in known}) < 2:
        return None
    mx = statistics.fmean(n for n, _ in known)
    my = statistics.fmean(y for _, y in known)
    return (sum((n - mx) * (y - my) for n, y in known)
            / sum((n - mx) ** 2 for n, _ in known))


def host_cost_per_break(record: Any, batch: int) -> float | None:
    """µs of host time each break adds to issuing a step at ``batch`` rows: the least-squares
    slope of the ``breaks_<n>`` host medians over ``n`` (``None`` without the host's time)."""
    return _slope([(n, stat(breakable_host_stats(record, f"breaks_{n}", batch)))
                   for n in break_counts(record)])


def pace_rows(record: Any) -> list[dict[str, Any]]:
    """Per batch size and variant: the GPU's µs per step, the host's µs to issue it and who sets
    the pace (:func:`pace`); empty for a record without the host's time."""
    d = record_data(record)
    if "host_times" not in d:
        return []
    return [{"batch": b, "variant": variant_label(v),
             "µs per step": _r(stat(breakable_stats(record, v, b))),
             "host µs to issue": _r(stat(breakable_host_stats(record, v, b))),
             "pace set by": pace(record, v, b) or ""}
            for b in d["batch_sizes"] for v in d["variants"]]


def pace_sentence(record: Any, batch: int) -> str:
    """What each break costs the host, and who sets the pace of FULL and of the most breaks at
    ``batch`` rows ("" for a record without the host's time)."""
    top, per = most_breaks(record), host_cost_per_break(record, batch)
    if per is None:
        return ""
    parts = []
    for v in ("full", top):
        who = pace(record, v, batch)
        if who is None:
            return ""
        parts.append(f"{variant_label(v)}: the host issues a step in "
                     f"{stat(breakable_host_stats(record, v, batch)):.1f} µs, the GPU runs it in "
                     f"{stat(breakable_stats(record, v, batch)):.1f} µs, so **{who}** sets the "
                     "pace")
    return (f"Each break adds about **{per:.0f} µs** of host time to issuing a step; "
            + "; ".join(parts) + ".")


def break_counts(record: Any) -> list[int]:
    """The break counts of the record's ``breaks_<n>`` variants."""
    return [int(n) for n in record_data(record)["break_counts"]]


def batch_sizes(record: Any) -> list[int]:
    """The record's batch sizes."""
    return [int(b) for b in record_data(record)["batch_sizes"]]


def variant_label(name: str) -> str:
    """``FULL``, ``PIECEWISE (hand cut)`` or ``<n> breaks``."""
    if name == "full":
        return "FULL"
    if name == "piecewise":
        return "PIECEWISE (hand cut)"
    n = int(name.removeprefix("breaks_"))
    return f"{n} break{'s' if n != 1 else ''}"


def breakable_compare(record: Any, variant: str, against: str, batch: int
                      ) -> Difference | None:
    """``variant`` against ``against`` at ``batch`` rows (interleaved samples)."""
    return compare(breakable_stats(record, variant, batch),
                   breakable_stats(record, against, batch),
                   interleaved=bool(record_data(record).get("interleaved", True)))


def most_breaks(record: Any) -> str:
    """The ``breaks_<n>`` variant with the most breaks (``L``: the hand cut's shape)."""
    return f"breaks_{max(break_counts(record))}"


def breakable_rows(record: Any) -> list[dict[str, Any]]:
    """Per batch size and variant: its segments and eager calls per step, the replay median and
    p10–p90 (µs), and its verdicts against FULL and against the hand-cut PIECEWISE."""
    d = record_data(record)
    rows = []
    for b in d["batch_sizes"]:
        for v in d["variants"]:
            s = breakable_stats(record, v, b)
            rows.append({
                "batch": b, "variant": variant_label(v),
                "segments": d["segments_per_step"][v], "eager calls": d["eager_per_step"][v],
                "µs per step": _r(stat(s)), "p10–p90 µs": _spread(s),
                "vs FULL": "" if v == "full" else verdict_word(
                    breakable_compare(record, v, "full", b)),
                "vs PIECEWISE": "" if v == "piecewise" else verdict_word(
                    breakable_compare(record, v, "piecewise", b))})
    return rows


def break_cost(record: Any, batch: int) -> dict[str, Any]:
    """What a break costs at ``batch`` rows: the least-squares slope of the ``breaks_<n>``
    medians over ``n`` (µs per break; ``None`` with fewer than two counts timed), and the
    comparison of the most breaks against none (``difference``; its verdict says whether the
    slope is more than noise)."""
    slope = _slope([(n, stat(breakable_stats(record, f"breaks_{n}", batch)))
                    for n in break_counts(record)])
    top = most_breaks(record)
    return {"batch": batch, "breaks": max(break_counts(record)), "slope_us": slope,
            "difference": breakable_compare(record, top, "breaks_0", batch)}


def break_cost_sentence(cost: Mapping[str, Any]) -> str:
    """What :func:`break_cost` allows one to say: a cost per break only where the most breaks
    are slower than none by the spreads."""
    d, n, slope = cost["difference"], cost["breaks"], cost["slope_us"]
    word = verdict_word(d)
    if word == "slower" and slope is not None:
        return (f"Each break adds about **{slope:.2f} µs** (least-squares slope over the break "
                f"counts; {n} breaks are slower than none by the spreads).")
    if word == "no clear difference":
        slope_text = "" if slope is None else f" (slope {slope:+.2f} µs per break)"
        return (f"No cost per break stands out of the noise: {n} breaks and none overlap in "
                f"spread{slope_text}.")
    return f"{n} breaks against none: **{word}**, so no cost per break is stated."


def breakable_checks_pass(record: Any) -> bool:
    """Every variant's graph tokens equal the eager step's, so every variant was timed."""
    d = record_data(record)
    return bool(d["checks"].get("graph_tokens_equal_eager")) and \
        list(d["timed"]) == list(d["variants"])


def segments_match(record: Any) -> bool:
    """``n`` breaks replay ``n + 1`` segments and ``n`` eager calls per step, FULL one segment,
    and the most breaks (``L``) the hand cut's ``L + 1`` pieces."""
    d = record_data(record)
    seg, eager = d["segments_per_step"], d["eager_per_step"]
    n_layer = int(d["n_layer"])
    return (all(seg[f"breaks_{n}"] == n + 1 and eager[f"breaks_{n}"] == n
                for n in break_counts(record))
            and seg["full"] == 1 and seg["piecewise"] == n_layer + 1
            and seg[most_breaks(record)] == seg["piecewise"])


def breakable_chart(record: Any, *, subtitle: str | None = None):
    """µs per step against breaks per step, one line per batch size (p10–p90 whiskers), with
    FULL at no break and the hand-cut PIECEWISE at ``L`` breaks as markers of their own."""
    go = plotly_go()
    d = record_data(record)
    counts = break_counts(record)
    n_layer = int(d["n_layer"])
    fig = go.Figure()
    for i, b in enumerate(d["batch_sizes"]):
        colour = PALETTE[i % len(PALETTE)]
        stats = [breakable_stats(record, f"breaks_{n}", b) for n in counts]
        fig.add_trace(go.Scatter(x=counts, y=[stat(s) for s in stats], mode="lines+markers",
                                 name=f"breakable, batch {b}", line=dict(color=colour),
                                 error_y=stats_error_bars(stats)))
        for name, x, symbol in (("full", 0, "diamond"), ("piecewise", n_layer, "square")):
            s = breakable_stats(record, name, b)
            fig.add_trace(go.Scatter(x=[x], y=[stat(s)], mode="markers",
                                     name=f"{variant_label(name)}, batch {b}",
                                     marker=dict(color=colour, symbol=symbol, size=12,
                                                 line=dict(color="#222222", width=1)),
                                     error_y=stats_error_bars([s])))
    return finish(fig, f"Breakable capture: µs per step by breaks ({d['preset']}, "
                  f"{n_layer} layers)", "breaks per step (eager functions between segments)",
                  "µs per step (median)", subtitle=subtitle, record=record)


def capture_rows(record: Any) -> list[dict[str, Any]]:
    """Per variant: segments per graph, the capture alone and the whole call (warm-up, capture,
    the collector's freeze) in seconds, medians and p10–p90 over the repeats, taken in turn."""
    d = record_data(record)
    return [{"variant": variant_label(v), "segments": d["segments_per_step"][v],
             "capture s": _r(stat(d["capture_s"][v]), 3),
             "capture p10–p90 s": _spread(d["capture_s"][v], 3),
             "whole call s": _r(stat(d["build_s"][v]), 3),
             "whole call p10–p90 s": _spread(d["build_s"][v], 3),
             "vs FULL (capture)": "" if v == "full" else verdict_word(
                 capture_compare(record, v), "shorter", "longer")}
            for v in d["variants"]]


def capture_compare(record: Any, variant: str, against: str = "full") -> Difference | None:
    """Capture time alone of ``variant`` against ``against`` (the variants captured in turn)."""
    d = record_data(record)
    return compare(d["capture_s"].get(variant), d["capture_s"].get(against), interleaved=True)


def _gc_row(record: Any, heap: int, torch_collects: bool, freeze: bool) -> Mapping | None:
    return next((r for r in record_data(record)["gc"]["rows"]
                 if r["heap_objects"] == heap and r["torch_collects"] == torch_collects
                 and r["freeze_gc"] == freeze), None)


def gc_heaps(record: Any) -> list[int]:
    """The synthetic heap sizes (live Python objects) of the collector comparison."""
    return [int(h) for h in record_data(record)["gc"]["heap_objects"]]


def gc_compare(record: Any, heap: int, torch_collects: bool = False) -> Difference | None:
    """Capture with the collector frozen against left running, at ``heap`` objects, with or
    without PyTorch's collection before each graph (the four configurations ran in turn)."""
    a, b = (_gc_row(record, heap, torch_collects, f) for f in (True, False))
    return None if a is None or b is None else compare(a["build_s"], b["build_s"])


def collections_per_capture(row: Mapping) -> list[float]:
    """Median collections per capture for generations 0, 1 and 2."""
    runs = row["collections"]
    return [statistics.median(r[g] for r in runs) for g in range(3)] if runs else []


def gc_collections(record: Any, heap: int, torch_collects: bool, freeze: bool) -> list[float]:
    """Median collections per capture (generations 0, 1, 2) of one collector configuration
    (``[]`` when the record lacks it)."""
    row = _gc_row(record, heap, torch_collects, freeze)
    return [] if row is None else collections_per_capture(row)


def gc_rows(record: Any) -> list[dict[str, Any]]:
    """Per heap size, PyTorch's collection before each graph on or off, and the collector
    frozen or running: the capture's seconds (median, p10–p90), the collections it ran per
    generation, and frozen against running."""
    rows = []
    for r in record_data(record)["gc"]["rows"]:
        g = collections_per_capture(r)
        rows.append({"heap objects": r["heap_objects"],
                     "PyTorch collects before each graph": r["torch_collects"],
                     "collector": "frozen" if r["freeze_gc"] else "running",
                     "capture s": _r(stat(r["build_s"]), 3),
                     "p10–p90 s": _spread(r["build_s"], 3),
                     "collections (gen 0 / 1 / 2)": " / ".join(f"{x:g}" for x in g),
                     "frozen vs running": verdict_word(
                         gc_compare(record, r["heap_objects"], r["torch_collects"]),
                         "faster", "slower") if r["freeze_gc"] else ""})
    return rows


# ---------------------------------------------------------------------- the WHILE node
# Rows of a ``while_decode_<preset>`` record (labkit.measure.while_decode).

#: the three ways of decoding until a stop token, as the record names them, and their labels
WHILE_METHODS = {"host_loop": "host loop (one-step graph)",
                 "multistep": "multistep graph (k steps)",
                 "while_node": "WHILE node (one launch)"}
#: colours of the WHILE chart's series
WHILE_COLORS = {"host_loop": "#d62728", "multistep": "#1f77b4", "while_node": "#2ca02c"}


def while_timed(record: Any) -> bool:
    """Whether the record timed the WHILE node (``False``: it holds the verdict alone)."""
    return bool(record_data(record).get("timed"))


def while_support_rows(record: Any) -> list[dict[str, Any]]:
    """What the GPU machine's torch offered: versions, the routes that work, what is missing."""
    d = record_data(record)
    s = d.get("support") or {}
    return [{"torch": s.get("torch"), "CUDA (torch)": s.get("cuda_runtime"),
             "driver": s.get("driver"), "torch WHILE binding": s.get("torch_while_node"),
             "CUDAGraph(keep_graph=True)": s.get("torch_keep_graph"),
             "cuda-python": s.get("cuda_python"), "NVRTC": s.get("nvrtc"),
             "routes": ", ".join(s.get("routes") or []) or "none",
             "route used": d.get("route") or "none"}]


def while_missing(record: Any) -> list[str]:
    """What the GPU machine's torch lacked, one line each (the route used may need none)."""
    return list((record_data(record).get("support") or {}).get("missing") or [])


def while_cases(record: Any) -> list[int]:
    """Indices of the record's cases (batch size, steps, stop placement)."""
    return list(range(len(record_data(record).get("batch_sizes", []))))


def _while_stats(record: Any, method: str, case: int) -> Mapping | None:
    series = record_data(record).get("times", {}).get(method) or []
    return series[case] if case < len(series) else None


def while_steps(record: Any, method: str, case: int) -> int:
    """Decode steps ``method`` runs in ``case``: the multistep graph always ``k``, the host
    loop and the WHILE node until the last row's stop token (``steps_run``)."""
    d = record_data(record)
    return int(d["max_steps"][case] if method == "multistep" else d["steps_run"][case])


def while_compare(record: Any, case: int, method: str = "while_node",
                  against: str = "host_loop") -> Difference | None:
    """``method`` against ``against`` in ``case`` (µs per whole decode, interleaved)."""
    return compare(_while_stats(record, method, case), _while_stats(record, against, case),
                   interleaved=bool(record_data(record).get("interleaved", True)))


def while_median(record: Any, method: str, case: int) -> float | None:
    """µs per whole decode (tokens on the host) of ``method`` in ``case``."""
    return stat(_while_stats(record, method, case))


def while_rows(record: Any) -> list[dict[str, Any]]:
    """Per case: batch, steps ``k``, stop placement, steps run; per way µs per whole decode and
    per step it ran; the WHILE node against the host loop and against the multistep graph."""
    d = record_data(record)
    rows = []
    for i in while_cases(record):
        row: dict[str, Any] = {"batch": d["batch_sizes"][i], "k": d["max_steps"][i],
                               "stop": d["stop"][i], "steps run": d["steps_run"][i]}
        for m in WHILE_METHODS:
            row[f"{m} µs"] = _r(while_median(record, m, i))
        for m in WHILE_METHODS:
            med = while_median(record, m, i)
            row[f"{m} µs/step"] = None if med is None else _r(med / while_steps(record, m, i), 2)
        row["WHILE vs host loop"] = verdict_word(while_compare(record, i, against="host_loop"))
        row["WHILE vs multistep"] = verdict_word(while_compare(record, i, against="multistep"))
        rows.append(row)
    return rows


def while_case(record: Any, batch: int, k: int, stop: str) -> int | None:
    """The index of the case of ``batch`` rows, ``k`` steps and stop placement ``stop``."""
    d = record_data(record)
    return next((i for i in while_cases(record) if (d["batch_sizes"][i], d["max_steps"][i],
                                                    d["stop"][i]) == (batch, k, stop)), None)


def case_label(record: Any, case: int) -> str:
    """``batch b, k steps, stop`` of ``case``."""
    d = record_data(record)
    return f"batch {d['batch_sizes'][case]}, k = {d['max_steps'][case]}, {d['stop'][case]} stop"


def while_checks_pass(record: Any) -> bool:
    """The plain decode equals the fixed-k decode cut at the stop, and the host loop, the
    multistep graph cut at the stop and the WHILE node (before and after timing) equal it."""
    checks = record_data(record).get("checks") or {}
    return bool(checks) and all(bool(v) for v in checks.values())


def steps_as_placed(record: Any) -> bool:
    """Every early stop ended the loop by step ``k // 2``; every stop that never came ran all
    ``k`` steps."""
    d = record_data(record)
    return bool(d["steps_run"]) and all(
        (s <= k // 2) if where == "early" else (s == k)
        for s, k, where in zip(d["steps_run"], d["max_steps"], d["stop"]))


def verdict_names_torch(record: Any) -> bool:
    """A verdict record names the torch version and every line of what was missing."""
    d = record_data(record)
    text = d.get("verdict") or ""
    torch_version = (d.get("support") or {}).get("torch") or ""
    return bool(text) and bool(torch_version) and torch_version in text and all(
        m in text for m in while_missing(record))


def largest_case(record: Any, stop: str) -> int | None:
    """The case of the largest batch and the most steps with stop placement ``stop``."""
    d = record_data(record)
    cases = [i for i in while_cases(record) if d["stop"][i] == stop]
    return max(cases, key=lambda i: (d["batch_sizes"][i], d["max_steps"][i]), default=None)


def while_chart(record: Any, *, subtitle: str | None = None):
    """µs per whole decode for each case and way (p10–p90 whiskers)."""
    go = plotly_go()
    d = record_data(record)
    labels = [f"b={d['batch_sizes'][i]}, k={d['max_steps'][i]}, {d['stop'][i]}"
              for i in while_cases(record)]
    fig = go.Figure([stats_bar(labels, [_while_stats(record, m, i) for i in while_cases(record)],
                               label, WHILE_COLORS[m])
                     for m, label in WHILE_METHODS.items()])
    fig.update_layout(barmode="group")
    return finish(fig, f"Decode until a stop token, three ways ({d['preset']})",
                  "case (batch, steps k, stop)", "µs per whole decode (median)",
                  subtitle=subtitle, record=record)


# ---------------------------------------------------------------------- LoRA graphs
# Rows of a ``lora_graphs_<preset>`` record (labkit.measure.lora_graphs).

#: the timed replays of a LoRA record, and their labels
LORA_STEPS = {"plain": "plain graph", "lora_idle": "LoRA graph, no adapter active",
              "lora_active": "LoRA graph, adapters active"}
LORA_COLORS = {"plain": "#1f77b4", "lora_idle": "#ff7f0e", "lora_active": "#2ca02c"}
#: the graph sets whose pools the record measured, and their labels
POOL_LABELS = {"plain": "plain graphs alone", "lora": "LoRA graphs alone",
               "both": "both, one pool (specialised, as vLLM PR #25914)"}


def lora_pool_ratio(record: Any, case: str = "lora", against: str = "plain") -> float | None:
    """Reserved pool bytes of ``case`` over those of ``against``."""
    pools = record_data(record)["pool_bytes"]
    a, b = pools[case]["reserved_bytes"], pools[against]["reserved_bytes"]
    return None if not b else a / b


def lora_pool_rows(record: Any) -> list[dict[str, Any]]:
    """Per graph set: graphs, the pool reserved and active (MiB), over the plain graphs'."""
    d = record_data(record)
    return [{"graphs": POOL_LABELS.get(c, c), "count": v["graphs"],
             "pool reserved MiB": _r(v["reserved_bytes"] / MiB, 2),
             "pool active MiB": _r(v["active_bytes"] / MiB, 2),
             "× plain": _r(lora_pool_ratio(record, c), 2)}
            for c, v in d["pool_bytes"].items()]


def lora_stats(record: Any, step: str, batch: int) -> Mapping | None:
    """The Stats of ``step`` (``plain``, ``lora_idle``, ``lora_active``) at ``batch`` rows."""
    return _series(record, "times", step, batch)


def lora_compare(record: Any, step: str, against: str, batch: int) -> Difference | None:
    """``step`` against ``against`` at ``batch`` rows (sampled in turn)."""
    return compare(lora_stats(record, step, batch), lora_stats(record, against, batch),
                   interleaved=bool(record_data(record).get("interleaved", True)))


def lora_time_rows(record: Any) -> list[dict[str, Any]]:
    """Per batch size: the three replays' medians (µs), the idle LoRA graph against the plain
    one, and the active against the idle."""
    rows = []
    for b in batch_sizes(record):
        row: dict[str, Any] = {"batch": b}
        for s, label in LORA_STEPS.items():
            row[f"{label} µs"] = _r(stat(lora_stats(record, s, b)))
        row["idle LoRA vs plain"] = verdict_word(lora_compare(record, "lora_idle", "plain", b))
        row["active vs idle"] = verdict_word(lora_compare(record, "lora_active", "lora_idle", b))
        rows.append(row)
    return rows


def lora_chart(record: Any, *, subtitle: str | None = None):
    """µs per step of the three replays at each batch size (p10–p90 whiskers)."""
    go = plotly_go()
    d = record_data(record)
    sizes = batch_sizes(record)
    fig = go.Figure([stats_bar(sizes, [lora_stats(record, s, b) for b in sizes], label,
                               LORA_COLORS[s]) for s, label in LORA_STEPS.items()])
    fig.update_layout(barmode="group")
    return finish(fig, f"LoRA under graphs ({d['preset']}, rank {d['rank']}, "
                  f"{d['max_loras']} adapters)", "batch size", "µs per step (median)",
                  subtitle=subtitle, record=record)


def lora_checks_pass(record: Any) -> bool:
    """Graph tokens equal eager's for both keys, the keys as dispatched, the adapters change
    tokens of their rows, and rows without one keep the plain model's, at every batch size."""
    checks = record_data(record)["checks"]
    return bool(checks) and all(bool(v) for v in checks.values())


def lora_graph_counts_match(record: Any) -> bool:
    """Each measured pool holds its graph set: one graph per size plain, one LoRA, two both."""
    d = record_data(record)
    n = len(d["batch_sizes"])
    return {c: v["graphs"] for c, v in d["pool_bytes"].items()} == \
        {"plain": n, "lora": n, "both": 2 * n}


def lora_pools_text(record: Any) -> str:
    """Each measured pool's graphs and reserved MiB: ``plain: 3 graphs in 2.0 MiB; ...``."""
    return "; ".join(f"{c}: {v['graphs']} graphs in {v['reserved_bytes'] / MiB:.1f} MiB"
                     for c, v in record_data(record)["pool_bytes"].items())


# ---------------------------------------------------------------------- the estimate
# Rows of a ``graph_memory_<preset>`` record (labkit.measure.graph_memory).

def _runs_span(runs: Sequence[Mapping], key: str, nd: int = 1) -> str:
    vals = [float(v) for r in runs if (v := r.get(key)) is not None]
    if not vals:
        return "n/a"
    lo, hi = min(vals), max(vals)
    return f"{lo:+.{nd}f}" if math.isclose(lo, hi) else f"{lo:+.{nd}f} to {hi:+.{nd}f}"


def _median_mib(runs: Sequence[Mapping], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return None if not vals else _r(statistics.median(vals) / MiB, 1)


def estimate_rows(record: Any) -> list[dict[str, Any]]:
    """Per capture list and ``max_seq``: the graphs, the pool measured in one shared pool and
    both estimates (MiB, medians over runs), and each estimate's error in percent of the
    measured pool (over runs: the span)."""
    d = record_data(record)
    return [{"list": p["size_list"], "max_seq": p["max_seq"], "graphs": p["n_graphs"],
             "measured MiB": _median_mib(p["runs"], "measured_bytes"),
             "vLLM estimate MiB": _median_mib(p["runs"], "vllm_estimate_bytes"),
             "vLLM error %": _runs_span(p["runs"], "vllm_error_pct"),
             "labkit estimate MiB": _median_mib(p["runs"], "labkit_estimate_bytes"),
             "labkit error %": _runs_span(p["runs"], "labkit_error_pct"),
             "out of memory": any("oom" in r for r in p["runs"])}
            for p in d["points"]]


def recomputed_errors(record: Any) -> list[tuple[float | None, float | None]]:
    """Each run's ``(vLLM error %, labkit error %)`` computed again from its sample bytes and
    measured pool with :mod:`labkit.sizes.graph_estimate` (``None`` where a capture ran out of
    memory): what the record's stored errors must equal."""
    out: list[tuple[float | None, float | None]] = []
    for p in record_data(record)["points"]:
        for r in p["runs"]:
            out.append(run_errors(r, p["sizes"]))
    return out


def run_errors(run: Mapping, sizes: Sequence[int]) -> tuple[float | None, float | None]:
    """One run's errors (percent of its measured pool) from its bytes."""
    measured = run.get("measured_bytes")
    if not measured:
        return None, None
    v = (estimate_error_pct(vllm_estimate(run["sample_bytes"], sizes), measured)
         if "sample_bytes" in run else None)
    k = (estimate_error_pct(labkit_graph_estimate(sizes, run["labkit_grown"],
                                                  run.get("labkit_kept")), measured)
         if "labkit_grown" in run else None)
    return v, k


def stored_errors(record: Any) -> list[tuple[float | None, float | None]]:
    """Each run's stored ``(vLLM error %, labkit error %)``."""
    return [(r.get("vllm_error_pct"), r.get("labkit_error_pct"))
            for p in record_data(record)["points"] for r in p["runs"]]


def errors_agree(record: Any, tol: float = 1e-6) -> bool:
    """The stored errors equal those computed again from the bytes (both ``None``, or within
    ``tol`` percentage points)."""
    def same(a: float | None, b: float | None) -> bool:
        return (a is None and b is None) or (a is not None and b is not None
                                             and abs(a - b) <= tol)
    pairs = list(zip(stored_errors(record), recomputed_errors(record)))
    return bool(pairs) and all(same(s[0], c[0]) and same(s[1], c[1]) for s, c in pairs)


def error_span(record: Any, who: str) -> tuple[float, float] | None:
    """The smallest and largest error (percent) of ``who``'s estimate over every run."""
    vals = [e for v, k in recomputed_errors(record) for e in ([v] if who == "vllm" else [k])
            if e is not None]
    return (min(vals), max(vals)) if vals else None


def worst_abs_error(record: Any) -> float | None:
    """The largest absolute error of labkit's estimate (percent) over every run, from bytes."""
    span = error_span(record, "labkit")
    return None if span is None else max(abs(span[0]), abs(span[1]))


def within_target(record: Any) -> bool | None:
    """Whether labkit's estimate lies within :data:`TARGET_PCT` of every measured pool."""
    worst = worst_abs_error(record)
    return None if worst is None else worst <= TARGET_PCT


def closer_points(record: Any) -> tuple[int, int]:
    """Runs where labkit's estimate is closer to the measured pool than vLLM's, and runs with
    both estimates known."""
    pairs = [(v, k) for v, k in recomputed_errors(record) if v is not None and k is not None]
    return sum(abs(k) < abs(v) for v, k in pairs), len(pairs)


def estimate_chart(record: Any, *, subtitle: str | None = None):
    """Each estimate's error in percent of the measured pool, per capture list and
    ``max_seq`` (median over runs, the runs' span as whiskers), and labkit's ±10% target."""
    go = plotly_go()
    d = record_data(record)
    labels = [f"{p['size_list']} ({p['n_graphs']}), {p['max_seq']}" for p in d["points"]]
    fig = go.Figure()
    for who, name, colour in (("vllm", "vLLM: first + max(second, 1 MiB) × (n − 1)", "#d62728"),
                              ("labkit", "labkit: largest + smallest + kept", "#2ca02c")):
        meds, los, his = [], [], []
        for p in d["points"]:
            vals = [e for e in (run_errors(r, p["sizes"])[0 if who == "vllm" else 1]
                                for r in p["runs"]) if e is not None]
            meds.append(statistics.median(vals) if vals else None)
            los.append(min(vals) if vals else None)
            his.append(max(vals) if vals else None)
        fig.add_trace(go.Bar(x=labels, y=meds, name=name, marker_color=colour,
                             error_y=dict(type="data", symmetric=False,
                                          array=[h - m if h is not None and m is not None
                                                 else 0 for h, m in zip(his, meds)],
                                          arrayminus=[m - lo if lo is not None and m is not None
                                                      else 0 for lo, m in zip(los, meds)])))
    for y in (TARGET_PCT, -TARGET_PCT):
        fig.add_hline(y=y, line=dict(color="#444444", dash="dash"))
    fig.update_layout(barmode="group")
    return finish(fig, f"Graph memory in one shared pool: each estimate's error ({d['preset']})",
                  "capture list (graphs), max_seq", "error, % of the measured pool",
                  subtitle=subtitle, record=record)


def small_cache_rows(record: Any) -> list[dict[str, Any]]:
    """Per KV layout: the estimates profiled against the small cache, set against the pool
    captured against the real one (percent, over runs), labkit's sampled against the real cache,
    and how much the pool changed from the small cache's rows to the real ones, and with the
    blocks alone."""
    sc = record_data(record)["small_cache"]
    rows = []
    for layout, row in sc["layouts"].items():
        rows.append({"layout": layout,
                     "rows profiled → real": f"{sc['profile_max_seq']} → {sc['real_max_seq']}",
                     "vLLM, profiled small %": _pct_span(row["profiled_vllm_error_pct"]),
                     "labkit, profiled small %": _pct_span(row["profiled_labkit_error_pct"]),
                     "labkit, sampled on the real cache %": _pct_span(row["real_labkit_error_pct"]),
                     "pool change, rows %": _pct_span(row["rows_change_pct"]),
                     "pool change, blocks alone %": _pct_span(row.get("blocks_change_pct"))})
    return rows


def _pct_span(values: Sequence[float | None] | None) -> str:
    vals = [v for v in values or [] if v is not None]
    if not vals:
        return "n/a"
    lo, hi = min(vals), max(vals)
    return f"{lo:+.1f}" if math.isclose(lo, hi) else f"{lo:+.1f} to {hi:+.1f}"


def profiled_short_fall(record: Any, layout: str) -> dict[str, Any]:
    """For ``layout``: per run, both estimates sampled against the small cache against the pool
    measured against the real cache, computed again from the bytes (``short``: every run's
    estimate below that pool), and the pool's change with the rows and with the blocks alone."""
    sc = record_data(record)["small_cache"]
    row = sc["layouts"][layout]
    caches = row["caches"]
    sizes = list(sc["sizes"])
    out: dict[str, Any] = {"layout": layout}
    for who in ("vllm", "labkit"):
        errs = []
        for prof, real in zip(caches["profile"]["runs"], caches["real"]["runs"]):
            measured = real.get("measured_bytes")
            v, k = run_errors({**prof, "measured_bytes": measured}, sizes)
            errs.append(v if who == "vllm" else k)
        out[f"{who}_errors"] = errs
        known = [e for e in errs if e is not None]
        out[f"{who}_short"] = bool(known) and all(e < 0 for e in known)
    out["rows_change_pct"] = list(row["rows_change_pct"])
    out["blocks_change_pct"] = list(row.get("blocks_change_pct") or [])
    return out


def blocks_change_bytes(record: Any, layout: str = "paged") -> list[int] | None:
    """Per run, the pool captured against the real rows on the fewest blocks less the pool
    against the real cache (bytes); ``None`` where the layout has no such cache."""
    caches = record_data(record)["small_cache"]["layouts"][layout]["caches"]
    if "real_few_blocks" not in caches:
        return None
    return [f["measured_bytes"] - r["measured_bytes"]
            for f, r in zip(caches["real_few_blocks"]["runs"], caches["real"]["runs"])
            if f.get("measured_bytes") is not None and r.get("measured_bytes") is not None]


# ---------------------------------------------------------------------- a CPU stand-in
# labkit's breakable recorder on CPU stand-in graphs: what each segment reads and writes.

#: tensor methods and functions that read a value on the host (or make a shape that depends on
#: one): on a GPU each waits for the device, which a capture refuses
HOST_SYNCS = frozenset({"item", "tolist", "numpy", "__bool__", "__int__", "__float__",
                        "__index__", "nonzero", "masked_select", "unique", "cpu"})


class HostSyncError(RuntimeError):
    """A host read during a segment's capture (on a GPU: ``cudaErrorStreamCaptureUnsupported``,
    or sync debug mode's error in the warm-up)."""


def _caller() -> str:
    """The innermost function outside torch that made the call being intercepted."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith("torch"):
        frame = frame.f_back
    return frame.f_code.co_name if frame is not None else "?"


class _SyncGuard(TorchFunctionMode):
    """Refuse the host reads of :data:`HOST_SYNCS` while a segment is being captured."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        name = getattr(func, "__name__", "")
        if name in HOST_SYNCS:
            raise HostSyncError(
                f"host read {name}() in {_caller()} during a segment's capture: on a GPU the "
                "capture fails (the CPU would wait for a stream that is being recorded); mark "
                "a function that holds it with break_graph so it runs eagerly between segments")
        return func(*args, **(kwargs or {}))


class StandInSegment(StandInGraph):
    """A segment on the CPU: :class:`labkit.teach.simulated.StandInGraph` with the calls
    :mod:`labkit.breakable`'s recorder makes (``capture_begin`` on a pool, ``capture_end``), a
    guard that refuses host reads while capturing, and an optional log of its replays."""

    def __init__(self) -> None:
        super().__init__()
        self._open: ExitStack | None = None
        #: when a list: ``("segment", index)`` appended at each replay
        self.log: list[tuple[str, int]] | None = None
        self.index = 0

    def capture_begin(self, pool: Pool | None = None, capture_error_mode: str = "global"
                      ) -> None:
        stack = ExitStack()
        stack.enter_context(graph(self, pool))
        stack.enter_context(_SyncGuard())
        self._open = stack

    def capture_end(self) -> None:
        stack, self._open = self._open, None
        if stack is not None:
            stack.close()

    def replay(self) -> None:
        if self.log is not None:
            self.log.append(("segment", self.index))
        super().replay()


def capture_standin(fn: Callable[..., Any], inputs: Sequence[torch.Tensor]
                    ) -> bk.BreakableGraph:
    """Capture ``fn(*inputs)`` with labkit's breakable recorder into CPU stand-in segments in
    one stand-in pool: split at every call of a :func:`labkit.breakable.break_graph` function,
    each segment replayed once before the eager call reads its values, as on a GPU. A host read
    in a segment raises :class:`HostSyncError`; a marked function that returns something other
    than tensors raises ``TypeError``; either way nothing is left behind."""
    segments = bk._Segments(Pool(), new_graph=StandInSegment)
    try:
        with torch.no_grad(), bk._recording(segments):
            segments.begin()
            output = fn(*inputs)
            segments.end()
    except BaseException:
        segments.abort()
        raise
    for i, seg in enumerate(segments.segments):
        seg.index = i
    return bk.BreakableGraph(segments.segments, segments.breaks, tuple(inputs), output, 0.0,
                             0.0, fn=fn)


@dataclass(frozen=True)
class BreakRecord:
    """What a replay needs of one graph break: the marked function, the static arguments it was
    called with at capture (what the segments before it write), and the static ``output`` it
    returned then (what the segments after it read). No ``run``: exercise 18.1 writes it."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    output: Any


def break_records(g: bk.BreakableGraph,
                  log: list[tuple[str, int]] | None = None) -> list[BreakRecord]:
    """The breaks of ``g`` as :class:`BreakRecord` (with ``log``: each call appends
    ``("break", index)``)."""
    def logged(fn: Callable[..., Any], i: int) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if log is not None:
                log.append(("break", i))
            return fn(*args, **kwargs)
        call.__name__ = getattr(fn, "__name__", "break")
        return call
    return [BreakRecord(b.name, logged(b.fn, i), b.args, dict(b.kwargs), b.output)
            for i, b in enumerate(g.breaks)]


def segment_rows(g: bk.BreakableGraph) -> list[dict[str, Any]]:
    """One row per segment and per break, in replay order: what runs, the stand-in ops a segment
    recorded, a break's function and the shape of its static output, and the pool."""
    rows: list[dict[str, Any]] = []
    pools: dict[int, int] = {}
    for i, seg in enumerate(g.segments):
        pool = pools.setdefault(id(seg.pool()), len(pools))
        rows.append({"order": len(rows), "what": f"segment {i} (graph)",
                     "recorded ops": len(getattr(seg, "_tape", ())), "static output": "",
                     "pool": f"stand-in pool {pool}"})
        if i < len(g.breaks):
            b = g.breaks[i]
            shape = tuple(b.output.shape) if isinstance(b.output, torch.Tensor) else None
            rows.append({"order": len(rows), "what": f"break {i}: {b.name} (eager)",
                         "recorded ops": "", "static output": str(shape), "pool": ""})
    return rows


class _OpCounter(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        self.ops += 1
        return func(*args, **(kwargs or {}))


def eager_ops(g: bk.BreakableGraph) -> int:
    """Torch operations the breaks of ``g`` run eagerly at every replay."""
    counter = _OpCounter()
    with torch.no_grad(), counter:
        for b in g.breaks:
            b.fn(*b.args, **b.kwargs)
    return counter.ops


# ---------------------------------------------------------------------- a toy step (18.2)

#: the functions of :class:`ToyStep`, any of which may be marked as a graph break
TOY_FUNCTIONS = ("embed", "layer", "norm", "quantize", "dynamic_scale", "mlp", "head")


class ToyStep:
    """A small step of named functions over a ``(rows, width)`` input: ``embed``, then per layer
    ``layer`` (``norm``, ``quantize``, ``mlp`` and a residual), then ``head``. ``quantize``
    rounds to an 8-bit grid whose scale ``dynamic_scale`` reads on the host. The functions call
    each other through :attr:`fns`, so marking one (``marks``) breaks the graph wherever it is
    called."""

    def __init__(self, marks: Sequence[str] = (), *, width: int = 16, layers: int = 2,
                 seed: int = 0) -> None:
        marks = check_marks(marks)
        g = torch.Generator().manual_seed(seed)

        def w(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=g) / shape[0] ** 0.5

        self.width, self.layers = width, layers
        self.w_embed, self.w_head = w(width, width), w(width, width)
        self.w_up = [w(width, 2 * width) for _ in range(layers)]
        self.w_down = [w(2 * width, width) for _ in range(layers)]
        self.fns: dict[str, Callable[..., Any]] = {
            name: getattr(self, name) for name in TOY_FUNCTIONS}
        for name in marks:
            self.fns[name] = bk.break_graph(self.fns[name])
        self.marks = marks

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fns["embed"](x)
        for i in range(self.layers):
            h = self.fns["layer"](h, i)
        return self.fns["head"](h)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w_embed

    def layer(self, h: torch.Tensor, i: int) -> torch.Tensor:
        q = self.fns["quantize"](self.fns["norm"](h))
        return h + self.fns["mlp"](q, i)

    def norm(self, h: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(h, (self.width,))

    def quantize(self, h: torch.Tensor) -> torch.Tensor:
        scale = self.fns["dynamic_scale"](h)
        return torch.round(h / scale).clamp(-127, 127) * scale

    def dynamic_scale(self, h: torch.Tensor) -> float:
        return float(h.abs().max().item()) / 127 or 1.0

    def mlp(self, h: torch.Tensor, i: int) -> torch.Tensor:
        return torch.tanh(h @ self.w_up[i]) @ self.w_down[i]

    def head(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.w_head


def check_marks(marks: object) -> tuple[str, ...]:
    """``marks`` (one function name or a list of them) as a tuple of distinct names of
    :data:`TOY_FUNCTIONS`."""
    if isinstance(marks, str):
        marks = [marks]
    if not isinstance(marks, Sequence) or not all(isinstance(m, str) for m in marks):
        raise TypeError(f"marks must be a function name or a list of names from "
                        f"{list(TOY_FUNCTIONS)}, got {marks!r}")
    bad = [m for m in marks if m not in TOY_FUNCTIONS]
    if bad:
        raise ValueError(f"no function {bad} in the toy step; choose from {list(TOY_FUNCTIONS)}")
    return tuple(dict.fromkeys(marks))


def toy_source() -> str:
    """The toy step's code, as the learner reads it."""
    src = inspect.getsource(ToyStep)
    start = src.index("    def __call__")
    return src[start:].rstrip()


def toy_inputs(rows: int = 4, width: int = 16, seeds: Sequence[int] = (1, 2, 3)
               ) -> list[torch.Tensor]:
    """Inputs of the toy step, one per seed (the capture's, then new ones)."""
    return [torch.randn(rows, width, generator=torch.Generator().manual_seed(s)) for s in seeds]


def try_marks(marks: object, *, seed: int = 0) -> dict[str, Any]:
    """Capture :class:`ToyStep` with ``marks`` on the CPU stand-in, then replay it on new inputs
    copied into the static input: whether it captured (else the error), its segments, whether
    every replay equals the eager step on the same input, and the ops its breaks run eagerly
    per replay."""
    names = check_marks(marks)
    step = ToyStep(names, seed=seed)
    first, *others = toy_inputs(width=step.width)
    x = first.clone()
    out: dict[str, Any] = {"marks": list(names), "captured": False, "error": "",
                           "segments": None, "equal_eager": None, "eager_ops": None}
    try:
        g = capture_standin(step, (x,))
    except (HostSyncError, TypeError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    equal = True
    with torch.no_grad():
        for new in others:
            x.copy_(new)
            got = g.replay()
            equal = equal and torch.allclose(got, ToyStep((), seed=seed)(new), atol=1e-6)
    out.update(captured=True, segments=len(g.segments), equal_eager=equal,
               eager_ops=eager_ops(g))
    return out
