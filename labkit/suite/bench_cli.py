"""``labkit bench``: the decode benchmark table, its targets, and (``--record``) every record
the notebooks read, saved into a new run folder with provenance."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any
from labkit.support.env import contention_warning
from labkit.measure import records
from labkit.measure.recorder import Job, record_each
from labkit.measure.records import Bench, Compile, Decode, PoolMemory, view
from labkit.measure.results import load_result, new_run_dir, provenance_line, save_result
from labkit.teach.compile import NOT_SCORED, fair_compile_size

BENCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


def bench_table(decode: dict[str, Any]) -> list[dict]:
    """Rows (model, batch, µs per method, ratios) from ``measure_decode`` records."""
    rows = []
    for name, rec in decode.items():
        dec = view(rec, Decode)
        for i, b in enumerate(dec.batch_sizes):
            t = {m: st.median for m in dec.methods if (st := dec.times[m][i]) is not None}
            rows.append(records.bench_row(name, b, t))
    return rows


def evaluate_targets(decode: dict[str, Any], pool: Any | None,
                     compile_few: Any | None = None) -> list[dict]:
    """The targets, each with the measured value and pass/fail; the dispatcher is scored
    against torch.compile only where that is fair (:func:`compile_targets`)."""
    out: list[dict] = []

    def target(name: str, value: float, ok: bool) -> None:
        out.append({"target": name, "value": value, "pass": ok})

    recs = {m: view(decode[m], Decode) for m in ("small", "gpt2") if decode.get(m)}
    if compile_few:
        view(compile_few, Compile)  # SchemaError unless a compile record
    if "small" in recs:
        e, g, d = (recs["small"].at(m, 1) for m in ("eager", "graph", "dispatcher"))
        if e and g:
            target("graph >= 5x eager at batch 1 (4-layer)", e / g, e / g >= 5)
        if d and g:
            target("dispatcher within 5% of raw replay at batch 1 (4-layer)", d / g, d / g <= 1.05)
    out += compile_targets(decode.get("small"), compile_few)
    # the decode engine's targets: the cache read in place, host-side metadata
    for model, b, limit in (("small", 1, 180.0), ("gpt2", 1, 680.0), ("gpt2", 64, 1050.0)):
        g = recs[model].at("graph", b) if model in recs else None
        if g:
            target(f"FULL graph step <= {limit:.0f} us at batch {b} ({model})", g, g <= limit)
    for model, rec in recs.items():
        ratios = [rec.at("dispatcher", b) / rec.at("graph", b) for b in rec.batch_sizes
                  if b <= 128 and rec.at("dispatcher", b) and rec.at("graph", b)]
        if ratios:
            target(f"dispatcher <= 1.03x raw replay at every size ({model}, worst)",
                   max(ratios), max(ratios) <= 1.03)
    if pool:
        mem = view(pool, PoolMemory)
        ratio = mem.shared_largest_first.total_bytes / mem.largest_private_bytes
        target("shared pool largest-first <= 1.1x largest private pool", ratio, ratio <= 1.1)
        mib = _mib(mem.shared_largest_first.total_bytes)
        target(f"ten sizes, one shared pool largest-first <= 100 MiB ({len(mem.sizes)} sizes)",
               mib, mib <= 100)
    return out


COMPILE_TARGET = "dispatcher faster than torch.compile"
def compile_targets(*compile_records: Any) -> list[dict]:
    """Dispatcher vs torch.compile, scored only at each record's :func:`fair_compile_size`
    (``decode_*`` with a merged compile column or ``compile_*``; None skipped)."""
    out = []
    for raw in (r for r in compile_records if r is not None):
        b = fair_compile_size(raw)
        data = getattr(raw, "data", raw)
        kind = Compile if "capture_s" in data else Decode
        rec = view(raw, kind)
        if b is None or b not in rec.batch_sizes:
            continue
        i = rec.batch_sizes.index(b)
        c, d = (rec.times.get(m, [None] * (i + 1))[i] for m in ("compile", "dispatcher"))
        if c is not None and d is not None:
            c_us, d_us = c.median, d.median
            src = ("compile record, dispatcher with device metadata" if kind is Compile
                   else "decode record, dispatcher with host metadata")
            out.append({"target": f"{COMPILE_TARGET} at batch {b} (4-layer, {src}; compile "
                                  "static-shaped, no CUDA graph skipped)",
                        "value": d_us / c_us, "pass": d_us < c_us})
    return out


def format_rows(rows: list[dict]) -> str:
    if not rows:
        return "(no rows)"
    cols = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "PASS" if v else "FAIL"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return "" if v is None else str(v)


def _mib(b: int) -> float:
    return b / 2**20


#: records ``labkit bench --record`` adds, measured with their recipes
#: (:data:`labkit.measure.records.RECIPES`)
RECORDED = ("launch_overhead", "timeline_small", "pool_memory_small", "dispatcher_small",
            "compile_small", "pitfalls")


def plan(quick: bool, record: bool) -> list[Job]:
    """The measurements ``labkit bench`` makes (:class:`labkit.measure.recorder.Job`): the
    bench table at :data:`BENCH_SIZES` (``[1, 8, 64]`` when ``quick``), its compile column saved
    apart as ``compile_times_<preset>``, the rest by their recipes."""
    sizes = [1, 8, 64] if quick else list(BENCH_SIZES)
    repeats = 10 if quick else 30
    jobs = []
    for name in ("small", "gpt2"):
        jobs.append(Job(f"decode_{name}", {"batch_sizes": sizes, "repeats": repeats,
                                           "methods": ["eager", "graph", "dispatcher"]}))
        jobs.append(Job(f"decode_{name}", {"batch_sizes": sizes, "repeats": repeats,
                                           "methods": ["compile"]},
                        save_as=f"compile_times_{name}"))
    jobs.append(Job("pool_memory_gpt2"))
    if record:
        jobs += [Job(name) for name in RECORDED]
    return jobs


def merge_compile(decode: dict, compile_rec: dict) -> dict:
    """A decode record's ``data`` with the compile column (measured in its own process) merged
    in; sizes it did not measure get None."""
    view(decode, Decode)
    comp = view(compile_rec, Decode)
    out = dict(decode)
    by_size = dict(zip(comp.batch_sizes, compile_rec["times"]["compile"]))
    out["times"] = {**decode["times"],
                    "compile": [by_size.get(b) for b in decode["batch_sizes"]]}
    merged = view(out, Decode)
    out["tokens_per_s"] = {**decode.get("tokens_per_s", {}),
                           "compile": merged.tokens_per_s("compile")}
    out["speedup_vs_eager"] = {m: merged.speedup_vs_eager(m) for m in merged.methods}
    out["checks"] = {**decode["checks"], **compile_rec["checks"]}
    for key in ("compile_s", "cudagraph_skips"):
        if key in compile_rec:
            out[key] = compile_rec[key]
    out["compile_batch_sizes"] = comp.batch_sizes
    return out


def summarize_bench(run: Path, failed: list[str] | None = None,
                    params: dict | None = None) -> tuple[Path, dict]:
    """Merge the compile columns into the decode records and write the ``bench`` record of run
    folder ``run`` (no GPU needed); returns its path and the correctness gate."""
    res = run / "results"

    def rec(name: str):
        p = res / f"{name}.json"
        return load_result(p) if p.exists() else None

    decode = {}
    env = None
    for name in ("small", "gpt2"):
        d, c = rec(f"decode_{name}"), rec(f"compile_times_{name}")
        if d is None:
            continue
        env = env or d.env
        data = d.data
        if c is not None and "compile" not in data["times"]:
            data = merge_compile(data, c.data)
            save_result(f"decode_{name}", data, {**d.params, "compile": c.params}, run,
                        env=d.env)
        decode[name] = data
    pool_res = rec("pool_memory_gpt2")
    rows = bench_table(decode)
    few = rec("compile_small")
    targets = evaluate_targets(decode, pool_res, few)
    pool_rows = []
    if pool_res:
        mem = pool_res.record
        pool_rows = [{"layout": k, "total_MiB": _mib(v)} for k, v in mem.total_bytes().items()]
        pool_rows.append({"layout": "largest private pool",
                          "total_MiB": _mib(mem.largest_private_bytes)})
    checks = {f"{n}.{k}": v for n, r in decode.items() for k, v in view(r, Decode).checks.items()}
    # the correctness gate: graph and dispatcher tokens equal eager tokens. torch.compile's
    # fused bf16 kernels round differently, so its agreement is reported, not gated.
    gate = {k: v for k, v in checks.items() if "graph_tokens" in k or "dispatcher_tokens" in k}
    path = save_result("bench", {"rows": rows, "targets": targets, "pool": pool_rows,
                                 "checks": checks, "failed": failed or []},
                       params or {}, run, env=env)
    return path, gate


def contention_lines(run: Path) -> list[str]:
    """One line per record of ``run`` whose environment shows a busy host."""
    out = []
    for p in sorted((run / "results").glob("*.json")):
        warning = contention_warning(load_result(p).env)
        if warning:
            out.append(f"[labkit bench] {p.stem}: {warning}")
    return out


def run_bench(quick: bool = False, out_root: Path = Path("runs"), record: bool = False) -> int:
    """Run the benchmark on the GPU; print and save the table; returns an exit code. Each
    measurement runs in a fresh process (no CUDA error or CUDA Graph Tree reaches the others)."""
    import torch

    if not torch.cuda.is_available():
        print("labkit bench: no CUDA GPU here (torch.cuda.is_available() is False). The "
              "benchmark times CUDA graphs and needs an NVIDIA GPU; the recorded H200 results "
              "are in data/reference/h200/ (bench.json).", file=sys.stderr)
        return 2

    run = new_run_dir("bench", root=out_root)
    status = record_each(plan(quick, record), run,
                         echo=lambda line: print(f"[labkit bench] {line}", flush=True))
    failed = [name for name, state in status.items() if state != "ok"]
    path, gate = summarize_bench(run, failed, {"quick": quick, "record": record})
    result = load_result(path)
    rec = result.data  # printed as stored: format_rows shows the columns each row has
    print("\n".join(["", provenance_line(result), format_rows(rec["rows"]), "",
                     format_rows(rec["pool"]), "",
                     f"checks (tokens equal eager before timing): {rec['checks']}",
                     format_rows(rec["targets"])]))
    if failed:
        print("FAILED measurements:", ", ".join(failed))
    for line in contention_lines(run):
        print(line)
    print(f"\nsaved: {run}")
    return 0 if all(gate.values()) and not failed else 1


def _findings(d: Bench, compile_few: Compile | None) -> list[str]:
    """Headline sentences, every number read from the records."""
    rows = {(r.model, r.batch): r for r in d.rows}
    out = []
    s1, g1 = rows.get(("small", 1)), rows.get(("gpt2", 1))
    big = max((r for r in d.rows if r.model == "gpt2"), key=lambda r: r.batch, default=None)
    if s1 and g1 and big:
        out.append(f"Graph replay removes the host's launch cost: {s1.graph_speedup:.1f}x "
                   f"faster than eager at batch 1 for the 4-layer model, "
                   f"{g1.graph_speedup:.1f}x for the 12-layer one; the gain shrinks as the "
                   f"GPU's own work grows ({big.graph_speedup:.1f}x at batch {big.batch} "
                   "for the 12-layer model).")
    for model, label in (("small", "4-layer"), ("gpt2", "12-layer")):
        ov = [r.dispatcher_over_graph for r in d.rows
              if r.model == model and r.dispatcher_over_graph is not None]
        if ov:
            out.append(f"The padding dispatcher (validate, copy in, replay, copy out) costs "
                       f"{100 * (min(ov) - 1):.0f}-{100 * (max(ov) - 1):.0f}% over a bare "
                       f"replay for the {label} model.")
    pool = d.pool_mib()
    if pool:
        out.append(f"One shared pool captured largest-first holds "
                   f"{pool['shared_largest_first']:.0f} MiB, the largest single graph's pool "
                   f"({pool['largest private pool']:.0f} MiB); private pools hold "
                   f"{pool['private']:.0f} MiB; smallest-first "
                   f"{pool['shared_smallest_first']:.0f} MiB.")
    if compile_few:
        k = compile_few.kernels_per_step
        ratios = [records.ratio(c, g) for c, g in zip(compile_few.median_us("compile"),
                                                      compile_few.median_us("graph"))]
        sizes = compile_few.batch_sizes
        out.append(f"torch.compile(mode='reduce-overhead') fuses kernels ({k.get('compile')} "
                   f"GPU operations per step instead of {k.get('eager')}; "
                   f"{records.GPU_OPS_COUNTED}) and takes {ratios[0]:.2f}x "
                   f"the time of the hand-made graphs at batch {sizes[0]}, its first compiled "
                   "size (static shapes)"
                   + "".join(f"; {r:.2f}x at batch {b} (after a dynamic-shape recompile)"
                             for b, r in zip(sizes[1:], ratios[1:])) + ".")
        out.append(f"The compile_us column below compiled all {len({r.batch for r in d.rows})}"
                   " sizes in one process: shown, not scored. " + NOT_SCORED)
    return out


def markdown_summary(result, compile_few=None) -> str:
    """The README's reference-results block, generated from the ``bench`` record (and
    ``compile_small``), so that no number in the README is typed by hand."""
    d = view(result, Bench)
    few = view(compile_few, Compile) if compile_few is not None else None
    params = getattr(result, "params", None) or {}
    command = "labkit bench --quick --record" if params.get("quick") else "labkit bench --record"
    lines = [f"Recorded with `{command}`: {provenance_line(result)}.", ""]
    lines += [f"- {f}" for f in _findings(d, few)]
    if compile_few is not None:
        lines.append(f"- The two-size torch.compile figures come from the `{compile_few.name}` "
                     f"record (notebook 08): {provenance_line(compile_few)}.")
    lines += ["", "Decode step time (µs, CUDA-event median), bf16, random weights. Eager time is "
              "the host issuing every kernel from Python: it is host-bound and moves between "
              "runs on the same machine, so compare the ratios of one run, not eager times "
              "across runs:", ""]
    cols = ["model", "batch", "eager_us", "graph_us", "dispatcher_us", "compile_us",
            "graph_speedup", "dispatcher_over_graph"]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for r in d.rows:
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
    lines += ["", "Graph pool memory, 12-layer d=768 model, ten batch sizes 1…512:", "",
              "| layout | MiB |", "|---|---|"]
    lines += [f"| {r.layout} | {r.total_MiB:.0f} |" for r in d.pool]
    lines += ["", "Targets:", "", "| target | value | result |", "|---|---|---|"]
    targets = [(t.target, t.value, t.passed) for t in d.targets
               if not t.target.startswith(COMPILE_TARGET)]
    targets += [(t["target"], t["value"], t["pass"]) for t in compile_targets(compile_few)]
    lines += [f"| {name} | {value:.3g} | {'PASS' if ok else 'FAIL'} |"
              for name, value, ok in targets]
    return "\n".join(lines)


README_START = "<!-- bench:start (generated by scripts/update_readme.py; do not edit) -->"
README_END = "<!-- bench:end -->"


#: the records of notebook 12, in order (the longest, with two gpt2 compiles, last)
ROOFLINE_RECORDS = ("roofline_small", "multistep_small", "multistep_gpt2", "roofline_gpt2")


def run_roofline(out_root: Path = Path("runs")) -> int:
    """``labkit bench --roofline``: the records of notebook 12, each in its own process, into a
    new run folder; returns an exit code."""
    import torch

    if not torch.cuda.is_available():
        print("labkit bench --roofline: no CUDA GPU here (torch.cuda.is_available() is False); "
              "the recorded H200 references are in data/reference/h200/ (roofline_*.json, "
              "multistep_*.json).", file=sys.stderr)
        return 2
    run = new_run_dir("roofline", root=out_root)
    status = record_each(ROOFLINE_RECORDS, run)
    for name, state in status.items():
        print(f"{name}: {state}")
    print(f"\nsaved: {run}")
    return 0 if all(v == "ok" for v in status.values()) else 1


def update_readme(readme: Path, block: str) -> bool:
    """Replace the generated block in ``readme``; returns True when the file changed."""
    text = readme.read_text(encoding="utf-8")
    if README_START not in text or README_END not in text:
        raise ValueError(f"{readme} has no generated block; add the lines {README_START!r} "
                         f"and {README_END!r} where the table belongs")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    new = f"{head}{README_START}\n{block}\n{README_END}{tail}"
    if new != text:
        readme.write_text(new, encoding="utf-8")
        return True
    return False

