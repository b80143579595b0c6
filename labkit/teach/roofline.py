"""Notebook 12: the roofline of a decode step, multi-step graphs, the Triton step, and the charts.

One module per notebook topic: its lessons (pure: records and numbers to rows) and its
charts (plotly figures from records).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labkit.measure import records as rk, triton_bench
from labkit.measure.records import Multistep, Roofline, view
from labkit.roofline import stepcost
from labkit.teach.compile import compare
from labkit.teach.notebook import record_or_reference, reference_or_none
from labkit.teach.plots import (
    check_methods, color, COLORS as METHOD_COLORS, finish, plotly_go, series_colors, stats_bar,
    stats_error_bars,
)


# ---------------------------------------------------------------------- lessons roofline
# Roofline helpers (notebook 12): bytes per step, the floor, the compile and multi-step rows.

MB, MIB = 1e6, 2 ** 20
#: display names of the step variants (a variant added later shows under its own name)
VARIANT_LABELS = {"eager": "eager", "graph": "FULL graph (labkit capture)",
                  "fused": "fused step (labkit.fused), FULL graph",
                  "compile_reduce_overhead": "torch.compile reduce-overhead (CUDA Graph Trees)",
                  "compile_manual_graph": "torch.compile kernels + labkit capture",
                  "compile_full_cache": "torch.compile reduce-overhead, cache of every batch size"}
#: ``measure_multistep`` samples its three ways in turn since commit 4a71390, which made both
#: references (data/reference/h200/PROVENANCE.md); records from before it wrote an
#: ``interleaved`` field carry none, so that is the default for a multistep record
MULTISTEP_INTERLEAVED = True


def variant_label(name: str) -> str:
    return VARIANT_LABELS.get(name, name)


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


def bytes_rows(cfg: Any, batch_sizes: Sequence[int], context: int) -> list[dict]:
    """Per batch size: MB (10⁶ bytes) one step moves, by kind, and the weights' share."""
    return [{"batch": b, "weights (MB)": round(sb.weights / MB, 2),
             "KV read (MB)": round(sb.kv_read / MB, 2), "logits + KV write + embeddings (MB)":
             round((sb.logits_write + sb.kv_write + sb.embedding_rows) / MB, 2),
             "total (MB)": round(sb.total / MB, 2), "weights share": round(sb.weights / sb.total, 3)
             }
            for b in batch_sizes for sb in [stepcost.step_bytes(cfg, b, context)]]


def weights_equal_batch(cfg: Any, context: int) -> int:
    """The smallest batch whose growing bytes (KV, logits, embedding rows) reach the weights'."""
    one = stepcost.step_bytes(cfg, 1, context)
    return max(1, -(-one.weights // (one.total - one.weights)))


def floor_rows(record: Any, variants: Sequence[str] | None = None) -> list[dict]:
    """Per batch size: MB per step, the floor (µs), each variant's median µs and × floor."""
    r = view(record, Roofline)
    floors, nbytes = r.roofline_us(), r.step_bytes()
    rows = []
    for i, b in enumerate(r.batch_sizes):
        row: dict[str, Any] = {"batch": b, "MB per step": round(nbytes[i] / MB, 1),
                               "floor (µs)": round(floors[i], 1)}
        for v in [v for v in (variants or r.methods) if v in r.times]:
            t = r.median_us(v)[i]
            row[f"{v} (µs)"], row[f"{v} × floor"] = _r(t), _r(rk.ratio(t, floors[i]))
        rows.append(row)
    return rows


def nodes_per_step(record: Any, variant: str = "graph") -> int | None:
    """GPU operations per step of ``variant`` (for the FULL graph, eager's if not counted)."""
    r = view(record, Roofline)
    n = getattr(r.variants.get(variant), "gpu_ops", None)
    if not n and variant == "graph" and "eager" in r.variants:
        n = r.variants["eager"].gpu_ops
    return n or None


def node_model(record: Any, batch: int = 1, empty_node_us: float = 0.0) -> dict:
    """FULL graph at ``batch``: step, floor, nodes, µs per node, floor + nodes × empty_node_us."""
    r = view(record, Roofline)
    if batch not in r.batch_sizes:
        raise KeyError(f"batch {batch} is not in the record; it has {r.batch_sizes}")
    i = r.batch_sizes.index(batch)
    t, floor, n = r.median_us("graph")[i], r.roofline_us()[i], nodes_per_step(r) or 0
    return {"batch": batch, "step_us": t, "floor_us": floor, "nodes": n,
            "us_per_node": rk.ratio(t, n or None), "over_floor": rk.ratio(t, floor),
            "predicted_us": floor + n * empty_node_us}


def compile_rows(record: Any) -> list[dict]:
    """Per variant at the compiled sizes: µs, verdict vs the FULL graph, set-up and checks."""
    r = view(record, Roofline)
    rows = []
    for name in r.methods:
        v = r.variants.get(name)
        row: dict[str, Any] = {"variant": variant_label(name)}
        for b in r.compile_sizes or r.batch_sizes[:1]:
            t = row[f"batch {b} (µs)"] = _r(r.at(name, b))
            row[f"batch {b} vs FULL graph"] = ("" if name == "graph" or None in (
                t, r.at("graph", b)) else compare(record, name, "graph", b).word)
        if v is not None:
            row.update({"cache slots": v.max_batch, "set-up (s)": _r(v.setup_s, 2),
                        "KV cache (MiB)": _r(v.cache_bytes and v.cache_bytes / MIB),
                        "pool (MiB)": _r(v.pool_bytes and v.pool_bytes / MIB),
                        "GPU ops / step": v.gpu_ops, "CUDA graphs used": v.graphs_used,
                        "error": v.error})
        row["tokens = eager"] = 1.0 if name == "eager" else _r(
            r.checks.get(f"{name}_token_agreement"), 3)
        rows.append(row)
    return rows


def cache_copy(record: Any) -> dict | None:
    """``compile_full_cache`` against the small-cache compiled step, and ``copy_us``: a whole K
    or V buffer copied at each of the ``2 × layers`` cache writes; ``None`` without both."""
    r = view(record, Roofline)
    full, small = r.variants.get("compile_full_cache"), r.variants.get("compile_reduce_overhead")
    if full is None or small is None or not full.sizes or not full.cache_bytes:
        return None
    b = full.sizes[0]
    t_full, t_small = r.at("compile_full_cache", b), r.at("compile_reduce_overhead", b)
    if t_full is None or t_small is None:
        return None
    writes, buffer = 2 * int(r.config["n_layer"]), full.cache_bytes / 2
    return {"batch": b, "full_slots": full.max_batch, "small_slots": small.max_batch,
            "cache_mib": full.cache_bytes / MIB, "buffer_mib": buffer / MIB,
            "full_us": t_full, "small_us": t_small, "extra_us": t_full - t_small,
            "writes": writes, "copy_us": stepcost.floor_us(writes * buffer * 2, r.bandwidth_gbps)}


def multistep_rows(record: Any) -> list[dict]:
    """Per batch size: µs per step of each way, N-step gain (%), verdicts vs one-step graphs."""
    m = view(record, Multistep)
    rows = []
    for i, b in enumerate(m.batch_sizes):
        g = m.gain("multistep", "one_step_graphs")[i]
        rows.append({"batch": b, **{f"{k} (µs/step)": _r(m.median_us(k)[i]) for k in m.methods},
                     "N-step gain (%)": None if g is None else round(100 * (g - 1), 2),
                     **{f"{a} vs one_step_graphs": compare(record, a, "one_step_graphs", b,
                                                           default=MULTISTEP_INTERLEAVED).word
                        for a in ("multistep", "host_sync")}})
    return rows


#: each control of a multistep record (:data:`~labkit.measure.records.MULTISTEP_CONTROLS`), the
#: way it is compared with, and the one difference between them
MULTISTEP_CONTROL_PAIRS = {
    "one_step_recaptured": ("one_step_graphs", "a second capture of the same one-step graph"),
    "multistep_fixed_positions": ("multistep", "positions held still instead of advancing"),
    "multistep_own_pool": ("multistep", "captured first, alone in a pool of its own"),
}


def multistep_control_rows(record: Any) -> list[dict]:
    """Per batch size and control: µs per step of the control and of the way it differs from
    in one thing, their ratio and the verdict; empty for a record without controls."""
    m = view(record, Multistep)
    rows = []
    for control, (base, what) in MULTISTEP_CONTROL_PAIRS.items():
        if control not in m.times:
            continue
        for b in m.batch_sizes:
            c, o = m.at(control, b), m.at(base, b)
            rows.append({"model": m.preset, "batch": b, "control": control,
                         "differs from": base,
                         "in": what, "control (µs/step)": _r(c), "other (µs/step)": _r(o),
                         "ratio": None if c is None or not o else round(c / o, 3),
                         "verdict": compare(record, control, base, b,
                                            default=MULTISTEP_INTERLEAVED).word})
    return rows


def multistep_split_rows(record: Any) -> list[dict]:
    """Per batch size and graph way: the GPU's µs per step inside kernels and between them
    (first kernel's start to last kernel's end, less the kernel time), kernels per step;
    empty for a record without the split."""
    m = view(record, Multistep)
    rows = []
    for way, per_size in m.gpu_split.items():
        for b, d in zip(m.batch_sizes, per_size):
            rows.append({"model": m.preset, "batch": b, "way": way,
                         "in kernels (µs/step)": _r(d["kernel_us"]),
                         "between kernels (µs/step)": _r(d["span_us"] - d["kernel_us"]),
                         "kernels per step": _r(d["kernels"])})
    return rows


def multistep_cause(record: Any) -> dict[str, float | bool] | None:
    """What the controls and the split say about the N-step graph's gap (None without them):
    ``gap`` the largest N-step / one-step ratio less 1; ``control`` the largest |ratio - 1| of a
    control against the way it differs from in one thing; ``kernels`` the largest |ratio - 1|
    of the N-step graph's kernel time per step to the one-step graphs'; ``fewer_gaps``: whether
    the profiler sees less time between the N-step graph's kernels at every batch size."""
    m = view(record, Multistep)
    controls = [r["ratio"] for r in multistep_control_rows(record) if r["ratio"] is not None]
    split = m.gpu_split
    if not controls or "multistep" not in split or "one_step_graphs" not in split:
        return None
    many, one = split["multistep"], split["one_step_graphs"]
    pairs = [(m.at("multistep", b), m.at("one_step_graphs", b)) for b in m.batch_sizes]
    gaps = [a / b - 1 for a, b in pairs if a is not None and b]
    if not gaps:
        return None
    return {"gap": max(gaps), "control": max(abs(r - 1) for r in controls),
            "kernels": max(abs(a["kernel_us"] / b["kernel_us"] - 1) for a, b in zip(many, one)),
            "fewer_gaps": all(a["span_us"] - a["kernel_us"] < b["span_us"] - b["kernel_us"]
                              for a, b in zip(many, one))}


def triton_records(nb: Any, presets: Sequence[str], repeats: int) -> dict[str, Any]:
    """``triton_<preset>`` per preset: measured live (``repeats`` samples) on a GPU where the
    Triton kernels compile, else the recorded references (with the reason printed)."""
    why = triton_bench.uncompiled_reason() if nb.live else "no CUDA GPU here"
    if why is not None:
        print(f"The Triton column is shown from the recorded references: {why}.")
        found = {p: reference_or_none(nb, f"triton_{p}") for p in presets}
        return {p: r for p, r in found.items() if r is not None}
    return {p: record_or_reference(nb, f"triton_{p}", repeats=repeats) for p in presets}


def triton_kernel_rows(record: Any) -> list[dict]:
    """Per Triton kernel at the record's ``count_batch``: launches, GPU µs (eager, profiled),
    the bytes its plan must move (compulsory, summed over its roles) and the bandwidth that
    reaches, then ``"total"``."""
    rec = view(record, rk.Triton)
    plan = record.data.get("plan") or []
    rows: list[dict[str, Any]] = []
    for name, us in sorted(rec.op_us.get("triton", {}).items(), key=lambda kv: -kv[1]):
        roles = [r for r in plan if r["kernel"] == name]
        moved = sum(int(r["compulsory"]) for r in roles)
        rows.append({"kernel": name, "does": " / ".join(r["role"] for r in roles),
                     "launches": int(rec.ops["triton"].get(name, 0)), "µs": round(us, 1),
                     "µs per launch": round(us / max(1, rec.ops["triton"].get(name, 1)), 2),
                     "MB moved": round(moved / MB, 1),
                     "GB/s": round(moved / us / 1e3) if us else None})
    total_us = sum(float(r["µs"]) for r in rows)
    total_mb = sum(float(r["MB moved"]) for r in rows)
    return [*rows, {"kernel": "total", "does": "",
                    "launches": sum(int(r["launches"]) for r in rows),
                    "µs": round(total_us, 1), "µs per launch": None,
                    "MB moved": round(total_mb, 1),
                    "GB/s": round(total_mb * MB / total_us / 1e3) if total_us else None}]


# ---------------------------------------------------------------------- plots roofline
# Charts of notebook 12: step time against the floor, and N decode steps per graph.

#: colours of the step variants and the multi-step ways not in the suite's palette
COLORS = {"fused": "#ff7f0e", "compile_reduce_overhead": color("compile"),
          "compile_manual_graph": "#e377c2", "host_sync": color("eager"),
          "one_step_graphs": color("graph"), "multistep": "#2ca02c"}
MULTISTEP = {"host_sync": "one-step graph, tokens to the host and back each step",
             "one_step_graphs": "one-step graph, argmax fed back on the device",
             "multistep": "{n} steps in one graph",
             "one_step_recaptured": "one-step graph, captured a second time",
             "multistep_fixed_positions": "{n} steps in one graph, positions held still",
             "multistep_own_pool": "{n} steps in one graph, captured alone in its own pool"}


def floor_chart(record: Any, *, variants: Sequence[str] | None = None,
                subtitle: str | None = None):
    """Median step time per batch size, one line per variant, and the floor dashed (log–log)."""
    go = plotly_go()
    r = view(record, Roofline)
    variants = list(variants or r.methods)
    check_methods("roofline", variants, r.times, "variant")
    fig, colours = go.Figure(), series_colors(variants, {**METHOD_COLORS, **COLORS})
    for v in variants:
        pts = [(b, s) for b, s in zip(r.batch_sizes, r.times[v]) if s is not None]
        fig.add_trace(go.Scatter(x=[b for b, _ in pts], y=[s.median for _, s in pts],
                                 name=variant_label(v), mode="lines+markers",
                                 line=dict(color=colours[v]),
                                 error_y=stats_error_bars([s for _, s in pts])))
    fig.add_trace(go.Scatter(x=r.batch_sizes, y=r.roofline_us(), mode="lines",
                             name=f"floor ({r.bandwidth_gbps / 1000:.2f} TB/s copy bandwidth)",
                             line=dict(color="#444444", dash="dash")))
    return finish(fig, f"Decode step against its floor ({r.preset}, {r.config['n_layer']} layers,"
                  f" {r.context} positions per row)", "batch size", "µs per step (median)",
                  subtitle=subtitle, record=record,
                  log_x=True, log_y=True)


def multistep_chart(record: Any, *, subtitle: str | None = None):
    """µs per decode step per batch size for each way of running N steps."""
    m = view(record, Multistep)
    colours = series_colors(list(m.methods), {**METHOD_COLORS, **COLORS})
    fig = plotly_go().Figure([stats_bar(m.batch_sizes, m.times[k],
                                        MULTISTEP.get(k, k).format(n=m.n_steps), colours[k])
                              for k in m.methods])
    fig.update_layout(barmode="group")
    return finish(fig, f"{m.n_steps} decode steps: per-step time ({m.preset})", "batch size",
                  "µs per step (median)", subtitle=subtitle, record=record)
