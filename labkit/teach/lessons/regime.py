"""Launching a decode step's kernels vs reading its weights at batch 1 (notebooks 00, 01)."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from labkit.measure.records import LaunchOverhead, view
from labkit.teach.lessons import record_data, stat
from labkit.teach.lessons.counts import gpu_ops_per_step
from labkit.teach.lessons.launch import sweep_rows

#: the published Llama-2-7B shape (Touvron et al. 2023): 32 layers, width 4096, SwiGLU MLP
LLAMA2_7B = {"name": "Llama-2-7B shape", "n_layer": 32, "d_model": 4096, "d_ff": 11008,
             "vocab_size": 32000, "gated": True}


def sweep_bandwidth(record: Any) -> float:
    """Bytes/s the sweep's largest kernel moved when replayed from a graph."""
    rows = [r for r in sweep_rows(record) if r["gbs"]]
    if not rows:
        raise ValueError("the launch_overhead record has no graph column in its sweep "
                         "(it was measured without CUDA); use the H200 reference record")
    return rows[-1]["gbs"] * 1e9


def weight_bytes(n_layer: int, d_model: int, vocab_size: int, *, d_ff: int | None = None,
                 bytes_per_param: int = 2, gated: bool = False) -> int:
    """Bytes of the matrices a decode step reads: per layer ``4 d²`` and ``2 d·d_ff`` (``3``
    gated), plus the head ``vocab × d`` (embeddings, norms, biases left out)."""
    d_ff = 4 * d_model if d_ff is None else d_ff
    for name, v in (("n_layer", n_layer), ("d_model", d_model), ("vocab_size", vocab_size),
                    ("d_ff", d_ff), ("bytes_per_param", bytes_per_param)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{name} must be a number > 0, got {v!r}")
    return int((n_layer * (4 * d_model ** 2 + (3 if gated else 2) * d_model * d_ff)
                + vocab_size * d_model) * bytes_per_param)


def regime_rows(launch_record: Any, decodes: Mapping[str, Any],
                big: Mapping[str, Any] | None = LLAMA2_7B) -> list[dict]:
    """Kernels, weight bytes, launch, read and floor µs per ``decodes`` record, then for the
    shape ``big`` (its count fitted per layer through the first two records: an estimate)."""
    lo = view(launch_record, LaunchOverhead)
    host, node = stat(lo.host_per_launch), stat(lo.gpu_per_graph_node)
    bw = sweep_bandwidth(launch_record)
    shapes: list[list[Any]] = []  # [name, kernels, kernels per layer (fitted) or None, shape]
    for name, rec in decodes.items():
        c = record_data(rec)["config"]
        shapes.append([name, gpu_ops_per_step(rec), None, dict(
            n_layer=c["n_layer"], d_model=c["d_model"], vocab_size=c["vocab_size"],
            bytes_per_param={"float32": 4}.get(c["dtype"], 2))])
    if big is not None:
        (_, k1, _, s1), (_, k2, _, s2) = shapes[:2]
        if s1["n_layer"] == s2["n_layer"]:
            raise ValueError("fitting operations per layer needs two records of different "
                             f"layer counts, got {s1['n_layer']} and {s2['n_layer']}")
        per = (k2 - k1) / (s2["n_layer"] - s1["n_layer"])
        shape = {k: v for k, v in big.items() if k != "name"}
        shapes.append([big.get("name", "shape"), k1 + per * (shape["n_layer"] - s1["n_layer"]),
                       per, shape])
    rows = []
    for name, k, per, shape in shapes:
        wb = weight_bytes(**shape)
        read = wb / bw * 1e6
        rows.append({"name": name, "kernels": k, "counted": per is None, "per_layer": per,
                     "weight_bytes": wb, "launch_us": k * host, "read_us": read,
                     "floor_us": read + k * node, "read_share": read / (read + k * node)})
    return rows
