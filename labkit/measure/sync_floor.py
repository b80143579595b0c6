"""What the persistent step's synchronisation costs with no work around it (notebook 17):
graphs of launches that do nothing but what each schedule of the Triton step does to order
its work, replayed in turn on a GPU.

Per preset (``L`` layers), one CUDA graph each:

- ``kernels``: ``5 L + 1`` empty launches, the plain step's kernel boundaries;
- ``kernels_pdl``: the same launched with programmatic dependent launch, each waiting for
  the one before and then releasing the next, the PDL step's;
- ``launches``: ``L + 1`` empty launches, the persistent step's;
- ``barriers``: the persistent step's ``L`` layer launches, each meeting at its four counter
  barriers (:mod:`labkit.kernels.sync_floor`, one program per SM, cooperative, one counter
  per layer as the step has), then one empty launch (the LM head's place);
- ``barriers_2``: the same at two programs per SM;
- ``barriers_acquire``: ``barriers`` with every poll an acquire load
  (``TritonStep(poll="acquire")``);
- ``kernels_plain``: ``kernels`` launched as the plain step launches, not cooperatively;
- ``kernels_one``: ``kernels_plain`` with one program a launch instead of one per SM;
- ``chain``: ``barriers`` with the programs also passing a ``d_model``-wide float32 row between
  the stages, each reading all of it and writing its share of the next
  (:func:`labkit.kernels.sync_floor.exchange_row`): the step's chain of dependencies with no
  weights to read, the least any schedule that makes the grid meet between stages can take;
- ``barriers_<n>``, ``n`` in :data:`FAN_IN`: ``barriers`` with ``n`` programs a launch, so
  that ``n`` arrivals make a barrier (what a barrier costs as a function of how many
  programs meet at it: the question a counter per producer asks);

and, replayed in the same rounds, the three steps whose synchronisation they are: the plain
Triton step (``triton``), the PDL one (``triton_pdl``) and the persistent one
(``triton_persistent``, one program per SM), the persistent step polling with acquire
loads alone (``triton_persistent_acquire``) and the one with a counter per stage instead of
the grid's barriers (``triton_persistent_stage``, ``TritonStep(counters="stage")``),
each a graph of one batch size (``batch``, bf16, every row at ``context`` positions), their
graph's greedy tokens first checked equal to the eager step's.

Every launch has one program per SM (two for ``barriers_2``, fewer where named), and all
but ``kernels_plain`` and ``kernels_one`` are cooperative, as the persistent step's are.
Before anything is timed each graph is replayed once and every layer's counter must have
grown by exactly four arrivals of every program (all the barriers were met), and the
``chain`` graph's rows must have settled where its stages lead (:func:`settled_row`: the
exchanges ran); after the timing again, for every replay.
``python -m labkit.measure.sync_floor OUT.json [BATCH]`` adds a run to the list at
``OUT.json`` (GPU, driver, versions, date, commit with it); :func:`sync_summary` derives
what one barrier and one kernel boundary cost from it.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch

from labkit.checks import as_int
from labkit.graphs import capture_decode_graphs
from labkit.kernels.step import BARRIERS, kernels_per_step, make_triton_step
from labkit.kernels.waits import READY, READY_ACQUIRE
from labkit.measure.bench import _need_cuda, make_model, step_inputs
from labkit.measure.fused_bench import same_tokens
from labkit.measure.roofline import graph_step
from labkit.measure.triton_bench import _need_compiled, _versions
from labkit.model import PRESETS
from labkit.runner import triton_schedule
from labkit.support.env import environment_record
from labkit.timing import time_cuda_interleaved

#: programs a launch of the ``barriers_<n>`` graphs
FAN_IN: tuple[int, ...] = (8, 32, 64)
#: the synchronisation graphs timed per preset, in the order they are replayed in a round
VARIANTS: tuple[str, ...] = ("kernels", "kernels_pdl", "launches", "barriers", "barriers_2",
                             "barriers_acquire", "kernels_plain", "kernels_one", "chain",
                             *(f"barriers_{n}" for n in FAN_IN))
#: the steps replayed after them in each round
STEPS: tuple[str, ...] = ("triton", "triton_pdl", "triton_persistent",
                          "triton_persistent_acquire", "triton_persistent_stage")


def _kernel() -> Any:
    return importlib.import_module("labkit.kernels.sync_floor").sync_kernel


def _sm_count() -> int:
    return int(torch.cuda.get_device_properties(0).multi_processor_count)


class _Graph:
    """One variant's launches captured in a CUDA graph; ``runs`` counts its replays."""

    def __init__(self, launches: Callable[[], None]) -> None:
        launches()  # compile and warm up outside the capture
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            launches()
        self.runs = 1  # the eager warm-up

    def replay(self) -> None:
        self.graph.replay()
        self.runs += 1


def settled_row(d_model: int, device: Any = "cpu") -> torch.Tensor:
    """Where the ``chain`` graph's two rows settle (:func:`labkit.kernels.sync_floor.
    exchange_row`): ``(d - 1) / 2 + column``."""
    return (d_model - 1) / 2 + torch.arange(d_model, dtype=torch.float32, device=device)


def _variants(n_layer: int, d_model: int,
              sm: int) -> tuple[dict[str, _Graph], dict[str, tuple[Any, int]], torch.Tensor]:
    """The graphs of :data:`VARIANTS` for an ``n_layer``-layer step of ``d_model`` features,
    per barrier variant its counters and programs, and the ``chain`` graph's two rows."""
    kernel = _kernel()
    dev = torch.device("cuda")
    empty = torch.zeros(1, dtype=torch.int64, device=dev)

    row = torch.zeros(2, d_model, dtype=torch.float32, device=dev)
    block_row = 1 << (d_model - 1).bit_length()

    def launch(counter: torch.Tensor, programs: int, barriers: int, pdl: bool = False,
               ready: int = READY, cooperative: bool = True, chain: bool = False,
               first: int = 0) -> None:
        if pdl:
            kernel[(programs,)](counter, programs, BARRIERS=0, PDL=True, launch_pdl=True)
            return
        extra: dict[str, Any] = ({"row_ptr": row, "first": first, "ROW": d_model,
                                  "BLOCK_ROW": block_row} if chain else {})
        if cooperative:
            extra["launch_cooperative_grid"] = True
        kernel[(programs,)](counter, programs, BARRIERS=barriers, READY=ready, **extra)

    def plain(count: int, pdl: bool = False, programs: int = sm,
              cooperative: bool = True) -> Callable[[], None]:
        def run() -> None:
            for _ in range(count):
                launch(empty, programs, 0, pdl, cooperative=cooperative)
        return run

    counters: dict[str, tuple[Any, int]] = {}

    def layers(programs: int, name: str, poll: int = READY,
               chain: bool = False) -> Callable[[], None]:
        ready = torch.zeros(n_layer, dtype=torch.int64, device=dev)
        counters[name] = (ready, programs)

        def run() -> None:
            for i in range(n_layer):
                launch(ready[i:i + 1], programs, BARRIERS, ready=poll, chain=chain,
                       first=(BARRIERS + 1) * i)
            launch(empty, sm, 0)
        return run

    graphs = {"kernels": _Graph(plain(kernels_per_step(n_layer))),
              "kernels_pdl": _Graph(plain(kernels_per_step(n_layer), pdl=True)),
              "launches": _Graph(plain(kernels_per_step(n_layer, "persistent"))),
              "barriers": _Graph(layers(sm, "barriers")),
              "barriers_2": _Graph(layers(2 * sm, "barriers_2")),
              "barriers_acquire": _Graph(layers(sm, "barriers_acquire", poll=READY_ACQUIRE)),
              "kernels_plain": _Graph(plain(kernels_per_step(n_layer), cooperative=False)),
              "kernels_one": _Graph(plain(kernels_per_step(n_layer), programs=1,
                                          cooperative=False)),
              "chain": _Graph(layers(sm, "chain", chain=True))}
    for n in FAN_IN:
        graphs[f"barriers_{n}"] = _Graph(layers(n, f"barriers_{n}"))
    return graphs, counters, row


def _counters_met(graphs: Mapping[str, _Graph], counters: Mapping[str, tuple[Any, int]],
                  row: torch.Tensor) -> bool:
    """Whether every layer's counter holds four arrivals of every program per run, and the
    ``chain`` graph's rows settled where every stage reading its predecessors' row leads."""
    torch.cuda.synchronize()
    settled = settled_row(row.shape[1], row.device).expand_as(row)
    return all(bool((ready == BARRIERS * programs * graphs[name].runs).all())
               for name, (ready, programs) in counters.items()) \
        and torch.allclose(row, settled, rtol=1e-5, atol=1e-3)


def _step_graphs(name: str, batch: int, context: int) -> tuple[dict[str, Any], dict[str, bool]]:
    """The steps' graphs of ``batch`` rows of preset ``name`` (inputs copied in, every row
    at ``context`` positions), and whether each graph's greedy tokens equal its eager step's."""
    model = make_model(name, max_batch=batch, max_seq=256)
    graphs, equal = {}, {}
    for step_name in STEPS:
        if step_name == "triton_persistent_acquire":
            step = make_triton_step(model, schedule="persistent", poll="acquire")
        elif step_name == "triton_persistent_stage":
            step = make_triton_step(model, schedule="persistent", counters="stage")
        else:
            step = make_triton_step(model,
                                    schedule=triton_schedule(step_name))  # type: ignore[arg-type]
        gs = capture_decode_graphs(model, [batch], step=step, progress=False)
        equal[step_name] = same_tokens(model, step, graph_step(gs), batch, 8)
        gs.copy_inputs(*step_inputs(model, batch, context=context))
        graphs[step_name] = gs
    return graphs, equal


def measure_sync_floor(presets: Sequence[str] = ("small", "gpt2"), *, batch: int = 1,
                       context: int = 128, repeats: int = 30, inner: int = 20,
                       log: Callable[[str], None] | None = None) -> dict:
    """Per preset the replay times of the graphs of :data:`VARIANTS` and :data:`STEPS`
    (:meth:`Stats.to_dict`, µs), replayed in turn ``repeats`` rounds of ``inner`` replays
    after one replay each checked the barriers and the steps' tokens. ``log``: told what
    starts (capturing, timing) and when, if given."""
    _need_cuda("measure_sync_floor")
    _need_compiled()
    repeats = as_int(repeats, "repeats", minimum=3)
    inner = as_int(inner, "inner", minimum=1)
    batch = as_int(batch, "batch", minimum=1)
    sm = _sm_count()
    out: dict[str, Any] = {"sm_count": sm, "barriers_per_layer": BARRIERS, "repeats": repeats,
                           "inner": inner, "batch": batch, "context": context,
                           "dtype": "bfloat16", "presets": {}}
    for name in presets:
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        n_layer = PRESETS[name]["n_layer"]
        if log:
            log(f"{name}: capturing {len(VARIANTS)} synchronisation graphs")
        graphs, counters, row = _variants(n_layer, PRESETS[name]["d_model"], sm)
        for g in graphs.values():
            g.replay()
        if not _counters_met(graphs, counters, row):
            raise RuntimeError(f"{name}: a barrier graph did not count four arrivals of every "
                               "program per layer, or the chain's row did not settle where "
                               "its stages lead; nothing was timed")
        if log:
            log(f"{name}: capturing and checking {len(STEPS)} steps at batch {batch}")
        steps, equal = _step_graphs(name, batch, context)
        if not all(equal.values()):
            raise RuntimeError(f"{name}: a step's graph gave other tokens than the step run "
                               f"eagerly ({equal}); nothing was timed")
        fns = {k: g.replay for k, g in graphs.items()}
        fns.update({k: partial(gs.replay, batch) for k, gs in steps.items()})
        if log:
            log(f"{name}: timing {len(fns)} graphs, {repeats} rounds of {inner} replays")
        times = time_cuda_interleaved(fns, warmup=10, repeats=repeats, inner=inner)
        for gs in steps.values():
            gs.release()
        out["presets"][name] = {
            "n_layer": n_layer,
            "launches": {k: kernels_per_step(n_layer, "persistent" if k in ("launches", "chain")
                                             or k.startswith("barriers") else "kernels")
                         for k in VARIANTS},
            "fan_in": list(FAN_IN),
            "counters_met": _counters_met(graphs, counters, row), "tokens_equal_eager": equal,
            "times": {k: t.to_dict() for k, t in times.items()}}
    return out


def sync_summary(record: Mapping[str, Any], preset: str) -> dict[str, float]:
    """From a :func:`measure_sync_floor` record, µs (medians): the step's synchronisation
    alone (``barriers``), one kernel boundary of the plain step (``kernels`` over its
    launches), one barrier at one and at two programs per SM (the barrier graph less the
    empty launches, over ``4 L``), the steps,
    and the share of each step its synchronisation alone takes (``kernels`` of the plain
    step, ``kernels_pdl`` of the PDL one, ``barriers`` of the persistent one); in a run that
    timed them (since ``poll="acquire"`` exists), one barrier and the persistent step with
    every poll an acquire (``per_barrier_acquire_us``, ``persistent_acquire_us``); in a run
    that timed them, one empty launch that is not cooperative, of one program per SM and of
    one program (``per_boundary_plain_us``, ``per_boundary_one_us``) and one
    barrier of ``n`` programs (``per_barrier_<n>_us``, ``n`` in the run's ``fan_in``), and the
    step's chain of dependencies with no weights (``chain_us``), what passing the row adds to
    each of its ``5 L`` stages (``per_exchange_us``: the chain less the barriers alone) and
    the chain's share of the persistent step (``chain_share``); and the persistent step with a
    counter per stage (``persistent_stage_us``) where a run timed it."""
    p = record["presets"][preset]
    t, n = p["times"], p["launches"]
    barriers = record["barriers_per_layer"] * p["n_layer"]

    def med(k: str) -> float:
        return float(t[k]["median"])

    return {"sync_us": med("barriers"), "sync_2_us": med("barriers_2"),
            "kernels_us": med("kernels"), "launches_us": med("launches"),
            "kernels_pdl_us": med("kernels_pdl"), "pdl_us": med("triton_pdl"),
            "pdl_share": med("kernels_pdl") / med("triton_pdl"),
            "per_boundary_us": med("kernels") / n["kernels"],
            "per_pdl_boundary_us": med("kernels_pdl") / n["kernels_pdl"],
            "per_launch_us": med("launches") / n["launches"],
            "per_barrier_us": (med("barriers") - med("launches")) / barriers,
            "per_barrier_2_us": (med("barriers_2") - med("launches")) / barriers,
            "triton_us": med("triton"), "persistent_us": med("triton_persistent"),
            "kernels_share": med("kernels") / med("triton"),
            "sync_share": med("barriers") / med("triton_persistent"),
            **({"per_barrier_acquire_us": (med("barriers_acquire") - med("launches")) / barriers,
                "persistent_acquire_us": med("triton_persistent_acquire")}
               if "barriers_acquire" in t and "triton_persistent_acquire" in t else {}),
            **({"per_boundary_plain_us": med("kernels_plain") / n["kernels_plain"],
                "per_boundary_one_us": med("kernels_one") / n["kernels_one"]}
               if "kernels_one" in t else {}),
            **{f"per_barrier_{k}_us": (med(f"barriers_{k}") - med("launches")) / barriers
               for k in p.get("fan_in", ())},
            **({"persistent_stage_us": med("triton_persistent_stage")}
               if "triton_persistent_stage" in t else {}),
            **({"chain_us": med("chain"),
                "per_exchange_us": (med("chain") - med("barriers")) / (barriers + p["n_layer"]),
                "chain_share": med("chain") / med("triton_persistent")}
               if "chain" in t else {})}


def _provenance() -> dict:
    return {"environment": environment_record(), **_versions()}


def main(argv: Sequence[str]) -> None:
    """``python -m labkit.measure.sync_floor OUT.json [BATCH]``: one run (every row at batch
    ``BATCH``, default 1) added to the JSON list at ``OUT.json``."""
    if len(argv) not in (1, 2):
        sys.exit("usage: python -m labkit.measure.sync_floor OUT.json [BATCH]")
    batch = int(argv[1]) if len(argv) == 2 else 1
    def log(message: str) -> None:
        print(f"[sync_floor {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    record = {**_provenance(), **measure_sync_floor(batch=batch, log=log)}
    runs = []
    if os.path.exists(argv[0]):
        with open(argv[0], encoding="utf-8") as f:
            runs = list(json.load(f))
    with open(argv[0], "w", encoding="utf-8") as f:
        json.dump([*runs, record], f, indent=1)
    for name in record["presets"]:
        print(name, json.dumps({k: round(v, 2) for k, v in sync_summary(record, name).items()}))


if __name__ == "__main__":
    main(sys.argv[1:])
