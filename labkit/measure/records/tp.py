"""Record kinds of tensor parallelism: ``tp_allreduce`` and ``tp_decode_<preset>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from labkit.measure.records.fields import (
    _checks, _dict, _int, _ints, _list, _median, _opt, _opt_num, _req, _str, _Timed, _times,
)
from labkit.timing import Stats


# ----------------------------------------------------------------------------- tensor parallel


def _str_map(v: Any, where: str) -> dict[str, str]:
    return {k: _str(x, f"{where}.{k}") for k, x in _dict(v, where).items()}


def _opt_num_rows(v: Any, where: str) -> dict[str, list[list[float | None]]]:
    """``{method: [[median per rank] per size]}``."""
    out = {}
    for m, rows in _dict(v, where).items():
        out[m] = [[_opt_num(x, f"{where}.{m}[{i}][{j}]") for j, x in
                   enumerate(_list(row, f"{where}.{m}[{i}]"))]
                  for i, row in enumerate(_list(rows, f"{where}.{m}"))]
    return out


@dataclass(frozen=True)
class TPAllReduce:
    """``tp_allreduce``: µs per all-reduce of ``world_size`` ranks per message size
    (``sizes_bytes``) and method: ``pg_eager`` / ``pg_graph`` (``dist.all_reduce`` over
    ``backend``, one by one or ``graph_ops`` of them captured in one graph), ``one_shot_*`` /
    ``two_shot_*`` (``torch.ops.symm_mem`` kernels on a symmetric buffer). ``None`` where a
    method did not run: ``errors`` says why (``skipped``: not applicable on this backend).
    ``rank_medians``: every rank's median."""

    RECORD = "tp_allreduce"  # the record name(s) of this kind

    backend: str
    world_size: int
    dtype: str
    sizes_bytes: list[int]
    times: dict[str, list[Stats | None]]
    checks: dict[str, bool | float]
    errors: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    graph_ops: int | None = None
    rank_medians: dict[str, list[list[float | None]]] = field(default_factory=dict)
    shutdown: dict = field(default_factory=dict)
    device: str = ""

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "TPAllReduce":
        sizes = _req(d, "sizes_bytes", where, _ints)
        return cls(backend=_req(d, "backend", where, _str),
                   world_size=_req(d, "world_size", where, _int),
                   dtype=_opt(d, "dtype", where, _str, ""), sizes_bytes=sizes,
                   times=_times(_req(d, "times", where, _dict), f"{where}.times", sizes,
                                f"{where}.sizes_bytes"),
                   checks=_opt(d, "checks", where, _checks, {}),
                   errors=_opt(d, "errors", where, _str_map, {}),
                   skipped=_opt(d, "skipped", where, _str_map, {}),
                   graph_ops=_opt(d, "graph_ops", where, _int),
                   rank_medians=_opt(d, "rank_medians", where, _opt_num_rows, {}),
                   shutdown=_opt(d, "shutdown", where, _dict, {}),
                   device=_opt(d, "device", where, _str, ""))

    @property
    def methods(self) -> list[str]:
        """The methods recorded, in record order."""
        return list(self.times)

    def median_us(self, method: str) -> list[float | None]:
        """Median µs per all-reduce of ``method`` per size (``None``: not measured)."""
        if method not in self.times:
            raise KeyError(f"the record has no method {method!r}; it has {self.methods}")
        return [_median(s) for s in self.times[method]]

    def at(self, method: str, nbytes: int) -> float | None:
        """Median µs of ``method`` at ``nbytes`` (``None``: not measured there)."""
        if method not in self.times or nbytes not in self.sizes_bytes:
            return None
        return _median(self.times[method][self.sizes_bytes.index(nbytes)])


@dataclass(frozen=True)
class TPDecode(_Timed):
    """``tp_decode_<preset>``: decode-step µs per method and batch size on one GPU
    (``tp1_*``) and split over ``world_size`` GPUs (``tpN_*``: eager; FULL graph with NCCL
    inside; ``_noop``: the all-reduces replaced by nothing, the compute alone;
    ``_graph_symm_mem``: one-shot symmetric-memory all-reduce in the graph). ``checks`` hold
    ``tp_tokens_equal_tp1`` (every mode); ``errors`` say why a method is ``None``."""

    RECORD = "tp_decode_<preset>"  # the record name(s) of this kind

    preset: str
    dtype: str
    world_size: int
    batch_sizes: list[int]
    times: dict[str, list[Stats | None]]
    checks: dict[str, bool | float]
    errors: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    rank_medians: dict[str, list[list[float | None]]] = field(default_factory=dict)
    shutdown: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    device: str = ""

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "TPDecode":
        sizes = _req(d, "batch_sizes", where, _ints)
        return cls(preset=_req(d, "preset", where, _str), dtype=_opt(d, "dtype", where, _str, ""),
                   world_size=_req(d, "world_size", where, _int), batch_sizes=sizes,
                   times=_times(_req(d, "times", where, _dict), f"{where}.times", sizes,
                                f"{where}.batch_sizes"),
                   checks=_opt(d, "checks", where, _checks, {}),
                   errors=_opt(d, "errors", where, _str_map, {}),
                   skipped=_opt(d, "skipped", where, _str_map, {}),
                   rank_medians=_opt(d, "rank_medians", where, _opt_num_rows, {}),
                   shutdown=_opt(d, "shutdown", where, _dict, {}),
                   config=_opt(d, "config", where, _dict, {}),
                   device=_opt(d, "device", where, _str, ""))

    def tp(self, suffix: str) -> str:
        """The method name ``tp<world_size>_<suffix>`` (e.g. ``tp('graph')``)."""
        return f"tp{self.world_size}_{suffix}"

    def comm_us(self, batch: int, graph: bool = True) -> float | None:
        """Communication µs per step at ``batch``: the step minus the same step with
        no-op all-reduces (``None`` when either was not measured)."""
        mode = "graph" if graph else "eager"
        full, noop = self.at(self.tp(mode), batch), self.at(self.tp(f"{mode}_noop"), batch)
        if full is None or noop is None:
            return None
        return full - noop
