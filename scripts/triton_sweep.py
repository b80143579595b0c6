"""Sweep the Triton step's tile sizes on a GPU (how ``labkit.kernels.step.choose_blocks``'s
choices were picked). Per preset and batch size: the readable and fused steps and the Triton
step with the heuristic's tiles and with each candidate change, each captured in a CUDA graph
and replayed in turn (``time_cuda_interleaved``), after checking the bf16 logits against the
readable step's; then the per-kernel profile of the heuristic. Prints one JSON line each.

    python scripts/triton_sweep.py [--schedule persistent|prefetch|heads|counters] \
        [--sizes 1,8,64] \
        [PRESET ...]

(one JSON line each on standard output; ``--sizes``: the persistent schedules' batch sizes).

With ``--schedule persistent`` it sweeps the persistent step instead (``PERSISTENT``: more
warps, wider tiles, two programs per SM, one stripe per program per stage), beside the plain
kernels (``kernels``), which it has to beat. ``--schedule prefetch`` sweeps ``PREFETCH``: the
persistent step with and without its L2 prefetch of each layer's weights
(``make_triton_step(..., prefetch=True)``) and with every tile or only a stage's first tile
waiting at the barrier (``waits=``), then the stage tables of its clock stamps
(``labkit.measure.past_launch.stage_rows``), beside the plain kernels. ``--schedule heads``
sweeps ``HEADS``: the persistent attention stage with tiles of several heads of one row,
unsplit (``make_triton_step(..., heads=)``), beside unsplit tiles of one head (which tells
the two changes apart), then the stage tables with one head and with four a tile.
``--schedule counters`` sweeps ``COUNTERS``: the persistent step whose grid meets at one
counter per layer (the default) against one counter per stage (``counters="stage"``), then
the stage tables of both.

``data/sweeps/h200/triton_tiles_3.jsonl`` is its output on an H200, ``persistent_tiles.jsonl``
beside it that of ``--schedule persistent`` (see data/sweeps/README.md).
"""
import json
import statistics
import sys
import time

import torch

from labkit.fused import make_fused_step
from labkit.graphs import capture_decode_graphs
from labkit.measure.bench import make_model, step_inputs
from labkit.measure.opcount import gpu_op_profile
from labkit.timing import time_cuda_interleaved
from labkit.kernels.step import make_triton_step

DOT = {"rows": 16, "n": 16, "n_out": 16, "k": 256, "head_n": 64}
#: per batch size, the changes to the heuristic's tiles tried ({} is the heuristic itself)
CANDIDATES = {
    1: [{}, {"t": 32, "splits": 8}, {"warps": 2}, {"n": 4}, {"head_n": 32}, {"n_out": 4},
        {"t": 32}],
    2: [{}, {"warps": 2}, DOT],
    4: [{}, {"splits": 2}, {"rows": 4, "n": 4, "n_out": 2, "k": 256, "head_n": 8}],
    8: [{}, {"n": 32}, {"warps": 8}],
    64: [{}, {"n": 64}, {"n_out": 32}],
}
PROFILED = (1, 8, 64)


def _wider(bl) -> dict:
    """Output tiles twice as wide and twice the warps: half the tiles, each program holding
    one tile a stage where the heuristic gave it two (the heuristic sizes tiles for about two
    programs per SM of the plain kernels)."""
    return {"n": 2 * bl.n, "n_out": 2 * bl.n_out, "warps": 2 * bl.warps}


#: the persistent step's candidates: (change to the tiles, or a function of the heuristic's
#: Blocks; programs per SM; one stripe per program per stage instead of the heuristic's
#: tiles; each program's L2 prefetch of its weights first)
PERSISTENT = [({}, 1, False, False, "tile"), ({"warps": 8}, 1, False, False, "tile"),
              (_wider, 1, False, False, "tile"), ({}, 2, False, False, "tile"),
              ({}, 1, True, False, "tile"), ({"warps": 8}, 1, True, False, "tile"),
              ({"warps": 16}, 1, True, False, "tile"), ({"warps": 8}, 2, True, False, "tile")]
#: ``--schedule prefetch``: (tiles, programs per SM, stripes, prefetch, waits): the
#: heuristic's tiles with every tile waiting, then with only a stage's first tile waiting,
#: without and with the prefetch; the same at two programs per SM (each wait) and at four;
#: stripes (one per program, or cut for two per SM) with the prefetch
PREFETCH = [({}, 1, False, False, "tile"), ({}, 1, False, True, "tile"),
            ({}, 1, False, False, "stage"), ({}, 1, False, True, "stage"),
            ({}, 2, False, False, "tile"), ({}, 2, False, False, "stage"),
            ({}, 2, False, True, "stage"), ({}, 4, False, False, "stage"),
            ({}, 1, True, False, "tile"),
            ({}, 1, True, True, "stage"), ({}, 2, True, True, "stage")]
#: ``--schedule heads``: (tiles, programs per SM, stripes, prefetch, waits, heads per attention
#: tile): the default persistent step, its attention unsplit with one head a tile (the
#: control), then 2 and 4 heads a tile, 4 with chunks of 32 positions and 8 (gpt2 only;
#: refused on the small preset's four heads) with chunks of 16, and 2 and 4 at two programs
#: per SM. Compiled for sm_90 without a GPU (``labkit.kernels.aot.compile_step`` with Triton
#: 3.6.0 and its ptxas 12.8, the GPU machine's; bf16, layer 0's kernel): at 64 rows of either
#: preset one head a tile takes 96 registers, 2 heads about 150, 4 heads 200-231, 8 heads
#: 255; none spills, and each fits two programs per SM
HEADS = [({}, 1, False, False, "stage", 1), ({"splits": 1}, 1, False, False, "stage", 1),
         ({}, 1, False, False, "stage", 2), ({}, 1, False, False, "stage", 4),
         ({"t": 32}, 1, False, False, "stage", 4), ({"t": 16}, 1, False, False, "stage", 8),
         ({}, 2, False, False, "stage", 2), ({"t": 32}, 2, False, False, "stage", 4)]
#: ``--schedule counters``: (tiles, programs per SM, stripes, prefetch, waits, heads,
#: counters): the default persistent step (the grid meets at one counter per layer) and the
#: same with a counter per stage (``make_triton_step(..., counters="stage")``), at one and two
#: programs per SM, then a counter per stage with stripes (every program then has a tile of
#: every stage, as at a barrier)
COUNTERS = [({}, 1, False, False, "stage", 1, "layer"), ({}, 1, False, False, "stage", 1, "stage"),
            ({}, 2, False, False, "stage", 1, "layer"), ({}, 2, False, False, "stage", 1, "stage"),
            ({}, 1, True, False, "stage", 1, "stage")]
#: the stamped variants of each table's stage tables: (prefetch, waits, heads[, counters])
STAMPED_VARIANTS = {"prefetch": ((False, "tile", 1), (False, "stage", 1), (True, "stage", 1)),
                    "heads": ((False, "stage", 1), (False, "stage", 4)),
                    "counters": ((False, "stage", 1, "layer"), (False, "stage", 1, "stage"))}
#: the persistent schedules' candidate tables, by ``--schedule``
PERSISTENT_SWEEPS = {"persistent": PERSISTENT, "prefetch": PREFETCH, "heads": HEADS,
                     "counters": COUNTERS}
#: stamped replays per batch size for the stage tables
STAMPED = 10


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def captured(model, step, b, inputs):
    gs = capture_decode_graphs(model, [b], step=step, progress=False)
    gs.copy_inputs(*inputs)
    return gs


def compare(model, name: str, b: int, inputs, graphs: dict, candidates: list) -> None:
    """Each candidate ``(label, make_triton_step keywords, extra fields)`` checked against the
    readable step and captured beside ``graphs``; then every graph replayed in turn
    (``time_cuda_interleaved``), one JSON line each, and released."""
    ref = model.decode_step(*inputs, check=False).float()
    info = {}
    for label, kwargs, extra in candidates:
        try:
            step = make_triton_step(model, **kwargs)
            out = step(*inputs, check=False).float()
            graphs[label] = captured(model, step, b, inputs)
        except Exception as exc:  # a tile the GPU cannot run, or a refused cooperative launch
            emit(preset=name, b=b, cand=kwargs.get("blocks") or {}, **extra,
                 error=repr(exc)[:300])
            continue
        info[label] = {"blocks": step.blocks_for(b).to_dict(), **extra,
                       "err": round((out - ref).abs().max().item(), 4),
                       "agree": (out.argmax(-1) == ref.argmax(-1)).float().mean().item()}
    fns = {label: (lambda gs=gs, b=b: gs.replay(b)) for label, gs in graphs.items()}
    for label, st in time_cuda_interleaved(fns, warmup=5, repeats=15, inner=10).items():
        emit(preset=name, b=b, step=label, median=round(st.median, 2),
             p10=round(st.p10, 2), p90=round(st.p90, 2), n=st.n, **info.get(label, {}))
    for gs in graphs.values():
        gs.release()


def sweep(name: str) -> None:
    model = make_model(name, max_batch=64, dtype="bfloat16", max_seq=256)
    fused = make_fused_step(model)
    for b, cands in CANDIDATES.items():
        t0 = time.time()
        inputs = step_inputs(model, b, context=128)
        graphs = {"readable": captured(model, model.decode_step, b, inputs),
                  "fused": captured(model, fused, b, inputs)}
        compare(model, name, b, inputs, graphs,
                [(f"t{i}", {"blocks": change or None}, {}) for i, change in enumerate(cands)])
        if b in PROFILED:
            step = make_triton_step(model)
            prof = gpu_op_profile(lambda step=step, x=inputs: step(*x, check=False))
            emit(preset=name, b=b, profile={k[:40]: [v["count"], round(v["us"], 2)]
                                            for k, v in prof.items()},
                 secs=round(time.time() - t0, 1))
    torch.cuda.empty_cache()


def sweep_persistent(name: str, table: list = PERSISTENT, sizes: tuple = PROFILED,
                     stamped: tuple = ()) -> None:
    """The persistent step's candidates (``table``) beside the plain kernels, per batch
    size of ``sizes``, replayed in turn; each checked against the readable step first; then
    the stage tables of the ``stamped`` variants (``STAMPED_VARIANTS``)."""
    model = make_model(name, max_batch=64, dtype="bfloat16", max_seq=256)
    sm = torch.cuda.get_device_properties(model.device).multi_processor_count
    for b in sizes:
        inputs = step_inputs(model, b, context=128)
        plain = make_triton_step(model)
        candidates = []
        for i, (change, per_sm, stripes, prefetch, waits, *more) in enumerate(table):
            blocks = change(plain.blocks_for(b)) if callable(change) else change
            # the heads and counters tables' extra columns
            extra = dict(zip(("heads", "counters"), more))
            candidates.append((f"p{i}", {"schedule": "persistent", "blocks": blocks or None,
                                         "programs": per_sm * sm, "stripes": stripes,
                                         "prefetch": prefetch, "waits": waits, **extra},
                               {"per_sm": per_sm, "stripes": stripes, "prefetch": prefetch,
                                "waits": waits, **extra}))
        compare(model, name, b, inputs, {"kernels": captured(model, plain, b, inputs)},
                candidates)
        if stamped:
            stage_tables(model, name, b, inputs, plain, stamped)
    torch.cuda.empty_cache()


def stage_tables(model, name: str, b: int, inputs, plain, variants: tuple) -> None:
    """The stamped persistent step (heuristic tiles, one program per SM) in each of
    ``variants`` (prefetch, waits, heads; ``STAMPED_VARIANTS``): ``STAMPED`` replays each,
    one JSON line per stage table (µs per layer), the plain kernels' profile beside it."""
    from labkit.measure.past_launch import (plain_kernel_us, stage_rows, stage_split,
                                            stamped_replays)

    per_layer, head = plain_kernel_us(plain, inputs, model.cfg.n_layer)
    for prefetch, waits, heads, *counters in variants:
        more = {"counters": counters[0]} if counters else {}
        step = make_triton_step(model, schedule="persistent", stamps=True, prefetch=prefetch,
                                waits=waits, heads=heads, **more)
        gs = captured(model, step, b, inputs)
        splits = [stage_split(raw) for raw in stamped_replays(gs, step, b, STAMPED)]
        gs.release()
        rows = stage_rows(splits, per_layer)
        emit(preset=name, b=b, stamped=True, prefetch=prefetch, waits=waits,
             **({"heads": heads} if heads != 1 else {}), **more, head_us=round(head, 2),
             gaps_us=round(statistics.median(g for s in splits for g in s["gaps"]), 2),
             stages=[{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}
                     for r in rows])


if __name__ == "__main__":
    args = sys.argv[1:]
    chosen = "kernels"
    sizes = PROFILED
    if args[:1] == ["--schedule"]:
        chosen, args = args[1], args[2:]
    if args[:1] == ["--sizes"]:  # the persistent schedules' batch sizes
        sizes, args = tuple(int(v) for v in args[1].split(",")), args[2:]
    for preset_name in args or ["gpt2", "small"]:
        if chosen in PERSISTENT_SWEEPS:
            sweep_persistent(preset_name, PERSISTENT_SWEEPS[chosen], sizes,
                             STAMPED_VARIANTS.get(chosen, ()))
        else:
            sweep(preset_name)
