"""Notebook 17: past the launch -- PDL and a persistent decode step: the record's rows and
chart, and a small simulator of programs meeting at a counter barrier.

One module per notebook topic: its lessons (pure: records and numbers to rows), its chart,
and :func:`simulate`, a deterministic model of ``P`` programs running the five stages of
``labkit.kernels.persistent.layer_kernel`` (plain Python, nothing runs on a GPU). The model
keeps what the barrier is about and nothing else: a shared memory (the GPU's L2), one cache
per program (its SM's L1, not coherent: a plain load may return a copy made earlier), loads
that bypass it (``volatile``), an acquire that drops it, a ready counter that only grows,
and a limit on how many programs are resident at once.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.kernels.step import BARRIERS, kernels_per_step, stage_tiles
from labkit.model import preset as model_preset
from labkit.measure.fidelity import kl_limit
from labkit.measure.sync_floor import sync_summary
from labkit.roofline.while_node import version_tuple
from labkit.support.paths import data_dir, repo_root
from labkit.teach.lessons import record_data, stat
from labkit.teach.plots import finish, plotly_go, stats_bar
from labkit.teach.verdicts import Difference, compare_stats, timing_verdict

# ---------------------------------------------------------------------- the record
# Rows and verdicts of a ``past_launch_<preset>`` record (labkit.measure.past_launch).

#: the three schedules of the Triton step, as the record names them, and their labels
WAYS = {"triton": "kernels (5L + 1)", "triton_pdl": "PDL (5L + 1)",
        "triton_persistent": "persistent (L + 1)"}
#: colours of the chart's series
COLORS = {"triton": "#1f77b4", "triton_pdl": "#ff7f0e", "triton_persistent": "#2ca02c"}


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(float(x), nd) + 0.0  # no "-0"


def n_layer(record: Any) -> int:
    """The record's model depth."""
    return int(record_data(record)["config"]["n_layer"])


def step_stats(record: Any, step: str, batch: int) -> Mapping | None:
    """The timing Stats dict of ``step`` at ``batch`` rows (``None``: not timed)."""
    d = record_data(record)
    series = d.get("times", {}).get(step)
    if series is None or batch not in d["batch_sizes"]:
        return None
    value = series[d["batch_sizes"].index(batch)]
    return value if isinstance(value, Mapping) else None


def batch_sizes(record: Any) -> list[int]:
    """The record's batch sizes."""
    return [int(b) for b in record_data(record)["batch_sizes"]]


def median_us(record: Any, step: str, batch: int) -> float | None:
    """The replay median of ``step`` at ``batch`` rows (``None``: not timed)."""
    return stat(step_stats(record, step, batch))


def floor_at(record: Any, batch: int) -> float:
    """The floor at ``batch`` rows: the step's bytes at the measured copy bandwidth (µs)."""
    d = record_data(record)
    return float(d["floor_us"][d["batch_sizes"].index(batch)])


def launches_at(record: Any, step: str, batch: int) -> int | None:
    """GPU kernels the profiler counted in one ``step`` at ``batch`` rows."""
    d = record_data(record)
    counts = d.get("kernels", {}).get(step)
    return None if not counts else int(counts[d["batch_sizes"].index(batch)])


def cooperative_notes(record: Any) -> list[str]:
    """Whether the record's persistent step was launched cooperatively (and why not), and
    each variant whose cooperative launch the GPU refused, with its error."""
    d = record_data(record)
    notes = [f"cooperative launch {'on' if d.get('cooperative') else 'off'}"
             + (f" ({d['cooperative_error']})" if d.get("cooperative_error") else "")]
    return notes + [f"{name}: refused on the GPU: {why}"
                    for name, why in (d.get("refused") or {}).items()]


def compare(record: Any, step: str, batch: int, against: str = "triton") -> Difference | None:
    """``step`` against ``against`` at ``batch`` rows (interleaved samples, p10–p90)."""
    a, b = step_stats(record, step, batch), step_stats(record, against, batch)
    if a is None or b is None:
        return None
    return compare_stats(a, b, interleaved=bool(record_data(record).get("interleaved", True)))


def verdict_word(d: Difference | None) -> str:
    """``faster``, ``slower``, ``no faster or slower`` or the untested reason."""
    if d is None:
        return "not timed"
    return {"a lower": "faster", "a higher": "slower",
            "no difference measured": "no faster or slower"}.get(d.word, d.word)


def spread_agrees(d: Difference) -> bool:
    """The raw condition behind :func:`verdict_word`: faster only if the step's p90 lies below
    the other's p10, slower only if its p10 lies above the other's p90, else they overlap."""
    if d.runs < 2 or not d.interleaved:
        return False
    word = verdict_word(d)
    if word == "faster":
        return d.a_range[1] < d.b_range[0]
    if word == "slower":
        return d.a_range[0] > d.b_range[1]
    return not (d.a_range[1] < d.b_range[0] or d.a_range[0] > d.b_range[1])


def gate_rows(record: Any) -> list[dict[str, Any]]:
    """The fidelity gate per step: agreement, KL mean and max against the float32 twin, the
    gate's limit, float32 tokens equal, and whether it passes."""
    fid = record_data(record)["fidelity"]
    limit = kl_limit(fid["readable"]["kl"]["mean"])
    return [{"step": name, "agreement": _r(row["agreement"], 3),
             "KL mean": float(f"{row['kl']['mean']:.3g}"),
             "KL max": float(f"{row['kl']['max']:.3g}"),
             "KL limit": float(f"{limit:.3g}"),
             "float32 tokens equal": row.get("float32_tokens_equal"),
             "passes": bool(row["passes"])} for name, row in fid.items()]


def gate_passes(record: Any) -> bool:
    """Every step of the record passes the gate, and every timed step was gated."""
    d = record_data(record)
    return all(row["passes"] for row in d["fidelity"].values()) and \
        set(d.get("timed", ())) <= {s for s, r in d["fidelity"].items() if r["passes"]}


def failed_gate(record: Any) -> dict[str, str]:
    """Each step that failed the gate, with why: its float32 tokens differ from the readable
    step's, and/or its mean KL is above the limit."""
    fid = record_data(record)["fidelity"]
    limit = kl_limit(fid["readable"]["kl"]["mean"])
    out = {}
    for name, row in fid.items():
        if row["passes"]:
            continue
        why = []
        if row.get("float32_tokens_equal") is False:
            why.append("its float32 tokens differ from the readable step's")
        if row["kl"]["mean"] > limit:
            why.append(f"its mean KL {row['kl']['mean']:.3g} is above the limit {limit:.3g}")
        out[name] = " and ".join(why) or "it failed the gate"
    return out


def timed(record: Any, step: str) -> bool:
    """Whether ``step`` was timed (it passed the gate)."""
    return step in record_data(record).get("timed", ())


def gated_fairly(record: Any) -> bool:
    """Exactly the gated steps that passed were timed: none that failed, none left out."""
    d = record_data(record)
    passed = {s for s, r in d["fidelity"].items() if r["passes"]} & set(d.get("steps", ()))
    return set(d.get("timed", ())) == passed


def gate_summary(record: Any) -> str:
    """Which steps the gate let through and which it stopped, and why (one sentence)."""
    d = record_data(record)
    failed = failed_gate(record)
    passed = [s for s in d["fidelity"] if s not in failed]
    text = "passed: " + ", ".join(passed)
    if failed:
        text += "; stopped: " + "; ".join(f"{s} ({why})" for s, why in failed.items())
    return text + "; timed: " + ", ".join(d.get("timed", ()))


def step_phrase(record: Any, step: str, batch: int) -> str:
    """``step`` at ``batch`` rows in words: its median and verdict against the plain kernels,
    or why it was not timed."""
    if not timed(record, step):
        why = failed_gate(record).get(step)
        return "not timed (" + (f"it failed the fidelity gate: {why}" if why else
                               "not in this record") + ")"
    med = median_us(record, step, batch)
    if med is None:
        return "not timed at this batch size"
    return f"{med:.0f} µs (**{verdict_word(compare(record, step, batch))}**)"


def ways_rows(record: Any) -> list[dict[str, Any]]:
    """Per batch size: each schedule's replay median (µs), the floor, the verdicts of PDL and
    the persistent step against the plain kernels, and each one's kernels per step."""
    d = record_data(record)
    rows = []
    for i, b in enumerate(d["batch_sizes"]):
        row: dict[str, Any] = {"model": d["preset"], "batch": b}
        for s, label in WAYS.items():
            row[f"{label} µs"] = _r(stat(step_stats(record, s, b)))
        row["floor µs"] = _r(d["floor_us"][i])
        for s in ("triton_pdl", "triton_persistent"):
            row[f"{WAYS[s].split(' ')[0]} vs kernels"] = verdict_word(compare(record, s, b))
        for s in WAYS:
            counts = d.get("kernels", {}).get(s)
            row[f"launches ({s.replace('triton_', '') if s != 'triton' else 'kernels'})"] = \
                None if not counts else counts[i]
        rows.append(row)
    return rows


def pdl_gain(record: Any, batch: int = 1) -> float | None:
    """The plain step's median over the PDL step's at ``batch`` (above 1: PDL is faster)."""
    a, b = step_stats(record, "triton_pdl", batch), step_stats(record, "triton", batch)
    return None if a is None or b is None else float(b["median"]) / float(a["median"])


def launches_match(record: Any, step: str = "triton_persistent") -> bool:
    """The GPU kernels counted per step of ``step`` equal its plan at every batch size."""
    d = record_data(record)
    counts = d.get("kernels", {}).get(step)
    schedule = {"triton": "kernels", "triton_pdl": "pdl", "triton_persistent": "persistent"}
    want = kernels_per_step(n_layer(record), schedule[step])  # type: ignore[arg-type]
    return bool(counts) and all(n == want for n in counts)


def variant_rows(record: Any) -> list[dict[str, Any]]:
    """The persistent step at each number of programs per SM: its median per batch size, or
    the error its cooperative launch was refused with."""
    d = record_data(record)
    rows = []
    for k in d.get("programs_per_sm", []):
        name = f"triton_persistent@{k}"
        row: dict[str, Any] = {"programs per SM": k, "programs": k * d["sm_count"]}
        for b in d["batch_sizes"]:
            row[f"batch {b} µs"] = _r(stat(step_stats(record, name, b)))
        row["refused"] = d.get("refused", {}).get(name, "")
        rows.append(row)
    return rows


def split_rows(record: Any, batch: int = 1) -> list[dict[str, Any]]:
    """Per timed schedule at ``batch`` rows: the replay median, the kernels' own GPU time
    (the profiler's, one eager step), the time between them (replay minus kernels) and the
    kernels' time beyond the floor (µs)."""
    d = record_data(record)
    i = d["batch_sizes"].index(batch)
    rows = []
    for s, label in WAYS.items():
        replay, inside = median_us(record, s, batch), d.get("kernel_us", {}).get(s)
        if replay is None or not inside:
            continue
        rows.append({"schedule": label, "replay µs": _r(replay), "kernels µs": _r(inside[i]),
                     "between kernels µs": _r(replay - inside[i]),
                     "kernels beyond floor µs": _r(inside[i] - d["floor_us"][i])})
    return rows


def split_pair(record: Any, batch: int = 1) -> tuple[dict, dict] | None:
    """The plain and the persistent step's rows of :func:`split_rows` (``None``: one of them
    was not timed or profiled)."""
    rows = {r["schedule"]: r for r in split_rows(record, batch)}
    plain, per = rows.get(WAYS["triton"]), rows.get(WAYS["triton_persistent"])
    return None if plain is None or per is None else (plain, per)


def moved_inside(record: Any, batch: int = 1) -> bool:
    """Whether the persistent step leaves less time between kernels than the plain step but
    spends more inside them, at ``batch`` rows."""
    pair = split_pair(record, batch)
    return (pair is not None and pair[1]["between kernels µs"] < pair[0]["between kernels µs"]
            and pair[1]["kernels µs"] > pair[0]["kernels µs"])


def ways_chart(record: Any, *, subtitle: str | None = None):
    """µs per step at each batch size for the three schedules (p10–p90 whiskers), and the
    floor."""
    go = plotly_go()
    d = record_data(record)
    sizes = d["batch_sizes"]
    fig = go.Figure([stats_bar(sizes, [step_stats(record, s, b) for b in sizes], label,
                               COLORS[s]) for s, label in WAYS.items() if s in d["times"]])
    fig.add_trace(go.Scatter(x=[str(b) for b in sizes], y=d["floor_us"], mode="lines+markers",
                             name="floor (bytes / copy bandwidth)",
                             line=dict(color="#444444", dash="dash")))
    fig.update_layout(barmode="group")
    return finish(fig, f"The Triton step three ways ({d['preset']}, {n_layer(record)} layers)",
                  "batch size", "µs per step (median)", subtitle=subtitle, record=record)


def triton_split(record: Any) -> dict[str, float]:
    """Where a ``triton_<preset>`` record's step goes at its first batch size: the replay,
    the floor (its bytes at the copy bandwidth), the kernels' own GPU time beyond the floor,
    the time between kernels, the kernels per step, and per kernel what lies beyond the
    floor."""
    d = record_data(record)
    replay = float(d["times"]["triton"][0]["median"])
    kernels = float(d["kernel_us"]["triton"][0])
    floor = float(d["floor_us"][0])
    n = int(d["graph_ops"]["triton"][0])
    return {"batch": d["batch_sizes"][0], "replay_us": replay, "floor_us": floor,
            "kernels_beyond_floor_us": kernels - floor, "gaps_us": replay - kernels,
            "kernels": n, "per_kernel_us": (replay - floor) / n,
            "n_layer": int(d["config"]["n_layer"])}


# ---------------------------------------------------------------------- the stages
# Rows and checks of a ``persistent_stages_<preset>`` record: the persistent step's clock
# stamps, stage by stage (labkit.measure.past_launch.measure_persistent_stages).

#: how much the stamps may change the persistent step's replay for its stage table to stand
#: for the unstamped step
STAMP_COST_LIMIT = 0.03
#: how closely the stages, the gaps between launches and the LM head must add up to the
#: stamped replay for the table to say where the time goes
ACCOUNT_LIMIT = 0.10


def _stage_data(record: Any, batch: int) -> tuple[Mapping, int]:
    d = record_data(record)
    return d, d["batch_sizes"].index(batch)


def _stage_rows(record: Any, batch: int) -> list[Mapping]:
    d, i = _stage_data(record, batch)
    return d["stages"][i]


def _loss(rows: Sequence[Mapping]) -> float:
    """What the five stages together lose against the plain kernels, per layer (µs)."""
    return sum(r["persistent_us"] - r["kernel_us"] for r in rows)


def stage_table(record: Any, batch: int = 1) -> list[dict[str, Any]]:
    """Per stage at ``batch`` rows: the persistent stage's span (median and p10–p90 over
    layers and stamped replays), the plain kernel doing the same work (median over layers),
    the difference, and how long the median program waits at the stage's barrier for the
    slowest (µs)."""
    return [{"stage": r["stage"], "persistent µs": _r(r["persistent_us"]),
             "p10–p90": f"{r['persistent_p10']:.1f}–{r['persistent_p90']:.1f}",
             "plain kernel µs": _r(r["kernel_us"]),
             "persistent − kernel µs": _r(r["persistent_us"] - r["kernel_us"]),
             "late at its barrier µs": _r(r["late_us"])} for r in _stage_rows(record, batch)]


def stage_totals(record: Any, batch: int = 1) -> dict[str, float]:
    """At ``batch`` rows, per step (µs): the persistent stages over every layer, the gaps
    between the layer launches, the LM head (the plain step's kernel, which the persistent
    step launches alike), what they add up to, the stamped and the plain persistent replays."""
    d, i = _stage_data(record, batch)
    layers = n_layer(record)
    rows = d["stages"][i]
    stages = layers * sum(r["persistent_us"] for r in rows)
    gaps = (layers - 1) * float(d["gaps_us"][i])
    head = float(d["head_us"][i])
    return {"stages_us": stages, "gaps_us": gaps, "head_us": head,
            "accounted_us": stages + gaps + head,
            "stamped_us": float(stat(d["times"]["triton_persistent_stamped"][i]) or 0.0),
            "persistent_us": float(stat(d["times"]["triton_persistent"][i]) or 0.0)}


def stamps_cost(record: Any) -> dict[int, float]:
    """Per batch size, the stamped replay over the unstamped one, minus 1."""
    d = record_data(record)
    t = d["times"]
    return {b: float(stat(t["triton_persistent_stamped"][i]) or 0.0)
            / float(stat(t["triton_persistent"][i]) or 1.0) - 1.0
            for i, b in enumerate(d["batch_sizes"])}


def stamps_cheap(record: Any, batch: int = 1, limit: float = STAMP_COST_LIMIT) -> bool:
    """The stamps change the persistent replay at ``batch`` rows by less than ``limit``."""
    return abs(stamps_cost(record)[batch]) < limit


def late_below_loss(record: Any, batch: int = 1) -> bool:
    """At every barrier the median program waits for the slowest less than the five stages
    together lose against the plain kernels: the time goes inside the stages."""
    rows = _stage_rows(record, batch)
    loss = _loss(rows)
    return loss > 0 and all(r["late_us"] < loss for r in rows if r["late_us"] is not None)


def largest_late(record: Any, batch: int = 1) -> float:
    """The longest wait for the slowest program at any barrier (median over layers, µs)."""
    return max(float(r["late_us"]) for r in _stage_rows(record, batch)
               if r["late_us"] is not None)


def stages_account(record: Any, batch: int = 1, limit: float = ACCOUNT_LIMIT) -> bool:
    """The stages, the gaps and the LM head add up to the stamped replay within ``limit``."""
    t = stage_totals(record, batch)
    return t["stamped_us"] > 0 and abs(t["accounted_us"] / t["stamped_us"] - 1) < limit


def stages_slower_than_kernels(record: Any, batch: int = 1) -> bool:
    """The five persistent stages together take longer than the plain step's five kernels,
    beyond the spreads: the stages' p10s add up to more than the kernels' p90s."""
    rows = _stage_rows(record, batch)
    return sum(r["persistent_p10"] for r in rows) > sum(r["kernel_p90"] for r in rows)


def largest_loss(record: Any, batch: int = 1) -> tuple[str, float]:
    """The stage whose span exceeds its plain kernel's the most, and by how much (µs)."""
    r = max(_stage_rows(record, batch), key=lambda r: r["persistent_us"] - r["kernel_us"])
    return r["stage"], float(r["persistent_us"] - r["kernel_us"])


#: where a persistent step's extra time can go (exercise 17.3's letters)
LOST_IN = {"a": "at the barriers", "b": "inside the stages", "c": "between the layer launches"}


def where_lost(record: Any, batch: int = 1) -> dict[str, float]:
    """Per step at ``batch`` rows (µs), by :data:`LOST_IN`'s letter: ``a`` the median
    program's waits for the slowest at every barrier; ``b`` what the stages lose against the
    plain kernels beyond those waits; ``c`` the gaps between the layer launches."""
    d, i = _stage_data(record, batch)
    rows = d["stages"][i]
    layers = n_layer(record)
    waits = layers * sum(r["late_us"] for r in rows if r["late_us"] is not None)
    return {"a": waits, "b": layers * _loss(rows) - waits,
            "c": (layers - 1) * float(d["gaps_us"][i])}


def stage_shows(record: Any, batch: int = 1) -> dict[str, str]:
    """The figures behind each stage statement at ``batch`` rows (``stamps``, ``account``,
    ``slower``, ``late``), each as a short line."""
    rows = _stage_rows(record, batch)
    t = stage_totals(record, batch)
    return {
        "stamps": f"stamped {t['stamped_us']:.1f} µs, without stamps {t['persistent_us']:.1f} "
                  f"µs ({stamps_cost(record)[batch]:+.1%})",
        "account": f"stages {t['stages_us']:.0f} + gaps {t['gaps_us']:.0f} + LM head "
                   f"{t['head_us']:.0f} = {t['accounted_us']:.0f} µs against a stamped replay "
                   f"of {t['stamped_us']:.0f} µs",
        "slower": f"per layer the stages' p10s add up to "
                  f"{sum(r['persistent_p10'] for r in rows):.1f} µs, the kernels' p90s to "
                  f"{sum(r['kernel_p90'] for r in rows):.1f} µs",
        "late": f"longest wait at a barrier {largest_late(record, batch):.1f} µs; the stages "
                f"lose {_loss(rows):.1f} µs per layer"}


def stamps_cost_text(record: Any) -> str:
    """The stamps' cost per batch size as prose: ``-1.3% at batch 1, +1.3% at 8 and ...``."""
    parts = [f"{v:+.1%} at {'batch ' if k == 0 else ''}{b}"
             for k, (b, v) in enumerate(stamps_cost(record).items())]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


# ---------------------------------------------------------------------- two changes tried
# The persistent step's two changes timed on a GPU: which tiles wait at a barrier, and an L2
# prefetch of each layer's weights (``scripts/triton_sweep.py --schedule prefetch``).

#: the sweep that timed them (exploratory, not a reference: see data/sweeps/README.md)
TRIED_FILE = "sweeps/h100-80gb-hbm3/persistent_prefetch.jsonl"
#: its second run, on the same GPU: the sizes the first did not reach (gpt2 at batch 64, small
#: at 1, 8 and 64), with two programs per SM waiting once per stage, and four
TRIED_MORE_FILE = "sweeps/h100-80gb-hbm3/persistent_prefetch_2.jsonl"
#: the GPU they ran on, as the notebook names it
TRIED_GPU = "H100 80GB HBM3"


def tried() -> list[dict[str, Any]]:
    """The lines of :data:`TRIED_FILE`, then those of :data:`TRIED_MORE_FILE` (no batch size
    of a preset is in both)."""
    rows = []
    for name in (TRIED_FILE, TRIED_MORE_FILE):
        with open(_sweep(name), encoding="utf-8") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def _timed(rows: Sequence[Mapping[str, Any]], preset: str, batch: int) -> list[Mapping]:
    return [r for r in rows if r.get("preset") == preset and r.get("b") == batch
            and "median" in r]


def _plain(timed: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The plain kernels' line among one batch size's timed lines."""
    return next(r for r in timed if r["step"] == "kernels")


def _fastest_persistent(timed: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The fastest persistent line among one batch size's timed lines."""
    plain = _plain(timed)
    return min((r for r in timed if r is not plain), key=lambda r: r["median"])


def _is(line: Mapping[str, Any], waits: str, prefetch: bool, per_sm: int,
        stripes: bool) -> bool:
    """Whether a sweep line is the persistent candidate built this way."""
    return (line.get("waits"), line.get("prefetch"), line.get("per_sm"),
            line.get("stripes")) == (waits, prefetch, per_sm, stripes)


def tried_step(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2", batch: int = 1, *,
               waits: str = "tile", prefetch: bool = False, per_sm: int = 1,
               stripes: bool = False) -> Mapping[str, Any]:
    """The timed line of one persistent candidate (``KeyError`` if the sweep has none)."""
    for r in _timed(rows, preset, batch):
        if _is(r, waits, prefetch, per_sm, stripes):
            return r
    raise KeyError(f"{preset} batch {batch}: no candidate with waits={waits!r}, "
                   f"prefetch={prefetch}, {per_sm} per SM, stripes={stripes}")


def tried_table(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2",
                batch: int = 1) -> list[dict[str, Any]]:
    """Every step the sweep timed at ``batch`` rows: how it is built, its replay (median,
    p10–p90, µs) and its ratio to the plain kernels'."""
    timed = _timed(rows, preset, batch)
    plain = float(_plain(timed)["median"])
    out = []
    for r in timed:
        persistent = r["step"] != "kernels"
        out.append({
            "step": "persistent" if persistent else "plain kernels (5L + 1)",
            "programs per SM": r.get("per_sm", "–"),
            "stripes": ("yes" if r.get("stripes") else "no") if persistent else "–",
            "tiles that wait": ("every tile" if r.get("waits") == "tile" else "first only")
                               if persistent else "–",
            "L2 prefetch": ("yes" if r.get("prefetch") else "no") if persistent else "–",
            "µs": _r(r["median"]), "p10–p90": f"{r['p10']:.1f}–{r['p90']:.1f}",
            "× plain": _r(float(r["median"]) / plain, 2)})
    return out


#: samples behind each timed line of the sweep (``scripts/triton_sweep.py``'s ``compare``: 15
#: interleaved rounds), for lines that do not say (the filed H100 sweep's)
TRIED_SAMPLES = 15


def _beyond(slow: Mapping[str, Any], fast: Mapping[str, Any]) -> bool:
    """``slow`` takes longer than ``fast`` by the project's evidence rule
    (:func:`labkit.teach.verdicts.compare_stats`: interleaved samples, p10–p90 apart)."""
    def stats(line: Mapping[str, Any]) -> dict[str, Any]:
        return {"n": TRIED_SAMPLES, **line}
    return compare_stats(stats(slow), stats(fast), interleaved=True).word == "a higher"


def _waits(rows: Sequence[Mapping[str, Any]], preset: str,
           batch: int) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The persistent step's lines waiting at every tile and at a stage's first tile only (one
    program per SM, the heuristic's tiles, no prefetch)."""
    return (tried_step(rows, preset, batch, waits="tile"),
            tried_step(rows, preset, batch, waits="stage"))


def wait_once_verdict(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2",
                      batch: int = 1) -> str:
    """How waiting once per stage compares with waiting at every tile (:func:`_waits`):
    ``"faster"`` or ``"slower"`` beyond the spreads, else ``"within the spread"``."""
    tile, stage = _waits(rows, preset, batch)
    if _beyond(tile, stage):
        return "faster"
    return "slower" if _beyond(stage, tile) else "within the spread"


def wait_once_faster(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2",
                     batch: int = 1) -> bool:
    """Waiting at a stage's first tile only is faster than at every tile, beyond the spreads."""
    return wait_once_verdict(rows, preset, batch) == "faster"


def _prefetch_pairs(rows: Sequence[Mapping[str, Any]], preset: str,
                    batch: int) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Per wait, the persistent step's line with the prefetch and without it."""
    return [(tried_step(rows, preset, batch, waits=w, prefetch=True),
             tried_step(rows, preset, batch, waits=w)) for w in ("tile", "stage")]


def prefetch_slower(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2",
                    batch: int = 1) -> bool:
    """With either wait, the L2 prefetch makes the persistent step slower beyond the spreads."""
    return all(_beyond(on, off) for on, off in _prefetch_pairs(rows, preset, batch))


def waits_within_spread(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2",
                        batch: int = 1) -> bool:
    """Neither wait is slower than the other beyond the spreads."""
    return wait_once_verdict(rows, preset, batch) == "within the spread"


def persistent_all_slower(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2",
                          batch: int = 1) -> bool:
    """Every persistent variant the sweep timed is slower than the plain kernels, beyond the
    spreads."""
    timed = _timed(rows, preset, batch)
    plain = _plain(timed)
    others = [r for r in timed if r is not plain]
    return bool(others) and all(_beyond(r, plain) for r in others)


def two_per_sm_faster(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2",
                      batch: int = 1) -> bool:
    """Two programs per SM are faster than one (every tile waiting, no prefetch), beyond the
    spreads."""
    return _beyond(tried_step(rows, preset, batch, waits="tile"),
                   tried_step(rows, preset, batch, waits="tile", per_sm=2))


def prefetch_faster(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2",
                    batch: int = 1) -> bool:
    """With either wait, the L2 prefetch makes the persistent step faster beyond the spreads."""
    return all(_beyond(off, on) for on, off in _prefetch_pairs(rows, preset, batch))


#: which of the two changes make the persistent step faster (exercise 17.4's letters)
HELPS = {"a": "both", "b": "only waiting once per stage", "c": "only the L2 prefetch",
         "d": "neither"}


def which_helps(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2", batch: int = 1) -> str:
    """:data:`HELPS`'s letter for what the sweep measured: a change helps when it is faster
    beyond the spreads (the prefetch: with either wait)."""
    waits, prefetch = wait_once_faster(rows, preset, batch), prefetch_faster(rows, preset, batch)
    return {(True, True): "a", (True, False): "b", (False, True): "c",
            (False, False): "d"}[(waits, prefetch)]


#: the three stamped steps of the sweep's stage tables, in order, and their column names
TRIED_STAGES = ((False, "tile", "every tile waits"), (False, "stage", "first tile waits"),
                (True, "stage", "first tile waits + prefetch"))


def _stages_of(rows: Sequence[Mapping[str, Any]], preset: str, batch: int, prefetch: bool,
               waits: str) -> list[Mapping[str, Any]]:
    for r in rows:
        if (r.get("preset"), r.get("b"), r.get("stamped"), r.get("prefetch"),
                r.get("waits")) == (preset, batch, True, prefetch, waits):
            return list(r["stages"])
    raise KeyError(f"{preset} batch {batch}: no stage table with prefetch={prefetch}, "
                   f"waits={waits!r}")


def tried_stage_table(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2",
                      batch: int = 1) -> list[dict[str, Any]]:
    """Per stage, µs per layer (medians over layers and stamped replays) of each stamped step
    of :data:`TRIED_STAGES`, beside the plain kernel doing the same work; a last row sums."""
    tables = [_stages_of(rows, preset, batch, pf, w) for pf, w, _ in TRIED_STAGES]
    out = []
    for k, stage in enumerate(tables[0]):
        row: dict[str, Any] = {"stage": stage["stage"]}
        for (_, _, label), t in zip(TRIED_STAGES, tables):
            row[label] = _r(t[k]["persistent_us"], 2)
        row["plain kernel"] = _r(stage["kernel_us"], 2)
        out.append(row)
    total: dict[str, Any] = {"stage": "all five"}
    for (_, _, label), t in zip(TRIED_STAGES, tables):
        total[label] = _r(sum(s["persistent_us"] for s in t), 2)
    total["plain kernel"] = _r(sum(s["kernel_us"] for s in tables[0]), 2)
    return [*out, total]


def prefetch_moves(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2",
                   batch: int = 1) -> dict[str, float]:
    """What the prefetch moves, per layer (µs), both steps waiting at a stage's first tile
    only: ``first_stage`` how much longer stage 1 (which issues it) takes, ``later`` how much
    shorter stages 2-5 take together."""
    before = _stages_of(rows, preset, batch, False, "stage")
    after = _stages_of(rows, preset, batch, True, "stage")
    return {"first_stage": float(after[0]["persistent_us"] - before[0]["persistent_us"]),
            "later": float(sum(b["persistent_us"] - a["persistent_us"]
                               for b, a in zip(before[1:], after[1:])))}


def prefetch_costs_first_stage(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2",
                               batch: int = 1) -> bool:
    """The prefetch lengthens stage 1 by more than it shortens the later stages together."""
    m = prefetch_moves(rows, preset, batch)
    return m["first_stage"] > max(0.0, m["later"])


def tried_shows(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2",
                batch: int = 1) -> dict[str, str]:
    """The figures behind each statement about the sweep (``waits``, ``plain``, ``two``,
    ``prefetch``, ``stages``), each as a short line; the ``prefetch`` and ``stages`` lines
    need the prefetching candidates and stage tables (gpt2 at batch 1 in the sweep)."""
    def line(r: Mapping[str, Any]) -> str:
        return f"{float(r['median']):.0f} µs (p10–p90 {r['p10']:.0f}–{r['p90']:.0f})"

    tile, stage = _waits(rows, preset, batch)
    (pf_tile, _), (pf_stage, _) = _prefetch_pairs(rows, preset, batch)
    try:
        m = prefetch_moves(rows, preset, batch)
    except KeyError:  # no stage tables at this batch size
        m = {"first_stage": float("nan"), "later": float("nan")}
    timed = _timed(rows, preset, batch)
    plain, fastest = _plain(timed), _fastest_persistent(timed)
    two = tried_step(rows, preset, batch, waits="tile", per_sm=2)
    return {"waits": f"first tile waits {line(stage)}, every tile waits {line(tile)}",
            "plain": f"fastest persistent variant {line(fastest)}, plain kernels {line(plain)}",
            "two": f"two programs per SM {line(two)}, one {line(tile)} (every tile waits)",
            "prefetch": f"every tile waits: {line(pf_tile)} with, {line(tile)} without; first "
                        f"tile waits: {line(pf_stage)} with, {line(stage)} without",
            "stages": f"stage 1 {m['first_stage']:+.1f} µs per layer, stages 2-5 together "
                      f"{-m['later']:+.1f} µs per layer"}


# ---------------------------------------------------------------------- every size
# The default chosen at one size (gpt2, batch 1) against every size the two sweeps timed.

def tried_sizes(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, int]]:
    """``(preset, batch)`` of every size the sweeps timed: gpt2 first, then by batch."""
    seen = {(str(r["preset"]), int(r["b"])) for r in rows if "median" in r}
    return sorted(seen, key=lambda s: (s[0] != "gpt2", s[0], s[1]))


def _size(preset: str, batch: int) -> str:
    return f"{preset} at batch {batch}"


#: SMs of the sweeps' GPU (an H100 80GB HBM3; an H200 has as many): one program each
TRIED_SMS = 132


def later_tiles(preset: str, batch: int, sm_count: int = TRIED_SMS) -> int:
    """Most tiles a program takes after its first in one of the stages that wait at a barrier
    for their inputs and have weights (out-projection, up, down), one program per SM and the
    heuristic's tiles (:func:`labkit.kernels.step.stage_tiles`, the sweep's model shape). Only
    these tiles differ between ``waits="tile"`` and ``waits="stage"``: at 0 both run the same
    waits."""
    cfg = model_preset(preset, max_batch=64, max_seq=256, dtype="bfloat16")
    tiles = stage_tiles(cfg, batch, sm_count)
    return max(-(-tiles[k] // sm_count) for k in ("out", "up", "down")) - 1


def wait_sizes(rows: Sequence[Mapping[str, Any]], *,
               later: bool | None = None) -> dict[str, str]:
    """:func:`wait_once_verdict` per size, keyed ``"gpt2 at batch 1"``: at every size the
    sweeps timed, or only where programs have tiles after their first (``later=True``: where
    the two waits differ) or have none (``False``: where they run the same waits, so a verdict
    there measures two compiled kernels, each captured on its own)."""
    return {_size(p, b): wait_once_verdict(rows, p, b) for p, b in tried_sizes(rows)
            if later is None or (later_tiles(p, b) > 0) == later}


def wait_faster_where_it_acts(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Waiting once per stage is faster, beyond the spreads, at every size where programs have
    tiles after their first (and there is such a size)."""
    acts = wait_sizes(rows, later=True)
    return bool(acts) and set(acts.values()) == {"faster"}


def wait_ratio(rows: Sequence[Mapping[str, Any]], preset: str = "gpt2", batch: int = 1) -> float:
    """The persistent step waiting once per stage over waiting at every tile (medians; one
    program per SM, no prefetch)."""
    tile, stage = _waits(rows, preset, batch)
    return float(stage["median"]) / float(tile["median"])


def capture_noise(rows: Sequence[Mapping[str, Any]]) -> float:
    """The largest relative difference between the two waits where they run the same
    instructions (no later tiles): what two compiled and captured kernels differ by with no
    change between them that runs; 0 without such a size."""
    return max((abs(wait_ratio(rows, p, b) - 1) for p, b in tried_sizes(rows)
                if later_tiles(p, b) == 0), default=0.0)


def wins_beyond_noise(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The sizes where waiting once per stage acts (later tiles) and saves more than
    :func:`capture_noise`."""
    noise = capture_noise(rows)
    return [_size(p, b) for p, b in tried_sizes(rows)
            if later_tiles(p, b) > 0 and wait_ratio(rows, p, b) < 1 - noise]


def batch1_beyond_noise(rows: Sequence[Mapping[str, Any]],
                        preset: str = "gpt2") -> dict[str, float]:
    """The relative differences behind the verdicts on ``preset`` at batch 1 (slower over
    faster, minus 1): the prefetch with each wait, two programs per SM against one, and one
    wait per stage, those the sweep timed; each a verdict between two kernels captured once,
    to hold against :func:`capture_noise`."""
    def ratio(slow: Mapping[str, Any], fast: Mapping[str, Any]) -> float:
        return float(slow["median"]) / float(fast["median"]) - 1

    def line(**kw: Any) -> Mapping[str, Any]:
        return tried_step(rows, preset, 1, **kw)

    pairs: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
        "prefetch, every tile waits": ({"waits": "tile", "prefetch": True}, {"waits": "tile"}),
        "prefetch, first tile waits": ({"waits": "stage", "prefetch": True}, {"waits": "stage"}),
        "one program per SM against two": ({"waits": "tile"}, {"waits": "tile", "per_sm": 2}),
        "every tile waits against the first": ({"waits": "tile"}, {"waits": "stage"})}
    out = {}
    for label, (slow, fast) in pairs.items():
        try:
            out[label] = ratio(line(**slow), line(**fast))
        except KeyError:  # a sweep without that candidate
            continue
    return out


def same_waits_both_ways(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Where the two waits run the same instructions, the sweep still finds one faster at one
    size and slower at another, beyond the spreads: the difference between two compiled and
    captured kernels, which the within-capture spread does not cover."""
    same = set(wait_sizes(rows, later=False).values())
    return {"faster", "slower"} <= same


def _per_sm(rows: Sequence[Mapping[str, Any]], preset: str, batch: int, per_sm: int,
            waits: str = "stage") -> Mapping[str, Any] | str | None:
    """The line of ``per_sm`` programs per SM (no prefetch, no stripes; ``waits``),
    ``"refused"`` where the cooperative launch refused it, ``None`` where the sweep did not
    try it."""
    try:
        return tried_step(rows, preset, batch, waits=waits, per_sm=per_sm)
    except KeyError:
        pass
    for r in rows:
        if (r.get("preset"), r.get("b")) == (preset, batch) \
                and "cooperative launch" in str(r.get("error", "")) \
                and _is(r, waits, False, per_sm, False):
            return "refused"
    return None


def four_per_sm(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Four programs per SM against two (both waiting once per stage), at every size the sweep
    tried both: ``"slower"`` / ``"faster"`` beyond the spreads, ``"within the spread"``, or
    ``"refused"`` where the cooperative launch refused four."""
    out = {}
    for p, b in tried_sizes(rows):
        two, four = _per_sm(rows, p, b, 2), _per_sm(rows, p, b, 4)
        if not isinstance(two, Mapping) or four is None:
            continue
        if isinstance(four, str):
            out[_size(p, b)] = four
        elif _beyond(four, two):
            out[_size(p, b)] = "slower"
        else:
            out[_size(p, b)] = "faster" if _beyond(two, four) else "within the spread"
    return out


def four_per_sm_slower(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Wherever the GPU ran four programs per SM they were slower than two, beyond the spreads
    (and the sweep ran them somewhere)."""
    verdicts = four_per_sm(rows)
    return "slower" in verdicts.values() and set(verdicts.values()) <= {"slower", "refused"}


def beats_plain(rows: Sequence[Mapping[str, Any]], noise: float | None = None) -> list[str]:
    """The sizes where some persistent variant is faster than the plain kernels, beyond the
    spreads and by more than ``noise`` (default: :func:`capture_noise` of ``rows``)."""
    noise, out = capture_noise(rows) if noise is None else noise, []
    for p, b in tried_sizes(rows):
        timed = _timed(rows, p, b)
        plain, fastest = _plain(timed), _fastest_persistent(timed)
        if _beyond(plain, fastest) and fastest["median"] < (1 - noise) * plain["median"]:
            out.append(_size(p, b))
    return out


def sizes_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per size the sweeps timed: :func:`later_tiles`, the plain kernels, the persistent step
    waiting at every tile and once per stage (one program per SM) with
    :func:`wait_once_verdict` and their ratio, two and four programs per SM waiting once per
    stage, and the fastest persistent variant's ratio to the plain kernels (µs, medians)."""
    def cell(line: Mapping[str, Any] | str | None) -> Any:
        if line is None:
            return "not tried"
        return line if isinstance(line, str) else _r(line["median"])

    out = []
    for p, b in tried_sizes(rows):
        timed = _timed(rows, p, b)
        plain = _plain(timed)
        tile, stage = _waits(rows, p, b)
        out.append({
            "model": p, "batch": b, "later tiles per program": later_tiles(p, b),
            "plain kernels": _r(plain["median"]),
            "every tile waits": cell(tile), "first tile waits": cell(stage),
            "one wait per stage is": wait_once_verdict(rows, p, b),
            "first ÷ every": _r(wait_ratio(rows, p, b), 3),
            "2 per SM": cell(_per_sm(rows, p, b, 2)), "4 per SM": cell(_per_sm(rows, p, b, 4)),
            "fastest persistent × plain": _r(float(_fastest_persistent(timed)["median"])
                                             / float(plain["median"]), 2)})
    return out


#: the sweep of several heads a persistent attention tile (``scripts/triton_sweep.py
#: --schedule heads --sizes 64`` then ``--sizes 8``, on the same GPU)
HEADS_FILE = "sweeps/h100-80gb-hbm3/persistent_heads.jsonl"


def heads_rows() -> list[dict[str, Any]]:
    """The lines of :data:`HEADS_FILE`."""
    with open(_sweep(HEADS_FILE), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _heads_line(timed: Sequence[Mapping[str, Any]], heads: int,
                split: bool = True) -> Mapping[str, Any]:
    """The line of ``heads`` a tile at one program per SM with the heuristic's chunks (the
    longest: the sweep's other lines halve them); at one head, split as the heuristic splits
    (``split``) or the unsplit control."""
    mine = [r for r in timed if r.get("per_sm") == 1 and r.get("heads") == heads]
    if heads > 1:
        return max(mine, key=lambda r: r["blocks"]["t"])
    return (max if split else min)(mine, key=lambda r: r["blocks"]["splits"])


def heads_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per size of the heads sweep (µs, medians): the plain kernels, the persistent step with
    one head a tile (split as the heuristic splits, and unsplit), two and four heads a tile
    (one program per SM), and two heads against one."""
    out = []
    for p, b in tried_sizes(rows):
        timed = _timed(rows, p, b)
        one, two = _heads_line(timed, 1), _heads_line(timed, 2)
        out.append({"model": p, "batch": b, "plain kernels": _r(_plain(timed)["median"]),
                    "1 head": _r(one["median"]),
                    "1 head, unsplit": _r(_heads_line(timed, 1, split=False)["median"]),
                    "2 heads": _r(two["median"]), "4 heads": _r(_heads_line(timed, 4)["median"]),
                    "2 heads ÷ 1": _r(float(two["median"]) / float(one["median"]), 3),
                    "fastest persistent × plain": _r(float(_fastest_persistent(timed)["median"])
                                                     / float(_plain(timed)["median"]), 2)})
    return out


def two_heads_verdicts(rows: Sequence[Mapping[str, Any]],
                       noise: float = 0.0) -> dict[str, str]:
    """Per size: two heads a tile against one (one program per SM), ``"faster"`` where it is
    faster beyond the spreads and by more than ``noise`` (a ratio, such as
    :func:`capture_noise` of the prefetch sweeps), ``"slower"`` beyond the spreads, else
    ``"within the spread"``."""
    out = {}
    for p, b in tried_sizes(rows):
        timed = _timed(rows, p, b)
        one, two = _heads_line(timed, 1), _heads_line(timed, 2)
        if _beyond(one, two) and float(two["median"]) < (1 - noise) * float(one["median"]):
            out[_size(p, b)] = "faster"
        else:
            out[_size(p, b)] = "slower" if _beyond(two, one) else "within the spread"
    return out


def heads_shows(rows: Sequence[Mapping[str, Any]], noise: float) -> str:
    """The figures behind the statement about the heads sweep."""
    return "; ".join(f"{r['model']} at batch {r['batch']}: 2 heads ÷ 1 = {r['2 heads ÷ 1']}, "
                     f"fastest persistent × plain = {r['fastest persistent × plain']}"
                     for r in heads_table(rows)) + f"; floor {noise:.1%}"


def sizes_shows(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The figures behind each statement about every size (``waits``, ``same``, ``noise``,
    ``batch1``, ``four``, ``plain``)."""
    def listed(verdicts: Mapping[str, str]) -> str:
        return "; ".join(f"{k}: {v}" for k, v in verdicts.items())

    return {"waits": "one wait per stage against one per tile, where programs have later "
                     "tiles: " + listed(wait_sizes(rows, later=True)),
            "same": "where they have none: " + listed(wait_sizes(rows, later=False)),
            "noise": f"largest difference where the waits are the same "
                     f"{capture_noise(rows):.1%}; one wait per stage over one per tile where "
                     "it acts: " + "; ".join(
                         f"{_size(p, b)} {wait_ratio(rows, p, b) - 1:+.1%}"
                         for p, b in tried_sizes(rows) if later_tiles(p, b) > 0),
            "batch1": f"floor {capture_noise(rows):.1%}; gpt2 at batch 1: " + "; ".join(
                f"{k} {v:+.1%}" for k, v in batch1_beyond_noise(rows).items()),
            "four": "four programs per SM against two: " + listed(four_per_sm(rows)),
            "plain": "faster than the plain kernels at: " + (", ".join(beats_plain(rows))
                                                             or "no size")}


# ---------------------------------------------------------------------- the synchronisation alone
#: graphs of launches that only synchronise, timed beside the two steps whose synchronisation
#: they are (``python -m labkit.measure.sync_floor``; not a reference: data/sweeps/README.md)
SYNC_FILE = "sweeps/h100-80gb-hbm3/sync_floor.json"


def sync_records() -> list[dict[str, Any]]:
    """The recorded runs of :data:`SYNC_FILE`, in the order they ran."""
    with open(_sweep(SYNC_FILE), encoding="utf-8") as f:
        return list(json.load(f))


def sync_record(records: Sequence[Mapping[str, Any]], batch: int = 1) -> Mapping[str, Any]:
    """The first run of ``records`` whose steps ran at ``batch`` rows."""
    for r in records:
        if r["batch"] == batch:
            return r
    raise LookupError(f"{SYNC_FILE} has no run at batch {batch}; add one with "
                      f"`python -m labkit.measure.sync_floor OUT.json {batch}` on a GPU")


def sync_provenance(record: Mapping[str, Any]) -> str:
    """Where and when a run of :data:`SYNC_FILE` was measured, in one line."""
    e = record["environment"]
    return (f"{e['gpu_name']}, driver {e['driver']}, torch {record['torch']}, Triton "
            f"{record['triton']}; {e['date']}, commit {str(e['git_commit'])[:7]}; "
            f"{record['repeats']} rounds of {record['inner']} replays "
            f"(data/{SYNC_FILE})")


def sync_table(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per preset and step (µs, medians): what orders the step's work, the step's replay,
    the same synchronisation with no work (empty launches, cooperative but PDL's; for the
    persistent step its layer launches meeting at their barriers, at one program per SM), and
    its share of the step."""
    out = []
    for name in record["presets"]:
        s = sync_summary(record, name)
        n, layers = record["presets"][name]["launches"], record["presets"][name]["n_layer"]
        per_step = record["barriers_per_layer"] * layers
        for step, what, step_us, alone, share in (
                ("plain kernels", f"{n['kernels']} launches", s["triton_us"], s["kernels_us"],
                 s["kernels_share"]),
                ("PDL", f"{n['kernels_pdl']} PDL launches", s["pdl_us"], s["kernels_pdl_us"],
                 s["pdl_share"]),
                ("persistent", f"{n['barriers']} launches, {per_step} barriers",
                 s["persistent_us"], s["sync_us"], s["sync_share"])):
            out.append({"model": name, "step": step, "what orders its work": what,
                        "step µs": _r(step_us), "that alone µs": _r(alone),
                        "share of the step": f"{share:.0%}"})
    return out


def sync_units(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per preset (µs): one cooperative empty launch of the ``5 L + 1`` (standing in for a
    kernel boundary of the plain step, whose kernels are not cooperative), one of the
    persistent step's (its ``L + 1`` launches alone), one PDL boundary, one barrier of one and
    of two programs per SM (:func:`labkit.measure.sync_floor.sync_summary`)."""
    return [{"model": name, "one cooperative launch": _r(s["per_boundary_us"], 2),
             "one persistent launch": _r(s["per_launch_us"], 2),
             "one PDL boundary": _r(s["per_pdl_boundary_us"], 2),
             "one barrier": _r(s["per_barrier_us"], 2),
             "one barrier, 2 programs per SM": _r(s["per_barrier_2_us"], 2)}
            for name in record["presets"] for s in [sync_summary(record, name)]]


def _sync_stats(record: Mapping[str, Any], preset: str, name: str) -> dict[str, Any]:
    return {"n": record["repeats"], **record["presets"][preset]["times"][name]}


def sync_compare(record: Mapping[str, Any], preset: str, a: str, b: str) -> str:
    """Graph ``a`` against graph ``b`` of one run: ``"longer"`` or ``"shorter"`` beyond the
    spreads (:func:`labkit.teach.verdicts.compare_stats`, interleaved), ``"within the
    spread"``, or the evidence rule's untested word (:func:`labkit.teach.verdicts.
    timing_verdict`)."""
    return timing_verdict(compare_stats(_sync_stats(record, preset, a),
                                        _sync_stats(record, preset, b), interleaved=True),
                          "shorter", "longer", "within the spread")


def sync_verdict(record: Mapping[str, Any], preset: str) -> str:
    """The persistent step's synchronisation alone (its barrier graph) against the plain
    step's (its empty launches), by :func:`sync_compare`."""
    return sync_compare(record, preset, "barriers", "kernels")


def sync_verdicts(records: Sequence[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """Over every run and preset: the persistent step's synchronisation against the plain
    step's, and the PDL step's against the plain step's (a set of such pairs of words: one
    pair where every run agrees)."""
    return {(sync_verdict(r, p), sync_compare(r, p, "kernels_pdl", "kernels"))
            for r in records for p in r["presets"]}


def barrier_dearer(records: Sequence[Mapping[str, Any]]) -> bool:
    """In every run and preset one barrier costs more than one cooperative empty launch of the
    ``5 L + 1`` (the plain step's boundaries, launched the persistent step's way), by more
    than the spread: over a step's ``4 L`` barriers the difference
    exceeds the larger p10–p90 spread of the two graphs."""
    def holds(r: Mapping[str, Any], name: str) -> bool:
        s = sync_summary(r, name)
        t = r["presets"][name]["times"]
        spread = max(float(t[k]["p90"]) - float(t[k]["p10"]) for k in ("barriers", "kernels"))
        barriers = r["barriers_per_layer"] * r["presets"][name]["n_layer"]
        return (s["per_barrier_us"] - s["per_boundary_us"]) * barriers > spread
    return bool(records) and all(holds(r, name) for r in records for name in r["presets"])


def sync_cost(layers: int, barrier_us: float, launch_us: float) -> float:
    """The persistent step's synchronisation with no work (µs): ``4 L`` barriers and ``L + 1``
    launches (exercise 17.5's rule)."""
    return (BARRIERS * layers * barrier_us
            + kernels_per_step(layers, "persistent") * launch_us)


def sync_prediction(record: Mapping[str, Any], sync_us: Callable[[int, float, float], float],
                    source: str = "small", target: str = "gpt2") -> tuple[float, float]:
    """``sync_us(layers, barrier_us, launch_us)`` of ``target``'s layers with ``source``'s
    measured barrier and launch, and ``target``'s measured barrier graph (µs)."""
    s = sync_summary(record, source)
    layers = int(record["presets"][target]["n_layer"])
    predicted = float(sync_us(layers, s["per_barrier_us"], s["per_launch_us"]))
    return predicted, float(sync_summary(record, target)["sync_us"])


def sync_shows(record: Mapping[str, Any]) -> str:
    """The figures behind the statements about the synchronisation record."""
    parts = []
    for name in record["presets"]:
        s = sync_summary(record, name)
        t = record["presets"][name]["times"]
        parts.append(f"{name}: barriers alone {s['sync_us']:.1f} µs (p10–p90 "
                     f"{t['barriers']['p10']:.1f}–{t['barriers']['p90']:.1f}), the plain "
                     f"step's empty launches {s['kernels_us']:.1f} µs (p10–p90 "
                     f"{t['kernels']['p10']:.1f}–{t['kernels']['p90']:.1f}); shares "
                     f"{s['sync_share']:.0%} of the persistent step, {s['kernels_share']:.0%} "
                     "of the plain one")
    return "; ".join(parts)


# ---------------------------------------------------------------------- the compiled wait
#: what the compiler kept of two waits, one row per Triton version (``python -m
#: labkit.kernels.aot acquire``; compiled for sm_90 without a GPU)
ACQUIRE_FILE = "sweeps/acquire_sass.json"


def acquire_records() -> list[dict[str, Any]]:
    """The recorded rows of ``data/sweeps/acquire_sass.json``."""
    with open(_sweep(ACQUIRE_FILE), encoding="utf-8") as f:
        return list(json.load(f))


def _sweep(name: str) -> Path:
    """A file of ``data/sweeps``: in ``$LABKIT_DATA`` if it has one, else the checkout's."""
    mine = data_dir() / name
    return mine if mine.exists() else repo_root() / "data" / name


def acquire_rows(rows: Sequence[Mapping[str, Any]],
                 here: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Per Triton version and wait: the acquire loads and L1 invalidations in its SASS, the
    recorded rows and (``here``) one compiled in this process."""
    found = [("recorded", r) for r in rows] + ([("compiled here", here)] if here else [])
    return [{"triton": r["triton"], "ptxas": r["ptxas"], "source": source, "wait": label,
             "acquire loads": r[key]["acquire_loads"],
             "L1 invalidations": r[key]["l1_invalidations"]}
            for source, r in found
            for key, label in (("wait_value_unused", "acquire value unused"),
                               ("wait_value_used", "labkit's wait (value used)"))]


def acquire_summary(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line per recorded Triton: acquire loads / L1 invalidations of each wait."""
    def pair(w: Mapping[str, int]) -> str:
        return f"{w['acquire_loads']}/{w['l1_invalidations']}"
    return "; ".join(f"Triton {r['triton']}: unused {pair(r['wait_value_unused'])}, labkit's "
                     f"{pair(r['wait_value_used'])} (acquire loads/L1 invalidations)"
                     for r in rows)


def dropped_in(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The Triton versions whose code for the unused-value wait invalidates no L1."""
    return [r["triton"] for r in rows if r["wait_value_unused"]["l1_invalidations"] == 0]


def load_gone_invalidation_kept(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether some Triton after 3.6 drops the unused acquire's load but keeps its L1
    invalidation (and none after 3.6 drops both)."""
    later = [r["wait_value_unused"] for r in rows
             if (version_tuple(r["triton"]) or (0, 0)) > (3, 6)]
    return bool(later) and all(u["acquire_loads"] == 0 and u["l1_invalidations"] >= 1
                               for u in later)


def kept_in_all(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether labkit's wait keeps an acquire load and an L1 invalidation in every row."""
    return bool(rows) and all(r["wait_value_used"]["acquire_loads"] >= 1
                              and r["wait_value_used"]["l1_invalidations"] >= 1 for r in rows)


# ---------------------------------------------------------------------- how many programs fit
#: the persistent layer kernel's registers and shared memory per launch of the sweeps, one row
#: per Triton version (``python -m labkit.kernels.aot resources``; compiled for sm_90 as the
#: JIT would, without a GPU)
RESOURCES_FILE = "sweeps/layer_resources.json"
#: what one SM of compute capability 9.0 (H100, H200) holds: 64 Ki registers, given to a warp
#: in units of 256; 228 KiB of shared memory, of which each block also reserves 1 KiB for the
#: system, in units of 128 bytes; 64 warps; 32 blocks (CUDA C++ Programming Guide, "Compute
#: Capabilities", table of technical specifications, and its occupancy rules)
HOPPER_SM = {"registers": 65536, "register_unit": 256, "shared_bytes": 228 * 1024,
             "shared_reserved": 1024, "shared_unit": 128, "warps": 64, "blocks": 32}


def resources_record(triton: str = "3.6.0") -> dict[str, Any]:
    """The recorded row of :data:`RESOURCES_FILE` for ``triton`` (the GPU machine's, which ran
    the sweeps)."""
    with open(_sweep(RESOURCES_FILE), encoding="utf-8") as f:
        rows = [r for r in json.load(f) if r["triton"] == triton]
    if not rows:
        raise LookupError(f"{RESOURCES_FILE} has no row for Triton {triton}; record one with "
                          "`python -m labkit.kernels.aot resources` under that Triton")
    return rows[0]


def _up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def programs_per_sm(registers: int, shared_bytes: int, num_warps: int,
                    sm: Mapping[str, int] = HOPPER_SM) -> dict[str, int]:
    """How many programs (blocks) of a kernel one SM holds at once, by each limit (``by
    registers``, ``by shared memory``, ``by warps``, ``by blocks``) and in all (``fit``, the
    smallest): registers are given per warp, rounded up to ``register_unit``; each block's
    shared memory is rounded up to ``shared_unit`` after the system's reserved KiB is added."""
    per_warp = _up(max(1, registers) * 32, sm["register_unit"])
    per_block = _up(shared_bytes + sm["shared_reserved"], sm["shared_unit"])
    limits = {"by registers": sm["registers"] // per_warp // num_warps,
              "by shared memory": sm["shared_bytes"] // per_block,
              "by warps": sm["warps"] // num_warps, "by blocks": sm["blocks"]}
    return {**limits, "fit": min(limits.values())}


def _outcome(rows: Sequence[Mapping[str, Any]], preset: str, batch: int, per_sm: int,
             waits: str) -> str:
    """What the sweeps saw of the default persistent kernel at ``per_sm`` programs per SM
    (:func:`_per_sm`): ``ran``, ``refused`` or ``not tried``."""
    seen = _per_sm(rows, preset, batch, per_sm, waits)
    if seen is None:
        return "not tried"
    return seen if isinstance(seen, str) else "ran"


def fits(resources: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
         sm: Mapping[str, int] = HOPPER_SM) -> list[dict[str, Any]]:
    """Per compiled launch (preset, batch, programs per SM, waits): the programs an SM holds
    (:func:`programs_per_sm`), whether the grid fits, and what the sweeps ``rows`` saw."""
    out = []
    for r in resources["rows"]:
        limit = programs_per_sm(r["registers"], r["shared_bytes"], r["num_warps"], sm)
        out.append({**r, **limit, "fits": limit["fit"] >= r["per_sm"],
                    "seen": _outcome(rows, r["preset"], r["batch"], r["per_sm"], r["waits"])})
    return out


def fits_agree(found: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the sweeps refused a launch somewhere, and every launch they tried ran where it
    fits and was refused where it does not."""
    tried = [f for f in found if f["seen"] != "not tried"]
    return (any(f["seen"] == "refused" for f in tried)
            and all((f["seen"] == "ran") == f["fits"] for f in tried))


def refused_launches(found: Sequence[Mapping[str, Any]]) -> list[str]:
    """The launches the sweeps saw refused (each size and programs per SM once)."""
    out = [f"{_size(f['preset'], f['batch'])}, {f['per_sm']} per SM" for f in found
           if f["seen"] == "refused"]
    return list(dict.fromkeys(out))


def fits_table(found: Sequence[Mapping[str, Any]], waits: str = "stage") -> list[dict[str, Any]]:
    """One row per preset and batch size (``waits``): registers, shared memory, the programs an
    SM holds and the tighter limit, and per programs per SM the prediction against what the
    sweeps saw."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for f in found:
        if f["waits"] != waits:
            continue
        key = (f["preset"], f["batch"])
        if key not in out:
            tight = [k.removeprefix("by ") for k in ("by registers", "by shared memory",
                                                      "by warps", "by blocks")
                     if f[k] == f["fit"]]
            out[key] = {"size": _size(*key), "registers": f["registers"],
                        "shared KiB": _r(f["shared_bytes"] / 1024, 1),
                        "fit per SM": f["fit"], "limited by": " and ".join(tight)}
        word = "fits" if f["fits"] else "does not fit"
        out[key][f"{f['per_sm']} per SM"] = (word if f["seen"] == "not tried"
                                             else f"{word}; {f['seen']}")
    return list(out.values())


def fits_shows(found: Sequence[Mapping[str, Any]]) -> str:
    """What the statement about :func:`fits` shows: how many launches the sweeps ran and the
    tightest of them (fewest programs to spare), then each refused launch, with their fits."""
    def one(f: Mapping[str, Any]) -> str:
        return (f"{_size(f['preset'], f['batch'])}, {f['per_sm']} per SM, waits={f['waits']!r}: "
                f"{f['fit']} fit")
    ran = [f for f in found if f["seen"] == "ran"]
    tightest = min(ran, key=lambda f: f["fit"] - f["per_sm"], default=None)
    return "; ".join([f"{len(ran)} launches ran"
                      + (f", the tightest {one(tightest)}" if tightest else "")]
                     + [f"refused: {one(f)}" for f in found if f["seen"] == "refused"])


#: the GPU run that found the dropped acquire (before the fix)
BEFORE_FIX_FILE = "sweeps/h100-80gb-hbm3/persistent_fidelity_before_fix.json"


def before_fix_row(found: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`before_fix` as a table row with readable headers."""
    return {"float32 tokens equal, 1 row": found["equal_at_1"],
            "… 8+ rows": found["equal_at_8_plus"],
            "repeats itself, 1 row": found["repeatable_at_1"],
            "one program: equal": found["one_program_equal"],
            "layer 0 stages 1-2: largest diff": _r(found["stages_1_2_differ"], 4),
            "stages 3-5: largest diff": _r(found["stages_3_5_differ"], 4),
            "rows of the file": found["rows"]}


def before_fix_shows(found: Mapping[str, Any]) -> str:
    """:func:`before_fix_row` as one line, what a statement about it shows."""
    return "; ".join(f"{k}: {v}" for k, v in before_fix_row(found).items())


def before_fix() -> dict[str, Any]:
    """What ``persistent_fidelity_before_fix.json`` shows: the share of the persistent step's
    float32 tokens equal to the readable step's at one row and at 8 or more (lowest), whether
    it repeated itself at one row, whether one program gave the readable tokens everywhere,
    and layer 0's largest differences from the kernels (q, y and the cache; hidden and x)."""
    with open(_sweep(BEFORE_FIX_FILE), encoding="utf-8") as f:
        rows = json.load(f)
    one = [r for r in rows if r["batch"] == 1]
    more = [r for r in rows if r["batch"] >= 8]
    return {"equal_at_1": min(r["persistent"] for r in one),
            "equal_at_8_plus": min(r["persistent"] for r in more),
            "repeatable_at_1": any(r["persistent_repeatable"] for r in one),
            "one_program_equal": all(r["persistent_p1"] == 1.0 for r in rows),
            "stages_1_2_differ": max(r["layer0"][f"persistent.{b}"] for r in one
                                     for b in ("q", "y", "cache")),
            "stages_3_5_differ": min(max(r["layer0"]["persistent.hidden"],
                                         r["layer0"]["persistent.x"]) for r in one),
            "rows": len(rows)}


# ---------------------------------------------------------------------- the simulator
# P programs, five stages, four counter barriers per launch: labkit.kernels.persistent.

READY = "ready"


class LaunchRefused(RuntimeError):
    """A cooperative launch of more programs than can be resident at once (CUDA refuses it
    with ``cudaErrorCooperativeLaunchTooLarge``)."""


@dataclass(frozen=True)
class Op:
    """One memory operation a program hands to the scheduler (``value = yield p.load(x)``)."""

    kind: str   # "load", "load_volatile", "store", "release_add", "acquire"
    name: str = ""
    value: int = 0


@dataclass
class Program:
    """What a program's code calls to make its operations: ``pid``, ``P`` and the ops."""

    pid: int
    P: int

    def load(self, name: str) -> Op:
        """A plain load: from this program's L1 copy if it has one, else from L2 (kept)."""
        return Op("load", name)

    def load_volatile(self, name: str) -> Op:
        """A load that bypasses L1 and reads L2 (``tl.load(..., volatile=True)``)."""
        return Op("load_volatile", name)

    def store(self, name: str, value: int) -> Op:
        """A store, written through to L2 (and to this program's own L1 copy)."""
        return Op("store", name, int(value))

    def release_add(self, name: str, n: int = 1) -> Op:
        """An atomic add at L2, ordered after this program's earlier stores (release)."""
        return Op("release_add", name, int(n))

    def acquire(self) -> Op:
        """An acquire: this program's L1 copies are dropped, so later loads read L2."""
        return Op("acquire")


ProgramCode = Generator[Op, int, None]
WaitFn = Callable[[Program, int], Generator[Op, int, None]]
TargetsFn = Callable[[int, int], tuple[int, list[int]]]


def barrier_targets(seen: int, programs: int, barriers: int = BARRIERS) -> tuple[int, list[int]]:
    """This launch's start ``base`` and its barriers' targets from ``seen``, the counter read
    before this program's first arrival: the counter holds whole launches (``barriers *
    programs`` each) plus fewer than ``programs`` arrivals of this one."""
    per_launch = barriers * programs
    base = seen - seen % per_launch
    return base, [base + k * programs for k in range(1, barriers + 1)]


def targets_without_base(seen: int, programs: int,
                         barriers: int = BARRIERS) -> tuple[int, list[int]]:
    """The bug of a counter reused without a base: targets as if it started at zero."""
    return 0, [k * programs for k in range(1, barriers + 1)]


def wait_acquire(p: Program, target: int) -> Generator[Op, int, None]:
    """labkit's wait (``labkit.kernels.common.wait_inputs``): spin on volatile loads, then
    one acquire."""
    seen = yield p.load_volatile(READY)
    while seen < target:
        seen = yield p.load_volatile(READY)
    yield p.acquire()


def wait_no_acquire(p: Program, target: int) -> Generator[Op, int, None]:
    """The wait without its acquire: the counter is seen, the data may be an old copy."""
    seen = yield p.load_volatile(READY)
    while seen < target:
        seen = yield p.load_volatile(READY)


def wait_plain_load(p: Program, target: int) -> Generator[Op, int, None]:
    """The wait that spins on a plain load: it may read its own L1 copy of the counter
    forever, and it has no acquire."""
    seen = yield p.load(READY)
    while seen < target:
        seen = yield p.load(READY)


def _read_row(p: Program, name: str) -> Generator[Op, int, int]:
    """Sum of every program's tile of buffer ``name`` (a LayerNorm or a matrix product reads
    the whole row)."""
    total = 0
    for j in range(p.P):
        total += yield p.load(f"{name}{j}")
    return total


def layer_program(p: Program, wait: WaitFn, targets: TargetsFn) -> ProgramCode:
    """One program of a layer launch: the five stages of ``layer_kernel`` as integer
    arithmetic on one tile per program (``x`` the residual, updated in place in stages 3 and
    5, read whole in stages 1 and 4, as LN1 and LN2 read it)."""
    t = p.pid
    seen = yield p.load_volatile(READY)             # before this program's first arrival
    _, target = targets(seen, p.P)
    x_row = yield from _read_row(p, "x")            # stage 1: LN1 + QKV
    yield p.store(f"a{t}", x_row + t)
    yield p.release_add(READY)
    yield from wait(p, target[0])                   # stage 2: attention over every a
    a_row = yield from _read_row(p, "a")
    yield p.store(f"b{t}", a_row * (t + 1))
    yield p.release_add(READY)
    yield from wait(p, target[1])                   # stage 3: out-projection + residual
    b_row = yield from _read_row(p, "b")
    x_t = yield p.load(f"x{t}")
    yield p.store(f"x{t}", x_t + b_row % 97)
    yield p.release_add(READY)
    yield from wait(p, target[2])                   # stage 4: LN2 + up-projection
    x_row = yield from _read_row(p, "x")
    yield p.store(f"c{t}", x_row - t)
    yield p.release_add(READY)
    yield from wait(p, target[3])                   # stage 5: down-projection + residual
    c_row = yield from _read_row(p, "c")
    x_t = yield p.load(f"x{t}")
    yield p.store(f"x{t}", x_t + c_row % 89)


def reference_layers(x: Sequence[int], launches: int) -> list[int]:
    """The residual after ``launches`` layer launches, computed one stage after another."""
    xs, P = list(x), len(x)
    for _ in range(launches):
        a = [sum(xs) + t for t in range(P)]
        b = [sum(a) * (t + 1) for t in range(P)]
        xs = [xs[t] + sum(b) % 97 for t in range(P)]
        c = [sum(xs) - t for t in range(P)]
        xs = [xs[t] + sum(c) % 89 for t in range(P)]
    return xs


@dataclass
class SimResult:
    """What a simulated run did: ``status`` is ``ok`` (the residual equals the reference),
    ``wrong`` (it does not), ``deadlock`` (no program could go on) or ``refused``."""

    status: str
    x: list[int]
    expected: list[int]
    ops: int
    counter: int
    #: plain loads that returned an L1 copy older than L2: (launch, pid, name, got, in L2)
    stale_reads: list[tuple[int, int, str, int, int]] = field(default_factory=list)
    #: loads of a buffer this launch had not yet written (the previous launch's value):
    #: (launch, pid, name, got)
    early_reads: list[tuple[int, int, str, int]] = field(default_factory=list)
    #: for a deadlock: the launch, the programs spinning, those never made resident
    stuck: dict[str, Any] = field(default_factory=dict)
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def row(self) -> dict[str, Any]:
        """One table row: status, residual against the reference, stale and early reads, the
        counter and the operations run (:attr:`message` says what went wrong)."""
        return {"status": self.status, "x": str(self.x), "expected": str(self.expected),
                "stale reads": len(self.stale_reads), "early reads": len(self.early_reads),
                "counter": self.counter, "scheduler ops": self.ops}


def simulate(programs: int = 4, launches: int = 2, *, resident: int | None = None,
             cooperative: bool = False, wait: WaitFn = wait_acquire,
             targets: TargetsFn = barrier_targets, seed: int = 0,
             max_ops: int = 200_000) -> SimResult:
    """Run ``launches`` layer launches of ``programs`` programs each, one launch after another
    (stream order: each launch starts with empty L1 copies), the programs' operations
    interleaved by a seeded random scheduler. At most ``resident`` programs run at once (the
    others start as resident ones finish, as a GPU's block scheduler does); ``cooperative``
    refuses a launch that cannot be resident at once (:class:`LaunchRefused`). A run in which
    no program can go on ends as ``deadlock``; none runs past ``max_ops`` operations."""
    if isinstance(programs, bool) or not isinstance(programs, int) or programs < 1:
        raise ValueError(f"programs must be an int >= 1, got {programs!r}")
    if isinstance(launches, bool) or not isinstance(launches, int) or launches < 1:
        raise ValueError(f"launches must be an int >= 1, got {launches!r}")
    resident = programs if resident is None else resident
    if isinstance(resident, bool) or not isinstance(resident, int) or resident < 1:
        raise ValueError(f"resident must be an int >= 1, got {resident!r}")
    if cooperative and programs > resident:
        raise LaunchRefused(
            f"cooperative launch of {programs} programs refused: at most {resident} can be "
            "resident at once (CUDA: cudaErrorCooperativeLaunchTooLarge, 'too many blocks in "
            "cooperative launch'); launch at most that many programs")
    rng = random.Random(seed)
    x0 = [t + 1 for t in range(programs)]
    l2: dict[str, int] = {READY: 0, **{f"x{t}": v for t, v in enumerate(x0)}}
    expected = reference_layers(x0, launches)
    stale: list[tuple[int, int, str, int, int]] = []
    early: list[tuple[int, int, str, int]] = []
    ops = 0
    # a deadlock: no store, add or finished program for this many operations in a row
    quiet_limit = 64 * resident * (2 * programs + 8)
    for launch in range(launches):
        codes = {pid: layer_program(Program(pid, programs), wait, targets)
                 for pid in range(programs)}
        l1: dict[int, dict[str, int]] = {pid: {} for pid in range(programs)}
        sent: dict[int, int | None] = dict.fromkeys(codes)
        last: dict[int, Op] = {}
        pending = list(range(programs))
        running: list[int] = []
        written: set[str] = set()
        quiet = 0
        while pending or running:
            while pending and len(running) < resident:
                running.append(pending.pop(0))
            pid = rng.choice(running)
            try:
                op = codes[pid].send(sent[pid])  # type: ignore[arg-type]
            except StopIteration:
                running.remove(pid)
                quiet = 0
                continue
            ops += 1
            last[pid] = op
            sent[pid] = None
            if op.kind in ("load", "load_volatile") and op.name[0] in "abc" \
                    and op.name not in written:
                early.append((launch, pid, op.name, l2.get(op.name, 0)))
            if op.kind == "load":
                if op.name in l1[pid]:
                    got = l1[pid][op.name]
                    if got != l2.get(op.name, 0):
                        stale.append((launch, pid, op.name, got, l2.get(op.name, 0)))
                else:
                    got = l1[pid][op.name] = l2.get(op.name, 0)
                sent[pid] = got
                quiet += 1
            elif op.kind == "load_volatile":
                sent[pid] = l2.get(op.name, 0)
                quiet += 1
            elif op.kind == "acquire":
                l1[pid].clear()
                quiet += 1
            elif op.kind == "store":
                l2[op.name] = l1[pid][op.name] = op.value
                written.add(op.name)
                quiet = 0
            elif op.kind == "release_add":
                l2[op.name] = l2.get(op.name, 0) + op.value
                l1[pid].pop(op.name, None)
                quiet = 0
            else:
                raise ValueError(f"program {pid} yielded {op!r}: use the operations of Program")
            if quiet > quiet_limit or ops > max_ops:
                spinning = sorted(p for p in running if last.get(p) is not None
                                  and last[p].name == READY)
                return SimResult(
                    "deadlock", [l2[f"x{t}"] for t in range(programs)], expected, ops,
                    l2[READY], stale, early,
                    {"launch": launch, "spinning": spinning, "never_resident": pending},
                    f"launch {launch}: programs {spinning} spin on the ready counter "
                    f"({l2[READY]}) and nothing can raise it"
                    + (f"; programs {pending} never became resident" if pending else ""))
    x = [l2[f"x{t}"] for t in range(programs)]
    status = "ok" if x == expected else "wrong"
    msg = "" if status == "ok" else (
        f"residual {x}, expected {expected}"
        + (f"; first stale read: launch {stale[0][0]}, program {stale[0][1]} read "
           f"{stale[0][2]} = {stale[0][3]} from its L1 while L2 held {stale[0][4]}"
           if stale else "")
        + (f"; first early read: launch {early[0][0]}, program {early[0][1]} read "
           f"{early[0][2]} = {early[0][3]} before this launch wrote it (the previous launch's "
           "value)" if early else ""))
    return SimResult(status, x, expected, ops, l2[READY], stale, early, {}, msg)


def seeds_status(seeds: Sequence[int], **kw: Any) -> dict[str, int]:
    """How many of ``seeds`` (scheduler orders) end in each status for :func:`simulate`
    (``kw``); a refused launch counts as ``refused``."""
    out: dict[str, int] = {}
    for s in seeds:
        try:
            status = simulate(seed=s, **kw).status
        except LaunchRefused:
            status = "refused"
        out[status] = out.get(status, 0) + 1
    return out
