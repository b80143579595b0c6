"""Claims about CUDA Graphs in vLLM from the suite's seed articles, as data, each checked
against records.

The articles' texts are not stored in this repository. Each :class:`Claim` therefore carries
the article's words as this repository quotes them (``quote``) and where they come from
(``origin``: :data:`SEED_ORIGIN`, which does not guess which of the articles said it); the
claim's own sentence (``claim``) is this suite's paraphrase. ``sources`` are the primary
sources the check relies on, not the claim's origin.

Each :class:`Claim` names the measurement it is checked against and a function that reads the
verdict and the evidence **from result records** (``decode_small``, ``decode_gpt2``,
``roofline_*``, ``pool_memory_*``, ``pitfalls``); no measured number is typed in here. The only numbers in
this module are the article's own (the claimed 5–8× band) and the tolerance a verdict uses.

Verdicts: ``holds`` (the measurements agree), ``partly`` (right in direction or practice, wrong
in mechanism or only under a condition), ``false`` (the measurements contradict it),
``depends`` (true for some settings, not others), ``untested`` (a record is missing),
``cannot be checked here`` (no record or primary source in reach can decide it).

    records = {"decode_small": res.data, ...}          # or Result objects
    rows = evaluate_all(records)                       # one dict per claim
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from labkit.measure import records as rk
from labkit.measure.bench import measure_decode, measure_pool_memory
from labkit.measure.pitfalls import run_all_pitfalls
from labkit.measure.records import Decode, Pitfalls, PoolMemory, view
from labkit.measure.results import Result, default_run_dir, load_result, provenance_line
from labkit.teach.notebook import measure_or_reference
from labkit.teach.verdicts import (CANNOT, SEED_ORIGIN, VERDICTS, Assessment, Claim, describe,
                                   verdict_counts, verdict_rows)

__all__ = [
    "ARTICLE_NAMES", "CLAIMED_SPEEDUP", "CLAIMS", "MEMORY_TOL", "MIB", "VLLM_CUDAGRAPH_NAMES",
    "check_engine_args", "check_largest_first", "check_offsets_not_addresses",
    "check_replay_speedup", "check_shared_pool_max", "claim", "evaluate", "evaluate_all",
    "gather_records", "model_size_shrink", "needed_records", "pool_record_from_mib",
    "record_specs", "saved_in_run", "vllm_option_names",
    # from labkit.teach.verdicts, imported from here as they always were
    "CANNOT", "SEED_ORIGIN", "VERDICTS", "Assessment", "Claim", "describe", "verdict_counts",
    "verdict_rows",
]

#: the article's figure for "replay is 5–8x faster than eager"
CLAIMED_SPEEDUP = (5.0, 8.0)
#: relative slack within which two memory figures count as "the same"
MEMORY_TOL = 0.10
MIB = 2 ** 20

#: vLLM's real CUDA-graph settings, as read from its source (V0 ``vllm/engine/arg_utils.py``,
#: ``vllm/worker/model_runner.py``; V1 ``vllm/config/compilation.py``)
VLLM_CUDAGRAPH_NAMES: dict[str, str] = {
    "enforce_eager": "engine argument (--enforce-eager): turn CUDA graphs off",
    "compilation_config": "engine argument (--compilation-config / -O): holds the options below",
    "cudagraph_mode": "CompilationConfig: NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, "
                      "FULL_AND_PIECEWISE",
    "cudagraph_capture_sizes": "CompilationConfig (--cudagraph-capture-sizes): the batch sizes",
    "max_cudagraph_capture_size": "CompilationConfig (--max-cudagraph-capture-size)",
    "cuda_graph_sizes": "older engine argument (--cuda-graph-sizes)",
    "max_seq_len_to_capture": "V0 engine argument: longest sequence a graph covers",
}
#: names the article gives, and where those names really come from
ARTICLE_NAMES: dict[str, str] = {
    "enable_cuda_graph": "no such vLLM argument (graphs are on unless enforce_eager=True)",
    "cuda_graph_batch_sizes": "a TensorRT-LLM setting, not vLLM's",
    "graph_pool_size": "no such argument anywhere: the pool is not pre-sized, it grows",
}


def _data(rec: Any) -> dict:
    data = getattr(rec, "data", rec)
    if not isinstance(data, Mapping):
        raise TypeError(f"a record must be a labkit Result or a dict, got {type(rec).__name__}")
    return dict(data)


def _mib(b: float | int | None) -> float | None:
    return None if b is None else float(b) / MIB


# ---------------------------------------------------------------------------- 1. 5-8x


def check_replay_speedup(records: Mapping[str, dict]) -> Assessment:
    """Graph-replay speed-up over eager per model and batch size vs the claimed 5–8×."""
    lo, hi = CLAIMED_SPEEDUP
    per: dict[str, dict] = {}
    for name in sorted(records):
        if not name.startswith("decode_"):
            continue
        d = view(records[name], Decode)
        if not {"eager", "graph"} <= set(d.methods):
            continue
        sp = d.speedup_vs_eager("graph")
        per[name] = {"batch_sizes": list(d.batch_sizes), "speedup": [float(s) for s in sp],
                     "kernels_per_step": d.kernels_per_step}
    if not per:
        return Assessment("untested", {}, "no decode record with a graph speed-up")
    values = [s for p in per.values() for s in p["speedup"]]
    inside = [lo <= s <= hi for s in values]
    smin, smax = min(values), max(values)
    evidence = {"claimed": [lo, hi], "min": smin, "max": smax, "n_points": len(values),
                "n_inside_claim": sum(inside), "per_record": per}
    parts = "; ".join(
        f"{n.removeprefix('decode_')}: " + ", ".join(f"bs {b} {s:.1f}x" for b, s in
                                                   zip(p["batch_sizes"], p["speedup"]))
        for n, p in per.items())
    if all(inside):
        verdict = "holds"
    elif not any(inside):
        verdict = "false"
    else:
        verdict = "depends"
    falling = {n.removeprefix("decode_"): p for n, p in per.items()
               if len(p["speedup"]) > 1 and p["speedup"][-1] < p["speedup"][0]}
    evidence["falls_with_batch"] = list(falling)
    text = (f"measured {smin:.1f}x to {smax:.1f}x ({parts}); {sum(inside)} of {len(values)} "
            f"points inside the claimed {lo:g}-{hi:g}x.")
    by_size = model_size_shrink(records)
    evidence["by_model_size"] = by_size
    if by_size:
        text += " With model size the gain shrinks: " + "; ".join(
            f"{s['larger']} ({s['larger_layers']} layers, d_model {s['larger_d_model']}) keeps "
            f"{min(s['ratio']):.2f}-{max(s['ratio']):.2f} of the {s['smaller']} model's gain "
            f"({s['kind']}, bs {s['batch_sizes'][0]}-{s['batch_sizes'][-1]})"
            for s in by_size) + "."
    if falling:
        text += " From the smallest to the largest batch the speed-up falls (" + "; ".join(
            f"{n}: {p['speedup'][0]:.1f}x at bs {p['batch_sizes'][0]} to {p['speedup'][-1]:.1f}x "
            f"at bs {p['batch_sizes'][-1]}" for n, p in falling.items()) + \
            "): the gain is the CPU launch time removed, worth less as the GPU work per step grows."
    return Assessment(verdict, evidence, text)


def _size_key(config: Mapping) -> tuple[int, int]:
    return int(config.get("n_layer", 0)), int(config.get("d_model", 0))


def model_size_shrink(records: Mapping[str, Any]) -> list[dict]:
    """How the graph speed-up shrinks with model size: for each kind of record that exists
    for two presets (``decode_*``, ``roofline_*``), the larger model's speed-up divided by the
    smaller one's at each common batch size, computed from the records."""
    out = []
    for kind, cls in (("decode", Decode), ("roofline", rk.Roofline)):
        models = []
        for name in sorted(records):
            if not name.startswith(kind + "_"):
                continue
            d = view(records[name], cls)
            if {"eager", "graph"} <= set(d.methods) and getattr(d, "config", None):
                models.append((_size_key(d.config), name, d))
        if len(models) < 2:
            continue
        models.sort(key=lambda m: m[0])
        (small_key, small_name, small), (big_key, big_name, big) = models[0], models[-1]
        if small_key == big_key:
            continue
        sp_s = dict(zip(small.batch_sizes, small.speedup_vs_eager("graph")))
        sp_b = dict(zip(big.batch_sizes, big.speedup_vs_eager("graph")))
        common = [b for b in small.batch_sizes if b in sp_b and sp_s[b] and sp_b[b]]
        if not common:
            continue
        out.append({"kind": kind, "smaller": small_name.split("_", 1)[1],
                    "larger": big_name.split("_", 1)[1],
                    "smaller_layers": small_key[0], "smaller_d_model": small_key[1],
                    "larger_layers": big_key[0], "larger_d_model": big_key[1],
                    "batch_sizes": common,
                    "smaller_speedup": [float(sp_s[b]) for b in common],
                    "larger_speedup": [float(sp_b[b]) for b in common],
                    "ratio": [float(sp_b[b] / sp_s[b]) for b in common]})
    return out


# ---------------------------------------------------------------------------- 2. max not sum


def _pool_records(records: Mapping[str, Any]) -> list[tuple[str, PoolMemory]]:
    """Every ``pool_memory_<preset>`` record present, by name."""
    return [(n, view(records[n], PoolMemory)) for n in sorted(records)
            if n.startswith("pool_memory_")]


def _pool_numbers(name: str, d: PoolMemory) -> dict:
    """The three figures that test max-not-sum and largest-first, from one pool record."""
    total, largest = d.private.total_bytes, d.largest_private_bytes
    lf, sf = d.shared_largest_first.total_bytes, d.shared_smallest_first.total_bytes
    per = d.private.per_size_bytes
    return {"record": name, "n_graphs": len(d.sizes), "sum_private_mib": _mib(total),
            "max_private_mib": _mib(largest), "shared_largest_first_mib": _mib(lf),
            "shared_smallest_first_mib": _mib(sf), "largest_first_over_max": lf / largest,
            "smallest_first_over_max": sf / largest, "largest_first_over_sum": lf / total,
            "smallest_private_mib": _mib(min(per.values())) if per else None,
            "n_at_smallest": sum(1 for v in per.values() if v == min(per.values())),
            # max and sum are told apart only when the other graphs add more than the slack
            "discriminates": (total - largest) > largest * MEMORY_TOL}


def check_shared_pool_max(records: Mapping[str, dict]) -> Assessment:
    """Shared-pool total vs the largest single private pool (max) and all of them (sum), in
    both capture orders, for every ``pool_memory_*`` record."""
    found = _pool_records(records)
    if not found:
        return Assessment("untested", {}, "no pool_memory record")
    per = [_pool_numbers(n, d) for n, d in found]
    tested = [p for p in per if p["discriminates"]]
    ev = {"per_record": per, **next((p for p in per if p["record"] == "pool_memory_gpt2"),
                                    per[0])}
    nums = "; ".join(
        f"{p['record'].removeprefix('pool_memory_')}: {p['n_graphs']} graphs, sum of private "
        f"pools {p['sum_private_mib']:.1f} MiB, largest {p['max_private_mib']:.1f} MiB, one "
        f"shared pool {p['shared_largest_first_mib']:.1f} MiB largest first "
        f"({p['largest_first_over_max']:.2f}x the largest), "
        f"{p['shared_smallest_first_mib']:.1f} MiB smallest first "
        f"({p['smallest_first_over_max']:.2f}x)" for p in per)
    if not tested:
        return Assessment("untested", ev, nums + ": the other graphs add less than the "
                          "tolerance to the largest, so these records cannot tell max from sum.")
    note = (f" ({per[0]['record']}: {per[0]['n_at_smallest']} of {per[0]['n_graphs']} private pools are "
            f"{per[0]['smallest_private_mib']:.0f} MiB, the smallest the allocator gave, so "
            "the large batch sizes decide the test)" if per[0]["n_at_smallest"] > 1 else "")
    if any(p["largest_first_over_sum"] >= 1 for p in tested):
        return Assessment("false", ev, nums + ": sharing saved nothing.")
    lf_max = all(p["largest_first_over_max"] <= 1 + MEMORY_TOL for p in tested)
    sf_max = all(p["smallest_first_over_max"] <= 1 + MEMORY_TOL for p in tested)
    if lf_max and sf_max:
        return Assessment("holds", ev, nums + ": about the max in either order" + note + ".")
    if lf_max:
        return Assessment("partly", ev, nums + ": max-not-sum holds when the largest graph "
                          "is captured first; in the other order the pool ends above the max.")
    return Assessment("partly", ev, nums + ": well below the sum but above the max (the "
                      "largest graph's peak plus what each other graph keeps alive).")


# ---------------------------------------------------------------------------- 3. largest first


def _growth_in_order(section: rk.PoolLayout, sizes: Sequence[int],
                     descending: bool) -> list[tuple[int, int]]:
    growth = section.growth_bytes
    order = sorted(sizes, reverse=descending)
    return [(b, growth[b]) for b in order if b in growth]


def _order_numbers(name: str, d: PoolMemory) -> dict:
    lf_total = d.shared_largest_first.total_bytes
    sf_total = d.shared_smallest_first.total_bytes
    sf_growth = _growth_in_order(d.shared_smallest_first, d.sizes, descending=False)
    lf_growth = _growth_in_order(d.shared_largest_first, d.sizes, descending=True)
    sf_steps = sum(1 for (_, a), (_, b) in zip(sf_growth, sf_growth[1:]) if b > a)
    lf_steps = sum(1 for (_, a), (_, b) in zip(lf_growth, lf_growth[1:]) if b > a)
    lf_first = lf_growth[0][1] if lf_growth else None
    return {"record": name, "largest_first_mib": _mib(lf_total),
            "smallest_first_mib": _mib(sf_total), "max_private_mib": _mib(d.largest_private_bytes),
            "smallest_first_over_largest_first": sf_total / lf_total if lf_total else None,
            "smallest_first_pool_mib_after_each": [[b, _mib(v)] for b, v in sf_growth],
            "largest_first_pool_mib_after_each": [[b, _mib(v)] for b, v in lf_growth],
            "smallest_first_growth_steps": sf_steps, "largest_first_growth_steps": lf_steps,
            "later_captures": max(len(sf_growth) - 1, 0),
            "largest_first_share_after_first_capture":
                (lf_first / lf_total) if lf_first and lf_total else None}


def check_largest_first(records: Mapping[str, dict]) -> Assessment:
    """Capture largest first "so the pool is big enough": does the order change the pool's
    final size (largest first vs smallest first vs the largest private pool), and is the
    pool sized by the first capture or does it grow?"""
    found = _pool_records(records)
    if not found:
        return Assessment("untested", {}, "no pool_memory record")
    per = [_order_numbers(n, d) for n, d in found]
    ev = {"per_record": per, **next((p for p in per if p["record"] == "pool_memory_gpt2"),
                                    per[0])}
    nums = "; ".join(
        f"{p['record'].removeprefix('pool_memory_')}: largest first ends at "
        f"{p['largest_first_mib']:.1f} MiB (grew at {p['largest_first_growth_steps']} of "
        f"{p['later_captures']} later captures), smallest first at "
        f"{p['smallest_first_mib']:.1f} MiB (grew at {p['smallest_first_growth_steps']}), "
        f"largest private pool {p['max_private_mib']:.1f} MiB" for p in per)
    ratios = [p["smallest_first_over_largest_first"] for p in per
              if p["smallest_first_over_largest_first"]]
    if any(r < 1 / (1 + MEMORY_TOL) for r in ratios):
        return Assessment("false", ev, nums + ": largest first did not save memory here.")
    grows = any(p["smallest_first_growth_steps"] >= 1 for p in per)
    if not grows:
        return Assessment("holds", ev, nums + ".")
    if ratios and all(r <= 1 + MEMORY_TOL for r in ratios):
        return Assessment("partly", ev, nums + ". The pool ends at the same size in either "
                          "order: it is not sized up front but grows at capture as needed, so "
                          "smallest first gets there too. Largest first only reaches the final "
                          "size at the first capture; vLLM, SGLang and TensorRT-LLM do it, and "
                          "it saves memory only where smaller graphs would leave blocks the "
                          "larger one cannot reuse, which these records do not show.")
    return Assessment("partly", ev, nums + ". The practice is right (vLLM, SGLang and "
                      "TensorRT-LLM capture largest first) but the pool is not sized up "
                      "front: it grows on demand; largest first helps because the smaller "
                      "graphs fit into blocks the first one freed.")


# ---------------------------------------------------------------------------- 4. offsets


def check_offsets_not_addresses(records: Mapping[str, dict]) -> Assessment:
    """Graphs replay into the same absolute device addresses (the ``pitfalls`` record)."""
    if "pitfalls" not in records:
        return Assessment("untested", {}, "no pitfalls record")
    d = view(records["pitfalls"], Pitfalls)
    addr = d.address_demo
    if not addr or "error" in addr:
        return Assessment("untested", {"address_demo": addr}, "the address demonstration "
                          "did not run")
    pits = d.by_name()
    reb = pits["input_rebound"].details if "input_rebound" in pits else {}
    shared = (pits["output_overwritten"].details if "output_overwritten" in pits
              else {}).get("shared_pool", {})
    a = addr["graphs"][0]
    seg = a.get("output_segment") or {}
    kernel = addr.get("kernel_args") or {}
    ev = {"output_ptr_hex": hex(a["output_ptr"]), "replays": len(addr["replay_output_ptrs"]),
          "identical_across_replays": bool(addr["identical_across_replays"]),
          "segment_base_hex": hex(seg["segment_base"]) if seg else None,
          "offset_in_segment": seg.get("offset_in_segment"),
          "absolute": bool(addr.get("absolute")),
          "pointer_in_kernel_args": kernel.get("output_ptr_found"),
          "rebound_input_ignored": bool(reb) and reb.get("stale") == reb.get("previous_step"),
          "shared_pool_block_reused_at_same_address": shared.get("reused_address")}
    absolute_evidence = ev["absolute"] or bool(ev["pointer_in_kernel_args"])
    if ev["identical_across_replays"] and absolute_evidence:
        text = (f"graph A wrote to {ev['output_ptr_hex']} at each of {ev['replays']} replays; "
                f"that is a device virtual address (allocator segment at "
                f"{ev['segment_base_hex']} + offset {ev['offset_in_segment']})")
        if ev["pointer_in_kernel_args"]:
            text += ", and the same 8-byte address sits in the kernel node's arguments"
        if ev["rebound_input_ignored"]:
            text += ("; a rebound input was ignored: the graph kept reading the tensor at the "
                     "captured address")
        text += (". Graphs bake absolute addresses; only CUDA virtual-memory remapping "
                 "(vLLM's sleep mode) moves the physical memory underneath them.")
        return Assessment("false", ev, text)
    if not ev["identical_across_replays"]:
        return Assessment("holds", ev, "the output address changed between replays")
    return Assessment("partly", ev, "same address at every replay, but the record does not "
                      "show that it is absolute")


# ---------------------------------------------------------------------------- 5. engine args


def vllm_option_names() -> tuple[set[str], str]:
    """vLLM's engine-argument and compilation-config field names: read from an installed
    ``vllm`` when there is one, else the names listed in :data:`VLLM_CUDAGRAPH_NAMES`."""
    try:
        import dataclasses

        from vllm.config import CompilationConfig  # type: ignore
        from vllm.engine.arg_utils import EngineArgs  # type: ignore

        names = {f.name for f in dataclasses.fields(EngineArgs)}
        names |= {f.name for f in dataclasses.fields(CompilationConfig)}
        return names, "installed vllm"
    except Exception:  # noqa: BLE001 - vllm is not a dependency
        return set(VLLM_CUDAGRAPH_NAMES), "vLLM source (listed in labkit.teach.claims)"


def check_engine_args(records: Mapping[str, dict]) -> Assessment:
    """Do the argument names the article gives exist in vLLM?"""
    real, where = vllm_option_names()
    claimed = list(ARTICLE_NAMES)
    exist = [n for n in claimed if n in real]
    ev = {"claimed_names": claimed, "exist_in_vllm": exist, "checked_against": where,
          "real_names": sorted(n for n in VLLM_CUDAGRAPH_NAMES if n in real)}
    if not exist:
        verdict = "false"
    elif len(exist) < len(claimed):
        verdict = "partly"
    else:
        verdict = "holds"
    text = (f"{len(exist)} of {len(claimed)} names exist ({where}). vLLM's settings are "
            "enforce_eager and compilation_config.cudagraph_mode / cudagraph_capture_sizes / "
            "max_cudagraph_capture_size; " +
            "; ".join(f"{n}: {why}" for n, why in ARTICLE_NAMES.items() if n not in exist))
    return Assessment(verdict, ev, text)


# ---------------------------------------------------------------------------- the list


CLAIMS: list[Claim] = [
    Claim("replay_5_8x", "Replaying a CUDA graph makes decode 5-8x faster than eager.",
          "decode step time, eager vs graph replay, per model and batch size (and the "
          "roofline_* records, when given, for the model-size comparison)",
          ("decode_small", "decode_gpt2"), check_replay_speedup, any_of=True,
          context="The gain is the CPU launch time removed (notebook 01), so it depends on the "
                  "model and the batch: a tiny model on a fast GPU can show much more than a "
                  "large one.",
          sources=("PyTorch docs, CUDA Graphs: 'eliding CPU overhead is the main benefit'",),
          quote="5–8× faster"),
    Claim("pool_max_not_sum", "Sharing one memory pool makes graph memory the max of the "
          "graphs instead of their sum.",
          "pool bytes (allocator accounting): private pools vs one shared pool, both orders",
          ("pool_memory_small", "pool_memory_gpt2"), check_shared_pool_max, any_of=True,
          context="vLLM estimates graph memory as the first capture plus a per-graph "
                  "residual times (n - 1).",
          sources=("vllm/worker/model_runner.py", "vllm/v1/worker/gpu_model_runner.py"),
          quote="the max, not the sum"),
    Claim("largest_first_sizes_pool", "Capture the largest batch size first so that the pool "
          "is big enough for the others.",
          "pool size after each capture, largest first vs smallest first",
          ("pool_memory_small", "pool_memory_gpt2"), check_largest_first, any_of=True,
          context="vLLM ('capturing the largest batch size first may help reduce the memory "
                  "usage'), SGLang and TensorRT-LLM all capture in descending order.",
          sources=("vllm/worker/model_runner.py",
                   "python/sglang/srt/model_executor/cuda_graph_runner.py"),
          quote="the pool big enough"),
    Claim("pool_offsets", "The pool records offsets, not absolute addresses, so graphs can "
          "be moved.",
          "data_ptr of a graph's output over replays and its allocator segment; rebound input",
          ("pitfalls",), check_offsets_not_addresses,
          context="PyTorch docs: 'a captured graph acts on the same virtual addresses every "
                  "time it replays'.",
          sources=("PyTorch docs, CUDA Graphs",),
          quote="records offsets, not addresses"),
    Claim("engine_args", "vLLM's CUDA graphs are configured with enable_cuda_graph, "
          "cuda_graph_batch_sizes and graph_pool_size.",
          "vLLM's engine arguments and compilation config", (), check_engine_args,
          sources=("vllm/engine/arg_utils.py", "vllm/config/compilation.py"),
          quote="enable_cuda_graph, cuda_graph_batch_sizes, graph_pool_size"),
]


def claim(claim_id: str) -> Claim:
    """The claim with id ``claim_id``."""
    for c in CLAIMS:
        if c.id == claim_id:
            return c
    raise KeyError(f"no claim {claim_id!r}; ids: {[c.id for c in CLAIMS]}")


def needed_records(claims: Sequence[Claim] | None = None) -> list[str]:
    """Every record name the claims (default :data:`CLAIMS`) are checked against, in order."""
    out: list[str] = []
    for c in CLAIMS if claims is None else claims:
        out += [r for r in c.records if r not in out]
    return out


def evaluate(c: Claim, records: Mapping[str, Any]) -> dict:
    """Run one claim's check on ``records`` (name -> Result or data dict)."""
    present = {k: _data(v) for k, v in records.items() if v is not None}
    missing = [r for r in c.records if r not in present]
    base = {"id": c.id, "claim": c.claim, "measurement": c.measurement,
            "records": list(c.records), "context": c.context, "quote": c.quote,
            "origin": c.origin}
    if c.records and (len(missing) == len(c.records) if c.any_of else missing):
        return {**base, "verdict": "untested", "evidence": {"missing": missing},
                "explanation": f"record(s) not available: {', '.join(missing)}"}
    try:
        a = c.check(present)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        return {**base, "verdict": "untested", "evidence": {"error": repr(exc)},
                "explanation": f"the record does not have the expected fields ({exc!r})"}
    return {**base, "verdict": a.verdict, "evidence": a.evidence, "explanation": a.explanation}


def evaluate_all(records: Mapping[str, Any], claims: Sequence[Claim] | None = None) -> list[dict]:
    """One result dict per claim (see :func:`evaluate`)."""
    return [evaluate(c, records) for c in (claims or CLAIMS)]


def pool_record_from_mib(private_mib: Mapping[int, float], largest_first_mib: Sequence[float],
                         smallest_first_mib: Sequence[float], preset: str = "synthetic") -> dict:
    """A ``pool_memory_<preset>``-shaped record from MiB figures, for exercises and tests:
    ``private_mib[bs]`` per batch size; the shared pool's size after each capture, in capture
    order (largest first: descending sizes; smallest first: ascending)."""
    sizes = sorted(int(b) for b in private_mib)
    if len(largest_first_mib) != len(sizes) or len(smallest_first_mib) != len(sizes):
        raise ValueError(f"give one pool size per capture: {len(sizes)} sizes, "
                         f"{len(largest_first_mib)} and {len(smallest_first_mib)} values")

    def b(x: float) -> int:
        return int(round(x * MIB))

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


_MEASURES: dict[str, Callable[..., dict]] = {"measure_decode": measure_decode,
                                              "measure_pool_memory": measure_pool_memory,
                                              "run_all_pitfalls": run_all_pitfalls}


def record_specs() -> dict[str, tuple[Callable[[], dict], dict]]:
    """name -> (measure function, params) for the records the claims need, measured with
    the records' default parameters (:data:`labkit.measure.records.DEFAULTS`). The measure
    functions run only when called (they need a GPU)."""

    def spec(name: str) -> tuple[Callable[[], dict], dict]:
        func, params = rk.DEFAULTS[name]

        def run() -> dict:
            return _MEASURES[func](**rk.measure_kwargs(params))

        return run, rk.default_params(name)

    return {name: spec(name) for name in needed_records()}


def saved_in_run(ctx: Any, name: str) -> Result | None:
    """On the GPU tier (``ctx.live``), record ``name`` as an earlier notebook of this
    ``labkit run`` saved it in the run folder; ``None`` when there is none or on the CPU
    tier."""
    path = default_run_dir() / "results" / f"{name}.json"
    return load_result(path) if getattr(ctx, "live", False) and path.is_file() else None


def gather_records(ctx: Any, names: Sequence[str] | None = None, *,
                   reuse_run: bool = True) -> dict[str, Any]:
    """The records the claims need, via :func:`labkit.teach.notebook.measure_or_reference`.

    On the GPU tier a record already saved in the current run folder (by an earlier notebook
    of the same ``labkit run``) is reused instead of measured again when ``reuse_run``.
    """

    specs = record_specs()
    out: dict[str, Any] = {}
    for name in names or needed_records():
        if name not in specs:
            raise KeyError(f"no measurement known for record {name!r}; known: {sorted(specs)}")
        res = saved_in_run(ctx, name) if reuse_run else None
        if res is not None:
            print(f"{name}: measured earlier in this run ({provenance_line(res)})")
            out[name] = res
            continue
        fn, params = specs[name]
        out[name] = measure_or_reference(ctx, name, fn, params)
    return out
