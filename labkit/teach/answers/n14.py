"""Exercise checks of notebook 14 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from typing import Any

from labkit.distributed.launch import SHUTDOWN_ORDER
from labkit.measure.records import TPDecode, view
from labkit.model import preset
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach import tp as lt


def band(ratio: float) -> str:
    """The word for a TP=2 over TP=1 step ratio that exercise 14.2 asks for."""
    return ("about half" if ratio <= 0.6 else "in between" if ratio < 0.9 else
            "about the same" if ratio <= 1.1 else "more")


@exercise("14.1", "count the collectives", "predict")
def _count_collectives(ex: Exercise, ends_in_allreduce: Any, allreduces_labkit: Any,
                       allreduces_vllm: Any, bytes_at_batch_8: Any) -> None:
    g = preset("gpt2")
    layers = (set(ends_in_allreduce) if isinstance(ends_in_allreduce, (set, list, tuple, frozenset))
              else ends_in_allreduce)
    ex.check("layers followed by an all-reduce", layers, {"proj", "fc_out"},
             hint="the row-parallel ones; labkit's head is replicated")
    ex.check("all-reduces per labkit step", allreduces_labkit, lt.allreduces_per_step(g.n_layer),
             hint="how many row-parallel layers does one block have?")
    ex.check("all-reduces per vLLM step", allreduces_vllm,
             lt.allreduces_per_step(g.n_layer, vocab_parallel_embedding=True),
             hint="the split embedding sums its partial lookups once per step")
    ex.check("bytes per all-reduce at batch 8", bytes_at_batch_8, 8 * g.d_model * 2,
             hint="the hidden state of every row, in bf16")


@exercise("14.2", "does splitting the matmuls halve the time", "predict")
def _half_the_work(ex: Exercise, compute_at_batch_1: Any, compute_at_batch_128: Any, *,
                   dec: Any) -> None:
    if dec is None:
        ex.check_true("a recorded TP decode step to compare with", dec is not None,
                      hint="this exercise needs tp_decode_gpt2 (data/reference/h200x2/)")
        return
    d = view(dec, TPDecode)
    for b, got in ((d.batch_sizes[0], compute_at_batch_1), (d.batch_sizes[-1],
                                                            compute_at_batch_128)):
        split, one = d.at(d.tp("graph_noop"), b), d.at("tp1_graph", b)
        if split is None or one is None:
            ex.check_true(f"the record times batch {b} both ways", False,
                          hint="this record lacks the no-op or the TP=1 graph step")
            continue
        # a ratio within 0.02 of a band's edge: either side is defensible
        ex.check_one_of(f"TP=2 no-op / TP=1 at batch {b}", got,
                        sorted({band(split / one + e) for e in (-0.02, 0.0, 0.02)}),
                        hint="what sets the time of a short kernel?")


@exercise("14.3", "clean shutdown", "debug")
def _clean_shutdown(ex: Exercise, shutdown_steps: Any, keeps_comm_alive: Any) -> None:
    ex.check("shutdown order", list(shutdown_steps) if isinstance(shutdown_steps, (list, tuple))
             else shutdown_steps, list(SHUTDOWN_ORDER),
             hint="free what holds the communicator first, destroy it last")
    ex.check_one_of("what holds the communicator", keeps_comm_alive, ["B"],
                    hint="which object did NCCL count a reference for?")
