"""Notebooks 05 and 06: cost models and rows from records, capture-size lists compared."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from labkit.measure.records import Bench, Dispatcher, DispatcherOverhead, PoolMemory, view
from labkit.sizes import (Interpolated, LinearFit, Pool, expected_padding, expected_step_cost,
                          isotonic, linear_fit, set_memory)
from labkit.teach.verdicts import compare_stats

MiB = 2**20


def memory_model_from_record(pool_data: Mapping) -> LinearFit:
    """``bytes = a + b * size`` fitted to a record's private pools, never below the smallest."""
    per = view(pool_data, PoolMemory).private.per_size_bytes
    if not per:
        raise ValueError("the record has no private pool per size (data.private."
                         "per_size_bytes); pass a 'pool_memory_<preset>' record")
    xs, ys = zip(*sorted((int(k), float(v)) for k, v in per.items()))
    return linear_fit(xs, ys, floor=min(ys))


def shared_residual_from_record(pool_data: Mapping) -> float:
    """Bytes each further graph adds to a shared pool captured largest first (>= 0)."""
    pool = view(pool_data, PoolMemory)
    n = len(pool.sizes)
    extra = pool.shared_largest_first.total_bytes - pool.largest_private_bytes
    return max(0.0, extra / (n - 1)) if n > 1 else 0.0


def time_model(disp_data: Mapping, method: str = "graph_exact") -> Interpolated:
    """``size -> µs`` (median) of ``method`` in a dispatcher record, made monotone, interpolated."""
    disp = view(disp_data, Dispatcher)
    if method not in disp.times:
        raise ValueError(f"the record has no times[{method!r}]; pass a 'dispatcher_<preset>' "
                         f"record and one of {sorted(disp.times)}")
    pts = [(b, t.median) for b, t in zip(disp.batch_sizes, disp.times[method]) if t is not None]
    return Interpolated(tuple(b for b, _ in pts), tuple(isotonic([y for _, y in pts])))


def dispatcher_rows(disp_data: Mapping) -> list[dict]:
    """Per batch size: padded size, median µs of eager, exact graph, dispatcher (``—``: none)."""
    disp = view(disp_data, Dispatcher)
    cols = [disp.median_us(m) for m in ("eager", "graph_exact", "dispatcher")]
    return [{"batch size": b, "padded to": p or "eager",
             **{k: "—" if v is None else round(v, 1) for k, v in
                zip(("eager (µs)", "exact graph (µs)", "dispatcher (µs)"), vals)}}
            for b, p, *vals in zip(disp.batch_sizes, disp.padded_to, *cols)]


def overhead_rows(bench_data: Mapping) -> list[dict]:
    """Per model and batch of a ``bench`` record: bare replay vs dispatcher step (medians)."""
    return [{"model": r.model, "batch": r.batch, "bare replay (µs)": round(r.graph_us, 1),
             "dispatcher (µs)": round(r.dispatcher_us, 1),
             "extra (µs)": round(r.dispatcher_us - r.graph_us, 1),
             "dispatcher / replay": round(r.dispatcher_over_graph, 3)}
            for r in view(bench_data, Bench).rows if r.graph_us and r.dispatcher_us]


#: the ways of a ``dispatcher_overhead`` record between a bare replay and a dispatcher step,
#: with the column that shows what each adds over the bare replay
OVERHEAD_PARTS = (("copy_replay", "copy in, then replay: + µs"),
                  ("stage_replay", "host inputs staged, then replay: + µs"),
                  ("step_device", "dispatcher, device metadata: + µs"))


def overhead_record_rows(record: object) -> list[dict]:
    """Per model and batch of a ``dispatcher_overhead`` record: a dispatcher step as a server
    calls it (``step_host``, metadata on the host) over a bare replay of its own graph (medians;
    the record samples every way in turn), the verdict of
    :func:`~labkit.teach.verdicts.compare_stats`, and what each way in between adds."""
    rows = []
    for run in view(record, DispatcherOverhead).runs:
        for i, b in enumerate(run.batch_sizes):
            rep, step = run.times["replay"][i], run.times["step_host"][i]
            if rep is None or step is None:
                continue
            row = {"model": run.preset, "batch": b, "bare replay (µs)": round(rep.median, 1),
                   "dispatcher (µs)": round(step.median, 1),
                   "extra (µs)": round(step.median - rep.median, 1),
                   "dispatcher / replay": round(step.median / rep.median, 3),
                   "dispatcher vs replay": compare_stats(step, rep, interleaved=True).word}
            for way, column in OVERHEAD_PARTS:
                s = run.times[way][i]
                if s is not None:
                    row[column] = round(s.median - rep.median, 1)
            rows.append(row)
    return rows


def short_list(sizes: Sequence[int], head: int = 6) -> str:
    """A size list for a table cell: the first ``head`` sizes, ``…`` and the last one."""
    s = sorted(sizes)
    return ", ".join(map(str, s)) if len(s) <= head + 1 else \
        ", ".join(map(str, s[:head])) + f", … {s[-1]}"


def size_set_rows(dist, named: Mapping[str, Sequence[int]], *,
                  step_time: Callable[[int], float] | None = None,
                  eager_time: Callable[[int], float] | None = None,
                  memory: Callable[[int], float] | Mapping[int, float] | None = None,
                  pool: Pool = "shared", residual_per_graph: float = 0.0) -> list[dict]:
    """Named capture-size lists on a distribution: hit rate, padding, step µs and graph MiB."""
    rows = []
    for name, sizes in named.items():
        rep = expected_padding(sizes, dist)
        row = {"sizes": name, "k": len(rep.sizes), "list": short_list(rep.sizes),
               "hit rate (%)": round(100 * rep.graph_hit_rate, 1),
               "padded rows / step": round(rep.expected_padded_rows, 2),
               "waste (%)": round(100 * rep.waste_fraction, 1)}
        if step_time is not None:
            row["expected step (µs)"] = round(
                expected_step_cost(rep.sizes, dist, step_time, eager_time), 1)
        if memory is not None:
            row["graph memory (MiB)"] = round(
                set_memory(rep.sizes, memory, pool, residual_per_graph) / MiB, 2)
        rows.append(row)
    return rows
