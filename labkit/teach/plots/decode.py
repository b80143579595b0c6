"""Charts of ``decode_<preset>`` records: step time, tokens/s and speed-up versus batch size.

Inputs are records (a :class:`labkit.measure.results.Result` or its ``data`` dict); a Result's
provenance becomes the subtitle unless ``subtitle`` is given.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from labkit.measure.records import Decode, view
from labkit.teach.lessons import median, record_provenance
from labkit.teach.plots import color, label
from labkit.teach.plots.timing import finish, stats_error_bars

#: bar colours for comparing model presets (shades, since colour per method is taken)
PRESET_COLORS = {"small": "#6baed6", "gpt2": "#08519c", "char": "#9ecae1", "test": "#c6dbef"}
_EXTRA = ["#3182bd", "#bdd7e7", "#2171b5"]


def _preset_color(name: str, i: int) -> str:
    return PRESET_COLORS.get(name, _EXTRA[i % len(_EXTRA)])


def _methods(data: Decode, methods: Sequence[str] | None) -> list[str]:
    have = data.methods
    if methods is None:
        return have
    missing = [m for m in methods if m not in have]
    if missing:
        raise KeyError(f"the decode record has no method(s) {missing}; it has {have}")
    return list(methods)


def _title(data: Decode, what: str) -> str:
    cfg = data.config
    shape = (f" ({cfg['n_layer']} layers, d={cfg['d_model']})"
             if "n_layer" in cfg and "d_model" in cfg else "")
    return f"{what}: {data.preset}{shape}, {data.dtype}".rstrip(", ")


def step_time_chart(record: Any, *, methods: Sequence[str] | None = None,
                    subtitle: str | None = None, log_y: bool = False):
    """Median decode-step time per batch size, one bar per method (p10–p90 whiskers)."""
    import plotly.graph_objects as go

    data = view(record, Decode)
    cats = [str(b) for b in data.batch_sizes]
    fig = go.Figure()
    for m in _methods(data, methods):
        stats = data.times[m]
        fig.add_trace(go.Bar(x=cats, y=[median(s) for s in stats], name=label(m),
                             marker_color=color(m), error_y=stats_error_bars(stats),
                             texttemplate="%{y:,.0f}", textposition="auto",
                             insidetextanchor="middle"))
    fig.update_layout(barmode="group")
    sub = record_provenance(record) if subtitle is None else subtitle
    return finish(fig, _title(data, "Decode step time"), "batch size",
                  "µs per step (median)", subtitle=sub, log_y=log_y)


def tokens_per_s_chart(record: Any, *, methods: Sequence[str] | None = None,
                       subtitle: str | None = None):
    """Generated tokens per second per batch size (batch × steps/s), one bar per method."""
    import plotly.graph_objects as go

    data = view(record, Decode)
    cats = [str(b) for b in data.batch_sizes]
    fig = go.Figure()
    for m in _methods(data, methods):
        fig.add_trace(go.Bar(x=cats, y=data.tokens_per_s(m), name=label(m),
                             marker_color=color(m), texttemplate="%{y:,.0f}",
                             textposition="outside"))
    fig.update_layout(barmode="group")
    sub = record_provenance(record) if subtitle is None else subtitle
    return finish(fig, _title(data, "Decode throughput"), "batch size", "tokens / s",
                  subtitle=sub, log_y=True)


def speedup_chart(records: Any, *, method: str = "graph", subtitle: str | None = None):
    """Speed-up of ``method`` over eager per batch size; ``records`` is one decode record or
    a mapping ``{preset name: record}`` (one bar per preset). A dashed line marks 1× (eager)."""
    import plotly.graph_objects as go

    if isinstance(records, Mapping) and "times" not in records:
        named = dict(records)
    else:
        named = {view(records, Decode).preset: records}
    if not named:
        raise ValueError("no decode records given")
    fig = go.Figure()
    subs = []
    for i, (name, rec) in enumerate(named.items()):
        data = view(rec, Decode)
        if method not in data.methods or "eager" not in data.methods:
            raise KeyError(f"record {name!r} has no speed-up for method {method!r}; it has "
                           f"{sorted(data.methods) if 'eager' in data.methods else []}")
        fig.add_trace(go.Bar(x=[str(b) for b in data.batch_sizes],
                             y=data.speedup_vs_eager(method), name=name,
                             marker_color=_preset_color(name, i), texttemplate="%{y:.1f}×",
                             textposition="outside"))
        prov = record_provenance(rec)
        if prov and prov not in subs:
            subs.append(prov)
    fig.add_hline(y=1, line_dash="dash", line_color=color("eager"),
                  annotation_text="eager = 1×", annotation_position="bottom right")
    fig.update_layout(barmode="group")
    sub = "; ".join(subs) if subtitle is None else subtitle
    return finish(fig, f"Speed-up of {label(method)} over eager", "batch size",
                  "× faster than eager (median step time)", subtitle=sub)


def eager_step_chart(records: Mapping[str, Any], *, cpu_times: Mapping[int, Any] | None = None,
                     cpu_label: str = "CPU eager (this machine, live)",
                     subtitle: str | None = None):
    """Eager decode-step time per batch size for several presets' records, optionally beside
    live CPU timings ``{batch size: Stats}`` (grey, labelled as CPU: no kernel launches)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    subs = []
    cats: list[str] = []
    for i, (name, rec) in enumerate(records.items()):
        data = view(rec, Decode)
        stats = data.times["eager"]
        x = [str(b) for b in data.batch_sizes]
        cats += [c for c in x if c not in cats]
        gpu = (getattr(rec, "env", None) or {}).get("gpu_name") or "GPU"
        fig.add_trace(go.Bar(x=x, y=[median(s) for s in stats], name=f"{gpu} eager, {name}",
                             marker_color=_preset_color(name, i), error_y=stats_error_bars(stats),
                             texttemplate="%{y:,.0f}", textposition="auto",
                             insidetextanchor="middle"))
        prov = record_provenance(rec)
        if prov and prov not in subs:
            subs.append(prov)
    if cpu_times:
        stats = list(cpu_times.values())
        x = [str(b) for b in cpu_times]
        cats += [c for c in x if c not in cats]
        fig.add_trace(go.Bar(x=x, y=[median(s) for s in stats], name=cpu_label,
                             marker_color=color("cpu"), error_y=stats_error_bars(stats),
                             texttemplate="%{y:,.0f}", textposition="auto",
                             insidetextanchor="middle"))
    fig.update_layout(barmode="group")
    fig.update_xaxes(type="category", categoryorder="array",
                     categoryarray=sorted(cats, key=int))
    sub = "; ".join(subs) if subtitle is None else subtitle
    return finish(fig, "Eager decode step time", "batch size", "µs per step (median)",
                  subtitle=sub, log_y=True)
