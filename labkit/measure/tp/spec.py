"""The parameters of a tensor-parallel measurement: message sizes, method and part names."""

from __future__ import annotations

#: the message the lessons quote: 12 KB, one all-reduce of gpt2 at batch 8 (8 x 768 bf16)
TARGET_ALLREDUCE_BYTES = 12288
#: message sizes of the all-reduce sweep (bytes): 2 KB ... 8 MB, and 12 KB (8 rows of gpt2)
ALLREDUCE_BYTES = (2048, 4096, 8192, 12288, 16384, 32768, 65536, 131072, 262144, 524288,
                   1048576, 2097152, 4194304, 8388608)
#: the quick sweep (notebook 14's live tier): every other size, and always the 12 KB target
QUICK_ALLREDUCE_BYTES = tuple(sorted(set(ALLREDUCE_BYTES[::2]) | {TARGET_ALLREDUCE_BYTES}))
PG_METHODS = ("pg_eager", "pg_graph")
SYMM_METHODS = ("one_shot_eager", "one_shot_graph", "two_shot_eager", "two_shot_graph")
#: the parts of each launch, in order: tokens checked before anything is timed
PG_PARTS = ("check_pg", "allreduce_pg", "decode_pg")
SYMM_PARTS = ("check_symm", "allreduce_symm", "decode_symm")


def decode_methods(world_size: int) -> list[str]:
    """The decode-step methods of a ``tp_decode`` record, in order."""
    n = f"tp{world_size}"
    return ["tp1_eager", "tp1_graph", f"{n}_eager", f"{n}_graph", f"{n}_eager_noop",
            f"{n}_graph_noop", f"{n}_graph_symm_mem"]


def default_spec(quick: bool = False, *, cpu: bool = False) -> dict:
    """The measurement parameters: gpt2 bf16 on GPUs; the tiny ``test`` preset on CPU (gloo),
    where only the plumbing is checked."""
    if cpu:
        return {"preset": "test", "overrides": {"n_head": 4, "d_model": 32, "max_seq": 32},
                "dtype": "float32", "batch_sizes": [1, 4], "sizes_bytes": [2048, 8192],
                "repeats": 3, "inner": 2, "graph_ops": 4, "graph_replays": 2,
                "check_sizes": [1, 2, 4], "check_rows": 3, "check_steps": 4, "seed": 0}
    return {"preset": "gpt2", "overrides": {"max_seq": 256}, "dtype": "bfloat16",
            "batch_sizes": [1, 8, 64, 128],
            "sizes_bytes": list(QUICK_ALLREDUCE_BYTES if quick else ALLREDUCE_BYTES),
            "repeats": 10 if quick else 20, "inner": 10, "graph_ops": 20, "graph_replays": 5,
            "check_sizes": [1, 2, 4, 8], "check_rows": 5, "check_steps": 6, "seed": 0}
