"""Cost models from measurements: a least-squares line and a piecewise-linear curve."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from collections.abc import Sequence


@dataclass(frozen=True)
class LinearFit:
    """``y = a + b * x`` fitted by least squares (``r2``, ``n`` points); calling it gives
    ``max(floor, a + b * x)`` (a pool is never below the smallest the allocator hands out)."""

    a: float
    b: float
    r2: float
    n: int
    floor: float = float("-inf")

    def __call__(self, x: float) -> float:
        return max(self.floor, self.a + self.b * x)


def linear_fit(xs: Sequence[float], ys: Sequence[float], floor: float = float("-inf")) -> LinearFit:
    """Least-squares straight line through ``(xs, ys)`` (at least two distinct xs)."""
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} x values but {len(ys)} y values; give one y per x")
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        raise ValueError("a linear fit needs at least two different x values")
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (a + b * x)) ** 2 for x, y in zip(xs, ys))
    return LinearFit(a, b, 1.0 - ss_res / ss_tot if ss_tot else 1.0, n, floor)


def isotonic(ys: Sequence[float]) -> list[float]:
    """The closest non-decreasing sequence to ``ys`` in least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [sum, count]
    for y in ys:
        blocks.append([float(y), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    return [s / c for s, c in blocks for _ in range(int(c))]


@dataclass(frozen=True)
class Interpolated:
    """Piecewise-linear ``x -> y`` through measured points, extrapolated linearly outside them."""

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

    def __call__(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        if len(xs) == 1:
            return ys[0]
        i = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
