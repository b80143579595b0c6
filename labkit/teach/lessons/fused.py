"""The readable vs the fused decode step, from a ``fused_<preset>`` record: pure helpers.

* :func:`kernel_rows`: the before/after table, kernel by kernel (profiler names shortened;
  kernels whose short names coincide are added up), total last;
* :func:`step_rows`: per batch size, replay time and GPU operations of both steps (and,
  where recorded, the summed kernel time of an eager step and what a replay spends beyond it);
* :func:`time_groups`: where one eager step's GPU time goes, by kind of kernel (GEMMs,
  attention, LayerNorm, cache write, ...), per step;
* :func:`sentences`: what the record says against the issue's targets (:data:`TARGETS`);
* :data:`TIME_CHOICES`, :func:`largest_kind_choice`: exercise 8.4 (which kind of kernel takes
  the largest share of the fused step's time), answered from the record.
"""

from __future__ import annotations

from typing import Any

from labkit.measure.opcount import compare_counts
from labkit.measure.records import Fused, view
from labkit.teach.lessons.trace import short_name

#: targets for the fused step at batch 1 (H200, bf16): replay µs and GPU operations per step
TARGETS: dict[str, dict[str, float]] = {"gpt2": {"step_us": 550.0, "ops": 120},
                                        "small": {"step_us": 140.0}}


#: kinds of kernel, matched in order against the lower-cased profiler name
KERNEL_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("attention", "fmha", "flash")),
    ("GEMM (cuBLAS) and split-K reduction", ("gemm", "gemv", "nvjet", "xmma", "splitk", "cublas")),
    ("LayerNorm", ("layer_norm",)),
    ("cache write", ("index_copy", "index_put")),
    ("embedding gathers", ("indexselect", "index_select", "embedding")),
)
OTHER_GROUP = "elementwise adds and metadata"


#: exercise 8.4: the kinds a learner chooses among (letters -> :data:`KERNEL_GROUPS` names)
TIME_CHOICES: dict[str, str] = {"a": "attention", "b": "GEMM (cuBLAS) and split-K reduction",
                                "c": "LayerNorm", "d": "cache write"}


def kernel_group(name: str) -> str:
    """The kind of a profiler kernel name (:data:`KERNEL_GROUPS`, else :data:`OTHER_GROUP`)."""
    low = name.lower()
    for group, keys in KERNEL_GROUPS:
        if any(k in low for k in keys):
            return group
    return OTHER_GROUP


def time_groups(record: Any, step: str = "fused") -> list[dict]:
    """Rows ``{"kind", "kernels", "us", "share"}``: GPU operations and summed GPU µs of one
    eager ``step`` at the record's ``count_batch``, by :func:`kernel_group`, largest first,
    then ``"total"``. Empty when the record holds no per-kernel times."""
    rec = view(record, Fused)
    us, counts = rec.op_us.get(step, {}), rec.ops.get(step, {})
    if not us:
        return []
    groups: dict[str, list[float]] = {}
    for name, t in us.items():
        g = groups.setdefault(kernel_group(name), [0, 0.0])
        g[0] += int(counts.get(name, 0))
        g[1] += float(t)
    total = sum(g[1] for g in groups.values())
    rows = [{"kind": k, "kernels": int(n), "us": round(t, 1),
             "share": round(t / total, 3) if total else 0.0}
            for k, (n, t) in sorted(groups.items(), key=lambda kv: -kv[1][1])]
    rows.append({"kind": "total", "kernels": sum(int(g[0]) for g in groups.values()),
                 "us": round(total, 1), "share": 1.0 if total else 0.0})
    return rows


def largest_kind_choice(record: Any, step: str = "fused") -> str | None:
    """The letter of :data:`TIME_CHOICES` naming the kind with the largest share of ``step``'s
    GPU time in ``record`` (:func:`time_groups`); ``None`` when the record holds no per-kernel
    times or the largest kind is none of the choices."""
    rows = time_groups(record, step)
    if not rows:
        return None
    top = rows[0]["kind"]
    return next((k for k, v in TIME_CHOICES.items() if v == top), None)


def _short(counts: dict[str, float], limit: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, n in counts.items():
        key = short_name(name, limit)
        out[key] = out.get(key, 0) + n
    return out


def kernel_rows(record: Any, *, short: bool = True, limit: int = 60) -> list[dict]:
    """Rows ``{"name", "readable", "fused", "change"}``: GPU operations of one eager step at
    the record's ``count_batch``, by kernel, most frequent first, then ``"total"``; with
    ``readable_us`` and ``fused_us`` (summed GPU µs of those kernels) where the record has
    them."""
    rec = view(record, Fused)
    before, after = rec.ops["readable"], rec.ops["fused"]
    us = {s: rec.op_us.get(s, {}) for s in ("readable", "fused")}
    if short:
        before, after = _short(before, limit), _short(after, limit)
        us = {s: _short(u, limit) for s, u in us.items()}
    rows = compare_counts({k: int(v) for k, v in before.items()},
                          {k: int(v) for k, v in after.items()})
    if us["readable"] or us["fused"]:
        for r in rows:
            for s in ("readable", "fused"):
                r[f"{s}_us"] = (round(sum(us[s].values()), 1) if r["name"] == "total"
                                else round(us[s][r["name"]], 1) if r["name"] in us[s] else None)
    return rows


def step_rows(record: Any) -> list[dict]:
    """Per batch size: FULL-graph replay µs and GPU operations of each step, and the ratio."""
    rec = view(record, Fused)
    rows = []
    for b in rec.batch_sizes:
        r, f = rec.at("readable", b), rec.at("fused", b)
        row = {"batch": b, "readable_us": r, "fused_us": f,
               "fused/readable": (f / r) if r and f is not None else None,
               "readable_ops": rec.ops_at("readable", b), "fused_ops": rec.ops_at("fused", b)}
        for s in ("readable", "fused"):
            if s in rec.kernel_us:  # GPU busy time of an eager step, and the rest of a replay
                busy = rec.kernel_us[s][rec.batch_sizes.index(b)]
                row[f"{s}_kernel_us"] = busy
                step = r if s == "readable" else f
                row[f"{s}_gaps_us"] = None if step is None else step - busy
        rows.append(row)
    return rows


def sentences(record: Any, preset: str | None = None) -> list[str]:
    """Plain sentences: the step at batch 1 before and after, operations per step and per
    layer, the agreement in the record's dtype, and each target of :data:`TARGETS` met or
    not (``preset`` defaults to the record's)."""
    rec = view(record, Fused)
    name = preset or rec.preset
    b = rec.batch_sizes[0]
    r, f = rec.at("readable", b), rec.at("fused", b)
    ro, fo = rec.ops_at("readable", b), rec.ops_at("fused", b)
    out = [f"{name} at batch {b}: FULL-graph replay {r:.0f} µs readable, {f:.0f} µs fused "
           f"({f / r:.2f}x); {ro} GPU operations per step readable, {fo} fused "
           f"({fo / rec.n_layer:.1f} per layer over {rec.n_layer} layers)."]
    a = rec.agreement
    if a:
        out.append(f"Agreement in {rec.dtype or 'the record dtype'}: "
                   f"{a.get('fraction', 0):.1%} of {a.get('tokens', 0):.0f} greedy tokens equal, "
                   f"largest logit difference {a.get('max_logit_diff', 0):.3g}; float32 tokens "
                   f"equal: {rec.checks.get('fused_tokens_equal_readable_float32')}.")
    target = TARGETS.get(name, {})
    if b == 1 and "step_us" in target:
        ok = f <= target["step_us"]
        out.append(f"Target step <= {target['step_us']:.0f} µs at batch 1: {f:.0f} µs, "
                   f"{'met' if ok else 'NOT met'}.")
    if b == 1 and "ops" in target:
        ok = fo <= target["ops"]
        out.append(f"Target <= {target['ops']:.0f} GPU operations per step: {fo}, "
                   f"{'met' if ok else 'NOT met'}.")
    return out
