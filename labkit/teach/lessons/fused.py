"""The readable vs the fused decode step of a ``fused_<preset>`` record (notebook 08)."""

from __future__ import annotations

from typing import Any

from labkit.measure.records import Fused, view

#: kinds of kernel, matched in order against the lower-cased profiler name
KERNEL_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("attention", "fmha", "flash")),
    ("GEMM (cuBLAS) and split-K reduction", ("gemm", "gemv", "nvjet", "xmma", "splitk", "cublas")),
    ("LayerNorm", ("layer_norm",)),
    ("cache write", ("index_copy", "index_put")),
    ("embedding gathers", ("indexselect", "index_select", "embedding")),
)
OTHER_GROUP = "elementwise adds and metadata"


def kernel_group(name: str) -> str:
    """The kind of a profiler kernel name (:data:`KERNEL_GROUPS`, else :data:`OTHER_GROUP`)."""
    low = name.lower()
    return next((g for g, keys in KERNEL_GROUPS if any(k in low for k in keys)), OTHER_GROUP)


def time_groups(record: Any, step: str = "fused") -> list[dict]:
    """Rows of one eager ``step``'s GPU time by kind of kernel, then ``"total"``."""
    rec = view(record, Fused)
    groups: dict[str, list[float]] = {}
    for name, t in rec.op_us.get(step, {}).items():
        g = groups.setdefault(kernel_group(name), [0, 0.0])
        g[0] += int(rec.ops.get(step, {}).get(name, 0))
        g[1] += float(t)
    total = sum(g[1] for g in groups.values())
    if not total:
        return []
    rows = [{"kind": k, "kernels": int(n), "us": round(t, 1), "share": round(t / total, 3)}
            for k, (n, t) in sorted(groups.items(), key=lambda kv: -kv[1][1])]
    return [*rows, {"kind": "total", "kernels": sum(r["kernels"] for r in rows),
                    "us": round(total, 1), "share": 1.0}]


def step_rows(record: Any) -> list[dict]:
    """Per batch size and step: replay µs, GPU ops, summed kernel µs and the gaps beyond it."""
    rec = view(record, Fused)
    rows = []
    for i, b in enumerate(rec.batch_sizes):
        for s in ("readable", "fused"):
            recorded = rec.kernel_us.get(s)
            t, busy = rec.at(s, b), (recorded[i] if recorded else None)
            rows.append({"batch": b, "step": s, "replay (µs)": None if t is None else round(t, 1),
                         "GPU ops": rec.ops_at(s, b),
                         "kernel time (µs)": None if busy is None else round(busy, 1),
                         "gaps (µs)": None if t is None or busy is None else round(t - busy, 1)})
    return rows
