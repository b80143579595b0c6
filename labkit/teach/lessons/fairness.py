"""Fair comparisons of timed columns (notebooks 08, 12, ``labkit bench``): torch.compile only at
its first compiled size with no CUDA graph skipped, two columns only when sampled in turn."""

from __future__ import annotations

from typing import Any

from labkit.teach.verdicts import Difference, compare_stats

#: why the other compile columns are shown but not scored (printed by ``labkit bench``)
NOT_SCORED = ("torch.compile columns after the first compiled batch size are not scored (PyTorch "
              "then recompiles with dynamic shapes, unlike the dispatcher's static per-size "
              "capture), nor is a column whose record does not show that CUDA graphs were used "
              "(cudagraph_skips). A fair comparison compiles each size with static shapes and "
              "checks the CUDA graphs (TORCH_LOGS=cudagraphs, cudagraph_skips empty).")


def fair_compile_size(record: Any) -> int | None:
    """The compile column's first batch size if ``cudagraph_skips`` is recorded and empty."""
    raw = getattr(record, "data", record) or {}
    if "cudagraph_skips" not in raw or raw["cudagraph_skips"]:
        return None
    sizes = raw.get("compile_batch_sizes") or raw.get("batch_sizes") or []
    return int(sizes[0]) if sizes else None


def interleaved(record: Any, default: bool = False, columns: tuple[str, ...] = ()) -> bool:
    """Whether the record's ``columns`` (all when empty) were sampled in turn, by its
    ``interleaved`` field (a bool or the list of such columns; ``default`` when absent)."""
    flag = getattr(record, "data", record).get("interleaved", default)
    if isinstance(flag, list):
        return bool(columns) and all(c in flag for c in columns)
    return bool(flag)


def compare(record: Any, a: str, b: str, batch: int, *, default: bool = False) -> Difference:
    """Column ``a`` against ``b`` of a timed record at ``batch``, by ``compare_stats``."""
    d = getattr(record, "data", record)
    i = list(d["batch_sizes"]).index(batch)
    sa, sb = d["times"][a][i], d["times"][b][i]
    if sa is None or sb is None:
        raise KeyError(f"{a!r} or {b!r} was not timed at batch {batch}")
    return compare_stats(sa, sb, interleaved=interleaved(record, default, (a, b)))
