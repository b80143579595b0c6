"""labkit.sizes: distributions, padding, default size lists, coverage, and the exact optimum
(checked against brute force on many small random cases, with and without memory budgets)."""

from __future__ import annotations

import itertools
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.sizes import (PaddingReport, ParetoPoint, coverage_sizes, expected_padding,
                          expected_step_cost, load_trace, optimal_sizes, padded_size,
                          padding_table, pareto_front, set_memory, sglang_default_sizes,
                          to_distribution, vllm_default_sizes, vllm_v0_sizes)
from labkit.sizes.optimal import _check_budget
from labkit.sizes.problem import _problem

ROOT = Path(__file__).resolve().parent.parent


def direct_cost(sizes, dist, *, cost="padded_rows", eager_cost=None, cmax=None):
    """Expected cost computed from first principles (padded_size per batch)."""
    p = to_distribution(dist)
    total = 0.0
    for b, w in p.items():
        s = padded_size(b, sizes)
        if s is not None:
            total += w * ((s - b) if cost == "padded_rows" else cost(s))
        elif eager_cost is not None:
            total += w * eager_cost(b)
        elif cmax is not None and b <= cmax:
            return math.inf
    return total


def linear_memory(base, per_row):
    """A memory model ``size -> base + per_row * size`` bytes."""
    return lambda size: base + per_row * size


def brute_force_optimal(dist, k, *, memory_budget=None, **kw):
    """The reference optimum: every set of at most ``k`` candidates (the arguments and rules of
    optimal_sizes) costed by direct_cost, without the DP: ``(sizes, expected cost)``."""
    budget = _check_budget(memory_budget, kw.get("memory_per_size"))
    args = dict(max_size=None, cost="padded_rows", eager_cost=None, memory_per_size=None,
                pool="shared", residual_per_graph=0.0, candidates=None) | kw
    prob = _problem(dist, **args)
    mem = None if prob.mem is None else dict(zip(prob.cands, prob.mem))
    best = None
    for j in range(1, min(k, len(prob.cands)) + 1):
        for combo in itertools.combinations(prob.cands, j):
            if mem is not None and set_memory(combo, mem, prob.pool, prob.residual) > budget:
                continue
            c = direct_cost(combo, dist, cost=args["cost"], eager_cost=args["eager_cost"],
                            cmax=prob.cands[-1])
            if math.isfinite(c) and (best is None or c < best[1] - 1e-12):
                best = (list(combo), c)
    if best is None:
        raise ValueError("no set of capture sizes fits the memory budget")
    return best


# ------------------------------------------------------------------------------ distributions

def test_to_distribution_normalises_counts_and_observations():
    assert to_distribution({4: 2, 1: 6, 9: 0}) == {1: 0.75, 4: 0.25}
    assert list(to_distribution({4: 2, 1: 6})) == [1, 4]          # sorted by size
    assert to_distribution([3, 1, 3, 3]) == {1: 0.25, 3: 0.75}
    assert to_distribution(x for x in (2, 2)) == {2: 1.0}
    d = to_distribution({2: 0.3, 5: 0.2})
    assert math.isclose(sum(d.values()), 1.0)


@pytest.mark.parametrize("bad, words", [
    ({}, "empty"), ([], "empty"), ({3: 0.0}, "empty"), ([0, 1], ">= 1"), ({-2: 1.0}, ">= 1"),
    ([1.5], "must be an int"), ({2: -1.0}, ">= 0"), ({2: float("nan")}, "finite"),
    ("12", "string"), (["3"], "must be an int"), ([True], "bool"),
])
def test_to_distribution_rejects_bad_input(bad, words):
    with pytest.raises((TypeError, ValueError), match=words):
        to_distribution(bad)


# ---------------------------------------------------------------------------------- padding

def test_padded_size_and_table():
    sizes = [8, 1, 4, 2]
    assert [padded_size(b, sizes) for b in (1, 2, 3, 4, 5, 8, 9)] == [1, 2, 4, 4, 8, 8, None]
    table = padding_table(sizes, max_bs=10)
    assert table == [0, 1, 2, 4, 4, 8, 8, 8, 8, 0, 0]
    assert padding_table([3]) == [0, 3, 3, 3]
    for b in range(1, 11):
        assert table[b] == (padded_size(b, sizes) or 0)
    with pytest.raises(ValueError, match=">= 1"):
        padded_size(0, sizes)
    with pytest.raises(ValueError, match="empty"):
        padded_size(3, [])
    with pytest.raises(ValueError, match=">= 1"):
        padding_table([0, 4])


def test_expected_padding_by_hand():
    # sizes [2, 8]; batches 1 (p=.5) -> 2, 5 (p=.25) -> 8, 10 (p=.25) -> eager
    rep = expected_padding([2, 8], {1: 2, 5: 1, 10: 1})
    assert isinstance(rep, PaddingReport)
    assert rep.sizes == (2, 8)
    assert math.isclose(rep.mean_batch, 0.5 * 1 + 0.25 * 5 + 0.25 * 10)
    assert math.isclose(rep.expected_padded_rows, 0.5 * 1 + 0.25 * 3)
    assert math.isclose(rep.waste_fraction, 1.25 / (4.25 + 1.25))
    assert math.isclose(rep.graph_hit_rate, 0.75)
    assert math.isclose(rep.eager_share, 0.25)
    full = expected_padding([1, 5, 10], [1, 5, 10])
    assert full.expected_padded_rows == 0 and full.waste_fraction == 0 and full.graph_hit_rate == 1


def test_expected_step_cost():
    step = lambda s: 100.0 + s          # noqa: E731
    eager = lambda b: 1000.0 + 2 * b    # noqa: E731
    got = expected_step_cost([2, 8], {1: 2, 5: 1, 10: 1}, step, eager)
    assert math.isclose(got, 0.5 * 102 + 0.25 * 108 + 0.25 * 1020)
    assert math.isclose(expected_step_cost([8], [3, 8], step), 108.0)
    with pytest.raises(ValueError, match="eager_time"):
        expected_step_cost([2], [1, 3], step)


# -------------------------------------------------------------------------- default size lists

def test_vllm_and_sglang_default_lists():
    v1 = vllm_default_sizes(512)
    assert len(v1) == 51 and v1[:5] == [1, 2, 4, 8, 16] and v1[-3:] == [480, 496, 512]
    assert 248 in v1 and 256 in v1 and 264 not in v1 and 272 in v1
    assert vllm_default_sizes(256)[-2:] == [248, 256]
    assert vllm_default_sizes(100)[-1] == 96 and vllm_default_sizes(3) == [1, 2]
    v0 = vllm_v0_sizes()
    assert len(v0) == 35 and v0[:4] == [1, 2, 4, 8] and v0[-1] == 256
    assert all(b % 8 == 0 for b in v0[3:])
    sg = sglang_default_sizes(256)          # SGLang 0.5.6 adds 12 and goes on in steps of 8
    assert sg[:7] == [1, 2, 4, 8, 12, 16, 24] and sg[-1] == 256 and len(sg) == 36
    assert sglang_default_sizes(100)[-1] == 96
    for lst in (v1, v0, sg):
        assert lst == sorted(set(lst))
    with pytest.raises(ValueError):
        vllm_default_sizes(0)


# --------------------------------------------------------------------------- coverage heuristic

def test_coverage_sizes_reaches_target_with_smallest_top():
    rng = random.Random(7)
    obs = [min(200, int(rng.lognormvariate(3, 0.7)) + 1) for _ in range(5000)]
    d = to_distribution(obs)
    for target in (0.5, 0.8, 0.95, 0.99, 1.0):
        sizes = coverage_sizes(d, target)
        q = sizes[-1]
        assert expected_padding(sizes, d).graph_hit_rate >= target - 1e-9
        below = [b for b in d if b < q]
        if below:   # the next smaller observed size would miss the target
            assert expected_padding([max(below)], d).graph_hit_rate < target
        assert sizes[:-1] == [1 << i for i in range(len(sizes) - 1)]
        assert all(s < q for s in sizes[:-1])
    assert coverage_sizes(d, 1.0)[-1] == max(d)


def test_coverage_sizes_max_sizes_and_errors():
    d = {1: 1, 50: 1, 100: 98}
    assert coverage_sizes(d, 0.95) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert coverage_sizes(d, 0.95, max_sizes=3) == [32, 64, 100]
    assert coverage_sizes(d, 0.95, max_sizes=1) == [100]
    assert coverage_sizes({1: 1}, 0.5) == [1]
    with pytest.raises(ValueError, match="target"):
        coverage_sizes(d, 0.0)
    with pytest.raises(ValueError, match="max_sizes"):
        coverage_sizes(d, 0.9, max_sizes=0)


# ------------------------------------------------------------------------------ exact optimum

def random_case(seed: int):
    """A small random size-choice problem (distribution, k, keyword arguments)."""
    rng = random.Random(seed)
    support = sorted(rng.sample(range(1, 41), rng.randint(1, 8)))
    dist = {s: rng.choice([rng.random(), rng.randint(1, 50)]) for s in support}
    kw: dict = {}
    if rng.random() < 0.3:
        kw["max_size"] = rng.randint(max(1, support[0] - 2), 45)
    r = rng.random()
    if r < 0.35:
        a, b, c = rng.uniform(0.5, 2), rng.uniform(0, 0.1), rng.uniform(1, 4)
        kw["cost"] = lambda s, a=a, b=b: a + b * s
        kw["eager_cost"] = lambda n, c=c: c + 0.2 * n
    elif r < 0.55:
        c = rng.uniform(0, 3)
        kw["eager_cost"] = lambda n, c=c: c * n
    memkind = rng.choice(["none", "linear", "measured"])
    if memkind == "linear":
        kw["memory_per_size"] = linear_memory(rng.randint(0, 100), rng.randint(0, 10))
    elif memkind == "measured":   # not monotone in size, and not every size measured
        extra = rng.sample(range(1, 46), rng.randint(0, 4))
        kw["memory_per_size"] = {s: rng.randint(0, 100) for s in set(support) | set(extra)}
    if memkind != "none":
        kw["pool"] = rng.choice(["shared", "private"])
        kw["residual_per_graph"] = rng.choice([0, rng.randint(1, 30)])
        kw["memory_budget"] = rng.choice([None, rng.randint(0, 300), rng.uniform(0, 200)])
    return dist, rng.randint(1, 4), kw


def check_against_brute_force(seed: int) -> None:
    dist, k, kw = random_case(seed)
    try:
        ref_sizes, ref_cost = brute_force_optimal(dist, k, **kw)
    except ValueError:
        with pytest.raises(ValueError):
            optimal_sizes(dist, k, **kw)
        return
    got = optimal_sizes(dist, k, **kw)
    assert 1 <= len(got) <= k and got == sorted(set(got))
    if "max_size" in kw:
        assert got[-1] <= kw["max_size"]
    cands = sorted(kw["memory_per_size"]) if isinstance(kw.get("memory_per_size"), dict) \
        else sorted(dist)
    cmax = max(c for c in cands if c <= kw.get("max_size", math.inf))
    cost = direct_cost(got, dist, cost=kw.get("cost", "padded_rows"),
                       eager_cost=kw.get("eager_cost"), cmax=cmax)
    assert math.isclose(cost, ref_cost, rel_tol=1e-9, abs_tol=1e-12), (seed, got, ref_sizes)
    if kw.get("memory_budget") is not None:
        mem = set_memory(got, kw["memory_per_size"], kw["pool"], kw["residual_per_graph"])
        assert mem <= kw["memory_budget"]


@pytest.mark.parametrize("block", range(10))
def test_optimal_sizes_equals_brute_force(block):
    for seed in range(block * 60, (block + 1) * 60):
        check_against_brute_force(seed)


def test_random_cases_cover_every_branch():
    kinds = set()
    for seed in range(600):
        _, _, kw = random_case(seed)
        kinds.add((kw.get("pool"), kw.get("memory_budget") is not None,
                   "eager_cost" in kw, callable(kw.get("cost"))))
    for pool in ("shared", "private"):
        for eager in (False, True):
            assert (pool, True, eager, False) in kinds


@pytest.mark.parametrize("seed", range(40))
def test_observed_sizes_contain_an_optimum(seed):
    """With cost and memory non-decreasing in size, searching every integer size gives no
    better set than searching the observed sizes (the DP's candidate set)."""
    rng = random.Random(1000 + seed)
    support = sorted(rng.sample(range(1, 16), rng.randint(1, 5)))
    dist = {s: rng.randint(1, 9) for s in support}
    k = rng.randint(1, 3)
    kw = {}
    if seed % 2:
        kw = dict(memory_per_size=linear_memory(rng.randint(0, 50), rng.randint(1, 5)),
                  pool="private" if seed % 4 == 1 else "shared",
                  residual_per_graph=rng.randint(0, 10))
        kw["memory_budget"] = set_memory([support[-1]], kw["memory_per_size"], kw["pool"],
                                         kw["residual_per_graph"]) + rng.randint(0, 80)
    if seed % 3 == 0:
        kw["cost"] = lambda s: 5.0 + 0.3 * s
    _, best = brute_force_optimal(dist, k, candidates=range(1, support[-1] + 1), **kw)
    got = optimal_sizes(dist, k, **kw)
    assert set(got) <= set(support)
    assert math.isclose(direct_cost(got, dist, cost=kw.get("cost", "padded_rows")), best,
                        rel_tol=1e-9, abs_tol=1e-12)


def test_optimal_sizes_simple_facts():
    d = {1: 5, 2: 3, 3: 1, 7: 2, 8: 4, 20: 1, 33: 2}
    assert optimal_sizes(d, 1) == [33]                       # nothing may fall back by default
    assert optimal_sizes(d, 7) == sorted(d)                  # enough sizes: no padding at all
    assert optimal_sizes(d, 100) == sorted(d)
    assert optimal_sizes({4: 1.0}, 3) == [4]                 # ties go to fewer sizes
    assert optimal_sizes(d, 3) == [2, 8, 33]
    assert optimal_sizes(d, 2, max_size=10)[-1] == 8         # 20 and 33 always run eager
    # a cheap eager path lets the top batches fall back
    assert optimal_sizes(d, 1, eager_cost=lambda b: 0.0) == [1]
    # more sizes never cost more
    costs = [direct_cost(optimal_sizes(d, k), d) for k in range(1, 8)]
    assert all(x >= y - 1e-12 for x, y in itertools.pairwise(costs))


def test_optimal_sizes_memory_budget_binds():
    d = to_distribution(load_trace("synthetic_chat"))
    mem = linear_memory(20e6, 0.3e6)
    free = optimal_sizes(d, 12, memory_per_size=mem, pool="private")
    need = set_memory(free, mem, "private")
    tight = optimal_sizes(d, 12, memory_per_size=mem, pool="private", memory_budget=need / 2)
    assert set_memory(tight, mem, "private") <= need / 2
    assert direct_cost(tight, d) > direct_cost(free, d)
    assert tight[-1] == max(d)
    shared = optimal_sizes(d, 12, memory_per_size=mem, residual_per_graph=1e6,
                           memory_budget=mem(max(d)) + 5e6)
    assert len(shared) == 6                                  # 1 + 5 residuals fit
    assert shared == optimal_sizes(d, 6)


@pytest.mark.parametrize("kwargs, words", [
    (dict(k=0), "k"), (dict(k=-1), "k"), (dict(k=1.5), "k"), (dict(k=True), "k"),
    (dict(k=2, memory_budget=10.0), "memory_per_size"),
    (dict(k=2, memory_per_size=linear_memory(100, 1), memory_budget=50), "memory_budget"),
    (dict(k=2, memory_per_size=linear_memory(100, 1), memory_budget=-1), ">= 0"),
    (dict(k=2, pool="pooled", memory_per_size=linear_memory(1, 1)), "pool"),
    (dict(k=2, max_size=0), ">= 1"),
    (dict(k=2, candidates=[40, 50], max_size=30), "max_size"),
    (dict(k=2, cost=lambda s: 1.0, max_size=5), "eager_cost"),
    (dict(k=2, cost="time"), "cost"),
    (dict(k=2, memory_per_size={1: 10.0}, candidates=[1, 9]), "no memory figure"),
    (dict(k=2, residual_per_graph=-5, memory_per_size=linear_memory(1, 1)), "residual"),
])
def test_optimal_sizes_bad_input(kwargs, words):
    d = {1: 1.0, 9: 2.0}
    k = kwargs.pop("k")
    with pytest.raises((TypeError, ValueError), match=words):
        optimal_sizes(d, k, **kwargs)


def test_optimal_sizes_bad_distribution():
    with pytest.raises(ValueError, match="empty"):
        optimal_sizes({}, 2)
    with pytest.raises(ValueError, match=">= 1"):
        optimal_sizes([-3, 4], 2)


def test_budget_error_names_the_fix():
    with pytest.raises(ValueError) as info:
        optimal_sizes({1: 1, 9: 1}, 2, memory_per_size={1: 10, 9: 90}, memory_budget=50)
    msg = str(info.value)
    assert "too small" in msg and "90" in msg and "memory_budget" in msg
    # with eager fallback allowed, a small graph fits
    assert optimal_sizes({1: 1, 9: 1}, 2, memory_per_size={1: 10, 9: 90}, memory_budget=50,
                         eager_cost=lambda b: 100.0) == [1]


def test_set_memory():
    mem = {1: 10.0, 4: 30.0, 8: 50.0}
    assert set_memory([1, 4, 8], mem, "private") == 90.0
    assert set_memory([8, 1, 4], mem, "shared", residual_per_graph=2.0) == 54.0
    assert set_memory([4], linear_memory(5, 2)) == 13.0
    with pytest.raises(ValueError, match="pool"):
        set_memory([1], mem, "both")
    with pytest.raises(ValueError, match="no memory figure"):
        set_memory([2], mem)


# ------------------------------------------------------------------------------ Pareto front

def brute_front(dist, ks, mem, pool, residual, cost="padded_rows", eager=None):
    pts = []
    cands = sorted(to_distribution(dist))
    for j in ks:
        for combo in itertools.combinations(cands, j):
            c = direct_cost(combo, dist, cost=cost, eager_cost=eager, cmax=cands[-1])
            if math.isfinite(c):
                pts.append((set_memory(combo, mem, pool, residual), c))
    front = []
    for m, c in sorted(pts):
        if not front or c < front[-1][1] - 1e-12:
            front.append((m, c))
    return front


@pytest.mark.parametrize("seed", range(30))
def test_pareto_front_equals_brute_force(seed):
    rng = random.Random(500 + seed)
    support = sorted(rng.sample(range(1, 30), rng.randint(1, 7)))
    dist = {s: rng.randint(1, 20) for s in support}
    ks = sorted(rng.sample(range(1, 5), rng.randint(1, 3)))
    pool = "shared" if seed % 2 else "private"
    if seed % 3:
        mem = linear_memory(rng.randint(0, 50), rng.randint(0, 5))
    else:
        mem = {s: float(rng.randint(0, 60)) for s in support}
    residual = rng.randint(0, 10)
    kw = {}
    if seed % 5 == 0:
        kw = dict(step_time=lambda s: 3.0 + 0.1 * s, eager_time=lambda b: 2.0 + 0.5 * b)
    front = pareto_front(dist, ks, memory_per_size=mem, pool=pool, residual_per_graph=residual,
                         **kw)
    ref = brute_front(dist, ks, mem, pool, residual, cost=kw.get("step_time", "padded_rows"),
                      eager=kw.get("eager_time"))
    assert [(p.memory, round(p.expected_cost, 9)) for p in front] == \
        [(m, round(c, 9)) for m, c in ref]
    for p in front:
        assert isinstance(p, ParetoPoint) and p.k == len(p.sizes) and p.k in ks
        assert set_memory(p.sizes, mem, pool, residual) == p.memory


def test_pareto_front_on_trace_is_monotone_and_fast():
    d = to_distribution(load_trace("synthetic_bursty"))
    front = pareto_front(d, range(1, 17), memory_per_size=linear_memory(20e6, 0.3e6),
                         residual_per_graph=1e6, step_time=lambda s: 170.0 + 0.5 * s)
    assert len(front) >= 2
    assert all(a.memory < b.memory and a.expected_cost > b.expected_cost
               for a, b in itertools.pairwise(front))
    with pytest.raises(ValueError, match="candidates_k"):
        pareto_front(d, [], memory_per_size=linear_memory(1, 1))


# ----------------------------------------------------------------------------------- traces

@pytest.mark.parametrize("name, max_batch", [("synthetic_chat", 256), ("synthetic_bursty", 128)])
def test_shipped_traces(name, max_batch):
    path = ROOT / "data" / "traces" / f"{name}.csv"
    assert path.stat().st_size < 200_000
    tr = load_trace(name)
    assert len(tr) == 20_000 and min(tr) >= 1 and max(tr) <= max_batch
    assert load_trace(path) == tr and load_trace(f"{name}.csv") == tr
    assert path.read_text().splitlines()[0] == "step,batch_size"


def test_trace_readme_says_synthetic():
    text = (ROOT / "data" / "traces" / "README.md").read_text()
    assert "SYNTHETIC" in text and "make_trace.py" in text


def test_load_trace_from_any_csv_and_errors(tmp_path):
    p = tmp_path / "mine.csv"
    p.write_text("step,batch_size\n0,3\n1,5\n")
    assert load_trace(p) == [3, 5]
    q = tmp_path / "bad.csv"
    q.write_text("step,bs\n0,3\n")
    with pytest.raises(ValueError, match="batch_size"):
        load_trace(q)
    with pytest.raises(FileNotFoundError, match="synthetic_chat"):
        load_trace("no_such_trace")


def test_make_trace_reproduces_shipped_files():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_trace.py"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("ok") == 2


def test_sizes_does_not_import_torch():
    code = "import sys, labkit.sizes; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


# --------------------------------------------------- private pools with a budget: vs brute force

def test_private_budget_with_eager_cost_finds_the_set_that_fits():
    """Memories that differ by far less than the smallest one: the Lagrangian multiplier
    estimated from costs was too small to reach the least-memory set, and that was read as
    'nothing fits'. The single size 6 fits the budget."""
    dist = {3: 5, 4: 9, 6: 5, 7: 7}
    kw = dict(memory_per_size={3: 94, 4: 94.5, 6: 95, 7: 96}, pool="private",
              memory_budget=95.75, eager_cost=lambda b: 3.0 * b)
    ref_sizes, ref_cost = brute_force_optimal(dist, 1, **kw)
    got = optimal_sizes(dist, 1, **kw)
    assert got == ref_sizes
    assert math.isclose(direct_cost(got, dist, eager_cost=kw["eager_cost"]), ref_cost)


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def budget_cases(draw):
    """Small problems: no memory model, or a budget with each pool mode; with and without
    eager_cost; step times or padded rows; memories close together, equal, or far apart."""
    support = draw(st.lists(st.integers(1, 12), min_size=1, max_size=6, unique=True))
    dist = {s: draw(st.integers(1, 9)) for s in support}
    extra = draw(st.lists(st.integers(1, 14), max_size=2))
    sizes = sorted(set(support) | set(extra))
    base = draw(st.integers(0, 100))
    memory = {s: base + draw(st.sampled_from([0, 0.25, 0.5, 1, 3, 40])) for s in sizes}
    pool = draw(st.sampled_from(["private", "shared", None]))   # None: no memory model
    kw = {} if pool is None else dict(
        memory_per_size=memory, pool=pool, residual_per_graph=draw(st.sampled_from([0, 0.5, 7])),
        memory_budget=base + draw(st.floats(0, 150)))
    if draw(st.booleans()):
        e = draw(st.floats(0, 20))
        kw["eager_cost"] = lambda b, e=e: e * b
    if draw(st.booleans()):
        a = draw(st.floats(0, 5))
        kw["cost"] = lambda s, a=a: a + s
    if pool is None and draw(st.booleans()):
        kw["candidates"] = sizes
    top = max(kw.get("candidates", kw.get("memory_per_size", support)))
    if callable(kw.get("cost")) and "eager_cost" not in kw and max(support) > top:
        kw["eager_cost"] = lambda b: 100.0
    return dist, draw(st.integers(1, 4)), kw


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budget_cases())
def test_optimal_sizes_with_budgets_equals_brute_force(case):
    dist, k, kw = case
    try:
        _, ref_cost = brute_force_optimal(dist, k, **kw)
    except ValueError:
        with pytest.raises(ValueError, match="too small"):
            optimal_sizes(dist, k, **kw)
        return
    got = optimal_sizes(dist, k, **kw)
    assert 1 <= len(got) <= k
    if "memory_per_size" in kw:
        mem = set_memory(got, kw["memory_per_size"], kw["pool"], kw["residual_per_graph"])
        assert mem <= kw["memory_budget"]
    cmax = max(kw.get("candidates", kw.get("memory_per_size", dist)))
    cost = direct_cost(got, dist, cost=kw.get("cost", "padded_rows"),
                       eager_cost=kw.get("eager_cost"), cmax=cmax)
    assert math.isclose(cost, ref_cost, rel_tol=1e-9, abs_tol=1e-9)
