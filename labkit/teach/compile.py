"""Notebook 08 (and 12's fairness rule): torch.compile against manual graphs, the fused step, when
a comparison is fair, and the charts.

One module per notebook topic: its lessons (pure: records and numbers to rows) and its
charts (plotly figures from records).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labkit.measure.records import Compile, Fused, view
from labkit.teach.plots import check_methods, color, finish, label, plotly_go, stats_bar
from labkit.teach.verdicts import compare_stats, Difference


# ---------------------------------------------------------------------- lessons fairness
# Fair comparisons of timed columns (notebooks 08, 12, ``labkit bench``): torch.compile only ...

#: why the other compile columns are shown but not scored (printed by ``labkit bench``)
NOT_SCORED = ("torch.compile columns after the first compiled batch size are not scored (PyTorch "
              "then recompiles with dynamic shapes, unlike the dispatcher's static per-size "
              "capture), nor is a column whose record does not show that CUDA graphs were used "
              "(cudagraph_skips). A fair comparison compiles each size with static shapes and "
              "checks the CUDA graphs (TORCH_LOGS=cudagraphs, cudagraph_skips empty).")


def fair_compile_size(record: Any) -> int | None:
    """The compile column's first batch size if ``cudagraph_skips`` is recorded and empty."""
    raw = getattr(record, "data", record) or {}
    if "cudagraph_skips" not in raw or raw["cudagraph_skips"]:
        return None
    sizes = raw.get("compile_batch_sizes") or raw.get("batch_sizes") or []
    return int(sizes[0]) if sizes else None


def interleaved(record: Any, default: bool = False, columns: tuple[str, ...] = ()) -> bool:
    """Whether the record's ``columns`` (all when empty) were sampled in turn, by its
    ``interleaved`` field (a bool or the list of such columns; ``default`` when absent)."""
    flag = getattr(record, "data", record).get("interleaved", default)
    if isinstance(flag, list):
        return bool(columns) and all(c in flag for c in columns)
    return bool(flag)


def compare(record: Any, a: str, b: str, batch: int, *, default: bool = False) -> Difference:
    """Column ``a`` against ``b`` of a timed record at ``batch``, by ``compare_stats``."""
    d = getattr(record, "data", record)
    i = list(d["batch_sizes"]).index(batch)
    sa, sb = d["times"][a][i], d["times"][b][i]
    if sa is None or sb is None:
        raise KeyError(f"{a!r} or {b!r} was not timed at batch {batch}")
    return compare_stats(sa, sb, interleaved=interleaved(record, default, (a, b)))


# ---------------------------------------------------------------------- lessons fused
# The readable vs the fused decode step of a ``fused_<preset>`` record (notebook 08).

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


# ---------------------------------------------------------------------- plots compile
# Charts and tables of ``compile_<preset>`` records: manual CUDA graphs vs torch.compile.

def compile_rows(record: Any) -> list[dict]:
    """Per batch size: compile shapes, each method's µs (p10–p90), compile's verdicts."""
    d = view(record, Compile)
    rows = []
    for i, b in enumerate(d.batch_sizes):
        row: dict[str, Any] = {"batch": b, "compile shapes": "static" if b == fair_compile_size(
            record) else "dynamic recompile (or graphs skipped)"}
        row.update({f"{m} µs (p10–p90)": f"{s.median:,.1f} ({s.p10:,.1f}–{s.p90:,.1f})"
                    for m in d.methods for s in [d.times[m][i]] if s is not None})
        row.update({f"compile vs {o}": compare(record, "compile", o, b).word
                    for o in ("dispatcher", "graph")})
        rows.append(row)
    return rows


def step_time_bars(record: Any, *, methods: Sequence[str] | None = None,
                   subtitle: str | None = None, log_y: bool = False):
    """Median decode-step time per batch size, one bar per method (p10–p90 whiskers)."""
    d = view(record, Compile)
    methods = list(methods or d.methods)
    check_methods("compile", methods, d.times)
    fig = plotly_go().Figure([stats_bar(d.batch_sizes, d.times[m], label(m), color(m),
                                        texttemplate="%{y:,.0f} µs", textposition="outside")
                              for m in methods])
    fig.update_layout(barmode="group")
    return finish(fig, f"Decode step: manual graphs vs torch.compile ({d.preset})", "batch size",
                  "µs per step (median)", log_y=log_y, subtitle=subtitle, record=record)


def break_even_steps(record: Any, batch: int) -> float:
    """Steps until compile's extra set-up is paid back by its saving over the graph at ``batch``."""
    d = view(record, Compile)
    if batch not in d.batch_sizes:
        raise ValueError(f"batch {batch} was not measured; the record has {d.batch_sizes}")
    extra_s = d.compile_s - d.capture_s
    saving_s = (d.at("graph", batch) - d.at("compile", batch)) * 1e-6
    return 0.0 if extra_s <= 0 else float("inf") if saving_s <= 0 else extra_s / saving_s


def total_time_chart(record: Any, batch: int, max_steps: int = 10 ** 6, *,
                     subtitle: str | None = None):
    """Wall time to serve ``n`` decode steps at ``batch``, set-up included (log axes)."""
    go = plotly_go()
    d = view(record, Compile)
    be = break_even_steps(d, batch)  # checks the batch
    if max_steps < 10:
        raise ValueError(f"max_steps must be at least 10, got {max_steps}")
    steps = [k * 10 ** e for e in range(9) for k in (1, 2, 5) if k * 10 ** e <= max_steps]
    fig = go.Figure()
    for m, setup in (("eager", 0.0), ("graph", d.capture_s), ("compile", d.compile_s)):
        per = d.at(m, batch) * 1e-6
        fig.add_trace(go.Scatter(x=steps, y=[setup + k * per for k in steps], name=label(m),
                                 mode="lines", line=dict(color=color(m))))
    if 0 < be <= max_steps:
        fig.add_vline(x=be, line_dash="dot", line_color=color("compile"),
                      annotation_text=f"compile pays off after {be:,.0f} steps")
    return finish(fig, f"Time to serve n steps at batch {batch}, set-up included", "decode steps",
                  "seconds", log_x=True, log_y=True, subtitle=subtitle, record=record)
