"""The seed articles' claims that :mod:`labkit.teach.claims` does not cover, each with the
seed it comes from and a verdict computed from a record, or a primary source, or the reason
it cannot be checked here.

The three seed articles (000, 001, 002) are not stored in this repository. Which seed each
claim comes from is taken from issue 10's summary of them; ``quote`` holds only words that
summary gives in quotation marks (empty where it gives none), and ``claim`` is this suite's
paraphrase of the topic, not the article's wording. Every check reads records only (the
reference records of notebooks 01, 04-08 and 10-13); no measured number is typed in here.

    rows = evaluate_seed(records)          # records: name -> Result or data dict
    table(seed_rows(rows))

Claims, verdicts (:data:`labkit.teach.claims.VERDICTS`; ``false`` reads "does not hold") and
their evaluation are :mod:`labkit.teach.claims`' own.
"""

from __future__ import annotations

from functools import wraps
from typing import Any, Callable, Mapping, Sequence

from labkit.measure.records import (Dispatcher, LaunchOverhead, Modes, Multistep, Paged,
                                    Pitfalls, PoolMemory, PoolOverwrite, Roofline, view)
from labkit.measure.results import provenance_line
from labkit.teach.claims import CANNOT, MIB, Assessment, Claim, evaluate, saved_in_run
from labkit.teach.claims import needed_records as claims_needed_records
from labkit.teach.notebook import reference_or_none
from labkit.teach.lessons.roofline import conditional_verdict
from labkit.teach.serving_claims import check_breaker

#: what a claim's ``origin`` says: the seed, and that its text is not in the repository
ORIGIN = "seed {seed}, as summarised in issue 10 (the article is not stored here)"

#: primary sources the checks below cite (paths in the projects' repositories)
SRC_TORCH_GRAPHS = "pytorch/pytorch: torch/cuda/graphs.py (graph_pool_handle, graph(pool=...))"
SRC_TORCH_NOTES = "PyTorch docs, CUDA semantics > CUDA Graphs (graph memory management)"
SRC_VLLM_MODES = "vllm-project/vllm: vllm/config/compilation.py (CUDAGraphMode)"
SRC_VLLM_PAGED = ("vllm-project/vllm: csrc/attention/attention_kernels.cuh "
                  "(paged_attention_kernel reads block_tables)")
SRC_VLLM_PR = ("vllm-project/vllm pull request #1926 'Optimize model execution with CUDA "
               "graph' (merged; review of December 2023; adds enforce_eager)")


def _first(records: Mapping[str, Any], prefix: str, prefer: str) -> tuple[str, Any] | None:
    if prefer in records:
        return prefer, records[prefer]
    names = sorted(n for n in records if n.startswith(prefix))
    return (names[0], records[names[0]]) if names else None


class _Missing(Exception):
    """A record, or a case in it, that a check needs is not there: the claim is untested."""


def _needed(records: Mapping[str, Any], name: str, prefix: str | None = None) -> tuple[str, Any]:
    """The record a check needs: ``name``, else (with ``prefix``) the first record whose name
    starts with ``prefix``; :class:`_Missing` ("no <kind> record") when there is none."""
    if name in records:
        return name, records[name]
    found = _first(records, prefix, name) if prefix is not None else None
    if found is None:
        raise _Missing(f"no {(prefix or name).rstrip('_')} record")
    return found


def _pitfall(records: Mapping[str, Any], case: str) -> dict:
    """The details of pitfall ``case`` in the ``pitfalls`` record (:class:`_Missing` when the
    record or the case is not there)."""
    pits = view(_needed(records, "pitfalls")[1], Pitfalls).by_name()
    if case not in pits:
        raise _Missing(f"the pitfalls record has no {case} case")
    return pits[case].details


def _untested_when_missing(check: Callable[[Mapping[str, Any]], Assessment]
                           ) -> Callable[[Mapping[str, Any]], Assessment]:
    """``check``, answering ``untested`` (with the reason) where a record it needs is missing."""
    @wraps(check)
    def run(records: Mapping[str, Any]) -> Assessment:
        try:
            return check(records)
        except _Missing as missing:
            return Assessment("untested", {}, str(missing))
    return run


# ---------------------------------------------------------------------------- seed 002


@_untested_when_missing
def check_pointer_rebinding(records: Mapping[str, Any]) -> Assessment:
    """A rebound input is not seen by replay (the ``input_rebound`` pitfall)."""
    d = _pitfall(records, "input_rebound")
    ignored = d.get("stale") == d.get("previous_step") and d.get("stale") != d.get("expected")
    ev = {"expected": d.get("expected"), "replay_returned": d.get("stale"),
          "captured_input_ptr": d.get("captured_input_ptr"), "rebound_ptr": d.get("rebound_ptr"),
          "rebound_input_ignored": ignored, "copy_in_fixed": d.get("fixed") == d.get("expected")}
    if not ignored:
        return Assessment("partly", ev, "the record does not show a rebound input being "
                          "ignored; replay may have read the new tensor")
    return Assessment("false", ev, (
        f"after rebinding the input name to a tensor at {hex(ev['rebound_ptr'] or 0)} the replay "
        f"still read the captured address {hex(ev['captured_input_ptr'] or 0)} and returned "
        f"{ev['replay_returned']} instead of {ev['expected']}; nothing is rebound at a step: new "
        "inputs are copied into the captured buffers (copy-in " +
        ("gave the expected values)." if ev["copy_in_fixed"] else "was not recorded).")))


@_untested_when_missing
def check_conditional_nodes(records: Mapping[str, Any]) -> Assessment:
    """Conditional (IF / WHILE) graph nodes for varying lengths: what this PyTorch offers,
    from the ``conditional`` section of a ``multistep_<preset>`` record (notebook 12)."""
    name, rec = _needed(records, "multistep_gpt2", "multistep_")
    support = view(rec, Multistep).conditional
    if not support:
        return Assessment("untested", {"record": name}, "the record has no conditional probe")
    ev = {"record": name, **{k: support.get(k) for k in
                             ("torch", "cuda_runtime", "if_node", "while_node", "cuda_python")}}
    sentence = conditional_verdict(support).rstrip(".")
    if support.get("if_node") and support.get("while_node"):
        return Assessment("holds", ev, sentence + ".")
    return Assessment("partly", ev, (
        "CUDA has IF and WHILE nodes, but as recorded: " + sentence + ". Varying lengths are "
        "served here, as in vLLM and SGLang, by padding to a captured size and masking, not "
        "by conditional nodes."))


@_untested_when_missing
def check_paged_zero_copy(records: Mapping[str, Any]) -> Assessment:
    """PagedAttention "prefetch / zero-copy": what the paged record and vLLM's kernel show."""
    name, rec = _needed(records, "paged_gpt2", "paged_")
    d = view(rec, Paged)
    run = d.runs[-1]
    b = d.batch_sizes[-1]
    ip, ga, pg = run.at("slot_in_place", b), run.at("slot_gather", b), run.at("paged", b)
    if None in (ip, ga, pg):
        return Assessment("untested", {"record": name}, "the record lacks a layout's time")
    ev = {"record": name, "max_seq": run.max_seq, "batch": b, "slot_in_place_us": ip,
          "slot_gather_us": ga, "paged_us": pg, "paged_over_in_place": pg / ip,
          "paged_over_gather": pg / ga,
          "tokens_equal": d.checks.get("paged_tokens_equal_slot_gather")}
    return Assessment("partly", ev, (
        f"zero-copy holds only for a kernel that reads the block table: vLLM's paged attention "
        f"kernel loads each key and value from the block the table names, in place. labkit's "
        f"paged layout in plain PyTorch gathers the blocks first (a copy): at max_seq "
        f"{run.max_seq}, batch {b} it takes {pg:,.0f} µs, {pg / ip:.2f}x the slot cache read in "
        f"place and {pg / ga:.2f}x the slot cache gathered. Nothing is prefetched: the table is "
        "an input buffer read at replay."))


def check_introduced_version(records: Mapping[str, Any]) -> Assessment:
    """"introduced in v0.17.1": when vLLM added CUDA graphs (primary source, no record)."""
    return Assessment("false", {"source": SRC_VLLM_PR, "first_release": "not confirmed here"}, (
        "vLLM has captured decode graphs since pull request #1926 ('Optimize model execution "
        "with CUDA graph'), reviewed and merged in December 2023, which added enforce_eager; "
        "that is long before a v0.17.1. Which release first shipped it is not confirmed here."))


@_untested_when_missing
def check_launch_cost_zero(records: Mapping[str, Any]) -> Assessment:
    """Launch cost "goes to zero": GPU time per graph node vs per eager kernel."""
    d = view(_needed(records, "launch_overhead")[1], LaunchOverhead)
    node, eager = d.gpu_per_graph_node, d.gpu_per_eager_kernel
    host = d.host_per_launch
    if node is None or eager is None:
        return Assessment("untested", {}, "the record has no GPU-side figures (CPU run)")
    ev = {"gpu_per_graph_node_us": node.median, "gpu_per_eager_kernel_us": eager.median,
          "host_per_launch_us": host.median if host else None, "n_kernels": d.n_kernels,
          "eager_over_node": eager.median / node.median}
    return Assessment("false", ev, (
        f"{d.n_kernels} tiny kernels: {eager.median:.1f} µs each launched eagerly (host issue "
        f"{ev['host_per_launch_us']:.1f} µs per launch), {node.median:.2f} µs each as graph "
        f"nodes ({ev['eager_over_node']:.1f}x less). The host cost becomes one graph launch "
        "per step; the GPU still pays about a microsecond per node, not zero."))


# ---------------------------------------------------------------------------- seed 001


def check_mode_switch(records: Mapping[str, Any]) -> Assessment:
    """A user/kernel mode switch per launch: not visible in any record."""
    host = None
    if "launch_overhead" in records:
        lo = view(records["launch_overhead"], LaunchOverhead).host_per_launch
        host = lo.median if lo else None
    ev = {"host_per_launch_us": host}
    return Assessment(CANNOT, ev, (
        (f"the record times the host's cost per launch ({host:.1f} µs) " if host else
         "the records time the host's cost per launch ") +
        "but not where it goes: no system-call trace was recorded, and no primary source "
        "confirmed here says whether a launch enters the kernel."))


@_untested_when_missing
def check_graph_pool_class(records: Mapping[str, Any]) -> Assessment:
    """The ``GraphPool`` class and its sharing: PyTorch's API, pool_memory, pool_overwrite."""
    name, rec = _needed(records, "pool_memory_gpt2", "pool_memory_")
    pm = view(rec, PoolMemory)
    ev = {"record": name, "api": "torch.cuda.graph_pool_handle(), torch.cuda.graph(pool=...), "
          "CUDAGraph.pool()", "graph_pool_class_in_torch": False,
          "sum_private_mib": pm.private.total_bytes / MIB,
          "shared_mib": pm.shared_largest_first.total_bytes / MIB}
    text = (f"PyTorch has no GraphPool class: a pool is an opaque handle from "
            f"torch.cuda.graph_pool_handle() or CUDAGraph.pool(), passed as pool= to "
            f"torch.cuda.graph. Sharing is real: {len(pm.sizes)} graphs took "
            f"{ev['sum_private_mib']:.1f} MiB in private pools, {ev['shared_mib']:.1f} MiB in one.")
    if "pool_overwrite" in records:
        ow = view(records["pool_overwrite"], PoolOverwrite)
        ev.update(overwritten=ow.overwritten, same_block=ow.same_block)
        if ow.overwritten:
            text += (f" The price (notebook 04): graph B's output, {ow.b_after_replay_b} after "
                     f"its replay, read {ow.b_after_replay_a} after graph A replayed into the "
                     "same block; an output is valid until the next replay of any graph in "
                     "the pool, unless copied.")
    return Assessment("partly", ev, text)


def check_circuit_breaker(records: Mapping[str, Any]) -> Assessment:
    """The circuit breaker: :func:`labkit.teach.serving_claims.check_breaker` (notebook 13)."""
    return check_breaker(records)


@_untested_when_missing
def check_piecewise_meaning(records: Mapping[str, Any]) -> Assessment:
    """"piecewise" means capture the attention? vLLM's PIECEWISE leaves attention eager."""
    name, rec = _needed(records, "modes_gpt2", "modes_")
    d = view(rec, Modes)
    need = {"piecewise", "full", "attention_only"}
    if not need <= set(d.methods):
        return Assessment("untested", {"record": name}, "the record lacks a capture mode")
    b = d.batch_sizes[0]
    t = {m: d.at(m, b) for m in ("eager", "piecewise", "full", "attention_only")}
    ev = {"record": name, "batch": b, "step_us": t, "graphs_per_step": d.graphs_per_step}
    return Assessment("false", ev, (
        f"vLLM's PIECEWISE captures everything except attention, which runs eagerly between "
        f"the pieces: {d.graphs_per_step.get('piecewise')} graphs per step for {d.n_layer} "
        f"layers here, {t['piecewise']:,.0f} µs at batch {b} against FULL {t['full']:,.0f} µs "
        f"and eager {t['eager']:,.0f} µs. Capturing only the attention (the claim's reading, "
        f"{d.graphs_per_step.get('attention_only')} graphs) took {t['attention_only']:,.0f} µs, "
        "close to eager."))


@_untested_when_missing
def check_compiled_capture(records: Mapping[str, Any]) -> Assessment:
    """Capture of a compiled model: the roofline record's compile columns (notebook 08/12)."""
    name, rec = _needed(records, "roofline_small", "roofline_")
    d = view(rec, Roofline)
    cols = [m for m in ("compile_manual_graph", "compile_reduce_overhead") if m in d.methods]
    if not cols or "graph" not in d.methods:
        return Assessment("untested", {"record": name}, "the record has no compiled column")
    b = d.batch_sizes[0]
    t = {m: d.at(m, b) for m in ["eager", "graph", *cols]}
    ok = {m: d.checks.get(f"{m}_tokens_equal_eager") for m in cols}
    ev = {"record": name, "batch": b, "step_us": t, "tokens_equal_eager": ok}
    if not all(ok.values()):
        return Assessment("partly", ev, f"compiled and captured, but the token check failed "
                          f"or is missing: {ok}")
    parts = ", ".join(f"{m} {t[m]:,.0f} µs" for m in cols)
    return Assessment("holds", ev, (
        f"a compiled model can be captured: at batch {b} ({name}) {parts}, against labkit's "
        f"capture of the eager model {t['graph']:,.0f} µs and eager {t['eager']:,.0f} µs, with "
        "the same greedy tokens as eager. reduce-overhead is torch.compile capturing its own "
        "graphs; compile_manual_graph is the compiled function captured by hand."))


@_untested_when_missing
def check_autocast_capture(records: Mapping[str, Any]) -> Assessment:
    """Autocast during capture: the ``autocast`` pitfall (notebook 07)."""
    d = _pitfall(records, "autocast")
    ev = {k: d.get(k) for k in ("cache_on_stale", "cache_on_max_abs_diff", "cache_off_stale",
                                "cache_off_correct")}
    if not d.get("cache_on_stale"):
        return Assessment("holds", ev, "capture inside autocast replayed correctly after a "
                          "weight update in this record")
    return Assessment("partly", ev, (
        "autocast works under capture, with a catch: with autocast's weight cache on (the "
        "default) the graph keeps reading the bf16 copy made at warm-up, so after a weight "
        f"update the replay was stale (off by up to {d.get('cache_on_max_abs_diff')}); with "
        "cache_enabled=False it was " + ("correct." if d.get("cache_off_correct") else
                                         "not correct either.")))


# ---------------------------------------------------------------------------- seed 000


def check_coverage_rule(records: Mapping[str, Any]) -> Assessment:
    """The 80 % coverage rule and the memory / P99 table: what the records can say."""
    ev: dict[str, Any] = {}
    parts = []
    found = _first(records, "dispatcher_", "dispatcher_small")
    if found is not None:
        c = view(found[1], Dispatcher).counters
        if c.get("hit_rate") is not None:
            ev.update(record=found[0], hit_rate=c["hit_rate"], waste=c.get("waste"),
                      eager_fallbacks=c.get("eager_fallbacks"), steps=c.get("steps"))
            parts.append(f"the dispatcher run ({found[0]}) served {100 * c['hit_rate']:.0f}% of "
                         f"{c.get('steps')} steps from graphs, with "
                         f"{100 * (c.get('waste') or 0):.0f}% padded rows")
    pool = _first(records, "pool_memory_", "pool_memory_gpt2")
    if pool is not None:
        pm = view(pool[1], PoolMemory)
        ev["pool_mib_per_size"] = {b: v / MIB for b, v in pm.private.per_size_bytes.items()}
        parts.append(f"{pool[0]} gives the pool memory of each of {len(pm.sizes)} sizes")
    return Assessment(CANNOT, ev, (
        "; ".join(parts) + (". " if parts else "") +
        "No record runs the rule's size set, and the seed's memory and P99 figures belong to "
        "its own unnamed model and hardware: the rule is a heuristic to evaluate on a trace "
        "(notebook 06), and the table cannot be reproduced here."))


def check_replay_allocates(records: Mapping[str, Any]) -> Assessment:
    """"replay still handles allocation": replay allocates nothing; the pool is reserved at
    capture (pool growth per capture; the same output address at every replay)."""
    found = _first(records, "pool_memory_", "pool_memory_gpt2")
    if found is None and "pitfalls" not in records:
        return Assessment("untested", {}, "needs a pool_memory or pitfalls record")
    ev: dict[str, Any] = {}
    text = []
    if found is not None:
        pm = view(found[1], PoolMemory)
        growth = pm.shared_smallest_first.growth_bytes
        ev.update(record=found[0], pool_mib_after_each_capture=[growth[b] / MIB for b in
                                                                sorted(growth)])
        text.append(f"{found[0]}: the shared pool reached "
                    f"{pm.shared_smallest_first.total_bytes / MIB:.1f} MiB during capture")
    if "pitfalls" in records:
        addr = view(records["pitfalls"], Pitfalls).address_demo
        if addr and "error" not in addr:
            ev.update(replays=len(addr.get("replay_output_ptrs", [])),
                      same_address=bool(addr.get("identical_across_replays")))
            text.append(f"a graph's output sat at the same address at each of {ev['replays']} "
                        "replays" if ev["same_address"] else "the output address moved")
    verdict = "false" if ev.get("same_address", True) else "partly"
    return Assessment(verdict, ev, "; ".join(text) + ". Replay launches the captured kernels "
                      "on memory reserved at capture; it calls no allocator (PyTorch's CUDA "
                      "Graphs notes: the pool's memory is kept for the graph's replays).")


# ---------------------------------------------------------------------------- the list


def _claim(cid: str, seed: str, text: str, records: Sequence[str], check: Callable,
           measurement: str, sources: Sequence[str] = (), quote: str = "",
           any_of: bool = True) -> Claim:
    return Claim(cid, text, measurement, tuple(records), check, any_of=any_of,
                 sources=tuple(sources), quote=quote, origin=ORIGIN.format(seed=seed),
                 context=f"seed {seed}")


SEED_CLAIMS: tuple[Claim, ...] = (
    _claim("002-pointer-rebinding", "002", "Inputs are passed to a graph by rebinding its "
           "pointers at each step.", ("pitfalls",), check_pointer_rebinding,
           "the input_rebound pitfall: replay after rebinding the input name"),
    _claim("002-conditional-nodes", "002", "Conditional graph nodes handle varying lengths.",
           ("multistep_gpt2", "multistep_small"), check_conditional_nodes,
           "notebook 12's probe of IF / WHILE node support in this PyTorch",
           sources=("labkit/conditional.py",)),
    _claim("002-paged-zero-copy", "002", "PagedAttention prefetches blocks, zero-copy.",
           ("paged_gpt2",), check_paged_zero_copy,
           "replay time of the slot cache read in place, gathered, and the paged cache",
           sources=(SRC_VLLM_PAGED,), quote="prefetch / zero-copy"),
    _claim("002-introduced-version", "002", "vLLM introduced CUDA graphs in v0.17.1.", (),
           check_introduced_version, "vLLM's history", sources=(SRC_VLLM_PR,),
           quote="introduced in v0.17.1"),
    _claim("002-launch-cost-zero", "002", "With a graph the launch cost goes to zero.",
           ("launch_overhead",), check_launch_cost_zero,
           "GPU time per eager kernel vs per graph node, 200 tiny kernels",
           quote="goes to zero"),
    _claim("001-mode-switch", "001", "Each kernel launch costs a user/kernel mode switch.",
           ("launch_overhead",), check_mode_switch, "host time per launch"),
    _claim("001-graph-pool", "001", "A GraphPool class lets graphs share one memory pool.",
           ("pool_memory_gpt2", "pool_memory_small", "pool_overwrite"), check_graph_pool_class,
           "PyTorch's pool API; private vs shared pool bytes; the overwrite case",
           sources=(SRC_TORCH_GRAPHS, SRC_TORCH_NOTES)),
    _claim("001-circuit-breaker", "001", "A circuit breaker that turns graphs off when the "
           "hit rate collapses keeps latency safe.", ("serve_capped", "serve_breaker"),
           check_circuit_breaker, "bursty trace with graph misses, breaker off vs on",
           any_of=False),
    _claim("001-piecewise", "001", "'Piecewise' means capturing the attention.",
           ("modes_gpt2", "modes_small"), check_piecewise_meaning,
           "step time of FULL, PIECEWISE (attention eager) and attention-only graphs",
           sources=(SRC_VLLM_MODES,), quote="piecewise"),
    _claim("001-compiled-capture", "001", "A torch.compile'd model can be captured.",
           ("roofline_small", "roofline_gpt2"), check_compiled_capture,
           "the roofline record's compiled columns and their token checks"),
    _claim("001-autocast", "001", "Capture can run under autocast.", ("pitfalls",),
           check_autocast_capture, "the autocast pitfall: replay after a weight update"),
    _claim("000-coverage-80", "000", "Capture the most frequent sizes until 80% cumulative; "
           "a table of memory and P99 per choice.",
           ("dispatcher_small", "pool_memory_gpt2", "pool_memory_small"), check_coverage_rule,
           "graph hit rate and padding of a dispatcher run; pool memory per size",
           quote="most frequent sizes until 80% cumulative"),
    _claim("000-replay-allocates", "000", "Replay still handles allocation.",
           ("pool_memory_gpt2", "pool_memory_small", "pitfalls"), check_replay_allocates,
           "pool size after each capture; output address at each replay",
           sources=(SRC_TORCH_NOTES,), quote="replay still handles allocation"),
)


def seed_of(c: Claim) -> str:
    """The seed number a claim comes from ("000", "001" or "002")."""
    return c.id.split("-", 1)[0]


def evidence_of(c: Claim) -> str:
    """What a claim is checked against: its records, else its primary sources."""
    return ", ".join(c.records) or "; ".join(c.sources)


def evaluate_seed(records: Mapping[str, Any],
                  claims: Sequence[Claim] = SEED_CLAIMS) -> list[dict[str, Any]]:
    """One dict per claim: :func:`labkit.teach.claims.evaluate`'s (id, claim, quote, origin,
    records, verdict, evidence, explanation ...) with the claim's ``seed`` and what it is
    ``checked_against``."""
    return [{**evaluate(c, records), "seed": seed_of(c), "checked_against": evidence_of(c)}
            for c in claims]


def seed_rows(results: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Table rows: claim, seed, verdict, evidence (record or source), one sentence."""
    return [{"claim": r["claim"] + (f' ("{r["quote"]}")' if r["quote"] else ""),
             "seed": r["seed"], "verdict": r["verdict"], "evidence": r["checked_against"],
             "why": r["explanation"]} for r in results]


def needed_records(claims: Sequence[Claim] = SEED_CLAIMS) -> list[str]:
    """Every record name the seed claims read, in order."""
    return claims_needed_records(claims)


def gather_records(ctx: Any, names: Sequence[str] | None = None) -> dict[str, Any]:
    """The records the seed claims read, measuring nothing: on the GPU tier a record an
    earlier notebook saved in this run folder, else the recorded reference (``None`` where
    there is none; that claim is then ``untested``). Prints where each came from."""
    out: dict[str, Any] = {}
    for name in names or needed_records():
        out[name] = saved_in_run(ctx, name)
        if out[name] is not None:
            where = "measured earlier in this run"
        else:
            out[name] = reference_or_none(ctx, name)
            where = "recorded reference" if out[name] is not None else "not recorded"
        line = provenance_line(out[name]) if out[name] is not None else ""
        print(f"{name}: {where}" + (f" ({line})" if line else ""))
    return out


__all__ = ["SEED_CLAIMS", "evaluate_seed", "seed_rows", "needed_records", "seed_of",
           "evidence_of", "gather_records"]
