"""The parts that run the model: ``check_*`` (TP=N tokens equal TP=1 tokens) and ``decode_*``
(decode step times per batch size)."""

from __future__ import annotations

import torch

from labkit.runner import PaddingDispatcher
from labkit.graphs import capture_decode_graphs
from labkit.measure.bench import random_prompts, step_inputs
from labkit.measure.tp.rank import _noop, _Rank, _say, _time
from labkit.model import TinyGPT, build_model, generate, preset
from labkit.distributed.tp import SymmMemAllReduce, TensorParallelGPT


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
                disp = PaddingDispatcher(tp, sizes, capture=graphs is not None,
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
