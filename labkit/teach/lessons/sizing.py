"""Notebook 05 and 06 helpers: cost models from the records, dispatcher demos, size tables.

* :func:`memory_model_from_record` fits ``bytes = a + b * size`` to the private pools of a
  ``pool_memory_<preset>`` record; :func:`shared_residual_from_record` estimates what each
  extra graph adds to one shared pool;
* :func:`step_time_model_from_record` / :func:`eager_time_model_from_record` turn a
  ``dispatcher_<preset>`` record into ``size -> µs`` functions (piecewise linear between
  measured sizes, linear extrapolation outside);
  these feed :func:`labkit.sizes.optimal_sizes` and :func:`labkit.sizes.pareto_front`;
* :func:`size_set_rows` compares named capture-size lists; :func:`draw_batch_sizes` draws a
  seeded stream of batch sizes from a trace (the live dispatcher demos that consume it,
  ``run_batch_stream`` and ``padding_isolation``, are in :mod:`labkit.measure.lesson_runs`).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence
from labkit.measure.records import Dispatcher, PoolMemory, view
from labkit.sizes import expected_padding, expected_step_cost, set_memory

MiB = 2**20


# ---------------------------------------------------------------------------- models


@dataclass(frozen=True)
class LinearFit:
    """``y = a + b * x`` fitted by least squares; ``r2`` is the coefficient of determination.
    Calling it gives ``max(floor, a + b * x)`` (a memory model must never go below the
    smallest pool the allocator hands out)."""

    a: float
    b: float
    r2: float
    n: int
    floor: float = float("-inf")

    def __call__(self, x: float) -> float:
        return max(self.floor, self.a + self.b * x)


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> LinearFit:
    """Least-squares straight line through ``(xs, ys)`` (at least two distinct xs)."""
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} x values but {len(ys)} y values; give one y per x")
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        raise ValueError("a linear fit needs at least two different x values")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    b = sxy / sxx
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (a + b * x)) ** 2 for x, y in zip(xs, ys))
    return LinearFit(a, b, 1.0 - ss_res / ss_tot if ss_tot else 1.0, n)


def memory_model_from_record(pool_data: Mapping) -> LinearFit:
    """Fit ``bytes = a + b * batch_size`` to the private pool of each captured size in a
    ``pool_memory_<preset>`` record (``result.data``). Call the fit with a size for bytes; it
    never returns less than the smallest measured pool (the allocator reserves whole
    segments, 2 MiB at least, so small graphs all cost about the same)."""
    per = view(pool_data, PoolMemory).private.per_size_bytes
    if not per:
        raise ValueError("the pool_memory record has no private pool per size "
                         "(data.private.per_size_bytes); pass a 'pool_memory_<preset>' record")
    pts = sorted((k, float(v)) for k, v in per.items())
    fit = linear_fit([p[0] for p in pts], [p[1] for p in pts])
    return LinearFit(fit.a, fit.b, fit.r2, fit.n, floor=min(p[1] for p in pts))


def shared_residual_from_record(pool_data: Mapping) -> float:
    """Bytes each extra graph adds to a shared pool captured largest-first, estimated as
    ``(shared pool - largest private pool) / (graphs - 1)`` (vLLM's estimate has this form:
    first capture + per-graph residual x (n - 1)). Never below 0."""
    pool = view(pool_data, PoolMemory)
    n = len(pool.sizes)
    if n < 2:
        return 0.0
    lf = float(pool.shared_largest_first.total_bytes)
    largest = float(pool.largest_private_bytes)
    return max(0.0, (lf - largest) / (n - 1))


@dataclass(frozen=True)
class Interpolated:
    """Piecewise-linear ``x -> y`` through measured points, extrapolated linearly from the
    two outermost points on each side (an estimate, not a measurement, outside them)."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.xs) != len(self.ys) or not self.xs:
            raise ValueError("give as many y values as x values, at least one")
        if list(self.xs) != sorted(set(self.xs)):
            raise ValueError("x values must be increasing and distinct")

    @property
    def lo(self) -> float:
        return self.xs[0]

    @property
    def hi(self) -> float:
        return self.xs[-1]

    def measured(self, x: float) -> bool:
        """True when ``x`` lies inside the measured range (no extrapolation)."""
        return self.lo <= x <= self.hi

    def __call__(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        if len(xs) == 1:
            return ys[0]
        i = bisect.bisect_left(xs, x)
        i = min(max(i, 1), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def isotonic(ys: Sequence[float]) -> list[float]:
    """The closest non-decreasing sequence to ``ys`` in least squares (pool adjacent
    violators): adjacent values that go down are replaced by their mean."""
    blocks: list[list[float]] = []  # [sum, count]
    for y in ys:
        blocks.append([float(y), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out: list[float] = []
    for s, c in blocks:
        out.extend([s / c] * int(c))
    return out


def _series_model(disp_data: Mapping, method: str, stat: str,
                  monotone: bool = True) -> Interpolated:
    disp = view(disp_data, Dispatcher)
    if method not in disp.times:
        raise ValueError(f"not a dispatcher record with times[{method!r}]; pass a "
                         "'dispatcher_<preset>' record")
    bss, times = disp.batch_sizes, disp.times[method]
    pts = [(int(b), float(getattr(t, stat))) for b, t in zip(bss, times) if t is not None]
    if not pts:
        raise ValueError(f"the record has no {method!r} times")
    ys = [p[1] for p in pts]
    return Interpolated(tuple(p[0] for p in pts), tuple(isotonic(ys) if monotone else ys))


def step_time_model_from_record(disp_data: Mapping, *, stat: str = "median",
                                monotone: bool = True) -> Interpolated:
    """``padded size -> µs`` of one graph replay, from the exact-size graph times of a
    ``dispatcher_<preset>`` record (sizes between measured ones interpolated).

    ``monotone=True`` first makes the measured times non-decreasing in the batch size
    (:func:`isotonic`): a larger batch does not really run faster, and an optimiser fed with
    noisy dips would pick sizes for the noise."""
    return _series_model(disp_data, "graph_exact", stat, monotone)


def eager_time_model_from_record(disp_data: Mapping, *, stat: str = "median",
                                 monotone: bool = True) -> Interpolated:
    """``batch size -> µs`` of one eager decode step, from a ``dispatcher_<preset>`` record
    (made non-decreasing like :func:`step_time_model_from_record`)."""
    return _series_model(disp_data, "eager", stat, monotone)


def dispatcher_overhead_rows(disp_data: Mapping) -> list[dict]:
    """At the batch sizes that are captured sizes (nothing padded): raw replay, dispatcher,
    and the dispatcher's extra µs (lookup, input copies, output slice and copy)."""
    rows = []
    disp = view(disp_data, Dispatcher)
    for b, p, g, d in zip(disp.batch_sizes, disp.padded_to, disp.median_us("graph_exact"),
                          disp.median_us("dispatcher")):
        if p == b and g is not None and d is not None:
            rows.append({"batch size": b, "graph replay (µs)": round(g, 1),
                         "dispatcher (µs)": round(d, 1),
                         "overhead (µs)": round(d - g, 1)})
    return rows


def dispatcher_rows(disp_data: Mapping) -> list[dict]:
    """One row per batch size of a ``dispatcher_<preset>`` record: padded size and the
    median µs of eager, exact graph and dispatcher (``—`` where not measured)."""
    disp = view(disp_data, Dispatcher)

    def fmt(us):
        return "—" if us is None else round(us, 1)

    return [{"batch size": b, "padded to": p if p else "eager",
             "eager (µs)": fmt(e), "exact graph (µs)": fmt(g), "dispatcher (µs)": fmt(d)}
            for b, p, e, g, d in zip(disp.batch_sizes, disp.padded_to, disp.median_us("eager"),
                                     disp.median_us("graph_exact"),
                                     disp.median_us("dispatcher"))]


# ---------------------------------------------------------------------------- size lists


def parse_sizes(text: str) -> list[int]:
    """``"1, 2, 4 8"`` -> ``[1, 2, 4, 8]`` (sorted, unique); ValueError names a bad entry."""
    parts = [p for p in re.split(r"[\s,;]+", text.strip()) if p]
    out = set()
    for p in parts:
        if not p.isdigit() or int(p) < 1:
            raise ValueError(f"capture size {p!r} is not a positive integer; write e.g. 1,2,4,8")
        out.add(int(p))
    if not out:
        raise ValueError("no capture sizes given; write e.g. 1,2,4,8")
    return sorted(out)


def short_list(sizes: Sequence[int], head: int = 6) -> str:
    """A size list for a table cell: the first ``head`` sizes, ``…`` and the last one."""
    s = sorted(sizes)
    if len(s) <= head + 1:
        return ", ".join(map(str, s))
    return ", ".join(map(str, s[:head])) + f", … {s[-1]}"


def size_set_rows(dist, named: Mapping[str, Sequence[int]], *,
                  step_time: Callable[[int], float] | None = None,
                  eager_time: Callable[[int], float] | None = None,
                  memory: Callable[[int], float] | Mapping[int, float] | None = None,
                  pool: str = "shared", residual_per_graph: float = 0.0) -> list[dict]:
    """Compare named capture-size lists on a distribution: size count, hit rate, expected
    padded rows and waste per step (and, with the models given, expected step time in µs and
    graph memory in MiB)."""

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
                set_memory(rep.sizes, memory, pool, residual_per_graph) / MiB, 1)
        rows.append(row)
    return rows


def best_under_budget(front: Sequence, budget_bytes: float):
    """The Pareto point with the lowest expected cost whose memory fits ``budget_bytes``
    (``None`` when none fits)."""
    fits = [p for p in front if p.memory <= budget_bytes]
    return min(fits, key=lambda p: (p.expected_cost, p.memory)) if fits else None


# ---------------------------------------------------------------------------- batch streams


def draw_batch_sizes(trace: Sequence[int], n: int, *, seed: int = 0,
                     max_bs: int | None = None) -> list[int]:
    """``n`` batch sizes drawn with replacement from ``trace`` (seeded); with ``max_bs``,
    only sizes ``<= max_bs`` are drawn from."""
    import random

    pool = [int(b) for b in trace if max_bs is None or b <= max_bs]
    if not pool:
        raise ValueError(f"the trace has no batch size <= max_bs={max_bs}")
    rng = random.Random(seed)
    return [rng.choice(pool) for _ in range(n)]
