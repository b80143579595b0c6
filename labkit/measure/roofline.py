"""Records ``roofline_<preset>`` and ``multistep_<preset>``: how far a decode step is from what
the memory allows, and what several steps per graph buy (notebook 12).

``roofline_<preset>`` measures this GPU's copy bandwidth and bf16 matmul rate, then the decode
step per batch size for every variant of :data:`STEP_VARIANTS`, with each variant's set-up
seconds, pool bytes, GPU operations and graph launches per step (profiled). A new variant is one
entry ``STEP_VARIANTS["name"] = builder`` (``builder(model, batch_sizes) -> Runner``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Sequence

import torch

from labkit.checks import as_int, as_int_list, as_size_list
from labkit.roofline.conditional import conditional_support
from labkit.fused import make_fused_step
from labkit.kernels.step import make_triton_step
from labkit.graphs import GraphSet, capture_callable, capture_decode_graphs, gc_frozen, \
    pool_reserved_bytes
from labkit.measure import records
from labkit.measure.bench import _free, _need_cuda, _pool_segments, make_model, \
    random_prompts, step_inputs, token_agreement, tokens_per_s_of
from labkit.measure.opcount import gpu_busy_split, profile_call
from labkit.model import TinyGPT
from labkit.roofline.multistep import capture_multistep, multistep_decode
from labkit.timing import Stats, time_cuda, time_cuda_interleaved

def copy_bandwidth(nbytes: int = 2**30, repeats: int = 20) -> dict:
    """Copy bandwidth of this GPU: ``dst.copy_(src)`` of ``nbytes`` (read and written:
    ``gbps = 2 * nbytes / time``)."""
    _need_cuda("copy_bandwidth")
    nbytes = as_int(nbytes, "nbytes", minimum=2**20, fix="copy at least 1 MiB (1 GiB is usual)")
    s = _timed_copy(nbytes, repeats)  # its buffers are gone when it returns
    _free()
    return {"bytes": nbytes, "counted": "read + write", "copy": s.to_dict(),
            "gbps": 2 * nbytes / (s.median * 1e3)}


def _timed_copy(nbytes: int, repeats: int) -> Stats:
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    return time_cuda(lambda: dst.copy_(src), warmup=3, repeats=repeats, inner=5)


def matmul_rate(n: int = 8192, repeats: int = 10, dtype: torch.dtype = torch.bfloat16) -> dict:
    """Dense matmul rate of an ``n x n`` product (``tflops = 2 n^3 / time``)."""
    _need_cuda("matmul_rate")
    n = as_int(n, "n", minimum=256, fix="use a large square GEMM such as 8192")
    s = _timed_matmul(n, dtype, repeats)  # its matrices are gone when it returns
    _free()
    return {"n": n, "dtype": str(dtype).replace("torch.", ""), "time": s.to_dict(),
            "tflops": 2 * n**3 / (s.median * 1e6)}


def _timed_matmul(n: int, dtype: torch.dtype, repeats: int) -> Stats:
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    return time_cuda(lambda: torch.mm(a, b, out=c), warmup=3, repeats=repeats, inner=3)


@dataclass
class Runner:
    """One step variant built for a model: ``prepare(b, t, p, s)`` loads a batch and returns
    a call of one step; ``step_fn`` the step for token checks (``None``: eager)."""

    prepare: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], Callable[[], Any]]
    step_fn: Callable[..., torch.Tensor] | None = None
    sizes: list[int] | None = None
    info: dict = field(default_factory=dict)
    release: Callable[[], None] = lambda: None


StepBuilder = Callable[[TinyGPT, list[int]], Runner]


def eager_variant(model: TinyGPT, sizes: list[int]) -> Runner:
    """``model.decode_step`` as it is: the reference."""
    return Runner(prepare=lambda b, t, p, s: (lambda: model.decode_step(t, p, s)),
                  info={"setup_s": 0.0, "pool_bytes": None})


def graph_variant(model: TinyGPT, sizes: list[int]) -> Runner:
    """labkit's FULL capture: one graph per size, one shared pool, static logits buffer."""
    t0 = time.perf_counter()
    gs = capture_decode_graphs(model, sizes, pool="shared", progress=False)
    setup = time.perf_counter() - t0
    pool = pool_reserved_bytes(next(iter(gs.graphs.values())).pool)

    def prepare(b, t, p, s):
        gs.copy_inputs(t, p, s)
        return lambda: gs.replay(b)

    return Runner(prepare, graph_step(gs), info={"setup_s": setup, "pool_bytes": pool},
                  release=gs.release)


def graph_step(gs: GraphSet) -> Callable[..., torch.Tensor]:
    """``(tokens, positions, slots) -> logits`` through the graph of the batch's size."""
    def step(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        b = gs.copy_inputs(t, p, s)
        return gs.replay(b)[:b].clone()
    return step


def captured_step_variant(make_step: Callable[[TinyGPT], Callable[..., torch.Tensor]],
                          *, compile_first: bool = False) -> StepBuilder:
    """A builder that captures ``make_step(model)`` (``(tokens, positions, slots) -> logits``)
    per size into one shared pool, largest first; ``compile_first`` calls it twice per size
    first (a compiled step compiles there, outside the capture)."""

    def build(model: TinyGPT, sizes: list[int]) -> Runner:
        t0 = time.perf_counter()
        step = make_step(model)
        n, dev = max(sizes), model.device
        tokens = torch.zeros(n, dtype=torch.long, device=dev)
        positions = torch.zeros(n, dtype=torch.long, device=dev)
        slots = torch.full((n,), model.cfg.scratch_slot, dtype=torch.long, device=dev)
        if compile_first:
            for b in sizes:
                for _ in range(2):
                    step(tokens[:b], positions[:b], slots[:b])
            torch.cuda.synchronize()
        handle = torch.cuda.graph_pool_handle()
        graphs = {}
        with torch.no_grad(), gc_frozen():
            for b in sorted(sizes, reverse=True):
                graphs[b] = capture_callable(step, tokens[:b], positions[:b], slots[:b],
                                             pool=handle, check_sync=not compile_first,
                                             label=b)
        setup = time.perf_counter() - t0
        pool = pool_reserved_bytes(next(iter(graphs.values())).pool)

        def load(t, p, s) -> int:
            b = t.shape[0]
            tokens[:b].copy_(t)
            positions[:b].copy_(p)
            slots[:b].copy_(s)
            return b

        def prepare(b, t, p, s):
            load(t, p, s)
            return graphs[b].replay

        def step_fn(t, p, s):
            return graphs[load(t, p, s)].replay().clone()

        def release() -> None:
            graphs.clear()
            _free()

        return Runner(prepare, step_fn, sizes=sorted(sizes),
                      info={"setup_s": setup, "pool_bytes": pool}, release=release)

    return build


def _skips() -> int:
    from torch._dynamo.utils import counters

    return int(counters["inductor"].get("cudagraph_skips", 0))


def compile_reduce_overhead_variant(model: TinyGPT, sizes: list[int]) -> Runner:
    """``torch.compile(decode_step, fullgraph=True, dynamic=False, mode="reduce-overhead")``:
    each size compiled static-shaped and recorded by CUDA Graph Trees."""
    import torch._dynamo

    torch._dynamo.reset()
    skips0 = _skips()
    before = _pool_segments()
    compiled = torch.compile(model.decode_step, mode="reduce-overhead", fullgraph=True,
                             dynamic=False)

    def step(t, p, s):
        # always under no_grad: Dynamo guards the grad mode at entry, and generate() (token
        # checks) runs under no_grad; a mixed mode would recompile every size once more
        with torch.no_grad():
            torch.compiler.cudagraph_mark_step_begin()
            return compiled(t, p, s)

    t0 = time.perf_counter()
    for b in sizes:  # compile, warm up, record: three calls per size
        args = step_inputs(model, b, context=1)
        for _ in range(3):
            step(*args)
    torch.cuda.synchronize()
    setup = time.perf_counter() - t0
    pool = sum(v for k, v in _pool_segments().items() if k not in before) or None

    def release() -> None:
        torch._dynamo.reset()
        _free()

    return Runner(prepare=lambda b, t, p, s: (lambda: step(t, p, s)),
                  step_fn=lambda t, p, s: step(t, p, s).clone(), sizes=sorted(sizes),
                  info={"setup_s": setup, "pool_bytes": pool,
                        "cudagraph_skips": _skips() - skips0},
                  release=release)


def _compiled_default(model: TinyGPT) -> Callable[..., torch.Tensor]:
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(model.decode_step, mode="default", fullgraph=True, dynamic=False)

    def step(t: torch.Tensor, p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # one grad mode at entry for every call: no recompile
            return compiled(t, p, s)

    return step


#: Inductor's kernels (``mode="default"``, no CUDA Graph Trees) in labkit's own capture
compile_manual_graph_variant = captured_step_variant(_compiled_default, compile_first=True)

#: name -> builder; a new column is one line (``STEP_VARIANTS["fused"] = builder``)
STEP_VARIANTS: dict[str, StepBuilder] = {
    "eager": eager_variant,
    "graph": graph_variant,
    "fused": captured_step_variant(make_fused_step),
    "triton": captured_step_variant(make_triton_step),
    "compile_reduce_overhead": compile_reduce_overhead_variant,
    "compile_manual_graph": compile_manual_graph_variant,
    "compile_full_cache": compile_reduce_overhead_variant,
}
#: variants measured by default (eager first: it is timed before any profiler has run)
DEFAULT_VARIANTS = ("eager", "graph", "compile_reduce_overhead",
                    "compile_manual_graph", "compile_full_cache")
#: variants timed only at ``compile_sizes`` (``compile_full_cache``: at the first one only)
COMPILED = ("compile_reduce_overhead", "compile_manual_graph", "compile_full_cache")
#: variants measured on a second model whose KV cache holds only the compiled sizes: Inductor
#: rewrites the whole (functionalized) cache at every write (``compile_full_cache`` shows it)
SMALL_CACHE = ("compile_reduce_overhead", "compile_manual_graph")


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


def _check_args(batch_sizes, variants, compile_sizes, context, max_seq):
    sizes = sorted(set(as_size_list(batch_sizes, "batch_sizes",
                                    fix="give batch sizes such as [1, 8, 64]")))
    unknown = [v for v in variants if v not in STEP_VARIANTS]
    if unknown or not variants:
        raise ValueError(f"unknown step variant(s) {unknown or variants}; choose from "
                         f"{sorted(STEP_VARIANTS)}")
    csizes = sorted(set(as_int_list(compile_sizes, "compile_sizes", minimum=1)))
    missing = [b for b in csizes if b not in sizes]
    if missing:
        raise ValueError(f"compile_sizes {missing} are not in batch_sizes {sizes}; compile "
                         "only sizes that are also timed")
    as_int(context, "context", minimum=1, maximum=max_seq,
           fix=f"give the positions each row attends to, at most max_seq={max_seq}")
    return sizes, csizes


def measure_roofline(preset_name: str, batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64,
                                                                    128, 256),
                     variants: Sequence[str] = DEFAULT_VARIANTS,
                     compile_sizes: Sequence[int] = (1, 8), context: int = 128,
                     max_seq: int = 256, dtype: str = "bfloat16", repeats: int = 20,
                     inner: int = 5) -> dict:
    """Record ``roofline_<preset>``: bandwidth, matmul rate, and the decode step per variant
    and batch size at ``context`` positions (compiled variants only at ``compile_sizes``); a
    failing variant is recorded with its error. Tokens checked first; the static-graph
    variants sampled in turn (``interleaved``), the compiled ones one after another."""
    variants = list(variants)
    sizes, csizes = _check_args(batch_sizes, variants, compile_sizes, context, max_seq)
    _need_cuda("measure_roofline")
    bandwidth = copy_bandwidth()
    matmul = matmul_rate()
    model = make_model(preset_name, max_batch=max(sizes), dtype=dtype, max_seq=max_seq)
    small = None
    if set(variants) & set(SMALL_CACHE):  # the same seeded weights, a cache of csizes rows
        small = make_model(preset_name, max_batch=max(csizes), dtype=dtype, max_seq=max_seq)
    times: dict[str, list] = {name: [None] * len(sizes) for name in variants}
    info: dict[str, dict] = {}
    checks: dict[str, bool | float] = {}
    check_sizes = sorted({sizes[0], sizes[-1], *[b for b in (8,) if b in sizes]})

    def build(name: str) -> tuple[Runner | None, list[int]]:
        """The variant's runner, tokens checked (``None``: error in ``info``), and its sizes."""
        vmodel = small if name in SMALL_CACHE else model
        run_sizes = (csizes[:1] if name == "compile_full_cache" else
                     csizes if name in COMPILED else sizes)
        try:
            runner = STEP_VARIANTS[name](vmodel, run_sizes)
            run_sizes = runner.sizes or run_sizes
            if runner.step_fn is not None:
                agree = min(token_agreement(vmodel, runner.step_fn, b)
                            for b in run_sizes if b in check_sizes or name in COMPILED)
                checks[f"{name}_tokens_equal_eager"] = agree == 1.0
                checks[f"{name}_token_agreement"] = agree
            return runner, run_sizes
        except Exception as exc:
            info[name] = {"sizes": run_sizes, "error": _error(exc)}
            return None, run_sizes

    def finish(name: str, runner: Runner | None, run_sizes: list[int]) -> None:
        """Profile one call (after every timing: a profiler session slows later launches),
        record the info, release."""
        vmodel = small if name in SMALL_CACHE else model
        try:
            if runner is not None and name not in info:
                b0 = run_sizes[0]
                fn = runner.prepare(b0, *step_inputs(vmodel, b0, context=context))
                runner.info.update(profile_call(fn), profiled_batch=b0)
                info[name] = {**runner.info, "sizes": run_sizes, "error": None}
        except Exception as exc:
            info[name] = {"sizes": run_sizes, "error": _error(exc)}
        finally:
            info.setdefault(name, {"sizes": run_sizes, "error": "interrupted"})
            info[name].update(max_batch=vmodel.cfg.max_batch, cache_bytes=vmodel.cache_bytes())
            if runner is not None:
                runner.release()
            _free()

    together = [n for n in variants if n not in COMPILED]
    built = {n: build(n) for n in together}
    try:
        for i, b in enumerate(sizes):
            fns = {n: r.prepare(b, *step_inputs(small if n in SMALL_CACHE else model, b,
                                                context=context))
                   for n, (r, rs) in built.items() if r is not None and b in rs}
            try:
                got = time_cuda_interleaved(fns, warmup=5, repeats=repeats, inner=inner)
            except Exception as exc:
                for n in fns:
                    info[n] = {"sizes": built[n][1], "error": _error(exc)}
                    built[n][0].release()
                    built[n] = (None, built[n][1])
                continue
            for n, st in got.items():
                times[n][i] = st.to_dict()
    finally:
        for n, (r, rs) in built.items():
            finish(n, r, rs)
    for name in (n for n in variants if n in COMPILED):
        runner, run_sizes = build(name)
        vmodel = small if name in SMALL_CACHE else model
        try:
            if runner is not None:
                for i, b in enumerate(sizes):
                    if b in run_sizes:
                        fn = runner.prepare(b, *step_inputs(vmodel, b, context=context))
                        times[name][i] = time_cuda(fn, warmup=5, repeats=repeats,
                                                   inner=inner).to_dict()
        except Exception as exc:
            info[name] = {"sizes": run_sizes, "error": _error(exc)}
        finally:
            finish(name, runner, run_sizes)
    out = {
        "preset": preset_name, "dtype": dtype, "config": model.cfg.to_dict(),
        "context": int(context), "batch_sizes": sizes, "compile_sizes": csizes,
        "bandwidth": bandwidth, "matmul": matmul, "times": times, "variants": info,
        "checks": checks,
        "interleaved": [n for n in together if any(t is not None for t in times[n])],
    }
    model = small = None  # drop references before freeing
    _free()
    return out


def _prefilled(model: TinyGPT, b: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Prefill ``b`` random prompts into slots ``0..b-1``; (first new tokens, their
    positions, the slots)."""
    prompts = random_prompts(model, b, seed)
    dev = model.device
    first = [model.prefill(torch.tensor([p], device=dev), torch.tensor([i], device=dev))
             .argmax(-1) for i, p in enumerate(prompts)]
    return (torch.cat(first), torch.tensor([len(p) for p in prompts], device=dev),
            torch.arange(b, device=dev))


def measure_multistep(preset_name: str, batch_sizes: Sequence[int] = (1, 8, 64),
                      n_steps: int = 8, max_seq: int = 256, dtype: str = "bfloat16",
                      repeats: int = 20) -> dict:
    """Record ``multistep_<preset>``: µs per decode step when ``n_steps`` steps run as
    ``host_sync`` (tokens through the host each step), ``one_step_graphs`` (argmax fed back on
    the device) or ``multistep`` (one graph of ``n_steps`` steps), its tokens checked against
    eager steps; three controls that each take one difference between the last two away
    (:data:`~labkit.measure.records.MULTISTEP_CONTROLS`), all sampled in turn; per graph way,
    the GPU's time per step inside kernels and between them (``gpu_split``); and this
    PyTorch's conditional nodes (:mod:`labkit.roofline.conditional`)."""
    sizes = sorted(set(as_size_list(batch_sizes, "batch_sizes")))
    n_steps = as_int(n_steps, "n_steps", minimum=2, maximum=max_seq // 2,
                     fix="compare at least 2 steps per graph, at most max_seq // 2")
    _need_cuda("measure_multistep")
    model = make_model(preset_name, max_batch=max(sizes), dtype=dtype, max_seq=max_seq)
    times: dict[str, list] = {m: [] for m in (*records.MULTISTEP_METHODS,
                                              *records.MULTISTEP_CONTROLS)}
    gpu_split: dict[str, list] = {m: [] for m in times if m != "host_sync"}
    pool = torch.cuda.graph_pool_handle()
    equal = []
    for b in sizes:
        same, stats, split = _time_multistep(model, b, n_steps, pool, repeats)  # graphs die here
        equal.append(same)
        for name, st in stats.items():
            times[name].append(st.per(n_steps).to_dict())
        for name, d in split.items():
            gpu_split[name].append({**{k: v / n_steps for k, v in d.items()
                                       if k in ("span_us", "kernel_us", "kernels")},
                                    "by_kernel": {k: v / n_steps for k, v in
                                                  d["by_kernel"].items()}})
        _free()
    checks = {"multistep_tokens_equal_single_steps": all(equal)}
    out = {"preset": preset_name, "dtype": dtype, "batch_sizes": sizes, "n_steps": n_steps,
           "times": times, "checks": checks, "interleaved": True,
           "tokens_per_s": tokens_per_s_of(sizes, times), "gpu_split": gpu_split,
           "conditional": {**conditional_support(), "if_node_demo": if_node_demo_isolated()}}
    model = None
    _free()
    return out


def _time_multistep(model: TinyGPT, b: int, n_steps: int, pool: Any,
                    repeats: int) -> tuple[bool, dict[str, Stats], dict[str, dict]]:
    """At batch size ``b``: whether the ``n_steps``-step graph's tokens equal eager steps; the
    times of ``n_steps`` steps each way (:data:`~labkit.measure.records.MULTISTEP_METHODS`,
    then the controls of :data:`~labkit.measure.records.MULTISTEP_CONTROLS`), sampled in turn;
    and where each graph way spends its GPU time (:func:`~labkit.measure.opcount.
    gpu_busy_split`)."""
    one = capture_multistep(model, b, 1, pool=pool)
    many = capture_multistep(model, b, n_steps, pool=pool)
    # controls, each taking one difference between `one` and `many` away
    one_again = capture_multistep(model, b, 1, pool=pool)                   # a second capture
    still = capture_multistep(model, b, n_steps, pool=pool, advance=False)  # positions held
    alone = capture_multistep(model, b, n_steps,                             # a pool of its own
                              pool=torch.cuda.graph_pool_handle())
    t, p, s = _prefilled(model, b)
    ref = multistep_decode(model, t, p, s, n_steps).clone()  # eager: the one-step path
    many.load(t, p, s)
    equal = bool(torch.equal(many.replay(), ref))
    alone.load(t, p, s)
    equal = equal and bool(torch.equal(alone.replay(), ref))

    def host_sync() -> None:
        for _ in range(n_steps):
            ids = one.replay()[:, 0].tolist()  # to the host (a server checks stop tokens)
            one.tokens.copy_(torch.tensor(ids))  # and back

    def steps_of(g: Any) -> Callable[[], None]:
        def run() -> None:
            for _ in range(n_steps // g.n_steps):
                g.replay()
                g.feed_back()
        return run

    for g in (one, many, one_again, still, alone):
        g.load(t, p, s)
    fns = {"host_sync": host_sync, "one_step_graphs": steps_of(one), "multistep": steps_of(many),
           "one_step_recaptured": steps_of(one_again), "multistep_fixed_positions": steps_of(still),
           "multistep_own_pool": steps_of(alone)}
    # samples interleaved: a GPU clock change between series once read as a 3-10% loss
    stats = time_cuda_interleaved(fns, warmup=3, repeats=repeats, inner=1)
    split = {name: gpu_busy_split(fns[name]) for name in fns if name != "host_sync"}
    return equal, stats, split


def if_node_demo_isolated(timeout_s: float = 120.0) -> dict:
    """:func:`labkit.roofline.conditional.if_node_demo` in a fresh Python process (a CUDA error
    it leaves cannot touch this one); a failure is reported, not raised."""
    code = ("import json; from labkit.roofline.conditional import if_node_demo; "
            "print('IFNODE ' + json.dumps(if_node_demo()))")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"ok": False, "values": [], "error": f"timed out after {timeout_s:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("IFNODE "):
            return json.loads(line[len("IFNODE "):])
    return {"ok": False, "values": [],
            "error": f"the probe process exited with {proc.returncode}: "
                     f"{proc.stderr.strip()[-1000:]}"}
