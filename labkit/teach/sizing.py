"""Notebooks 05-06: the padding dispatcher's cost, capture sizes, and their charts.

One module per notebook topic: its lessons (pure: records and numbers to rows) and its
charts (plotly figures from records).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import math
from typing import Any

from labkit.measure.records import Bench, Dispatcher, DispatcherOverhead, PoolMemory, view
from labkit.sizes import (
    expected_padding, expected_step_cost, Interpolated, isotonic, linear_fit, LinearFit, Pool,
    set_memory,
)
from labkit.teach.plots import base_layout, color, COLORS, plotly_go, stats_error_bars
from labkit.teach.verdicts import compare_stats


# ---------------------------------------------------------------------- lessons sizing
# Notebooks 05 and 06: cost models and rows from records, capture-size lists compared.

MiB = 2**20


def memory_model_from_record(pool_data: Mapping) -> LinearFit:
    """``bytes = a + b * size`` fitted to a record's private pools, never below the smallest."""
    per = view(pool_data, PoolMemory).private.per_size_bytes
    if not per:
        raise ValueError("the record has no private pool per size (data.private."
                         "per_size_bytes); pass a 'pool_memory_<preset>' record")
    xs, ys = zip(*sorted((int(k), float(v)) for k, v in per.items()))
    return linear_fit(xs, ys, floor=min(ys))


def shared_residual_from_record(pool_data: Mapping) -> float:
    """Bytes each further graph adds to a shared pool captured largest first (>= 0)."""
    pool = view(pool_data, PoolMemory)
    n = len(pool.sizes)
    extra = pool.shared_largest_first.total_bytes - pool.largest_private_bytes
    return max(0.0, extra / (n - 1)) if n > 1 else 0.0


def time_model(disp_data: Mapping, method: str = "graph_exact") -> Interpolated:
    """``size -> µs`` (median) of ``method`` in a dispatcher record, made monotone, interpolated."""
    disp = view(disp_data, Dispatcher)
    if method not in disp.times:
        raise ValueError(f"the record has no times[{method!r}]; pass a 'dispatcher_<preset>' "
                         f"record and one of {sorted(disp.times)}")
    pts = [(b, t.median) for b, t in zip(disp.batch_sizes, disp.times[method]) if t is not None]
    return Interpolated(tuple(b for b, _ in pts), tuple(isotonic([y for _, y in pts])))


def dispatcher_rows(disp_data: Mapping) -> list[dict]:
    """Per batch size: padded size, median µs of eager, exact graph, dispatcher (``—``: none)."""
    disp = view(disp_data, Dispatcher)
    cols = [disp.median_us(m) for m in ("eager", "graph_exact", "dispatcher")]
    return [{"batch size": b, "padded to": p or "eager",
             **{k: "—" if v is None else round(v, 1) for k, v in
                zip(("eager (µs)", "exact graph (µs)", "dispatcher (µs)"), vals)}}
            for b, p, *vals in zip(disp.batch_sizes, disp.padded_to, *cols)]


def overhead_rows(bench_data: Mapping) -> list[dict]:
    """Per model and batch of a ``bench`` record: bare replay vs dispatcher step (medians)."""
    return [{"model": r.model, "batch": r.batch, "bare replay (µs)": round(r.graph_us, 1),
             "dispatcher (µs)": round(r.dispatcher_us, 1),
             "extra (µs)": round(r.dispatcher_us - r.graph_us, 1),
             "dispatcher / replay": round(r.dispatcher_over_graph, 3)}
            for r in view(bench_data, Bench).rows if r.graph_us and r.dispatcher_us]


#: the ways of a ``dispatcher_overhead`` record between a bare replay and a dispatcher step,
#: with the column that shows what each adds over the bare replay
OVERHEAD_PARTS = (("copy_replay", "copy in, then replay: + µs"),
                  ("stage_replay", "host inputs staged, then replay: + µs"),
                  ("step_device", "dispatcher, device metadata: + µs"))


def overhead_record_rows(record: object) -> list[dict]:
    """Per model and batch of a ``dispatcher_overhead`` record: a dispatcher step as a server
    calls it (``step_host``, metadata on the host) over a bare replay of its own graph (medians;
    the record samples every way in turn), the verdict of
    :func:`~labkit.teach.verdicts.compare_stats`, and what each way in between adds."""
    rows = []
    for run in view(record, DispatcherOverhead).runs:
        for i, b in enumerate(run.batch_sizes):
            rep, step = run.times["replay"][i], run.times["step_host"][i]
            if rep is None or step is None:
                continue
            row = {"model": run.preset, "batch": b, "bare replay (µs)": round(rep.median, 1),
                   "dispatcher (µs)": round(step.median, 1),
                   "extra (µs)": round(step.median - rep.median, 1),
                   "dispatcher / replay": round(step.median / rep.median, 3),
                   "dispatcher vs replay": compare_stats(step, rep, interleaved=True).word}
            for way, column in OVERHEAD_PARTS:
                s = run.times[way][i]
                if s is not None:
                    row[column] = round(s.median - rep.median, 1)
            rows.append(row)
    return rows


def short_list(sizes: Sequence[int], head: int = 6) -> str:
    """A size list for a table cell: the first ``head`` sizes, ``…`` and the last one."""
    s = sorted(sizes)
    return ", ".join(map(str, s)) if len(s) <= head + 1 else \
        ", ".join(map(str, s[:head])) + f", … {s[-1]}"


def size_set_rows(dist, named: Mapping[str, Sequence[int]], *,
                  step_time: Callable[[int], float] | None = None,
                  eager_time: Callable[[int], float] | None = None,
                  memory: Callable[[int], float] | Mapping[int, float] | None = None,
                  pool: Pool = "shared", residual_per_graph: float = 0.0) -> list[dict]:
    """Named capture-size lists on a distribution: hit rate, padding, step µs and graph MiB."""
    rows = []
    for name, sizes in named.items():
        rep = expected_padding(sizes, dist)
        row = {"sizes": name, "k": len(rep.sizes), "list": short_list(rep.sizes),
               "hit rate (%)": round(100 * rep.graph_hit_rate, 1),
               "padded rows / step": round(rep.expected_padded_rows, 2),
               "waste (%)": round(100 * rep.waste_fraction, 1)}
        if step_time is not None:
            row["expected step (µs)"] = round(
                expected_step_cost(rep.sizes, dist, step_time, eager_time), 1)
        if memory is not None:
            row["graph memory (MiB)"] = round(
                set_memory(rep.sizes, memory, pool, residual_per_graph) / MiB, 2)
        rows.append(row)
    return rows


# ---------------------------------------------------------------------- plots dispatch
# Charts of the padding dispatcher (notebook 05): step times, padding table, hit rate, waste.

_LINES = {"eager": ("eager", "eager"),
          "graph_exact": ("graph", "a graph captured at exactly this size (a capture of its own)"),
          "dispatcher": ("dispatcher", "padding dispatcher")}


def step_times(data: Any, *, subtitle: str = ""):
    """Median step time vs batch size per method, captured sizes dotted, eager fallback shaded."""
    go = plotly_go()
    disp, fig = view(data, Dispatcher), go.Figure()
    bss = list(disp.batch_sizes)
    for key, (col, name) in _LINES.items():
        pts = [(b, t) for b, t in zip(bss, disp.times.get(key, [])) if t is not None]
        if not pts:
            continue
        exact = key == "graph_exact"
        fig.add_trace(go.Scatter(x=[b for b, _ in pts], y=[t.median for _, t in pts], name=name,
                                 error_y=stats_error_bars([t for _, t in pts]),
                                 mode="markers" if exact else "lines+markers",
                                 marker=dict(size=9 if exact else 6, color=color(col)),
                                 line=dict(color=color(col))))
    for c in disp.capture_sizes:
        fig.add_vline(x=c, line_dash="dot", line_color="#bbbbbb", line_width=1)
    top, above = max(disp.capture_sizes), [b for b in bss if b > max(disp.capture_sizes)]
    if above:
        fig.add_vrect(x0=top, x1=max(above) * 1.15, fillcolor=COLORS["eager"], opacity=0.07,
                      line_width=0)
        # annotations on a log axis take log10 coordinates (shapes take data values)
        fig.add_annotation(x=math.log10(top), y=1, xref="x", yref="paper", showarrow=False,
                           text="eager fallback →", xanchor="right", yanchor="top",
                           font=dict(color=COLORS["eager"]))
    base_layout(fig, "Decode step time: eager vs graph vs dispatcher",
                "batch size (dotted: captured sizes)", "step time (µs)", subtitle=subtitle,
                log_x=True)
    ticks = [b for i, b in enumerate(bss) if i == 0 or b / bss[i - 1] > 1.12]
    fig.update_xaxes(tickvals=ticks, ticktext=[str(b) for b in ticks],
                     range=[math.log10(min(bss) * 0.8), math.log10(max(bss) * 1.15)])
    return fig.update_layout(margin=dict(t=110))


def padding_table_chart(table: Sequence[int], *, title: str = "Padding table",
                        subtitle: str = ""):
    """Real and padded rows per batch size of a padding table (``0``: drawn as eager)."""
    go = plotly_go()
    bs = list(range(1, len(table)))
    if not bs:
        raise ValueError("empty padding table; build it with build_padding_table(sizes, max_bs)")
    graph_b, eager_b = [b for b in bs if table[b]], [b for b in bs if not table[b]]
    fig = go.Figure([
        go.Bar(x=graph_b, y=graph_b, name="real rows (graph)", marker_color=COLORS["graph"]),
        go.Bar(x=graph_b, y=[table[b] - b for b in graph_b], name="padded rows",
               marker_color="#c7c7c7", customdata=[table[b] for b in graph_b],
               hovertemplate="batch %{x} runs graph %{customdata}: %{y} padded rows"
                             "<extra></extra>")])
    if eager_b:
        fig.add_trace(go.Bar(x=eager_b, y=eager_b, name="eager (no graph large enough)",
                             marker_color=COLORS["eager"]))
    fig.update_layout(barmode="stack", bargap=0.05, margin=dict(t=110))
    return base_layout(fig, title, "batch size", "rows computed", subtitle=subtitle)


def hit_waste(results: Mapping[str, Any], *, title: str = "", subtitle: str = ""):
    """Hit rate and waste (%) per size choice (``StepCounters.to_dict()`` or PaddingReport)."""
    go = plotly_go()
    vals = {n: (r["hit_rate"], r["waste"]) if isinstance(r, Mapping) else
            (r.graph_hit_rate, r.waste_fraction) for n, r in results.items()}
    fig = go.Figure([go.Bar(x=list(vals), y=[100 * v[i] for v in vals.values()], name=name,
                            marker_color=col, texttemplate="%{y:.1f}%", textposition="outside")
                     for i, (col, name) in enumerate(((COLORS["graph"], "steps served by a graph"),
                                                      ("#7f7f7f", "padded rows / rows computed")))])
    fig.update_layout(barmode="group", margin=dict(t=110))
    fig.update_yaxes(range=[0, 112])
    return base_layout(fig, title or "Hit rate and padding waste", "capture sizes", "%",
                       subtitle=subtitle)


# ---------------------------------------------------------------------- plots sizes
# Charts for choosing capture sizes (notebook 06): a trace's sizes, the Pareto front.

SET_COLORS = ["#ff7f0e", "#2ca02c", "#9467bd", "#1f77b4", "#8c564b", "#e377c2", "#17becf"]


def trace_histogram(dist: Mapping[int, float], capture_sets: Mapping[str, Sequence[int]]
                    | None = None, *, title: str = "Decode batch sizes in the trace",
                    subtitle: str = "", max_x: int | None = None):
    """Share of steps per batch size over a row of ticks per named capture-size list."""
    go = plotly_go()
    from plotly.subplots import make_subplots

    if not dist:
        raise ValueError("empty distribution; pass labkit.sizes.to_distribution(trace)")
    sets, xs = dict(capture_sets or {}), sorted(dist)
    hi = max_x or max(xs + [max(s) for s in sets.values() if s])
    rows = 2 if sets else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        row_heights=[0.7, 0.3] if sets else [1.0])
    fig.add_trace(go.Bar(x=xs, y=[100 * dist[x] for x in xs], marker_color=COLORS["cpu"],
                         showlegend=False,
                         hovertemplate="batch %{x}: %{y:.2f}% of steps<extra></extra>"), 1, 1)
    for i, (name, sizes) in enumerate(sets.items()):
        shown = [s for s in sorted(sizes) if s <= hi]
        fig.add_trace(go.Scatter(x=shown, y=[name] * len(shown), mode="markers", showlegend=False,
                                 marker=dict(symbol="line-ns-open", size=14, line_width=2,
                                             color=SET_COLORS[i % len(SET_COLORS)]),
                                 hovertemplate=f"{name}: capture size %{{x}}<extra></extra>"),
                      2, 1)
    base_layout(fig, title, "", "% of decode steps", subtitle=subtitle)
    fig.update_layout(bargap=0.1, height=420 + 30 * len(sets))
    fig.update_xaxes(range=[0, hi + 1])
    fig.update_xaxes(title_text="batch size (rows per decode step)", row=rows, col=1)
    if sets:
        fig.update_yaxes(autorange="reversed", row=2, col=1)
    return fig


def pareto_chart(front: Sequence, *, chosen=None, named: Mapping[str, tuple[float, float]]
                 | None = None, budget: float | None = None,
                 title: str = "Graph memory vs expected decode step time",
                 subtitle: str = ""):
    """The Pareto front as a step line, ``chosen`` a star, ``named`` points, ``budget`` a line."""
    go = plotly_go()
    if not front:
        raise ValueError("empty Pareto front; compute it with labkit.sizes.pareto_front")
    fig = go.Figure(go.Scatter(
        x=[p.memory / MiB for p in front], y=[p.expected_cost for p in front],
        mode="lines+markers", line_shape="hv", name="Pareto front (optimal sets)",
        line=dict(color=COLORS["graph"]), marker=dict(size=7),
        text=[f"k={p.k}: {list(p.sizes)}" for p in front],
        hovertemplate="%{text}<br>%{x:.2f} MiB, %{y:.1f} µs<extra></extra>"))
    for i, (name, (mem, cost)) in enumerate((named or {}).items()):
        fig.add_trace(go.Scatter(x=[mem / MiB], y=[cost], mode="markers+text", name=name,
                                 text=[name], textposition="top center",
                                 marker=dict(size=11, symbol="diamond",
                                             color=SET_COLORS[i % len(SET_COLORS)])))
    if chosen is not None:
        fig.add_trace(go.Scatter(x=[chosen.memory / MiB], y=[chosen.expected_cost],
                                 mode="markers", name=f"chosen: {list(chosen.sizes)}",
                                 marker=dict(size=20, symbol="star", color=COLORS["dispatcher"],
                                             line=dict(color="black", width=1))))
    if budget is not None:
        fig.add_vline(x=budget / MiB, line_dash="dash", line_color="#444",
                      annotation_text="memory budget", annotation_position="bottom right")
    fig.update_layout(margin=dict(t=110))
    return base_layout(fig, title, "graph memory (MiB)", "expected step time (µs)",
                       subtitle=subtitle)
