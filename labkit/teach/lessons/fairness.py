"""When is a torch.compile column a fair comparison with static CUDA graphs? (notebook 08, bench)

The manual graphs and the dispatcher capture one static-shaped graph per batch size. PyTorch's
``torch.compile`` compiles the first shape it sees statically; a second shape triggers a
recompile with dynamic shapes (automatic dynamic shapes), and CUDA Graph Trees may skip graphs
they cannot record. So a compile column is compared fairly only at the first size it compiled,
and only when its record shows that no CUDA graph was skipped (``cudagraph_skips`` empty).
"""

from __future__ import annotations

from typing import Any

#: why the other compile columns are shown but not scored
NOT_SCORED = ("torch.compile columns at batch sizes after the first compiled one are not "
              "scored: PyTorch then recompiles with dynamic shapes, which is not the static "
              "per-size capture the dispatcher does; nor is a compile column whose record does "
              "not show that CUDA graphs were used (its cudagraph_skips field). A fair "
              "comparison compiles each size with static shapes and checks the CUDA graphs "
              "(TORCH_LOGS=cudagraphs, cudagraph_skips empty).")


def fair_compile_size(record: Any) -> int | None:
    """The batch size at which ``record``'s compile column is a fair comparison with static
    CUDA graphs: the first size it compiled (static shapes; later sizes are a dynamic
    recompile), and only if the record holds a ``cudagraph_skips`` field that is empty.
    ``None`` when there is no such size."""
    if record is None:
        return None
    raw = getattr(record, "data", record)
    if "cudagraph_skips" not in raw or raw["cudagraph_skips"]:
        return None
    sizes = raw.get("compile_batch_sizes") or raw.get("batch_sizes") or []
    return int(sizes[0]) if sizes else None
