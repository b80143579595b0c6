"""One number for "kernels per step", said the same way everywhere (notebooks 02, 03, 08, 10).

Every record that counts the GPU work of a decode step counts it the same way:
``labkit.measure.bench.count_gpu_ops`` runs one eager ``decode_step`` at batch size 1 under
``torch.profiler`` and counts its GPU events, i.e. kernels **plus** memory copies and fills.
The field is ``kernels_per_step`` (an int in ``decode_<preset>``; a dict with ``eager`` and
``compile`` in ``compile_<preset>``) or ``gpu_ops_per_step`` (``modes_<preset>``). Records made
by different runs or on differently built models may differ by a few operations; the helpers
below always name the record a count comes from.
"""

from __future__ import annotations

from typing import Any, Mapping

from labkit.teach.lessons import record_data

#: what a count includes, per method, said once
WHAT = {"eager": ("per eager step at batch 1 (kernels plus memory copies and fills, counted "
                  "by torch.profiler"),
        "compile": ("per step compiled by torch.compile without CUDA graphs, at batch 1 (fused "
                    "kernels plus copies and fills, counted by torch.profiler")}


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


def describe_count(record: Any, method: str = "eager") -> str:
    """``"<n> GPU operations per eager step at batch 1 (what it counts; record <name>)"``."""
    n = gpu_ops_per_step(record, method)
    name = getattr(record, "name", None) or "a record without a name"
    return f"{n} GPU operations {WHAT[method]}; record {name})"
