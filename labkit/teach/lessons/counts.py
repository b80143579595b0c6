"""One number for "kernels per step", said the same way everywhere (notebooks 01, 02, 03, 08, 10).

Every record that counts the GPU work of a decode step counts it with one function,
``labkit.measure.bench.count_step_ops``: the step's inputs are made and copied to the GPU
first, then one eager ``decode_step`` at batch size 1 runs under ``torch.profiler`` and its GPU
events are counted, i.e. its kernels **plus** memory copies and fills
(:data:`labkit.measure.records.GPU_OPS_COUNTED`). The field is ``kernels_per_step`` (an int in
``decode_<preset>``; a dict with ``eager`` and ``compile`` in ``compile_<preset>``) or
``gpu_ops_per_step`` (``modes_<preset>``); records counted this way say so in
``gpu_ops_counted``.

``decode_<preset>`` records made before that field existed counted the three host-to-device
copies of the step's inputs (tokens, positions, slots) too, so their count lies above the
``compile_`` and ``modes_`` counts of the same model: :func:`describe_count` says so for such a
record instead of hiding it. The helpers always name the record a count comes from.
"""

from __future__ import annotations

from typing import Any, Mapping

from labkit.measure.records import GPU_OPS_COUNTED, GPU_OPS_SCOPE
from labkit.teach.lessons import record_data

#: what a count includes, per method, said once
WHAT = {"eager": f"per eager step ({GPU_OPS_COUNTED}",
        "compile": ("per step compiled by torch.compile without CUDA graphs, at batch 1 (fused "
                    "kernels plus copies and fills, inputs already on the GPU, counted by "
                    "torch.profiler")}

#: how a ``decode_<preset>`` record without ``gpu_ops_counted`` differs (see the module text)
LEGACY_NOTE = ("; this older record's count also includes the three host-to-device copies of "
               "the step's inputs that the measurement made inside the count, so it lies three "
               "above a count of the step alone until the record is re-recorded")


def gpu_ops_per_step(record: Any, method: str = "eager") -> int:
    """The recorded GPU operations per decode step of ``method`` (``eager`` or ``compile``)."""
    if method not in WHAT:
        raise ValueError(f"method must be one of {sorted(WHAT)}, got {method!r}")
    d = record_data(record)
    value = d.get("kernels_per_step", d.get("gpu_ops_per_step"))
    if isinstance(value, Mapping):
        value = value.get(method)
    elif method != "eager":
        value = None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        name = getattr(record, "name", "the record")
        raise ValueError(f"{name} holds no GPU operation count for method {method!r} (fields "
                         "kernels_per_step / gpu_ops_per_step); pass a decode_, compile_ or "
                         "modes_ record")
    return value


def counts_inputs(record: Any) -> bool:
    """True for a ``decode_<preset>`` record whose count included the three input copies
    (made before records said what they counted: no ``gpu_ops_counted`` field)."""
    d = record_data(record)
    name = getattr(record, "name", None) or ""
    is_decode = name.startswith("decode_") or isinstance(d.get("kernels_per_step"), int)
    return is_decode and d.get("gpu_ops_counted") != GPU_OPS_SCOPE


def describe_count(record: Any, method: str = "eager") -> str:
    """``"<n> GPU operations per eager step (what it counts; record <name>)"``; for an older
    ``decode_`` record it adds :data:`LEGACY_NOTE`."""
    n = gpu_ops_per_step(record, method)
    name = getattr(record, "name", None) or "a record without a name"
    note = LEGACY_NOTE if method == "eager" and counts_inputs(record) else ""
    return f"{n} GPU operations {WHAT[method]}; record {name}{note})"
