"""Records ``tp_allreduce`` and ``tp_decode_<preset>``: tensor-parallel decode on ``N`` ranks
(notebook 14, ``labkit tp``).

Everything runs inside ranks started by :func:`labkit.launch.run_ranks` (NCCL, one GPU per
rank; gloo on CPU with tiny sizes, so the whole path is tested without a GPU). Each rank runs
the same *parts* in the same order (lockstep); a part that raises is recorded as a reason
(``errors``) and the next part still runs; every rank learns which parts failed on any rank
through a gloo control group (a rank never waits in a collective its peer skipped).
:func:`measure_tp` runs two launches: the process-group (NCCL) parts, then the
symmetric-memory parts (the riskier ones, which may be unavailable), each with its own
timeout, and merges them. Rank 0 writes what it has after every part, so a launch that times
out still yields the parts done before.

Parts and what they give:

* ``allreduce_pg`` / ``allreduce_symm``: all-reduce latency (µs per all-reduce, bf16) per
  message size: ``pg_eager`` (``dist.all_reduce`` issued one by one), ``pg_graph`` (the same,
  captured ``graph_ops`` times into one CUDA graph and replayed), ``one_shot_*`` and
  ``two_shot_*`` (``torch.ops.symm_mem.one_shot_all_reduce_out`` /
  ``two_shot_all_reduce_`` on a symmetric buffer, eager and captured). Every method is
  checked first (each rank adds ``rank + 1``; the sum must come out exact).
* ``check_pg`` / ``check_symm``: greedy tokens of the TP=N model equal the TP=1 model's
  (float32, the same seed) in every mode: eager, and the padding dispatcher replaying FULL
  graphs (per rank, in lockstep: host-side metadata, every rank the same bucket).
* ``decode_pg`` / ``decode_symm``: decode step time (µs, bf16) per batch size: ``tp1_eager``,
  ``tp1_graph`` (the whole model on each rank's GPU, timed at the same moment on every rank),
  ``tpN_eager``, ``tpN_graph`` (NCCL inside the graph), ``tpN_eager_noop`` and
  ``tpN_graph_noop`` (every all-reduce replaced by a no-op, the same graph otherwise: the
  compute share), ``tpN_graph_symm_mem`` (one-shot symmetric-memory all-reduce inside the
  graph). Communication per step = ``tpN_graph - tpN_graph_noop``.

The shutdown of each launch (graphs released, synchronize, barrier, destroy) is timed per
rank and stored under ``shutdown``.
"""

from __future__ import annotations

import importlib
import os
import pickle
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from labkit.checks import as_int, as_int_list
from labkit.dispatch import PaddingDispatcher
from labkit.graphs import capture_callable, capture_decode_graphs
from labkit.launch import RankError, RankTimeout, check_devices, default_backend, \
    rank_device, run_ranks
from labkit.measure.bench import random_prompts, step_inputs
from labkit.model import TinyGPT, build_model, generate, preset
from labkit.timing import Stats, time_cuda, time_host
from labkit.tp import SymmMemAllReduce, TensorParallelGPT, enable_symm_mem, \
    symm_mem_unavailable

#: the message the lessons quote: 12 KB, one all-reduce of gpt2 at batch 8 (8 x 768 bf16)
TARGET_ALLREDUCE_BYTES = 12288
#: message sizes of the all-reduce sweep (bytes): 2 KB ... 8 MB, and 12 KB (8 rows of gpt2)
ALLREDUCE_BYTES = (2048, 4096, 8192, 12288, 16384, 32768, 65536, 131072, 262144, 524288,
                   1048576, 2097152, 4194304, 8388608)
#: the quick sweep (notebook 14's live tier): every other size, and always the 12 KB target
QUICK_ALLREDUCE_BYTES = tuple(sorted(set(ALLREDUCE_BYTES[::2]) | {TARGET_ALLREDUCE_BYTES}))
PG_METHODS = ("pg_eager", "pg_graph")
SYMM_METHODS = ("one_shot_eager", "one_shot_graph", "two_shot_eager", "two_shot_graph")
#: the parts of each launch, in order: tokens checked before anything is timed
PG_PARTS = ("check_pg", "allreduce_pg", "decode_pg")
SYMM_PARTS = ("check_symm", "allreduce_symm", "decode_symm")


def decode_methods(world_size: int) -> list[str]:
    """The decode-step methods of a ``tp_decode`` record, in order."""
    n = f"tp{world_size}"
    return ["tp1_eager", "tp1_graph", f"{n}_eager", f"{n}_graph", f"{n}_eager_noop",
            f"{n}_graph_noop", f"{n}_graph_symm_mem"]


# ------------------------------------------------------------------------------ rank helpers


def _noop(x: torch.Tensor) -> torch.Tensor:
    """The all-reduce replaced by nothing: the step's compute alone."""
    return x


def _say(rank: int, text: str) -> None:
    if rank == 0:
        print(f"[labkit tp rank 0] {text}", flush=True)


def _time(fn: Callable[[], object], device: torch.device, repeats: int, inner: int) -> Stats:
    """GPU time per call (CUDA events) on CUDA, host time per call on CPU."""
    if device.type == "cuda":
        return time_cuda(fn, warmup=3, repeats=repeats, inner=inner)
    return time_host(fn, warmup=1, repeats=repeats, inner=inner)


def _reason(exc: BaseException) -> str:
    """One line for the record, the last frames for the log."""
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return f"{type(exc).__name__}: {exc}".strip()[:600] + " | " + "".join(tb[-3:])[-900:]


class _Rank:
    """What one rank collects: times, checks, errors; agreement over a gloo control group."""

    def __init__(self, rank: int, world_size: int, spec: dict) -> None:
        self.rank, self.world_size, self.spec = rank, world_size, spec
        self.device = rank_device()
        self.backend = dist.get_backend()
        self.ctrl = dist.new_group(backend="gloo") if self.backend != "gloo" else None
        self.symm_handles: list[Any] = []
        self.out: dict[str, Any] = {"rank": rank, "world_size": world_size,
                                    "backend": self.backend, "times": {}, "checks": {},
                                    "errors": {}, "skipped": {}, "parts_s": {},
                                    "notes": []}
        if self.device.type == "cuda":
            self.out["device"] = torch.cuda.get_device_name(self.device)
        else:
            self.out["device"] = "cpu"

    def agree(self, ok: bool) -> list[bool]:
        """Every rank's ``ok`` (a gloo all-gather: works while NCCL is wedged or busy)."""
        flags: list[Any] = [None] * self.world_size
        dist.all_gather_object(flags, bool(ok), group=self.ctrl)
        return [bool(f) for f in flags]

    def gather(self, value: Any) -> list[Any]:
        got: list[Any] = [None] * self.world_size
        dist.all_gather_object(got, value, group=self.ctrl)
        return got

    def barrier(self) -> None:
        """Line the ranks up on the host (between attempts only, never inside one)."""
        dist.barrier(group=self.ctrl)

    def attempt(self, key: str, fn: Callable[[], Any]) -> Any:
        """``fn()``; an exception is recorded as ``errors[key]`` (``None`` returned). Every
        rank then learns whether any rank failed: a failure elsewhere is recorded too."""
        value, ok = None, True
        try:
            value = fn()
        except Exception as exc:  # noqa: BLE001 - recorded, the next measurement runs
            ok = False
            self.out["errors"][key] = _reason(exc)
            _say(self.rank, f"{key} failed: {type(exc).__name__}: {exc}")
            if self.device.type == "cuda":
                try:
                    torch.cuda.synchronize()
                except Exception:  # noqa: BLE001 - a broken context stays broken
                    pass
        flags = self.agree(ok)
        if ok and not all(flags):
            bad = [r for r, f in enumerate(flags) if not f]
            self.out["errors"][key] = f"failed on rank(s) {bad}"
            value = None
        return value

    def save_partial(self) -> None:
        path = self.spec.get("partial")
        if self.rank != 0 or not path:
            return
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(self.out, f)
        os.replace(tmp, path)


def rank_main(rank: int, world_size: int, spec: dict) -> dict:
    """Run on every rank: the parts named in ``spec['parts']`` (see the module docstring), in
    order; returns this rank's times (``Stats`` as dicts), checks, errors and part seconds."""
    r = _Rank(rank, world_size, spec)
    for part in spec["parts"]:
        t0 = time.perf_counter()
        _say(rank, f"part {part} ...")
        r.attempt(f"part.{part}", lambda: _PARTS[part](r))
        r.out["parts_s"][part] = time.perf_counter() - t0
        r.save_partial()
    return r.out


# ------------------------------------------------------------------------------ all-reduce


def _symm_buffer(r: _Rank, numel: int, dtype: torch.dtype) -> tuple[torch.Tensor, str]:
    """A symmetric-memory buffer of ``numel`` values, rendezvous'd over the world group."""
    why = symm_mem_unavailable(r.device)
    if why:
        raise RuntimeError(f"symmetric memory is unavailable: {why}")
    symm_mem = importlib.import_module("torch.distributed._symmetric_memory")

    name = dist.group.WORLD.group_name
    enable_symm_mem(symm_mem, name)
    buf = symm_mem.empty(numel, dtype=dtype, device=r.device)
    r.symm_handles.append(symm_mem.rendezvous(buf, name))  # kept alive with the buffer
    buf.zero_()
    return buf, name


def _allreduce_ops(r: _Rank, kind: str, numel: int, bufs: dict) -> tuple[Callable[[], Any],
                                                                        Callable[[], torch.Tensor],
                                                                        bool]:
    """(operation, where its result is, whether it reduces in place) for one method kind."""
    if kind == "pg":
        x = bufs["x"][:numel]
        return (lambda: dist.all_reduce(x)), (lambda: x), True
    buf, name = bufs["symm"]
    b = buf[:numel]
    if kind == "one_shot":
        out = bufs["out"][:numel]
        if hasattr(torch.ops.symm_mem, "one_shot_all_reduce_out"):
            op = lambda: torch.ops.symm_mem.one_shot_all_reduce_out(b, "sum", name, out)  # noqa
        else:
            op = lambda: out.copy_(torch.ops.symm_mem.one_shot_all_reduce(b, "sum", name))  # noqa
        return op, (lambda: out), False
    return (lambda: torch.ops.symm_mem.two_shot_all_reduce_(b, "sum", name)), (lambda: b), True


def _fill(r: _Rank, kind: str, numel: int, bufs: dict, value: float) -> None:
    src = bufs["x"] if kind == "pg" else bufs["symm"][0]
    src[:numel].fill_(value)
    if kind == "one_shot":
        bufs["out"][:numel].zero_()


def _check_sum(r: _Rank, kind: str, numel: int, bufs: dict, run: Callable[[], Any],
               ops: int) -> bool:
    """Each rank puts ``rank + 1``; after ``ops`` reductions the result must be exact:
    ``S * N**(ops-1)`` in place (each pass sums the last sum), ``S`` out of place."""
    n = r.world_size
    s = n * (n + 1) / 2
    _fill(r, kind, numel, bufs, float(r.rank + 1))
    run()
    _, result, inplace = _allreduce_ops(r, kind, numel, bufs)
    want = s * n ** (ops - 1) if inplace else s
    ok = bool((result().float() == want).all())
    _fill(r, kind, numel, bufs, 0.0)
    if r.device.type == "cuda":
        torch.cuda.synchronize()
    return ok


def _sweep_method(r: _Rank, kind: str, graph: bool, bufs: dict) -> None:
    """Time one all-reduce method at every size; a size that fails is recorded, the next runs."""
    spec = r.spec
    method = f"{kind}_{'graph' if graph else 'eager'}"
    sizes = spec["sizes_bytes"]
    elem = bufs["elem"]
    col: list[dict | None] = [None] * len(sizes)
    r.out["times"][method] = col
    k = spec["graph_ops"]
    checked = False
    if graph and r.device.type != "cuda":
        r.out["skipped"][method] = "CUDA graphs need CUDA; on CPU only eager is timed"
        return
    for i, nbytes in enumerate(sizes):
        numel = nbytes // elem

        def one() -> dict:
            nonlocal checked
            op, _, _ = _allreduce_ops(r, kind, numel, bufs)
            if not graph:
                if not checked:
                    r.out["checks"][f"sum_exact.{method}"] = _check_sum(r, kind, numel, bufs,
                                                                         op, 1)
                    checked = True
                return _time(op, r.device, spec["repeats"], k).to_dict()

            def many() -> None:
                for _ in range(k):
                    op()

            cg = capture_callable(many, warmup=1, check_sync=False)
            try:
                if not checked:
                    r.out["checks"][f"sum_exact.{method}"] = _check_sum(
                        r, kind, numel, bufs, cg.graph.replay, k)
                    checked = True
                st = time_cuda(cg.graph.replay, warmup=2, repeats=spec["repeats"],
                               inner=spec["graph_replays"])
                return st.per(k).to_dict()  # one replay runs k all-reduces
            finally:
                cg.graph.reset()
                del cg

        col[i] = r.attempt(f"{method}.{nbytes}", one)
    _say(r.rank, f"{method}: " + ", ".join(
        f"{b // 1024}K {c['median']:.1f}us" for b, c in zip(sizes, col) if c))


def _allreduce_part(r: _Rank, kinds: Sequence[str]) -> None:
    spec = r.spec
    dtype = getattr(torch, spec["dtype"])
    elem = torch.empty((), dtype=dtype).element_size()
    numel = max(spec["sizes_bytes"]) // elem
    bufs: dict[str, Any] = {"elem": elem,
                            "x": torch.zeros(numel, dtype=dtype, device=r.device)}
    if any(k != "pg" for k in kinds):
        got = r.attempt("symm_mem.rendezvous", lambda: _symm_buffer(r, numel, dtype))
        if got is None:
            for k in kinds:
                for m in ("eager", "graph"):
                    r.out["errors"].setdefault(f"{k}_{m}", r.out["errors"].get(
                        "symm_mem.rendezvous", "symmetric memory unavailable"))
            return
        bufs["symm"] = got
        bufs["out"] = torch.zeros(numel, dtype=dtype, device=r.device)
    for kind in kinds:
        for graph in (False, True):
            _sweep_method(r, kind, graph, bufs)
    bufs.clear()
    r.symm_handles.clear()


# ------------------------------------------------------------------------------ models


def _models(r: _Rank, dtype: str, max_batch: int) -> tuple[TinyGPT, TensorParallelGPT]:
    spec = r.spec
    cfg = preset(spec["preset"], max_batch=max_batch, dtype=dtype, **spec.get("overrides", {}))
    full = build_model(cfg, r.device, seed=spec["seed"])
    tp = TensorParallelGPT(full)
    if r.device.type == "cuda":
        tp.warmup_collectives()
    return full, tp


def _use_symm_mem(r: _Rank, tp: TensorParallelGPT) -> None:
    cfg = tp.cfg
    tp.allreduce = SymmMemAllReduce(tp.group, cfg.max_batch * cfg.d_model, cfg.torch_dtype,
                                    r.device)


def _check_part(r: _Rank, symm: bool) -> None:
    """TP=N tokens equal TP=1 tokens (float32) eager and through the dispatcher's graphs."""
    spec = r.spec
    sizes = spec["check_sizes"]
    full, tp = _models(r, "float32", max(*sizes, spec["check_rows"]))
    tag = "symm_mem" if symm else "pg"
    if symm:
        r.attempt("symm_mem.check_model", lambda: _use_symm_mem(r, tp))
        if "symm_mem.check_model" in r.out["errors"]:
            return  # nothing to check: the errors say why
    prompts = random_prompts(full, spec["check_rows"], seed=spec["seed"])
    steps = spec["check_steps"]
    ref = generate(full, prompts, steps)
    modes = ["eager", "graph"] if r.device.type == "cuda" else ["eager", "dispatcher_eager"]
    for mode in modes:
        def run() -> tuple[list, dict | None]:
            if mode == "eager":
                got = generate(tp, prompts, steps)
                counts = None
            else:
                graphs = (capture_decode_graphs(tp, sizes, check_sync=False, progress=False)
                          if mode == "graph" else None)
                disp = PaddingDispatcher(tp, sizes, mode="graph" if graphs else "eager",
                                         graphs=graphs, progress=False)
                try:
                    got = generate(tp, prompts, steps,  # host-side metadata, as documented
                                   step_fn=lambda t, p, s: disp.step(t, p.cpu(), s.cpu()))
                    counts = dict(disp.counters.mode_steps)
                finally:
                    if graphs is not None:
                        disp.release()
            return got, counts

        done = r.attempt(f"check.{tag}.{mode}", run)
        # control-group collectives only between attempts: a rank that failed inside one
        # never leaves its peer waiting in a mismatched collective
        peers = r.gather(done)
        got = done[0] if done is not None else []
        pairs = [(a, b) for x, y in zip(ref, got) for a, b in zip(x, y)]
        r.out["checks"][f"token_agreement.{tag}.{mode}"] = \
            sum(a == b for a, b in pairs) / max(1, sum(len(x) for x in ref))
        r.out["checks"][f"ranks_in_lockstep.{tag}.{mode}"] = \
            done is not None and all(p == peers[0] for p in peers)
        r.out["checks"][f"tp_tokens_equal_tp1.{tag}.{mode}"] = done is not None and got == ref
        if mode == "graph":  # the padded batch really replayed captured graphs (FULL steps)
            r.out["checks"][f"dispatcher_replayed_graphs.{tag}"] = bool(
                done is not None and (done[1] or {}).get("FULL", 0) > 0)
    _say(r.rank, "checks: " + ", ".join(f"{k}={v}" for k, v in r.out["checks"].items()
                                         if k.startswith("tp_tokens")))


def _time_model(r: _Rank, model: TinyGPT, method: str, graph: bool) -> None:
    """Decode step time of ``model`` (eager or one FULL graph per size) at every batch size."""
    spec = r.spec
    sizes = spec["batch_sizes"]
    col: list[dict | None] = [None] * len(sizes)
    r.out["times"][method] = col
    if graph and r.device.type != "cuda":
        r.out["skipped"][method] = "CUDA graphs need CUDA; on CPU only eager is timed"
        return
    graphs = None
    if graph:
        r.barrier()
        graphs = r.attempt(f"{method}.capture", lambda: capture_decode_graphs(
            model, sizes, check_sync=False, progress=False))
        if graphs is None:
            return
    try:
        for i, b in enumerate(sizes):
            t, p, s = step_inputs(model, b, seed=spec["seed"])

            def one() -> dict:
                if graphs is not None:
                    graphs.copy_inputs(t, p, s)
                    fn = lambda: graphs.replay(b)  # noqa: E731
                else:
                    fn = lambda: model.decode_step(t, p, s, check=False)  # noqa: E731
                with torch.no_grad():
                    return _time(fn, r.device, spec["repeats"], spec["inner"]).to_dict()

            col[i] = r.attempt(f"{method}.{b}", one)
    finally:
        if graphs is not None:
            graphs.release()
    _say(r.rank, f"{method}: " + ", ".join(f"B{b} {c['median']:.0f}us"
                                            for b, c in zip(sizes, col) if c))


def _decode_part(r: _Rank, symm: bool) -> None:
    spec = r.spec
    n = f"tp{r.world_size}"
    full, tp = _models(r, spec["dtype"], max(spec["batch_sizes"]))
    if symm:
        got = r.attempt("symm_mem.model", lambda: _use_symm_mem(r, tp))
        if got is None and "symm_mem.model" in r.out["errors"]:
            r.out["errors"][f"{n}_graph_symm_mem"] = r.out["errors"]["symm_mem.model"]
            return
        _time_model(r, tp, f"{n}_graph_symm_mem", True)
        return
    _time_model(r, full, "tp1_eager", False)
    _time_model(r, full, "tp1_graph", True)
    del full
    _time_model(r, tp, f"{n}_eager", False)
    _time_model(r, tp, f"{n}_graph", True)
    tp.allreduce = _noop
    _time_model(r, tp, f"{n}_eager_noop", False)
    _time_model(r, tp, f"{n}_graph_noop", True)


_PARTS: dict[str, Callable[[_Rank], None]] = {
    "allreduce_pg": lambda r: _allreduce_part(r, ["pg"]),
    "allreduce_symm": lambda r: _allreduce_part(r, ["one_shot", "two_shot"]),
    "check_pg": lambda r: _check_part(r, False),
    "check_symm": lambda r: _check_part(r, True),
    "decode_pg": lambda r: _decode_part(r, False),
    "decode_symm": lambda r: _decode_part(r, True),
}


# ------------------------------------------------------------------------------ the parent


def default_spec(quick: bool = False, *, cpu: bool = False) -> dict:
    """The measurement parameters: gpt2 bf16 at batch 1, 8, 64, 128 on GPUs; the ``test``
    preset and a few small sizes on CPU (gloo), where only the plumbing is checked."""
    if cpu:
        return {"preset": "test", "overrides": {"n_head": 4, "d_model": 32, "max_seq": 32},
                "dtype": "float32", "batch_sizes": [1, 4], "sizes_bytes": [2048, 8192],
                "repeats": 3, "inner": 2, "graph_ops": 4, "graph_replays": 2,
                "check_sizes": [1, 2, 4], "check_rows": 3, "check_steps": 4, "seed": 0}
    return {"preset": "gpt2", "overrides": {"max_seq": 256}, "dtype": "bfloat16",
            "batch_sizes": [1, 8, 64, 128],
            "sizes_bytes": list(QUICK_ALLREDUCE_BYTES if quick else ALLREDUCE_BYTES),
            "repeats": 10 if quick else 20, "inner": 10, "graph_ops": 20, "graph_replays": 5,
            "check_sizes": [1, 2, 4, 8], "check_rows": 5, "check_steps": 6, "seed": 0}


def _launch(parts: Sequence[str], world_size: int, backend: str, spec: dict, timeout_s: float,
            partial: Path) -> tuple[list[dict], dict, str | None]:
    """Run ``parts`` on every rank; (per-rank results, launcher info, failure or None). On a
    failure the parts rank 0 finished are read back from its partial file."""
    info: dict = {}
    spec = {**spec, "parts": list(parts), "partial": str(partial)}
    t0 = time.perf_counter()
    try:
        res = run_ranks(rank_main, world_size, args=(spec,), backend=backend,
                        timeout_s=timeout_s, start_timeout_s=120, grace_s=10,
                        shutdown_timeout_s=30, info=info)
        info["wall_s"] = time.perf_counter() - t0
        return res, info, None
    except (RankError, RankTimeout) as exc:
        info["wall_s"] = time.perf_counter() - t0
        why = f"{type(exc).__name__}: {exc}"
        print(f"[labkit tp] launch of {list(parts)} failed: {why[:2000]}", flush=True)
        if partial.is_file():
            with open(partial, "rb") as f:
                return [pickle.load(f)], info, why
        return [], info, why


def _merge(results: list[dict], into: dict, methods: Sequence[str], n: int,
           keep: Callable[[str], bool]) -> None:
    """Rank 0's Stats per method (``times``), every rank's medians (``rank_medians``),
    checks that hold on every rank, errors of any rank (named); checks and errors only
    where ``keep(key)``."""
    if not results:
        return
    r0 = results[0]
    for m in methods:
        if m in r0["times"]:
            into["times"][m] = r0["times"][m]
            into["rank_medians"][m] = [[(res["times"][m][i] or {}).get("median")
                                        if m in res["times"] else None for res in results]
                                       for i in range(n)]
    for res in results:
        for k, v in res["checks"].items():
            if not keep(k):
                continue
            prev = into["checks"].get(k)
            if isinstance(v, bool):
                into["checks"][k] = v if prev is None else bool(prev and v)
            else:
                into["checks"][k] = v if prev is None else min(prev, v)
        for k, v in res["errors"].items():
            if not keep(k):
                continue
            into["errors"].setdefault(k, f"rank {res['rank']}: {v}")
        for k, v in res.get("skipped", {}).items():
            if keep(k):
                into["skipped"].setdefault(k, v)
        into["notes"].extend(res.get("notes", []))
    into.setdefault("parts_s", {}).update(r0.get("parts_s", {}))
    into["device"] = r0.get("device", into.get("device", ""))


def measure_tp(*, world_size: int = 2, backend: str | None = None, quick: bool = False,
               spec: dict | None = None, timeout_s: float = 150.0,
               symm_timeout_s: float = 90.0, scratch: str | os.PathLike[str] | None = None,
               log: Callable[[str], None] = print) -> tuple[dict, dict]:
    """Measure everything on ``world_size`` ranks; returns the data of ``tp_allreduce`` and
    ``tp_decode_<preset>`` (each with ``checks``, ``errors`` naming what failed and why, and
    per-rank shutdown times). Never raises for a failed part or launch: it is recorded."""
    world_size = as_int(world_size, "world_size", minimum=2,
                        fix="tensor parallelism needs 2 or more ranks")
    backend = default_backend() if backend is None else backend
    check_devices(world_size, backend)
    cpu = backend == "gloo"
    spec = dict(spec) if spec is not None else default_spec(quick, cpu=cpu)
    as_int_list(spec["batch_sizes"], "batch_sizes", minimum=1)
    as_int_list(spec["sizes_bytes"], "sizes_bytes", minimum=16)
    scratch = Path(scratch) if scratch is not None else Path(tempfile.gettempdir())
    scratch.mkdir(parents=True, exist_ok=True)
    sizes, batches = list(spec["sizes_bytes"]), list(spec["batch_sizes"])
    ar: dict[str, Any] = {"backend": backend, "world_size": world_size, "dtype": spec["dtype"],
                          "sizes_bytes": sizes, "graph_ops": spec["graph_ops"], "times": {},
                          "rank_medians": {}, "checks": {}, "errors": {}, "skipped": {},
                          "notes": [], "shutdown": {}, "launch": {}}
    dec: dict[str, Any] = {"backend": backend, "preset": spec["preset"], "dtype": spec["dtype"],
                           "world_size": world_size, "batch_sizes": batches,
                           "config": {"preset": spec["preset"], **spec.get("overrides", {})},
                           "times": {}, "rank_medians": {}, "checks": {}, "errors": {},
                           "skipped": {}, "notes": [], "shutdown": {}, "launch": {}}
    symm_why = None if not cpu else "symmetric memory needs CUDA and NCCL (this run is gloo)"
    for label, parts, limit in (("pg", PG_PARTS, timeout_s), ("symm_mem", SYMM_PARTS,
                                                               symm_timeout_s)):
        if label == "symm_mem" and symm_why:
            for m in SYMM_METHODS:
                ar["skipped"][m] = symm_why
            dec["skipped"][f"tp{world_size}_graph_symm_mem"] = symm_why
            continue
        log(f"[labkit tp] launch {label}: parts {list(parts)} on {world_size} ranks "
            f"({backend}), limit {limit:.0f} s")
        partial = scratch / f".tp-{label}-{os.getpid()}.partial"
        results, info, failure = _launch(parts, world_size, backend, spec, limit, partial)
        partial.unlink(missing_ok=True)
        for d in (ar, dec):
            d["shutdown"][label] = {str(k): v for k, v in info.get("shutdown", {}).items()}
            d["launch"][label] = {"wall_s": info.get("wall_s"),
                                  "shutdown_hung": info.get("shutdown_hung", []),
                                  "exit_codes": {str(k): v for k, v in
                                                 info.get("exit_codes", {}).items()},
                                  "failure": failure}
            if failure:
                d["errors"][f"launch.{label}"] = failure[:4000]
        _merge(results, ar, [*PG_METHODS, *SYMM_METHODS], len(sizes), _is_allreduce_key)
        _merge(results, dec, decode_methods(world_size), len(batches),
               lambda k: not _is_allreduce_key(k))
    for d, methods, n in ((ar, [*PG_METHODS, *SYMM_METHODS], len(sizes)),
                          (dec, decode_methods(world_size), len(batches))):
        for m in methods:  # every method has a column; None where it did not run (see errors)
            d["times"].setdefault(m, [None] * n)
        _split_errors(d)
    tokens = [v for k, v in dec["checks"].items() if k.startswith("tp_tokens_equal_tp1.")]
    dec["checks"]["tp_tokens_equal_tp1"] = bool(tokens) and all(tokens)
    sums = [v for k, v in ar["checks"].items() if k.startswith("sum_exact.")]
    ar["checks"]["sum_exact"] = bool(sums) and all(sums)
    return ar, dec


def _is_allreduce_key(key: str) -> bool:
    """Whether a check or error key belongs to the all-reduce sweep (else: to decode)."""
    head = key.split(".")[0]
    return head in PG_METHODS or head in SYMM_METHODS or key.startswith(
        ("sum_exact.", "symm_mem.rendezvous", "part.allreduce"))


def _split_errors(d: dict) -> None:
    """Errors are kept as they came (``method.size`` keys) and summed up per method: the
    first reason of any size under the method's own name."""
    for k in list(d["errors"]):
        head = k.split(".")[0]
        if head in d["times"] and head != k:
            d["errors"].setdefault(head, d["errors"][k])
