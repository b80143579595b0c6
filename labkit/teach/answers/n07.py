"""Exercise checks of notebook 07 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
from labkit.teach import pitfalls

#: snippets of exercise 7.3 that break a second rule as well as their own: ``x[x != 0]`` has a
#: data-dependent shape, and PyTorch reads its size back to the host (a sync) to allocate it
ALSO_DEFENSIBLE = {"c": ("host_sync",)}


@exercise("7.1", "predict whether a kept output survives", "predict")
def _kept_output(ex: Exercise, kept_without_copy: Any, b_after_a: Any, *,
                 details: Mapping[str, Any]) -> None:
    ex.check("(a) logits kept with copy_outputs=False", kept_without_copy,
             details["dispatcher"]["copy_outputs_false_kept"],
             hint="what does copy_outputs=False hand out?")
    ex.check("(b) B's output after replaying A", b_after_a,
             float(details["shared_pool"]["b_output_after_replay_a"]), rel=1e-6,
             hint="which graph wrote last into the block they share?")


@exercise("7.2", "debug the stale input", "debug")
def _stale_input(ex: Exercise, serve: Any, *, layer: Callable[[torch.Tensor], torch.Tensor],
                 static_x: torch.Tensor) -> None:
    if not ex.check_function("a function serve(new_x)", serve):
        return
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randn(2, 4, generator=gen).to(static_x.device) for _ in range(3)]
    got = [serve(x) for x in batches]
    ex.check_true("every replay equals the eager step on its own batch",
                  all(torch.allclose(y, layer(x), rtol=1e-5, atol=1e-5)
                      for x, y in zip(batches, got)),
                  hint="a replay returned the same numbers for different batches: which "
                       "tensor does the graph read?")
    ex.check_true("the last batch sits in the tensor the graph was captured with",
                  torch.equal(static_x, batches[-1]),
                  hint="do not rebind static_x; copy into it")


@exercise("7.3", "which rule is broken", "choose")
def _which_rule(ex: Exercise, answers: Any) -> None:
    if not isinstance(answers, Mapping):
        ex.check("a dict from snippet to rule key", answers, "a dict")
        return
    for key, item in pitfalls.QUIZ.items():
        ex.check_one_of(f"snippet {key}", answers.get(key),
                        [item.answer, *ALSO_DEFENSIBLE.get(key, ())],
                        hint="see the table in section 1")
