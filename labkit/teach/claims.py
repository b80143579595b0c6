"""Five claims of the seed articles about CUDA graphs in vLLM (notebook 09), checked on records."""

from __future__ import annotations

from dataclasses import fields
from typing import Any
from collections.abc import Callable, Mapping, Sequence

from labkit.measure import records as rk
from labkit.measure import recorder
from labkit.measure.records import Decode, LaunchOverhead, Pitfalls, PoolMemory, view
from labkit.measure.results import default_run_dir, load_result
from labkit.teach.notebook import measure_or_reference
from labkit.teach.plots import color, finish, plotly_go, provenances, stats_bar
from labkit.teach.verdicts import Assessment, Claim, compare_stats

#: the article's figure for "replay is 5–8x faster than eager"
CLAIMED_SPEEDUP = (5.0, 8.0)
MIB = 2 ** 20
#: vLLM's CUDA-graph settings as read from its source (vllm/engine/arg_utils.py,
#: vllm/config/compilation.py); the names the article gives
VLLM_CUDAGRAPH_NAMES = ("enforce_eager", "compilation_config", "cudagraph_mode",
                        "cudagraph_capture_sizes", "max_cudagraph_capture_size")
ARTICLE_NAMES = ("enable_cuda_graph", "cuda_graph_batch_sizes", "graph_pool_size")


# ---------------------------------------------------------------------------- the five claims


def check_replay_speedup(records: Mapping[str, Any]) -> Assessment:
    """Graph replay vs eager (sampled interleaved) per decode record and batch size."""
    lo, hi = CLAIMED_SPEEDUP
    per: dict[str, dict[str, Any]] = {}
    words: list[str] = []
    for name in sorted(n for n in records if n.startswith("decode_")):
        d = view(records[name], Decode)
        if not {"eager", "graph"} <= set(d.methods):
            continue
        e, g = d.times["eager"], d.times["graph"]
        w = [compare_stats(gs, es, interleaved=True).word for gs, es in zip(g, e)]
        words += w
        per[name] = {"batch_sizes": list(d.batch_sizes), "words": w,
                     "speedup": [float(s) for s in d.speedup_vs_eager("graph")],
                     "eager_us": [s.median for s in e], "graph_us": [s.median for s in g],
                     "eager_us_per_kernel": [s.median / d.kernels_per_step for s in e],
                     "kernels_per_step": d.kernels_per_step}
    if not per:
        raise KeyError("no decode record with eager and graph times")
    values = [s for p in per.values() for s in p["speedup"]]
    lo_rec = records.get("launch_overhead")
    host = view(lo_rec, LaunchOverhead).host_per_launch if lo_rec is not None else None
    ev = {"claimed": [lo, hi], "min": min(values), "max": max(values), "n_points": len(values),
          "n_inside_claim": sum(lo <= s <= hi for s in values), "per_record": per,
          "host_us_per_launch": None if host is None else host.median}
    untested = [w for w in words if w.startswith("untested")]
    if untested:
        return Assessment(untested[0], ev)
    if any(w != "a lower" for w in words):
        return Assessment("false", ev)
    return Assessment("holds" if ev["n_inside_claim"] == len(values) else "depends", ev)


def _pool_bytes(name: str, d: PoolMemory) -> dict:
    per = d.private.per_size_bytes
    return {"record": name, "n_graphs": len(d.sizes), "sum_private": d.private.total_bytes,
            "largest_private": d.largest_private_bytes,
            "largest_first": d.shared_largest_first.total_bytes,
            "smallest_first": d.shared_smallest_first.total_bytes,
            "smallest_private": min(per.values()) if per else None,
            "n_at_smallest": sum(v == min(per.values()) for v in per.values()),
            "largest_first_after_each": [d.shared_largest_first.growth_bytes[b] for b in
                                         sorted(d.sizes, reverse=True)],
            "smallest_first_after_each": [d.shared_smallest_first.growth_bytes[b] for b in
                                          sorted(d.sizes)]}


def _pools(records: Mapping[str, Any]) -> list[dict]:
    out = [_pool_bytes(n, view(r, PoolMemory)) for n, r in sorted(records.items())
           if n.startswith("pool_memory_") and r is not None]
    if not out:
        raise KeyError("no pool_memory record")
    return out


def check_shared_pool_max(records: Mapping[str, Any]) -> Assessment:
    """One shared pool (both orders) vs the largest private pool and their sum, in bytes:
    ``holds`` at exactly the largest, ``partly`` below the sum, ``false`` at it or above."""
    per = _pools(records)
    ev = {"per_record": per}
    tested = [p for p in per if p["sum_private"] > p["largest_private"]]
    if not tested:
        return Assessment("untested", ev)  # one graph: max and sum are the same number
    shared = [max(p["largest_first"], p["smallest_first"]) for p in tested]
    if any(s >= p["sum_private"] for s, p in zip(shared, tested)):
        return Assessment("false", ev)
    exact = all(s == p["largest_private"] for s, p in zip(shared, tested))
    return Assessment("holds" if exact else "partly", ev)


def check_largest_first(records: Mapping[str, Any]) -> Assessment:
    """"Capture the largest first so the pool is big enough": ``holds`` if smallest first
    ends larger, ``false`` if smaller, ``partly`` if the same (the pool grows at capture)."""
    per = _pools(records)
    ev = {"per_record": per}
    sf = [p["smallest_first"] for p in per]
    lf = [p["largest_first"] for p in per]
    if any(s < lf_ for s, lf_ in zip(sf, lf)):
        return Assessment("false", ev)
    return Assessment("holds" if any(s > lf_ for s, lf_ in zip(sf, lf)) else "partly", ev)


def check_offsets_not_addresses(records: Mapping[str, Any]) -> Assessment:
    """Graphs replay into the same absolute device addresses (the ``pitfalls`` record)."""
    d = view(records["pitfalls"], Pitfalls)
    addr = d.address_demo
    if not addr or "error" in addr:
        return Assessment("untested", {"address_demo": addr})
    a = addr["graphs"][0]
    seg = a.get("output_segment") or {}
    ev = {"output_ptr": a["output_ptr"], "replays": len(addr["replay_output_ptrs"]),
          "identical_across_replays": bool(addr["identical_across_replays"]),
          "segment_base": seg.get("segment_base"), "offset_in_segment":
          seg.get("offset_in_segment"), "absolute": bool(addr.get("absolute")),
          "pointer_in_kernel_args": bool((addr.get("kernel_args") or {}).get("output_ptr_found"))}
    if not ev["identical_across_replays"]:
        return Assessment("holds", ev)
    return Assessment("false" if ev["absolute"] or ev["pointer_in_kernel_args"] else "partly",
                      ev)


def vllm_option_names() -> tuple[set[str], str]:
    """vLLM's engine and compilation-config names (installed, else as read) and their source."""
    try:
        from vllm.config import CompilationConfig  # type: ignore
        from vllm.engine.arg_utils import EngineArgs  # type: ignore
    except Exception:
        return set(VLLM_CUDAGRAPH_NAMES), "vLLM source"
    return {f.name for c in (EngineArgs, CompilationConfig) for f in fields(c)}, "installed vllm"


def check_engine_args(records: Mapping[str, Any]) -> Assessment:
    """Do the argument names the article gives exist in vLLM?"""
    real, where = vllm_option_names()
    exist = [n for n in ARTICLE_NAMES if n in real]
    return Assessment("false" if not exist else "partly" if len(exist) < len(ARTICLE_NAMES)
                      else "holds", {"exist_in_vllm": exist, "checked_against": where})


# ---------------------------------------------------------------------------- the lists


CLAIMS: tuple[Claim, ...] = (
    Claim("replay_5_8x", "Replaying a CUDA graph makes decode 5-8x faster than eager.",
          "decode step time, eager vs graph replay, per model and batch size; the host's "
          "cost per launch", ("decode_small", "decode_gpt2", "launch_overhead"),
          check_replay_speedup, any_of=True, quote="5–8× faster"),
    Claim("pool_max_not_sum", "Sharing one memory pool makes graph memory the max of the "
          "graphs instead of their sum.", "pool bytes: private pools vs one shared pool",
          ("pool_memory_small", "pool_memory_gpt2"), check_shared_pool_max, any_of=True,
          quote="the max, not the sum"),
    Claim("largest_first_sizes_pool", "Capture the largest batch size first so that the pool "
          "is big enough for the others.", "pool bytes after each capture, both orders",
          ("pool_memory_small", "pool_memory_gpt2"), check_largest_first, any_of=True,
          quote="the pool big enough"),
    Claim("pool_offsets", "The pool records offsets, not absolute addresses, so graphs can "
          "be moved.", "a graph's output address over replays; its allocator segment",
          ("pitfalls",), check_offsets_not_addresses, quote="records offsets, not addresses"),
    Claim("engine_args", "vLLM's CUDA graphs are configured with enable_cuda_graph, "
          "cuda_graph_batch_sizes and graph_pool_size.", "vLLM's engine arguments", (),
          check_engine_args, quote="enable_cuda_graph, cuda_graph_batch_sizes, graph_pool_size"),
)


def needed_records(claims: Sequence[Claim] = CLAIMS) -> list[str]:
    """Every record name the claims are checked against, in order."""
    return list(dict.fromkeys(r for c in claims for r in c.records))


def evaluate(c: Claim, records: Mapping[str, Any]) -> dict:
    """One claim's check on ``records``: its fields, ``verdict`` and ``evidence``."""
    present = {k: v for k, v in records.items() if v is not None}
    missing = [r for r in c.records if r not in present]
    base = {"id": c.id, "claim": c.claim, "quote": c.quote, "measurement": c.measurement,
            "records": list(c.records)}
    if c.records and (len(missing) == len(c.records) if c.any_of else missing):
        return {**base, "verdict": "untested (not recorded)", "evidence": {"missing": missing}}
    try:
        a = c.check(present)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        return {**base, "verdict": "untested", "evidence": {"error": repr(exc)}}
    return {**base, "verdict": a.verdict, "evidence": a.evidence}


def evaluate_all(records: Mapping[str, Any], claims: Sequence[Claim] = CLAIMS) -> list[dict]:
    return [evaluate(c, records) for c in claims]  # one :func:`evaluate` dict per claim


def pool_record_from_mib(private_mib: Mapping[int, float], largest_first_mib: Sequence[float],
                         smallest_first_mib: Sequence[float], preset: str = "synthetic") -> dict:
    """A ``pool_memory_<preset>``-shaped record from MiB figures (shared: after each capture)."""
    sizes = sorted(int(b) for b in private_mib)
    if len(largest_first_mib) != len(sizes) or len(smallest_first_mib) != len(sizes):
        raise ValueError(f"give one pool size per capture: {len(sizes)} sizes, "
                         f"{len(largest_first_mib)} and {len(smallest_first_mib)} values")
    b = lambda x: int(round(x * MIB))  # noqa: E731

    def shared(values: Sequence[float], order: Sequence[int]) -> dict:
        return {"total_bytes": b(values[-1]), "capture_s": {},
                "growth_bytes": {str(bs): b(v) for bs, v in zip(order, values)}}

    return {"preset": preset, "sizes": sizes,
            "private": {"per_size_bytes": {str(k): b(private_mib[k]) for k in sizes},
                        "total_bytes": sum(b(private_mib[k]) for k in sizes), "capture_s": {}},
            "largest_private_bytes": max(b(private_mib[k]) for k in sizes),
            "shared_largest_first": shared(largest_first_mib, sizes[::-1]),
            "shared_smallest_first": shared(smallest_first_mib, sizes)}


# ---------------------------------------------------------------------------- gathering records


def record_specs() -> dict[str, tuple[Callable[[], dict], dict]]:
    """name -> (measure function, default params) of the records :data:`CLAIMS` read."""

    def spec(name: str) -> tuple[Callable[[], dict], dict]:
        return (lambda: recorder.measure(name)[0]), rk.default_params(name)

    return {n: spec(n) for n in needed_records()}


def gather_records(ctx: Any, *, reuse_run: bool = True) -> dict[str, Any]:
    """The records of :data:`CLAIMS`: live on the GPU tier, else the recorded references."""
    out = {}
    for n, (fn, params) in record_specs().items():
        saved = default_run_dir() / "results" / f"{n}.json"
        out[n] = (load_result(saved) if ctx.live and reuse_run and saved.is_file()
                  else measure_or_reference(ctx, n, fn, params, show=False))
    return out


# ---------------------------------------------------------------------- the chart

def speedup_vs_claim(records: Mapping[str, Any], claimed: tuple[float, float]):
    """Eager and graph-replay step time per model and batch size, the speed-up on each bar."""
    fig = plotly_go().Figure()
    for i, (name, rec) in enumerate(sorted(records.items())):
        d = view(rec, Decode)
        x = [f"{name.removeprefix('decode_')} bs {b}" for b in d.batch_sizes]
        for m in ("eager", "graph"):
            fig.add_trace(stats_bar(
                x, d.times[m], m, color(m), showlegend=i == 0, textposition="outside",
                text=None if m == "eager" else [f"{s:.1f}×" for s in d.speedup_vs_eager(m)]))
    if not fig.data:
        raise ValueError("no decode record with eager and graph times")
    fig.update_layout(barmode="group")
    return finish(fig, f"Eager vs graph replay (claimed: {claimed[0]:g}–{claimed[1]:g}× faster)",
                  "model and batch size", "decode step (µs, log)", log_y=True,
                  subtitle=provenances([records[n] for n in sorted(records)]))
