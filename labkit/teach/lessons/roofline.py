"""Roofline helpers for notebook 12: the bytes a decode step moves, the floor they set, the
nodes × cost model of what is left after capture, the compile columns, multi-step graphs and
the verdict on conditional nodes.

Pure functions: they turn configs, numbers and ``roofline_<preset>`` / ``multistep_<preset>``
records into numbers, rows and sentences. The measurements are
:func:`labkit.measure.roofline.measure_roofline` and
:func:`labkit.measure.roofline.measure_multistep`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from labkit import stepcost
from labkit.measure import records as rk
from labkit.measure.records import Multistep, Roofline, view

MB = 1e6
MIB = 2 ** 20

#: display names of the step variants (a variant added later shows under its own name)
VARIANT_LABELS: dict[str, str] = {
    "eager": "eager",
    "graph": "FULL graph (labkit capture)",
    "fused": "fused step (labkit.fused), FULL graph",
    "compile_reduce_overhead": "torch.compile reduce-overhead (CUDA Graph Trees)",
    "compile_manual_graph": "torch.compile kernels + labkit capture",
    "compile_full_cache": "torch.compile reduce-overhead, cache of every batch size",
}
MULTISTEP_LABELS: dict[str, str] = {
    "host_sync": "one-step graph, tokens to the host and back each step",
    "one_step_graphs": "one-step graph, argmax fed back on the device",
    "multistep": "N steps in one graph",
}


def missing_reference(name: str) -> str:
    """What a notebook prints on the CPU tier when record ``name`` has not been recorded."""
    return f"no H200 reference recorded yet for {name}"


def variant_label(name: str) -> str:
    return VARIANT_LABELS.get(name, name)


# ---------------------------------------------------------------------------------- bytes


def bytes_rows(cfg: Any, batch_sizes: Sequence[int], context: int) -> list[dict]:
    """One row per batch size: what a step moves, in MB (10⁶ bytes), by kind, and the share
    that is weights."""
    rows = []
    for b in batch_sizes:
        sb = stepcost.step_bytes(cfg, b, context)
        rows.append({"batch": b, "weights (MB)": round(sb.weights / MB, 2),
                     "KV read (MB)": round(sb.kv_read / MB, 2),
                     "logits + KV write + embeddings (MB)":
                         round((sb.logits_write + sb.kv_write + sb.embedding_rows) / MB, 2),
                     "total (MB)": round(sb.total / MB, 2),
                     "weights share": round(sb.weights / sb.total, 3)})
    return rows


def weights_equal_batch(cfg: Any, context: int) -> int:
    """The smallest batch at which the bytes that grow with the batch (KV read and write,
    logits, embedding rows) reach the weights' bytes: below it a step is weight-bound, so
    extra rows come almost free; above it every row costs its own bytes."""
    one = stepcost.step_bytes(cfg, 1, context)
    per_row = one.total - one.weights
    return max(1, -(-one.weights // per_row))


def predict_floor_us(nbytes: float, bandwidth_gbps: float) -> float:
    """The bandwidth floor in µs (:func:`labkit.stepcost.floor_us`): what exercise 12.1
    asks for."""
    return stepcost.floor_us(nbytes, bandwidth_gbps)


# ---------------------------------------------------------------------------------- records


def floor_rows(record: Any, variants: Sequence[str] | None = None) -> list[dict]:
    """One row per batch size: bytes per step, the floor (µs), and per variant its median µs
    and how many times the floor it is."""
    r = view(record, Roofline)
    variants = [v for v in (variants or r.methods) if v in r.times]
    floors, nbytes = r.roofline_us(), r.step_bytes()
    rows = []
    for i, b in enumerate(r.batch_sizes):
        row: dict[str, Any] = {"batch": b, "MB per step": round(nbytes[i] / MB, 1),
                               "floor (µs)": round(floors[i], 1)}
        for v in variants:
            t = r.median_us(v)[i]
            row[f"{v} (µs)"] = None if t is None else round(t, 1)
            x = rk.ratio(t, floors[i])
            row[f"{v} × floor"] = None if x is None else round(x, 1)
        rows.append(row)
    return rows


def nodes_per_step(record: Any, variant: str = "graph") -> int | None:
    """GPU operations one step of ``variant`` runs (the profiler's count; a FULL graph holds
    one node per operation of the eager step, so eager's count stands in when the replay's
    operations were not counted)."""
    r = view(record, Roofline)
    v = r.variants.get(variant)
    n = v.gpu_ops if v is not None else None
    if not n and variant == "graph" and "eager" in r.variants:
        n = r.variants["eager"].gpu_ops
    return n or None


def node_model(record: Any, batch: int = 1, variant: str = "graph",
               empty_node_us: float | None = None) -> dict:
    """The model of what is left after capture, at ``batch``: the step time, the floor, the
    nodes per step, µs per node (step / nodes) and, when ``empty_node_us`` (an empty graph
    node's cost, from ``launch_overhead``) is given, the prediction ``floor + nodes × empty``
    and what neither explains."""
    r = view(record, Roofline)
    if batch not in r.batch_sizes:
        raise KeyError(f"batch {batch} is not in the record; it has {r.batch_sizes}")
    i = r.batch_sizes.index(batch)
    t = r.median_us(variant)[i]
    floor = r.roofline_us()[i]
    n = nodes_per_step(r, variant)
    out = {"variant": variant, "batch": batch, "step_us": t, "floor_us": floor, "nodes": n,
           "us_per_node": rk.ratio(t, n), "over_floor": rk.ratio(t, floor),
           "excess_us_per_node": None if None in (t, n) else (t - floor) / n}
    if empty_node_us is not None and n:
        pred = floor + n * empty_node_us
        out.update(empty_node_us=empty_node_us, predicted_us=pred,
                   unexplained_us=None if t is None else t - pred)
    return out


def node_sentence(model: Mapping) -> str:
    """The node model in one sentence."""
    if model["step_us"] is None or not model["nodes"]:
        return f"{variant_label(model['variant'])}: not measured at batch {model['batch']}."
    s = (f"batch {model['batch']}: a {variant_label(model['variant'])} step takes "
         f"{model['step_us']:,.0f} µs = {model['over_floor']:.1f}× its floor of "
         f"{model['floor_us']:,.0f} µs; it runs {model['nodes']} GPU operations, "
         f"{model['us_per_node']:.2f} µs each on average")
    if model.get("predicted_us") is not None:
        s += (f"; floor + {model['nodes']} × {model['empty_node_us']:.2f} µs (an empty node) "
              f"predicts {model['predicted_us']:,.0f} µs, leaving {model['unexplained_us']:,.0f}"
              " µs to the kernels being slower than their bytes allow")
    return s + "."


def bound_batch(record: Any, variant: str = "graph", growth: float = 1.25) -> int | None:
    """The first measured batch whose step takes more than ``growth`` × the smallest batch's:
    up to there extra rows ride along (the step is bound by fixed costs: weights and nodes),
    from there on they cost time (their own bytes). ``None``: no measured batch does."""
    r = view(record, Roofline)
    ts = r.median_us(variant)
    base = next((t for t in ts if t is not None), None)
    if base is None:
        return None
    for b, t in zip(r.batch_sizes, ts):
        if t is not None and t > growth * base:
            return b
    return None


def regime_sentence(record: Any, variant: str = "graph") -> str:
    """Where the step turns bandwidth-bound and whether it can turn compute-bound, from the
    record's config, context, bandwidth and matmul rate and the measured step times."""
    r = view(record, Roofline)
    w = weights_equal_batch(r.config, r.context)
    ridge = stepcost.ridge_batch(r.config, r.context, r.bandwidth_gbps, r.matmul_tflops)
    grows = bound_batch(r, variant)
    s = (f"At {r.context} positions per row the bytes that grow with the batch equal the "
         f"weights at batch {w}; ")
    s += ("the step never turns compute-bound (each row's KV bytes take longer to read than "
          "its flops take to compute)" if ridge is None else
          f"the compute floor overtakes the bandwidth floor at batch {ridge}")
    s += (f". Measured, the {variant_label(variant)} step first grows by more than 25% at "
          f"batch {grows}." if grows else
          f". Measured, the {variant_label(variant)} step stays within 25% of its smallest "
          "batch over every batch size recorded.")
    return s


def compile_rows(record: Any) -> list[dict]:
    """One row per variant: µs at each compiled size, set-up seconds (capture or compile),
    pool MiB, GPU operations and graph launches per step, whether CUDA graphs were really
    used, the token agreement with eager, and the error of a variant that failed."""
    r = view(record, Roofline)
    rows = []
    for name in r.methods:
        v = r.variants.get(name)
        row: dict[str, Any] = {"variant": variant_label(name)}
        for b in r.compile_sizes or r.batch_sizes[:1]:
            t = r.at(name, b)
            row[f"batch {b} (µs)"] = None if t is None else round(t, 1)
        agree = r.checks.get(f"{name}_token_agreement")
        row.update({"cache slots": None if v is None else v.max_batch,
                    "KV cache (MiB)": None if v is None or v.cache_bytes is None
                    else round(v.cache_bytes / MIB, 1),"set-up (s)": None if v is None or v.setup_s is None else round(v.setup_s, 2),
                    "pool (MiB)": None if v is None or v.pool_bytes is None
                    else round(v.pool_bytes / MIB, 1),
                    "GPU ops / step": None if v is None else v.gpu_ops,
                    "graph launches / step": None if v is None else v.graph_launches,
                    "CUDA graphs used": None if v is None else v.graphs_used,
                    "tokens = eager": 1.0 if name == "eager" else agree,
                    "error": None if v is None else v.error})
        rows.append(row)
    return rows


def compile_sentence(record: Any, batch: int = 1) -> str:
    """The compiled columns against labkit's graph at ``batch``, from the record."""
    r = view(record, Roofline)
    g = r.at("graph", batch)
    parts = []
    for name in r.methods:
        if not name.startswith("compile"):
            continue
        v = r.variants.get(name)
        if v is not None and v.error:
            parts.append(f"{variant_label(name)} failed ({v.error.splitlines()[0][:120]})")
            continue
        t = r.at(name, batch)
        if t is None or g is None:
            continue
        used = "" if v is None or v.graphs_used else " (no CUDA graph was launched!)"
        parts.append(f"{variant_label(name)} {t:,.0f} µs = {t / g:.2f}× the graph"
                     f"{used}, {v.setup_s:.0f} s to compile" if v and v.setup_s is not None
                     else f"{variant_label(name)} {t:,.0f} µs = {t / g:.2f}× the graph{used}")
    if not parts:
        return f"no compiled column was measured at batch {batch}."
    return f"batch {batch}: FULL graph {g:,.0f} µs; " + "; ".join(parts) + "."


def cache_copy_sentence(record: Any) -> str | None:
    """What a compiled step pays for rewriting whole cache buffers: the ``compile_full_cache``
    step against the small-cache compiled step at the same batch, next to what copying the
    whole K or V buffer at each of the ``2 × layers`` cache writes would take at the measured
    bandwidth (read + write). ``None`` when the record lacks either column."""
    r = view(record, Roofline)
    full, small = r.variants.get("compile_full_cache"), r.variants.get("compile_reduce_overhead")
    if full is None or small is None or not full.sizes or not full.cache_bytes:
        return None
    b = full.sizes[0]
    t_full, t_small = r.at("compile_full_cache", b), r.at("compile_reduce_overhead", b)
    if t_full is None or t_small is None:
        return None
    writes = 2 * int(r.config["n_layer"])
    per_buffer = full.cache_bytes / 2
    copy_us = stepcost.floor_us(writes * per_buffer * 2, r.bandwidth_gbps)
    return (f"batch {b}: the compiled step on a cache of {full.max_batch} slots "
            f"({full.cache_bytes / MIB:,.0f} MiB) takes {t_full:,.0f} µs, on a cache of "
            f"{small.max_batch} slots {t_small:,.0f} µs: {t_full - t_small:,.0f} µs more. "
            f"Rewriting the whole K or V buffer ({per_buffer / MIB:,.0f} MiB) at each of the "
            f"{writes} cache writes would take {copy_us:,.0f} µs at the measured bandwidth.")


# ---------------------------------------------------------------------------------- multi-step


def multistep_rows(record: Any) -> list[dict]:
    """One row per batch size: µs per step for each way of running N steps, and the gains."""
    m = view(record, Multistep)
    rows = []
    for i, b in enumerate(m.batch_sizes):
        row: dict[str, Any] = {"batch": b}
        for k in m.methods:
            t = m.median_us(k)[i]
            row[f"{k} (µs/step)"] = None if t is None else round(t, 1)
        g1 = m.gain("one_step_graphs", "host_sync")[i]
        g2 = m.gain("multistep", "one_step_graphs")[i]
        row["device feed vs host sync"] = None if g1 is None else round(g1, 3)
        row[f"{m.n_steps} steps/graph vs one-step graphs"] = None if g2 is None else round(g2, 3)
        rows.append(row)
    return rows


def multistep_sentence(record: Any) -> str:
    """How much the N-step graph gains per token, in percent, over one-step graphs fed on
    the device and over a host round trip per step."""
    m = view(record, Multistep)
    over_one = [g for g in m.gain("multistep", "one_step_graphs") if g is not None]
    over_host = [g for g in m.gain("multistep", "host_sync") if g is not None]
    if not over_one:
        return "no multi-step timing in the record."
    pct = [100 * (g - 1) for g in over_one]
    ok = m.checks.get("multistep_tokens_equal_single_steps")
    return (f"{m.n_steps} steps in one graph: {min(pct):+.1f}% to {max(pct):+.1f}% per token "
            f"against one-step graphs fed back on the device (batch {m.batch_sizes[0]}–"
            f"{m.batch_sizes[-1]}), {100 * (min(over_host) - 1):+.1f}% to "
            f"{100 * (max(over_host) - 1):+.1f}% against a host round trip per step; tokens "
            + ("equal the one-step path." if ok is True else "CHECK FAILED or missing."))


# ---------------------------------------------------------------------------------- conditional

#: the history, with the pull requests (pytorch/pytorch) it rests on
CONDITIONAL_HISTORY = (
    "PyTorch's first attempt to expose IF and WHILE nodes (#130386, 2024) went stale and was "
    "closed; its successor for torch.cond and torch.while_loop (#140979) was closed too. "
    "IF nodes for torch.cond under capture (#168912) were merged and then reverted "
    "(#177108, March 2026); the stubs of torch 2.13 declare the IF binding again "
    "(_CUDAGraph.begin_capture_to_if_node), with no WHILE counterpart. WHILE nodes for "
    "torch.while_loop (#184989) were proposed and closed; IF-ELSE nodes (#189462) are still "
    "open. Without a binding a WHILE node is built by hand through cuda-python, as NVIDIA "
    "NeMo's greedy ASR decoders do (nemo/core/utils/cuda_python_utils.py, "
    "with_conditional_node).")


def conditional_verdict(support: Mapping) -> str:
    """The verdict for one process (the output of
    :func:`labkit.conditional.conditional_support`, optionally with ``if_node_demo``)."""
    where = f"torch {support.get('torch')}"
    if not support.get("cuda_built"):
        s = (f"{where} is a CPU build: no CUDA graph of any kind here, conditional or not. ")
    elif support.get("if_node"):
        s = f"{where} exposes IF nodes on CUDAGraph. "
    else:
        s = f"{where} exposes no conditional node on CUDAGraph. "
    demo = support.get("if_node_demo")
    if isinstance(demo, Mapping) and demo:
        s += ("An IF node captured and replayed with its predicate on, off, on gave "
              f"{demo.get('values')}: it works. " if demo.get("ok") else
              f"The IF-node demo did not run: {demo.get('error')}. ")
    s += ("It has no WHILE-node binding" if not support.get("while_node") else
          "It has a WHILE-node binding")
    cp = support.get("cuda_python")
    s += (f"; cuda-python is importable ({cp}): NeMo's route, a WHILE node added by hand "
          "with a small NVRTC-compiled kernel setting its condition, is open, and labkit does "
          "not take it (see the verdict)." if cp else "; cuda-python is not installed, so a WHILE-node decode loop (stop at an "
          "end token inside one graph) cannot be built here without a new package.")
    return s


# ---------------------------------------------------------------------------------- exercises

#: exercise 12.2: what moves a captured small-batch step toward its floor
FLOOR_CHOICES: dict[str, str] = {
    "a": "capture more batch sizes",
    "b": "fewer, fatter kernels: fuse the small operations so the step has fewer nodes",
    "c": "a second CUDA stream for the host's work",
    "d": "a larger max_seq for the KV cache",
}
FLOOR_ANSWER = "b"

#: exercise 12.4: a captured step object caches buffers; after capture its replays read garbage
LIFETIME_CHOICES: dict[str, str] = {
    "a": "call torch.cuda.synchronize() before every replay",
    "b": "keep the step object alive for as long as the graph (store it with the graph)",
    "c": "capture into a private memory pool instead of a shared one",
    "d": "clone the graph's output after every replay",
}
#: the buffers were made during warm-up, in the ordinary pool: once their owner is freed, the
#: next eager tensor may take their bytes whatever pool the graph uses (so c does not help)
LIFETIME_ANSWER = "b"
