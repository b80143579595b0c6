"""Charts of ``compile_<preset>`` records: manual CUDA graphs vs ``torch.compile(mode=
"reduce-overhead")`` (CUDA Graph Trees) — step time, set-up cost, pool memory, kernels per step.

Inputs are records (a :class:`labkit.measure.results.Result` or its ``data`` dict); a Result's
provenance becomes the subtitle unless ``subtitle`` is given. :func:`summary` holds the
numbers the charts show, for tables and exercises.
"""

from __future__ import annotations

from typing import Any, Sequence

from labkit.measure import records as rk
from labkit.measure.records import Compile, view
from labkit.teach.lessons import record_provenance
from labkit.teach.plots import color, label
from labkit.teach.plots.timing import finish, stats_error_bars

METHODS = ("eager", "graph", "dispatcher", "compile")
MIB = 2 ** 20


def _sub(record: Any, subtitle: str | None) -> str:
    return record_provenance(record) if subtitle is None else subtitle


def _mib(b: Any) -> float | None:
    return None if b is None else float(b) / MIB


def summary(record: Any) -> dict:
    """The record's headline numbers: median step time (µs) per method and batch size, the
    speed-up of every method over eager, set-up seconds, pool MiB and kernels per step.
    A kernel count of -1 or None in the record (not measured) becomes None."""
    d = view(record, Compile)
    sizes = list(d.batch_sizes)
    methods = [m for m in METHODS if m in d.times] + [m for m in d.methods if m not in METHODS]
    step = {m: d.median_us(m) for m in methods}
    eager = step.get("eager")
    speedup = ({m: [rk.speedup(e, t) if e and t else None for e, t in zip(eager, ts)]
                for m, ts in step.items()} if eager else {})
    kernels = {k: (None if v is None or v < 0 else v) for k, v in d.kernels_per_step.items()}
    return {"batch_sizes": sizes, "step_us": step, "speedup_vs_eager": speedup,
            "compile_s": d.compile_s, "capture_s": d.capture_s,
            "graph_pool_mib": _mib(d.graph_pool_bytes),
            "compile_pool_mib": _mib(d.compile_pool_bytes),
            "kernels_per_step": kernels, "checks": d.checks}


def summary_rows(record: Any) -> list[dict]:
    """One table row per method and batch size: median µs and × over eager."""
    s = summary(record)
    rows = []
    for m, ts in s["step_us"].items():
        for i, b in enumerate(s["batch_sizes"]):
            sp = s["speedup_vs_eager"].get(m, [None] * len(ts))[i]
            rows.append({"method": label(m), "batch": b,
                         "step time (µs, median)": None if ts[i] is None else round(ts[i], 1),
                         "× vs eager": None if sp is None else round(sp, 2)})
    return rows


def step_time_bars(record: Any, *, methods: Sequence[str] | None = None,
                   subtitle: str | None = None, log_y: bool = False):
    """Median decode-step time per batch size, one bar per method (p10–p90 whiskers), each bar
    labelled with its speed-up over eager."""
    import plotly.graph_objects as go

    d = view(record, Compile)
    s = summary(d)
    methods = list(methods or s["step_us"])
    missing = [m for m in methods if m not in d.times]
    if missing:
        raise KeyError(f"the compile record has no method(s) {missing}; it has {d.methods}")
    cats = [str(b) for b in s["batch_sizes"]]
    fig = go.Figure()
    for m in methods:
        sp = s["speedup_vs_eager"].get(m) or [None] * len(cats)
        text = [f"{t:,.0f} µs" + (f"<br>{x:.1f}×" if x and m != "eager" else "")
                if t is not None else "" for t, x in zip(s["step_us"][m], sp)]
        fig.add_trace(go.Bar(x=cats, y=s["step_us"][m], name=label(m), marker_color=color(m),
                             error_y=stats_error_bars(d.times[m]), text=text,
                             textposition="outside"))
    fig.update_layout(barmode="group")
    return finish(fig, f"Decode step: manual graphs vs torch.compile ({d.preset})",
                  "batch size", "µs per step (median)", subtitle=_sub(record, subtitle),
                  log_y=log_y)


def setup_cost_bars(record: Any, *, subtitle: str | None = None):
    """Seconds before the first fast step: manual capture (all sizes) vs compile + record."""
    import plotly.graph_objects as go

    s = summary(record)
    names = ["manual capture<br>(all sizes)", "torch.compile<br>(compile + record)"]
    vals = [s["capture_s"], s["compile_s"]]
    fig = go.Figure(go.Bar(x=names, y=vals, marker_color=[color("graph"), color("compile")],
                           texttemplate="%{y:.2f} s", textposition="outside", showlegend=False))
    n = len(s["batch_sizes"])
    return finish(fig, f"Set-up cost for {n} batch size{'s' if n != 1 else ''}", "",
                  "seconds (log scale)", subtitle=_sub(record, subtitle), log_y=True)


def memory_bars(record: Any, *, subtitle: str | None = None):
    """Graph-pool memory: labkit's shared pool vs the pool(s) CUDA Graph Trees created.
    A figure the record lacks is drawn as an empty bar marked *not measured*."""
    import plotly.graph_objects as go

    s = summary(record)
    names = ["manual graphs<br>(one shared pool)", "torch.compile<br>(graph trees pool)"]
    vals = [s["graph_pool_mib"], s["compile_pool_mib"]]
    text = ["not measured" if v is None else f"{v:.1f} MiB" for v in vals]
    fig = go.Figure(go.Bar(x=names, y=[v or 0 for v in vals], text=text, textposition="outside",
                           marker_color=[color("graph"), color("compile")], showlegend=False))
    return finish(fig, "Memory held by the graphs' pools", "", "MiB",
                  subtitle=_sub(record, subtitle))


def kernels_bars(record: Any, *, subtitle: str | None = None):
    """GPU operations per decode step: eager (what a manual graph replays, one node each) vs
    the compiled step (what fusion leaves for its graph)."""
    import plotly.graph_objects as go

    s = summary(record)
    k = s["kernels_per_step"]
    names = ["eager = manual graph<br>(one node per kernel)", "torch.compile<br>(fused kernels)"]
    vals = [k.get("eager"), k.get("compile")]
    text = ["not measured" if v is None else f"{v}" for v in vals]
    fig = go.Figure(go.Bar(x=names, y=[v or 0 for v in vals], text=text, textposition="outside",
                           marker_color=[color("graph"), color("compile")], showlegend=False))
    return finish(fig, "GPU operations per decode step (batch 1)", "", "GPU operations per step",
                  subtitle=_sub(record, subtitle))


def break_even_steps(record: Any, batch: int) -> float:
    """Decode steps after which torch.compile's extra set-up time (compile − capture) is paid
    back by its per-step saving over the manual graph at ``batch``; ``inf`` when the compiled
    step is not faster, ``0.0`` when compiling was not slower to set up."""
    s = summary(record)
    if batch not in s["batch_sizes"]:
        raise ValueError(f"batch {batch} was not measured; the record has {s['batch_sizes']}")
    i = s["batch_sizes"].index(batch)
    extra_s = float(s["compile_s"]) - float(s["capture_s"])
    saving_s = (s["step_us"]["graph"][i] - s["step_us"]["compile"][i]) * 1e-6
    if extra_s <= 0:
        return 0.0
    if saving_s <= 0:
        return float("inf")
    return extra_s / saving_s


def total_time_chart(record: Any, batch: int, max_steps: int = 10 ** 6, *,
                     subtitle: str | None = None):
    """Wall time to serve ``n`` decode steps at ``batch``, set-up included: eager (no set-up),
    manual graphs (capture first), torch.compile (compile + record first); log axes."""
    import plotly.graph_objects as go

    s = summary(record)
    if batch not in s["batch_sizes"]:
        raise ValueError(f"batch {batch} was not measured; the record has {s['batch_sizes']}")
    if max_steps < 10:
        raise ValueError(f"max_steps must be at least 10, got {max_steps}")
    i = s["batch_sizes"].index(batch)
    steps, n = [], 1
    while n <= max_steps:
        steps += [n, n * 2, n * 5]
        n *= 10
    steps = [k for k in steps if k <= max_steps]
    setup = {"eager": 0.0, "graph": float(s["capture_s"]), "compile": float(s["compile_s"])}
    fig = go.Figure()
    for m in ("eager", "graph", "compile"):
        if m not in s["step_us"]:
            continue
        per = s["step_us"][m][i] * 1e-6
        fig.add_trace(go.Scatter(x=steps, y=[setup[m] + k * per for k in steps], name=label(m),
                                 mode="lines", line=dict(color=color(m))))
    be = break_even_steps(record, batch)
    if 0 < be < float("inf") and be <= max_steps:
        fig.add_vline(x=be, line_dash="dot", line_color=color("compile"),
                      annotation_text=f"compile pays off after {be:,.0f} steps")
    return finish(fig, f"Time to serve n steps at batch {batch}, set-up included", "decode steps",
                  "seconds", subtitle=_sub(record, subtitle), log_x=True, log_y=True)
