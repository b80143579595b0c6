"""Choosing CUDA-graph capture sizes from a decode batch-size distribution.

A serving engine captures one CUDA graph per *capture size* and pads every decode step up to
the smallest captured size that fits (batches above the largest size run eager). Which sizes
to capture is a trade-off between padding waste, graph hit rate and graph memory. This module
holds the pieces notebook 06 uses:

* distributions: :func:`to_distribution`, :func:`load_trace` (the shipped request-size traces);
* padding: :func:`padded_size`, :func:`padding_table`, :func:`expected_padding`,
  :func:`expected_step_cost`;
* size lists: the defaults of real engines (:func:`vllm_default_sizes`, :func:`vllm_v0_sizes`,
  :func:`sglang_default_sizes`), the coverage heuristic (:func:`coverage_sizes`) and the exact
  optimum under a size count and a memory budget (:func:`optimal_sizes`, checked against
  :func:`brute_force_optimal`), plus the memory/cost Pareto front (:func:`pareto_front`).

A *distribution* is a mapping ``batch size -> count or probability`` or a sequence of observed
batch sizes (one per decode step); :func:`to_distribution` turns either into probabilities.
Pure Python and numpy: nothing here imports torch.
"""

from __future__ import annotations

import bisect
import csv
import itertools
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Literal, Mapping, Sequence, Union

import numpy as np

from labkit.checks import as_int, as_number, as_size_list
from labkit.paths import shipped_file

DistLike = Union[Mapping[int, float], Iterable[int]]
"""A batch-size distribution: ``{size: count or probability}`` or observed sizes."""
MemoryModel = Union[Callable[[int], float], Mapping[int, float]]
"""Graph memory in bytes per captured size: a function (e.g. ``a + b * size``) or measurements."""
CostModel = Union[Literal["padded_rows"], Callable[[int], float]]
"""``"padded_rows"`` (wasted rows per step) or ``step_time(padded_size)`` of one graph replay."""
Pool = Literal["shared", "private"]

__all__ = [
    "PaddingReport", "ParetoPoint", "brute_force_optimal", "coverage_sizes", "expected_padding",
    "expected_step_cost", "linear_memory", "load_trace", "optimal_sizes", "padded_size",
    "padding_table", "pareto_front", "set_memory", "sglang_default_sizes", "to_distribution",
    "trace_path", "vllm_default_sizes", "vllm_v0_sizes",
]


# --------------------------------------------------------------------------------------------
# distributions and traces
# --------------------------------------------------------------------------------------------

_BATCH_SIZE_FIX = "a batch size is a whole number >= 1 (a step serves at least one request)"


def _as_batch_size(x: object, what: str) -> int:
    """``x`` as a positive int: an ``int`` or numpy integer only (``2.5``, ``2.0``, ``"3"``,
    ``True`` are refused, never coerced), with an error that names ``what`` and the fix."""
    return as_int(x, what, minimum=1, fix=_BATCH_SIZE_FIX)


def _parse_batch_size(text: str, what: str) -> int:
    """A batch size read from a CSV cell: decimal digits only (``"3"``; not ``"3.5"``)."""
    t = text.strip()
    if not t.isdigit():
        raise ValueError(f"{what} must be a whole number >= 1, got {text!r}; fix the CSV")
    return _as_batch_size(int(t), what)


def to_distribution(obs: DistLike) -> dict[int, float]:
    """Normalise a batch-size distribution to ``{size: probability}``, sorted by size.

    ``obs`` is either a mapping ``{size: count or probability}`` (weights >= 0, zeros dropped)
    or an iterable of observed batch sizes, one per decode step. Raises ``ValueError`` for an
    empty distribution, sizes < 1 or non-integral, and negative or non-finite weights.
    """
    if isinstance(obs, (str, bytes)):
        raise ValueError("a distribution is a mapping {size: weight} or a sequence of sizes, "
                         f"not a string ({obs!r}); use load_trace(name) to read a trace")
    if isinstance(obs, Mapping):
        weights: dict[int, float] = {}
        for key, w in obs.items():
            size = _as_batch_size(key, "batch size")
            w = as_number(w, f"weight of batch size {size}", allow_inf=True)
            if not math.isfinite(w) or w < 0:
                raise ValueError(f"weight of batch size {size} must be finite and >= 0, got {w}")
            if w > 0:
                weights[size] = weights.get(size, 0.0) + w
    elif isinstance(obs, Iterable):
        weights = {s: float(c) for s, c in
                   Counter(_as_batch_size(x, "observed batch size") for x in obs).items()}
    else:
        raise TypeError(f"a distribution is a mapping {{size: weight}} or a sequence of sizes, "
                        f"got {type(obs).__name__}; pass e.g. load_trace(name)")
    total = sum(weights.values())
    if not weights or total <= 0:
        raise ValueError("the batch-size distribution is empty: pass observed sizes or a "
                         "mapping {size: weight} with at least one positive weight")
    return {s: weights[s] / total for s in sorted(weights)}


def trace_path(name_or_path: str | os.PathLike[str]) -> Path:
    """Path of a trace: an existing CSV file, or ``<data>/traces/<name>.csv`` for a bare name."""
    return shipped_file("traces", name_or_path, ".csv")


def load_trace(name_or_path: str | os.PathLike[str]) -> list[int]:
    """Decode-step batch sizes of a trace CSV (columns ``step,batch_size``), in step order.

    ``name_or_path`` is a shipped trace name (``"synthetic_chat"``, ``"synthetic_bursty"``; see
    ``data/traces/README.md``) or a path to any CSV with a ``batch_size`` column.
    """
    path = trace_path(name_or_path)
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or "batch_size" not in reader.fieldnames:
            raise ValueError(f"{path} has no 'batch_size' column (columns: {reader.fieldnames})")
        return [_parse_batch_size(row["batch_size"] or "", f"batch_size in {path.name}")
                for row in reader]


# --------------------------------------------------------------------------------------------
# padding
# --------------------------------------------------------------------------------------------

def _check_sizes(sizes: Iterable[int], what: str = "capture sizes") -> list[int]:
    """Sorted capture sizes; an error when empty, not positive ints, or repeated."""
    return sorted(as_size_list(sizes, what, distinct=True, fix=_BATCH_SIZE_FIX))


def padded_size(bs: int, sizes: Sequence[int]) -> int | None:
    """The smallest captured size ``>= bs``, or ``None`` when ``bs`` exceeds them all (eager)."""
    bs = _as_batch_size(bs, "batch size")
    ordered = _check_sizes(sizes)
    i = bisect.bisect_left(ordered, bs)
    return ordered[i] if i < len(ordered) else None


def padding_table(sizes: Sequence[int], max_bs: int | None = None) -> list[int]:
    """``table[bs]`` = padded size for ``bs`` in ``0..max_bs`` (0 means: run eager).

    ``table[0]`` is 0 (there is no empty decode step). ``max_bs`` defaults to the largest size.
    """
    ordered = _check_sizes(sizes)
    max_bs = ordered[-1] if max_bs is None else as_int(
        max_bs, "max_bs", minimum=0, fix="give the largest batch size to tabulate")
    table = [0] * (max_bs + 1)
    for b in range(1, max_bs + 1):
        i = bisect.bisect_left(ordered, b)
        table[b] = ordered[i] if i < len(ordered) else 0
    return table


@dataclass(frozen=True)
class PaddingReport:
    """What a set of capture sizes costs on a distribution, per decode step on average.

    ``expected_padded_rows``: padded (wasted) rows per step; eager steps pad nothing.
    ``waste_fraction``: padded rows / all rows computed. ``graph_hit_rate``: share of steps
    served by a graph; ``eager_share = 1 - graph_hit_rate``. ``mean_batch``: real rows per step.
    """

    sizes: tuple[int, ...]
    mean_batch: float
    expected_padded_rows: float
    waste_fraction: float
    graph_hit_rate: float
    eager_share: float


def expected_padding(sizes: Sequence[int], dist: DistLike) -> PaddingReport:
    """Expected padding, waste and graph hit rate of ``sizes`` under ``dist``."""
    ordered, p = _check_sizes(sizes), to_distribution(dist)
    mean = padded = hit = 0.0
    for b, w in p.items():
        mean += w * b
        i = bisect.bisect_left(ordered, b)
        if i < len(ordered):
            hit += w
            padded += w * (ordered[i] - b)
    hit = min(hit, 1.0)
    return PaddingReport(sizes=tuple(ordered), mean_batch=mean, expected_padded_rows=padded,
                         waste_fraction=padded / (mean + padded), graph_hit_rate=hit,
                         eager_share=max(0.0, 1.0 - hit))


def expected_step_cost(sizes: Sequence[int], dist: DistLike,
                       step_time: Callable[[int], float],
                       eager_time: Callable[[int], float] | None = None) -> float:
    """Expected time of one decode step: ``step_time(padded)`` for a graph step,
    ``eager_time(bs)`` for a batch above the largest size (required when any such batch occurs).
    """
    ordered, p = _check_sizes(sizes), to_distribution(dist)
    for name, fn in (("step_time", step_time), ("eager_time", eager_time)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be a function batch size -> µs, got "
                            f"{type(fn).__name__}")
    if step_time is None:
        raise TypeError("step_time must be a function padded size -> µs, got None")
    total = 0.0
    for b, w in p.items():
        i = bisect.bisect_left(ordered, b)
        if i < len(ordered):
            total += w * float(step_time(ordered[i]))
        elif eager_time is None:
            raise ValueError(f"batch size {b} exceeds the largest capture size {ordered[-1]} and "
                             "runs eager: pass eager_time=... to price eager steps")
        else:
            total += w * float(eager_time(b))
    return total


# --------------------------------------------------------------------------------------------
# size lists of real engines and the coverage heuristic
# --------------------------------------------------------------------------------------------

def vllm_default_sizes(max_size: int = 512) -> list[int]:
    """vLLM V1 default capture sizes: ``[1, 2, 4] + range(8, 256, 8) + range(256, max+1, 16)``,
    kept ``<= max_size`` (source: ``vllm/config/compilation.py``, where newer versions build it
    in ``vllm/config/vllm.py``; the default ``max_cudagraph_capture_size`` is
    ``min(max_num_seqs * 2, 512)``).
    """
    max_size = _as_batch_size(max_size, "max_size")
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_size + 1, 16))
    return [s for s in sizes if s <= max_size]


def vllm_v0_sizes() -> list[int]:
    """vLLM V0 ``_BATCH_SIZES_TO_CAPTURE = [1, 2, 4] + [8 * i for i in range(1, 33)]`` (1..256;
    source: ``vllm/worker/model_runner.py``)."""
    return [1, 2, 4] + [8 * i for i in range(1, 33)]


def sglang_default_sizes(max_bs: int = 160) -> list[int]:
    """SGLang default capture sizes ``[1, 2, 4, 8] + range(16, 161, 8)``, kept ``<= max_bs``
    (source: ``python/sglang/srt/model_executor/cuda_graph_runner.py``; ``--cuda-graph-max-bs``
    caps the list, and some versions add larger sizes on GPUs with more than 96 GB).
    """
    max_bs = _as_batch_size(max_bs, "max_bs")
    return [s for s in [1, 2, 4, 8] + list(range(16, 161, 8)) if s <= max_bs]


def coverage_sizes(dist: DistLike, target: float = 0.95, max_sizes: int | None = None) -> list[int]:
    """The coverage heuristic: a power-of-two ladder up to the ``target`` quantile.

    The largest size ``q`` is the smallest observed batch size whose cumulative share of steps
    is ``>= target``, so the graph hit rate is ``>= target`` and no smaller observed size would
    reach it. Below ``q`` come the powers of two ``1, 2, 4, ... < q``. With ``max_sizes``, ``q``
    and the ``max_sizes - 1`` largest powers of two are kept (small batches then pad up to the
    smallest kept size). It ignores padding cost; compare it with :func:`optimal_sizes`.
    """
    p = to_distribution(dist)
    target = as_number(target, "target", fix="give a share of steps in (0, 1], e.g. 0.95")
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target is a share of steps in (0, 1], got {target}; give e.g. 0.95")
    if max_sizes is not None:
        max_sizes = as_int(max_sizes, "max_sizes", minimum=1, fix="keep at least one size")
    cum, q = 0.0, max(p)
    for b, w in p.items():
        cum += w
        if cum >= target - 1e-12:
            q = b
            break
    ladder = [1 << i for i in range(q.bit_length()) if (1 << i) < q]
    if max_sizes is not None:
        ladder = ladder[len(ladder) - (int(max_sizes) - 1):] if int(max_sizes) > 1 else []
    return ladder + [q]


# --------------------------------------------------------------------------------------------
# memory models
# --------------------------------------------------------------------------------------------

def linear_memory(base: float, per_row: float) -> Callable[[int], float]:
    """A memory model ``size -> base + per_row * size`` bytes for one captured graph."""
    base = as_number(base, "base", minimum=0.0, fix="graph memory is bytes >= 0")
    per_row = as_number(per_row, "per_row", minimum=0.0, fix="graph memory is bytes >= 0")
    return lambda size: base + per_row * size


def _mem_of(memory_per_size: MemoryModel, size: int) -> float:
    if isinstance(memory_per_size, Mapping):
        if size not in memory_per_size:
            raise ValueError(f"no memory figure for capture size {size}; measured sizes are "
                             f"{sorted(memory_per_size)}: restrict the sizes to those")
        m = float(memory_per_size[size])
    else:
        m = float(memory_per_size(size))
    if not math.isfinite(m) or m < 0:
        raise ValueError(f"memory for capture size {size} must be finite and >= 0, got {m}")
    return m


def set_memory(sizes: Sequence[int], memory_per_size: MemoryModel, pool: Pool = "shared",
               residual_per_graph: float = 0.0) -> float:
    """Graph memory of a set of sizes, in bytes.

    ``pool="private"``: every graph has its own pool, so memory is the sum of
    ``memory_per_size``. ``pool="shared"``: one pool captured largest-first, about the largest
    graph's memory plus ``residual_per_graph`` for each further graph (vLLM estimates its graph
    memory the same way: first capture + per-graph x (n - 1)).
    """
    ordered = _check_sizes(sizes)
    _check_pool(pool)
    _check_memory_model(memory_per_size)
    residual = as_number(residual_per_graph, "residual_per_graph", minimum=0.0,
                         fix="bytes each further graph adds to a shared pool, >= 0")
    mems = [_mem_of(memory_per_size, s) for s in ordered]
    if pool == "private":
        return float(sum(mems))
    return max(mems) + residual * (len(ordered) - 1)


def _check_pool(pool: object) -> None:
    if not isinstance(pool, str) or pool not in ("shared", "private"):
        raise ValueError(f"pool must be 'shared' or 'private', got {pool!r}")


def _check_memory_model(memory_per_size: object) -> None:
    if not isinstance(memory_per_size, Mapping) and not callable(memory_per_size):
        raise TypeError("memory_per_size must be a function size -> bytes or a mapping "
                        f"{{size: bytes}}, got {type(memory_per_size).__name__}")


# --------------------------------------------------------------------------------------------
# the exact optimum
# --------------------------------------------------------------------------------------------

@dataclass
class _Problem:
    """A validated size-choice problem (see :func:`optimal_sizes`)."""

    b: np.ndarray                 # support (observed sizes), ascending
    p: np.ndarray                 # probabilities
    cands: list[int]              # candidate capture sizes, ascending
    step: Callable[[int], float] | None           # padded size -> step cost; None: padded rows
    eager: Callable[[int], float] | None          # batch -> cost of one eager step
    mem: list[float] | None       # memory per candidate
    pool: Pool
    residual: float

    def graph_cost(self, b: int, s: int) -> float:
        """Cost of one step of ``b`` rows replayed on the graph of size ``s``."""
        return float(s - b) if self.step is None else float(self.step(s))


def _problem(dist: DistLike, *, max_size: int | None, cost: CostModel,
             eager_cost: Callable[[int], float] | None, memory_per_size: MemoryModel | None,
             pool: Pool, residual_per_graph: float, candidates: Iterable[int] | None) -> _Problem:
    p = to_distribution(dist)
    _check_pool(pool)
    residual_per_graph = as_number(residual_per_graph, "residual_per_graph", minimum=0.0,
                                   fix="bytes each further graph adds to a shared pool, >= 0")
    if memory_per_size is not None:
        _check_memory_model(memory_per_size)
    if eager_cost is not None and not callable(eager_cost):
        raise TypeError(f"eager_cost must be a function batch size -> cost, got "
                        f"{type(eager_cost).__name__}")
    if candidates is not None:
        cands = _check_sizes(candidates, "candidates")
    elif isinstance(memory_per_size, Mapping):
        cands = _check_sizes(list(memory_per_size), "memory_per_size sizes")  # measured
    else:
        cands = sorted(p)                        # observed sizes contain an optimum (see docs)
    if max_size is not None:
        max_size = _as_batch_size(max_size, "max_size")
        cands = [c for c in cands if c <= max_size]
    if not cands:
        raise ValueError(f"no candidate capture size is <= max_size={max_size}: raise "
                         "max_size or pass candidates=... that include smaller sizes")
    if isinstance(cost, str) and cost == "padded_rows":
        step = None
    elif callable(cost):
        step = cost
        above = [b for b in p if b > cands[-1]]
        if above and eager_cost is None:
            raise ValueError(f"batch sizes {above[:5]}{'...' if len(above) > 5 else ''} exceed "
                             f"the largest candidate size {cands[-1]} and always run eager: "
                             "pass eager_cost=... (time of an eager step) or raise max_size")
    else:
        raise ValueError(f"cost must be 'padded_rows' or a function padded_size -> step cost, "
                         f"got {cost!r}")
    mem = None if memory_per_size is None else [_mem_of(memory_per_size, c) for c in cands]
    return _Problem(b=np.array(list(p), dtype=np.int64), p=np.array(list(p.values())),
                    cands=cands, step=step, eager=eager_cost, mem=mem, pool=pool,
                    residual=float(residual_per_graph))


def _objective(prob: _Problem, sizes: Sequence[int]) -> float:
    """Expected cost of ``sizes`` computed directly, batch by batch (no DP)."""
    ordered, cmax = sorted(sizes), prob.cands[-1]
    total = 0.0
    for b, w in zip(prob.b.tolist(), prob.p.tolist()):
        i = bisect.bisect_left(ordered, b)
        if i < len(ordered):
            total += w * prob.graph_cost(b, ordered[i])
        elif prob.eager is not None:
            total += w * float(prob.eager(b))
        elif b <= cmax:
            return math.inf       # eager fallback below the largest candidate is not allowed
    return total


def _tail_costs(prob: _Problem, tops: Sequence[int]) -> np.ndarray:
    """Cost of the batches above each possible largest size (they run eager)."""
    b, p, cmax = prob.b, prob.p, prob.cands[-1]
    cut = np.searchsorted(b, np.asarray(tops), side="right")
    if prob.eager is not None:
        e = np.array([float(prob.eager(int(x))) for x in b.tolist()])
        suffix = np.concatenate([np.cumsum((p * e)[::-1])[::-1], [0.0]])
        return suffix[cut]
    forced = np.searchsorted(b, cmax, side="right")   # batches <= cmax must hit a graph
    return np.where(cut >= forced, 0.0, np.inf)


def _segment_costs(prob: _Problem, cands: Sequence[int]) -> np.ndarray:
    """``C[l, i]``: cost of the batches in ``(cands[l-1], cands[i]]`` padded to ``cands[i]``
    (``l = 0``: everything up to ``cands[i]``); ``inf`` where ``l > i``."""
    b, p = prob.b, prob.p
    c = np.asarray(cands, dtype=np.int64)
    pre_p = np.concatenate([[0.0], np.cumsum(p)])
    cut = np.asarray(np.searchsorted(b, c, side="right"))
    prev = np.concatenate([[0], cut[:-1]])
    dp_ = pre_p[cut][None, :] - pre_p[prev][:, None]
    if prob.step is None:                 # padded rows: sum p (c - b) = c * dP - dQ
        pre_q = np.concatenate([[0.0], np.cumsum(p * b)])
        dq = pre_q[cut][None, :] - pre_q[prev][:, None]
        C = np.maximum(c[None, :] * dp_ - dq, 0.0)   # clip float round-off below 0
    else:
        g = np.array([float(prob.step(int(x))) for x in c])
        C = g[None, :] * dp_
    m = len(c)
    return np.where(np.arange(m)[:, None] <= np.arange(m)[None, :], C, np.inf)


@dataclass
class _Entry:
    sizes: list[int]
    cost: float
    memory: float | None


def _dp_matrix(C: np.ndarray, tail: np.ndarray, kmax: int) -> tuple[np.ndarray, np.ndarray]:
    """``best[j, i]``: least cost of exactly ``j + 1`` sizes whose largest is candidate ``i``,
    tail included, for segment costs ``C`` (see :func:`_segment_costs`); ``back[j, i]`` is the
    previous size's index. O(kmax * m^2) time with numpy, O(kmax * m) memory."""
    m = C.shape[1]
    dp = np.full((kmax, m), np.inf)
    back = np.full((kmax, m), -1, dtype=np.int64)
    dp[0] = C[0]
    for j in range(1, kmax):
        if m < 2:
            break
        A = dp[j - 1][:-1, None] + C[1:, :]      # row r: previous largest is candidate r
        back[j] = A.argmin(axis=0)
        dp[j] = A.min(axis=0)
    return dp + tail[None, :], back


def _dp_exact_count(prob: _Problem, cands: list[int], kmax: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_dp_matrix` for the problem restricted to ``cands``."""
    return _dp_matrix(_segment_costs(prob, cands), _tail_costs(prob, cands), kmax)


def _suffix_bounds(C: np.ndarray, tail: np.ndarray, kmax: int) -> list[list[float]]:
    """``lb[r][i]``: least cost of the batches above candidate ``i`` with at most ``r`` more
    sizes (a lower bound for any completion of a set whose largest size so far is ``i``)."""
    out = [tail.copy()]
    for _ in range(kmax - 1):
        nxt = tail.copy()
        if len(tail) > 1:
            nxt[:-1] = np.minimum(tail[:-1], (C[1:, :] + out[-1][None, :]).min(axis=1))
        out.append(nxt)
    return [x.tolist() for x in out]


def _walk(back: np.ndarray, cands: list[int], j: int, i: int) -> list[int]:
    out = [cands[i]]
    while j > 0:
        i = int(back[j, i])
        j -= 1
        out.append(cands[i])
    return out[::-1]


def _entries(prob: _Problem, kmax: int, budget: float = math.inf,
             allowed: set[int] | None = None, best_only: bool = False) -> list[_Entry]:
    """Candidate optima: for every (size count, memory class) the cheapest set, so that both
    the budgeted optimum and the memory/cost Pareto front are among them (exact)."""
    cands, mem, out = prob.cands, prob.mem, []
    if mem is None or prob.pool == "shared":
        if mem is None:
            classes: list[list[int]] = [list(range(len(cands)))]
        elif all(x <= y for x, y in zip(mem, mem[1:])):
            classes = [list(range(len(cands)))]  # max memory = memory of the largest size
        else:                                     # one run per memory ceiling M
            classes = [[i for i, x in enumerate(mem) if x <= ceil] for ceil in sorted(set(mem))]
        for idx in classes:
            sub = [cands[i] for i in idx]
            dp, back = _dp_exact_count(prob, sub, min(kmax, len(sub)))
            for j, i in zip(*np.nonzero(np.isfinite(dp))):
                sizes = _walk(back, sub, int(j), int(i))
                memory = None if mem is None else set_memory(
                    sizes, dict(zip(cands, mem)), "shared", prob.residual)
                if memory is None or memory <= budget:
                    out.append(_Entry(sizes, float(dp[j, i]), memory))
        return out
    return _private_entries(prob, kmax, budget, allowed, best_only)


def _lagrange_incumbent(C: np.ndarray, tail: np.ndarray, mem: np.ndarray, kmax: int,
                        budget: float) -> tuple[float, list[int], float, float, bool] | None:
    """Lagrangian relaxation of the private-pool budget: minimise ``cost + lam * memory`` (an
    ordinary DP, since private memory adds up per size) and bisect ``lam`` for the cheapest set
    within budget. Returns ``(lam, size indices, cost, memory, optimal)`` of a feasible set
    (an incumbent and a multiplier for bounds; ``optimal`` when the budget does not bind, so
    the set is the optimum itself), or None only when no set fits at all.

    Feasibility is decided directly, not by the relaxation: the least memory any allowed set
    needs is that of the cheapest-memory single size that may be the largest (memory adds up
    and is >= 0; the batches above the largest size decide whether it may be). A multiplier
    large enough to reach that set can be far above any estimate from costs and memories
    (memories may differ by far less than the smallest one), so ``lam`` grows until the
    relaxed optimum fits, and the least-memory set is the incumbent if it never does."""
    single = np.where(np.isfinite(tail), C[0] + tail, np.inf)
    tops = [i for i in range(len(single)) if math.isfinite(single[i])]
    if not tops:
        return None
    least = min(tops, key=lambda i: (mem[i], single[i]))
    if mem[least] > budget:
        return None                       # even the least memory does not fit

    def solve(lam: float) -> tuple[list[int], float, float]:
        dp, back = _dp_matrix(C + lam * mem[None, :], tail, kmax)
        j, i = np.unravel_index(int(np.argmin(dp)), dp.shape)
        idx = [int(i)]
        for jj in range(int(j), 0, -1):
            idx.append(int(back[jj, idx[-1]]))
        idx = idx[::-1]
        memory = float(mem[idx].sum())
        return idx, float(dp[j, i]) - lam * memory, memory

    idx, cost, memory = solve(0.0)
    if memory <= budget:
        return 0.0, idx, cost, memory, True   # the budget does not bind: the optimum itself
    best = (0.0, [least], float(single[least]), float(mem[least]), False)
    finite = C[np.isfinite(C)]
    scale = (float(finite.max()) if finite.size else 1.0) + float(np.nanmax(
        np.where(np.isfinite(tail), tail, 0.0))) + 1.0
    positive = mem[mem > 0]
    hi = 2.0 * kmax * scale / (float(positive.min()) if positive.size else 1.0)
    for _ in range(200):                  # find a multiplier whose relaxed optimum fits
        idx, cost, memory = solve(hi)
        if memory <= budget:
            break
        hi *= 4.0
    else:
        return best                       # no usable multiplier: the least-memory set
    lo = 0.0
    best = min(best, (hi, idx, cost, memory, False), key=lambda t: t[2])
    for _ in range(60):
        if hi - lo <= 1e-9 * hi:
            break
        lam = 0.5 * (lo + hi)
        idx, cost, memory = solve(lam)
        if memory <= budget:
            if cost < best[2]:
                best = (lam, idx, cost, memory, False)
            hi = lam
        else:
            lo = lam
    return best


def _private_entries(prob: _Problem, kmax: int, budget: float, allowed: set[int] | None,
                     best_only: bool) -> list[_Entry]:
    """Private pools: memory adds up, so each state (count j, largest size i) keeps its
    non-dominated (memory, cost) labels; exact, but the label count L can grow large.
    Branch and bound keeps it fast: a label is dropped when even its best completion (cost
    bound from a memory-free suffix DP and, with a budget, a Lagrangian one; memory bound from
    the sizes it still must add) is dominated by a set already found (``best_only``: costs
    more than the best set within budget so far, seeded by :func:`_lagrange_incumbent`)."""
    cands, mem = prob.cands, prob.mem
    assert mem is not None
    m = len(cands)
    C_np, tail_np, mem_np = _segment_costs(prob, cands), _tail_costs(prob, cands), np.array(mem)
    lbl = _suffix_bounds(C_np, tail_np, kmax)
    C, tail = C_np.tolist(), tail_np.tolist()
    fin = [i for i in range(m) if math.isfinite(tail[i])]
    mem_lb = [0.0 if math.isfinite(tail[i]) else
              min((mem[x] for x in fin if x > i), default=math.inf) for i in range(m)]
    allowed = set(range(1, kmax + 1)) if allowed is None else allowed
    front_mem: list[float] = []       # completed sets (allowed counts), Pareto, by memory
    front_cost: list[float] = []
    best, lam, vlam = math.inf, 0.0, lbl
    out: list[_Entry] = []
    if best_only:
        inc = _lagrange_incumbent(C_np, tail_np, mem_np, kmax, budget)
        if inc is None:
            return []
        lam, idx, best, memory, optimal = inc
        out.append(_Entry([cands[x] for x in idx], best, memory))
        if optimal:
            return out
        vlam = _suffix_bounds(C_np + lam * mem_np[None, :], tail_np, kmax)

    def hopeless(memory: float, cost: float, i: int, r: int) -> bool:
        lo_mem = memory + mem_lb[i]
        lo_cost = cost + max(lbl[r][i], vlam[r][i] - lam * (budget - memory) if lam else 0.0)
        if lo_mem > budget or not math.isfinite(lo_cost):
            return True
        tol = 1e-12 * max(1.0, abs(lo_cost))
        if best_only:
            return lo_cost > best + tol
        x = bisect.bisect_right(front_mem, lo_mem) - 1
        return x >= 0 and front_cost[x] <= lo_cost + tol

    # a state's labels: (memory, cost, parent label, candidate index), memory up, cost down
    layer: list[list[tuple]] = [[(mem[i], C[0][i], None, i)] for i in range(m)]
    for j in range(kmax):
        r = kmax - 1 - j
        if j > 0:
            keys = [([t[0] for t in labs], [-t[1] for t in labs]) for labs in layer]
            new: list[list[tuple]] = []
            for i in range(m):
                cand: list[tuple] = []
                mem_cap = budget - mem[i] - mem_lb[i]
                for l in range(1, i + 1):  # noqa: E741  (l as in C[l, i])
                    labs = layer[l - 1]
                    if not labs:
                        continue
                    mems, negc = keys[l - 1]
                    hi = bisect.bisect_right(mems, mem_cap)
                    lo = 0
                    if best_only:     # costs fall along the list: skip those that cost too much
                        thr = best - C[l][i] - lbl[r][i]
                        lo = bisect.bisect_left(negc, -thr - 1e-12 * max(1.0, abs(thr)))
                    cil = C[l][i]
                    for lab in labs[lo:hi]:
                        t = (lab[0] + mem[i], lab[1] + cil, lab, i)
                        if not hopeless(t[0], t[1], i, r):
                            cand.append(t)
                new.append(_pareto(cand))
            layer = new
        if j + 1 in allowed:              # record the sets that stop here
            done = [(lab[0], lab[1] + tail[i], lab) for i in fin for lab in layer[i]
                    if lab[0] <= budget]
            for memory, cost, lab in done:
                sizes, node = [], lab
                while node is not None:
                    sizes.append(cands[node[3]])
                    node = node[2]
                out.append(_Entry(sizes[::-1], cost, memory))
                best = min(best, cost)
            merged = _pareto(list(zip(front_mem, front_cost)) + [(d[0], d[1]) for d in done])
            front_mem, front_cost = [t[0] for t in merged], [t[1] for t in merged]
        layer = [[lab for lab in labs if not hopeless(lab[0], lab[1], i, r)]
                 for i, labs in enumerate(layer)]
    return out


def _pareto(labels: list[tuple]) -> list[tuple]:
    """Labels not dominated in (memory, cost), by increasing memory."""
    kept: list[tuple] = []
    for lab in sorted(labels, key=lambda t: (t[0], t[1])):
        if not kept or lab[1] < kept[-1][1]:
            kept.append(lab)
    return kept


def optimal_sizes(dist: DistLike, k: int, *, max_size: int | None = None,
                  cost: CostModel = "padded_rows",
                  eager_cost: Callable[[int], float] | None = None,
                  memory_per_size: MemoryModel | None = None,
                  memory_budget: float | None = None, pool: Pool = "shared",
                  residual_per_graph: float = 0.0,
                  candidates: Iterable[int] | None = None) -> list[int]:
    """At most ``k`` capture sizes minimising the expected cost per decode step, exactly.

    Cost of a step of ``b`` rows served by graph ``s >= b``: ``s - b`` padded rows
    (``cost="padded_rows"``) or ``cost(s)``, e.g. the measured replay time at size ``s``.
    Eager fallback: batches above the largest *candidate* run eager in every set and cost
    ``eager_cost(b)`` (0 padded rows when not given; a callable ``cost`` then needs
    ``eager_cost``). Below the largest candidate a batch may fall back to eager only when
    ``eager_cost`` is given; by default the largest candidate (the largest observed size
    ``<= max_size``) is therefore always chosen and nothing falls back.

    Candidates are the observed sizes ``<= max_size`` (or the keys of a measured
    ``memory_per_size`` dict, or ``candidates``). They contain an optimum whenever cost and
    memory do not decrease with size: moving a size down to the largest observed size it
    serves changes no assignment and raises neither cost nor memory.

    Memory (``memory_per_size`` and ``memory_budget`` in bytes): see :func:`set_memory` for
    ``pool`` and ``residual_per_graph``; the chosen set's memory is ``<= memory_budget``.

    Algorithm: dynamic programming over the sorted candidates, ``best[j][i]`` = the cheapest
    set of ``j`` sizes whose largest is candidate ``i``, using prefix sums for the cost of the
    batches between two consecutive sizes. With no budget or a shared pool whose memory grows
    with size, one DP of O(k * m^2) time (numpy) and O(k * m) memory for m candidates; with a
    shared pool of non-monotone memory, one DP per distinct memory ceiling (O(m * k * m^2)).
    Private pools make it a knapsack (memory adds up): the DP then keeps every non-dominated
    (memory, cost) label per state, exact but pseudo-polynomial (O(k * m^2 * L) for L labels
    per state), pruned by branch and bound with a Lagrangian incumbent and bound (milliseconds
    on the shipped traces). Ties go to fewer sizes.
    """
    k = as_int(k, "k (the most sizes to capture)", minimum=1, fix="capture at least one size")
    prob = _problem(dist, max_size=max_size, cost=cost, eager_cost=eager_cost,
                    memory_per_size=memory_per_size, pool=pool,
                    residual_per_graph=residual_per_graph, candidates=candidates)
    budget = _check_budget(memory_budget, memory_per_size)
    entries = [e for e in _entries(prob, int(k), budget, best_only=True)
               if e.memory is None or e.memory <= budget]
    if not entries:
        need = _min_memory(prob)
        raise ValueError(f"memory budget {budget:.6g} bytes is too small for any set of capture "
                         f"sizes: the cheapest allowed set needs {need:.6g} bytes; raise "
                         "memory_budget, lower max_size, or allow eager fallback with "
                         "eager_cost=...")
    best = min(entries, key=lambda e: (e.cost, len(e.sizes), e.memory or 0.0))
    return best.sizes


def _check_budget(memory_budget: float | None, memory_per_size: MemoryModel | None) -> float:
    if memory_budget is None:
        return math.inf
    if memory_per_size is None:
        raise ValueError("memory_budget needs memory_per_size (bytes per captured size)")
    return as_number(memory_budget, "memory_budget", minimum=0.0, allow_inf=True,
                     fix="give the bytes the graphs may use, >= 0")


def _min_memory(prob: _Problem) -> float:
    """Memory of the smallest allowed set: one size that may be the largest (any size with
    eager fallback; otherwise one that serves every batch up to the largest candidate)."""
    assert prob.mem is not None
    tail = _tail_costs(prob, prob.cands)
    return min(m for m, t in zip(prob.mem, tail.tolist()) if math.isfinite(t))


def brute_force_optimal(dist: DistLike, k: int, *, max_size: int | None = None,
                        cost: CostModel = "padded_rows",
                        eager_cost: Callable[[int], float] | None = None,
                        memory_per_size: MemoryModel | None = None,
                        memory_budget: float | None = None, pool: Pool = "shared",
                        residual_per_graph: float = 0.0,
                        candidates: Iterable[int] | None = None) -> tuple[list[int], float]:
    """Reference for tests: enumerate every set of at most ``k`` candidates (same arguments and
    rules as :func:`optimal_sizes`) and cost it batch by batch, without the DP.

    Returns ``(sizes, expected cost)``. Exponential in the number of candidates: small cases only.
    """
    k = as_int(k, "k (the most sizes to capture)", minimum=1, fix="capture at least one size")
    budget = _check_budget(memory_budget, memory_per_size)
    prob = _problem(dist, max_size=max_size, cost=cost, eager_cost=eager_cost,
                    memory_per_size=memory_per_size, pool=pool,
                    residual_per_graph=residual_per_graph, candidates=candidates)
    mem = None if prob.mem is None else dict(zip(prob.cands, prob.mem))
    best: tuple[list[int], float] | None = None
    for j in range(1, min(int(k), len(prob.cands)) + 1):
        for combo in itertools.combinations(prob.cands, j):
            if mem is not None and set_memory(combo, mem, prob.pool, prob.residual) > budget:
                continue
            c = _objective(prob, combo)
            if math.isfinite(c) and (best is None or c < best[1] - 1e-12):
                best = (list(combo), c)
    if best is None:
        raise ValueError("no set of capture sizes fits the memory budget")
    return best


# --------------------------------------------------------------------------------------------
# memory / cost Pareto front
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParetoPoint:
    """One non-dominated choice: ``k`` sizes, their memory (bytes), expected cost per step."""

    k: int
    sizes: tuple[int, ...]
    memory: float
    expected_cost: float


def pareto_front(dist: DistLike, candidates_k: Iterable[int] = range(1, 9), *,
                 memory_per_size: MemoryModel,
                 step_time: CostModel = "padded_rows",
                 eager_time: Callable[[int], float] | None = None, pool: Pool = "shared",
                 residual_per_graph: float = 0.0, max_size: int | None = None,
                 candidates: Iterable[int] | None = None) -> list[ParetoPoint]:
    """The memory/cost Pareto front over sets whose size count is in ``candidates_k``.

    Every returned point is the cheapest set for its memory, and no set with a count in
    ``candidates_k`` has both less memory and lower expected cost (``step_time`` as ``cost`` in
    :func:`optimal_sizes`, ``eager_time`` as its ``eager_cost``). Sorted by memory; the cost
    falls along the list. Exact, by the same dynamic programme as :func:`optimal_sizes`.
    A shared pool takes milliseconds. Private pools can have a front of hundreds of points
    (memory adds up) and take seconds for large ``candidates_k`` over hundreds of observed
    sizes: pass ``candidates=`` a coarser grid (e.g. multiples of 8) to explore them.
    """
    ks = _check_sizes(candidates_k, "candidates_k")
    prob = _problem(dist, max_size=max_size, cost=step_time, eager_cost=eager_time,
                    memory_per_size=memory_per_size, pool=pool,
                    residual_per_graph=residual_per_graph, candidates=candidates)
    allowed = set(ks)
    labels = [(float(e.memory or 0.0), e.cost, e.sizes)
              for e in _entries(prob, ks[-1], allowed=allowed) if len(e.sizes) in allowed]
    front: list[ParetoPoint] = []
    for memory, c, sizes in sorted(labels, key=lambda t: (t[0], t[1], len(t[2]))):
        if not front or c < front[-1].expected_cost - 1e-12 * max(1.0, abs(c)):
            front.append(ParetoPoint(len(sizes), tuple(sizes), float(memory), float(c)))
    return front
