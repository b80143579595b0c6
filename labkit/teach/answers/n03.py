"""Exercise checks of notebook 03 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labkit.model import TinyGPT, generate
from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach import launch

#: speed-ups closer than this (relative) may be ranked either way in exercise 3.2
RANK_TIE = 0.05


@exercise("3.1", "write the capture", "write")
def _write_the_capture(ex: Exercise, graph_step: Any, *, model: TinyGPT, prompt: Sequence[int],
                       new_tokens: int) -> None:
    if not ex.check_function("graph_step is a function (tokens, positions, slots) -> logits",
                             graph_step):
        return
    eager = generate(model, [list(prompt)], new_tokens)
    try:
        graph = generate(model, [list(prompt)], new_tokens, step_fn=graph_step)
    except Exception as err:  # a half-written capture: say what it raised
        ex.check_true(f"generating through graph_step runs ({type(err).__name__}: {err})", False,
                      hint="warm up, capture one_step(), copy_ each input into its static tensor,"
                           " replay")
        return
    ex.check("graph tokens == eager tokens", graph, eager,
             hint="warm up, capture one_step(), copy_ each input into its static tensor, replay")


def _rankings(batch_sizes: Sequence[int], gains: Sequence[float]) -> list[list[int]]:
    """Every order of ``batch_sizes`` by gain, largest first, that swaps only neighbours whose
    gains lie within :data:`RANK_TIE` of each other."""
    order = sorted(zip(gains, batch_sizes), key=lambda p: -p[0])
    out = [[b for _, b in order]]
    for i in range(len(order) - 1):
        (ga, _), (gb, _) = order[i], order[i + 1]
        if abs(ga - gb) <= RANK_TIE * max(ga, gb):
            swapped = list(out[0])
            swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
            out.append(swapped)
    return out


@exercise("3.2", "where replay gains most", "predict")
def _where_replay_gains(ex: Exercise, ranking: Any, why: Any, *, rec: Any) -> None:
    d = rec.data
    ex.check_one_of("ranking", list(ranking) if isinstance(ranking, (list, tuple)) else ranking,
                    _rankings(d["batch_sizes"], d["speedup_vs_eager"]["graph"]),
                    hint="what does each column pay for as the batch grows?")
    eager, graph = ([s["median"] for s in d["times"][m]] for m in ("eager", "graph"))
    ex.check_one_of("reason", why, ["a" if eager[-1] / eager[0] < graph[-1] / graph[0] else "b"],
                    hint="which step's work grows with the batch?")


@exercise("3.3", "find the bug in a replay prediction", "debug")
def _replay_prediction(ex: Exercise, predict_replay_us: Any, bug: Any, *, lo: Any,
                       kernels: int) -> None:
    if not ex.check_function("predict_replay_us is a function (kernels, host_us, node_us) -> µs",
                             predict_replay_us):
        return
    host_us, node_us = lo.data["host_per_launch"]["median"], lo.data["gpu_per_graph_node"]["median"]
    for k in (1, kernels, 10 * kernels):
        ex.check(f"prediction for {k} nodes (µs)", predict_replay_us(k, host_us, node_us),
                 launch.expected_replay_us(k, node_us), rel=0.01,
                 hint="kernels × the GPU's time per graph node")
    ex.check_true("the bug is explained", isinstance(bug, str) and len(bug.strip()) > 0,
                  hint="a sentence: which figure did it use, and which should it?")
