"""Padding a batch up to a capture size (the checked :func:`labkit.rules.padded_size`), and
what a set of sizes costs on a distribution."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable, Iterable, Sequence

from labkit import rules
from labkit.checks import as_int, as_size_list
from labkit.sizes.distribution import (_BATCH_SIZE_FIX, DistLike, _as_batch_size,
                                      to_distribution)


def _check_sizes(sizes: Iterable[int], what: str = "capture sizes") -> list[int]:
    """Sorted capture sizes; an error when empty, not positive ints, or repeated."""
    return sorted(as_size_list(sizes, what, distinct=True, fix=_BATCH_SIZE_FIX))


def padded_size(bs: int, sizes: Sequence[int]) -> int | None:
    """The smallest captured size ``>= bs``, or ``None`` when ``bs`` exceeds them all (eager)."""
    return rules.padded_size(_check_sizes(sizes), _as_batch_size(bs, "batch size"))


def padding_table(sizes: Sequence[int], max_bs: int | None = None) -> list[int]:
    """``table[bs]`` = padded size for ``bs`` in ``0..max_bs`` (0: eager, and ``table[0]``)."""
    ordered = _check_sizes(sizes)
    max_bs = ordered[-1] if max_bs is None else as_int(
        max_bs, "max_bs", minimum=0, fix="give the largest batch size to tabulate")
    return rules.padding_table(ordered, max_bs)


@dataclass(frozen=True)
class PaddingReport:
    """What a set of capture sizes costs per decode step on average: padding, hit rate."""

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
        to = rules.padded_size(ordered, b)
        if to is not None:
            hit += w
            padded += w * (to - b)
    hit = min(hit, 1.0)
    return PaddingReport(sizes=tuple(ordered), mean_batch=mean, expected_padded_rows=padded,
                         waste_fraction=padded / (mean + padded), graph_hit_rate=hit,
                         eager_share=max(0.0, 1.0 - hit))


def expected_step_cost(sizes: Sequence[int], dist: DistLike,
                       step_time: Callable[[int], float],
                       eager_time: Callable[[int], float] | None = None) -> float:
    """Expected step time: ``step_time(padded)``, ``eager_time(bs)`` above the largest size."""
    ordered, p = _check_sizes(sizes), to_distribution(dist)
    for name, fn in (("step_time", step_time), ("eager_time", eager_time or float)):
        if not callable(fn):
            raise TypeError(f"{name} must be a function batch size -> µs, got "
                            f"{type(fn).__name__}")
    total = 0.0
    for b, w in p.items():
        to = rules.padded_size(ordered, b)
        if to is not None:
            total += w * float(step_time(to))
        elif eager_time is None:
            raise ValueError(f"batch size {b} exceeds the largest capture size {ordered[-1]} and "
                             "runs eager: pass eager_time=... to price eager steps")
        else:
            total += w * float(eager_time(b))
    return total
