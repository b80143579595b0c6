"""When is decode launch-bound, and when bound by weight bandwidth? (notebooks 00 and 01)

Pure arithmetic over the ``launch_overhead`` record's work-per-kernel sweep: the bandwidth
the largest swept kernel reached, the bytes a kernel must move before its own GPU time
exceeds the host's launch time (the crossover), and what both mean for a whole decode step
whose weights are read once per step. A step is launch-bound when launching its kernels takes
longer than reading its weights; graph replay removes the launches but not the reads.
"""

from __future__ import annotations

from typing import Any, Mapping

from labkit.measure.records import LaunchOverhead, view
from labkit.teach.lessons import median
from labkit.teach.lessons.launch import SWEEP_BYTES_PER_ELEMENT, _sweep


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    return float(value)


def sweep_bandwidth(record: Any) -> float:
    """Bytes per second the largest kernel of the sweep moved when replayed from a graph
    (``numel × 8 bytes / graph median``): the memory bandwidth a big kernel reaches."""
    points = [p for p in _sweep(record) if median(p.get("graph"))]
    if not points:
        raise ValueError("the launch_overhead record has no graph column in its sweep "
                         "(it was measured without CUDA); use the H200 reference record")
    big = points[-1]
    return big["numel"] * SWEEP_BYTES_PER_ELEMENT / (median(big["graph"]) * 1e-6)


def host_launch_us(record: Any) -> float:
    """Median host time per launch (µs) of the ``launch_overhead`` record."""
    return _positive("host_per_launch median", median(view(record, LaunchOverhead)
                                                       .host_per_launch))


def first_gpu_bound_point(record: Any) -> dict | None:
    """The first sweep point whose GPU time per kernel (graph median) is at least the host
    time per launch: from there on a kernel runs longer than its launch takes."""
    host = host_launch_us(record)
    return next((p for p in _sweep(record)
                 if median(p.get("graph")) is not None and median(p["graph"]) >= host), None)


def hiding_bytes(record: Any) -> float:
    """Bytes a kernel must move at the sweep's bandwidth to take as long on the GPU as one
    launch takes on the host: ``host time per launch × bandwidth``."""
    return host_launch_us(record) * 1e-6 * sweep_bandwidth(record)


def weight_bytes(n_layer: int, d_model: int, vocab_size: int, *, d_ff: int | None = None,
                 bytes_per_param: int = 2, gated: bool = False) -> int:
    """Bytes of the matrices a decode step reads once: per layer the attention projections
    (``4 d²``) and the MLP (``2 d·d_ff``, ``3 d·d_ff`` when ``gated`` as in Llama), plus the
    output head (``vocab × d``). Embedding rows, norms and biases are left out (small)."""
    for name, v in (("n_layer", n_layer), ("d_model", d_model), ("vocab_size", vocab_size),
                    ("bytes_per_param", bytes_per_param)):
        _positive(name, v)
    d_ff = 4 * d_model if d_ff is None else int(_positive("d_ff", d_ff))
    per_layer = 4 * d_model * d_model + (3 if gated else 2) * d_model * d_ff
    return int((n_layer * per_layer + vocab_size * d_model) * bytes_per_param)


def kernels_per_layer(k_small: int, layers_small: int, k_big: int, layers_big: int
                      ) -> tuple[float, float]:
    """Fit ``kernels = per_layer × layers + fixed`` through two models' counts:
    ``(per_layer, fixed)``."""
    if layers_big == layers_small:
        raise ValueError("the two models must have different layer counts to fit kernels per "
                         f"layer, got {layers_small} and {layers_big}")
    per = (k_big - k_small) / (layers_big - layers_small)
    return per, k_small - per * layers_small


def step_regime(n_bytes: float, n_kernels: float, launch_us: float, bandwidth: float
                ) -> dict[str, float | str]:
    """Compare launching ``n_kernels`` (``launch_us`` each) with reading ``n_bytes`` at
    ``bandwidth`` bytes/s. Returns ``launch_us``, ``read_us`` and ``bound``
    (``"launch-bound"`` or ``"weight-bandwidth-bound"``)."""
    launch = _positive("n_kernels", n_kernels) * _positive("launch_us", launch_us)
    read = _positive("n_bytes", n_bytes) / _positive("bandwidth", bandwidth) * 1e6
    return {"launch_us": launch, "read_us": read,
            "bound": "launch-bound" if launch > read else "weight-bandwidth-bound"}


def describe_regime(name: str, row: Mapping[str, Any]) -> str:
    """One line: which of launching and reading the weights takes longer for ``name``."""
    return (f"{name}: launching its kernels {row['launch_us']:,.0f} µs vs reading its weights "
            f"{row['read_us']:,.0f} µs → {row['bound']}")


def replay_floor_us(n_bytes: float, n_kernels: float, node_us: float, bandwidth: float
                    ) -> dict[str, float]:
    """The least a graph replay of the step can take: reading ``n_bytes`` at ``bandwidth``
    plus ``n_kernels`` graph nodes of ``node_us`` each. Returns ``floor_us`` and
    ``read_share`` (the part of it spent reading weights)."""
    read = _positive("n_bytes", n_bytes) / _positive("bandwidth", bandwidth) * 1e6
    nodes = _positive("n_kernels", n_kernels) * _positive("node_us", node_us)
    return {"floor_us": read + nodes, "read_share": read / (read + nodes)}
