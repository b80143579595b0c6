"""Notebook 15: mixed batches, chunked prefill and speculative decoding, as rows.

One module per notebook topic: its lessons (pure: records and numbers to rows) and its
charts (plotly figures from records).
"""

from __future__ import annotations

import statistics
from typing import Any

from labkit.measure.records import Chunked, LaunchOverhead, Mixed, Spec, SpecVerify, view


# ---------------------------------------------------------------------- lessons mixed
# Mixed batches, chunked prefill and speculative decoding (notebook 15): tables from the ...

def uniform_rows(record: Any) -> list[dict[str, Any]]:
    """Per batch size: today's FULL step and the token-flattened runner's, each over its own
    graph's bare replay, and new over today (medians, µs)."""
    d = view(record, Mixed)
    u = d.uniform
    return [{"batch": b, "today's step (µs)": round(u["today_step"][i].median, 1),
             "over its replay": round(u["today_step"][i].median / u["today_replay"][i].median, 3),
             "token-flattened step (µs)": round(u["new_step"][i].median, 1),
             "over its replay ": round(u["new_step"][i].median / u["new_replay"][i].median, 3),
             "new / today": round(u["new_step"][i].median / u["today_step"][i].median, 3)}
            for i, b in enumerate(d.batch_sizes)]


def mixed_rows(record: Any) -> list[dict[str, Any]]:
    """Per mixed batch: its decode rows and chunk, the runtime mode, PIECEWISE and eager
    medians with p10–p90, and the speed-up."""
    d = view(record, Mixed)
    out = []
    for i, ((rows, chunk), n) in enumerate(zip(d.shapes, d.mixed_tokens)):
        pw, ea = d.mixed["piecewise"][i], d.mixed["eager"][i]
        out.append({"decode rows": rows, "prefill chunk": chunk, "tokens": n,
                    "mode": d.mixed_modes[i],
                    "PIECEWISE (µs)": f"{pw.median:,.0f} ({pw.p10:,.0f}–{pw.p90:,.0f})",
                    "eager (µs)": f"{ea.median:,.0f} ({ea.p10:,.0f}–{ea.p90:,.0f})",
                    "eager / PIECEWISE": round(ea.median / pw.median, 2)})
    return out


def same_commit(a: Any, b: Any) -> bool:
    """Whether two records name the same commit in their ``env`` (a short hash matches the
    full one it starts), on the same GPU; ``False`` when either names none."""
    ea, eb = (getattr(r, "env", None) or {} for r in (a, b))
    ca, cb = str(ea.get("git_commit") or ""), str(eb.get("git_commit") or "")
    if len(ca) < 7 or len(cb) < 7 or ea.get("gpu_name") != eb.get("gpu_name"):
        return False
    return ca.startswith(cb) or cb.startswith(ca)


def host_us_per_launch(record: Any, launch_record: Any) -> float | None:
    """The host µs to issue one kernel launch, for the run of ``record``: the median of
    ``launch_record`` (a ``launch_overhead`` record) when it was measured at the same commit on
    the same GPU, else ``None`` (the run did not measure it; eager steps follow the host CPU,
    so another run's host is not this one's)."""
    if record is None or launch_record is None or not same_commit(record, launch_record):
        return None
    host = view(launch_record, LaunchOverhead).host_per_launch
    return None if host is None else host.median


def verify_ratio(record: Any, k: int, requests: int) -> float:
    """Median of the verify step of ``k`` drafts over the decode step's, at ``requests``."""
    d = view(record, SpecVerify)
    i = d.batch_sizes.index(requests)
    return d.times[f"k{k}"][i].median / d.times["k0"][i].median


def verify_rows(record: Any) -> list[dict[str, Any]]:
    """Per number of requests and ``k``: the verify step's median and its cost over decode."""
    d = view(record, SpecVerify)
    return [{"requests": r, "k": k, "tokens": r * (k + 1),
             "step (µs)": round(d.times[f"k{k}"][i].median, 1),
             "× decode step": round(verify_ratio(d, k, r), 3)}
            for i, r in enumerate(d.batch_sizes) for k in d.ks]


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens a verify step of ``k`` drafts emits on average when each draft is accepted with
    probability ``acceptance`` independently (the accepted prefix plus one):
    ``(1 - a^(k+1)) / (1 - a)``, Leviathan et al. 2023, eq. 1."""
    if not 0 <= acceptance <= 1:
        raise ValueError(f"acceptance is a probability in [0, 1], got {acceptance}")
    if acceptance == 1:
        return float(k + 1)
    return (1 - acceptance ** (k + 1)) / (1 - acceptance)


def break_even(cost_ratio: float, k: int) -> float | None:
    """The acceptance rate at which a speculative step of ``k`` drafts, costing
    ``cost_ratio`` plain steps, emits as many tokens per second as plain decoding (``None``:
    even every draft accepted does not pay)."""
    if cost_ratio <= 1:
        return 0.0
    if expected_tokens(1.0, k) < cost_ratio:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, k) < cost_ratio else (lo, mid)
    return hi


def spec_rows(record: Any) -> list[dict[str, Any]]:
    """Per arm of a ``spec_<name>`` record: median seconds, tokens/s, the drafter's stats, the
    time of one step over a plain step (tokens to the host each step) and the break-even
    acceptance it implies."""
    d = view(record, Spec)
    tokens = d.n_prompts * d.new_tokens
    plain_step = statistics.median(d.seconds["plain_synced"]) / (d.new_tokens - 1)
    rows = []
    for arm, secs in d.seconds.items():
        s = statistics.median(secs)
        st = d.stats.get(arm)
        row: dict[str, Any] = {"arm": arm, "seconds (median)": round(s, 4),
                               "tokens/s": round(tokens / s), "acceptance": None,
                               "tokens / step": 1.0, "step / plain step": None,
                               "break-even acceptance": None}
        if st is not None:
            k = int(arm[1:])
            ratio = s / st["steps"] / plain_step
            row.update({"acceptance": round(st["acceptance_rate"], 3),
                        "tokens / step": round(st["tokens_per_step"], 3),
                        "step / plain step": round(ratio, 2),
                        "break-even acceptance": _round(break_even(ratio, k))})
        rows.append(row)
    return rows


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def chunked_rows(record: Any) -> list[dict[str, Any]]:
    """Per arm of a ``chunked_<preset>`` record: the medians over repeats of TTFT and ITL p50
    and p99 (ms) and the largest step's tokens."""
    d = view(record, Chunked)
    out = []
    for arm, a in d.arms.items():
        row: dict[str, Any] = {"arm": arm, "budget": a.get("max_num_batched_tokens")}
        for metric in ("ttft", "itl"):
            for p in ("p50", "p99"):
                row[f"{metric.upper()} {p} (ms)"] = round(
                    statistics.median(d.percentile(arm, metric, p)), 2)
        row["largest step (tokens)"] = max(x["max_step_tokens"] for x in a["latency"])
        out.append(row)
    return out
