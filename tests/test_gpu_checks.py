"""CUDA tests (marker ``gpu``) of the checked boundaries: the dispatcher refuses a bad batch of
CUDA metadata and changes nothing, a shared dispatcher is correct from two threads, and
``decode_step(check=True)`` refuses to read values back during capture.

Skipped with a reason on machines without CUDA; run them on a GPU with ``pytest -m gpu``.
"""

import threading

import pytest
import torch

from labkit.runner import PaddingDispatcher
from labkit.graphs import capture_callable
from labkit.model import build_model, preset

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def model():
    return build_model(preset("test", max_batch=8), "cuda", seed=0)


def _cuda(*xs):
    return tuple(torch.tensor(x, device="cuda") for x in xs)


@pytest.mark.parametrize("tokens, positions, slots, words", [
    ([1, 2], [3, 3], [4, 4], "more than once"),
    ([1, 2], [3, 3], [0, 8], "scratch slot"),
    ([1], [-1], [0], "negative"),
    ([1], [32], [0], "past the KV cache"),
    ([97], [0], [0], "token ids"),
])
def test_dispatcher_checks_cuda_metadata_and_changes_nothing(model, tokens, positions, slots,
                                                             words):
    model.reset_cache()
    d = PaddingDispatcher(model, [1, 2, 4], progress=False)
    d.step(*_cuda([5, 6, 7], [1, 1, 1], [5, 6, 7]))
    before = (model.k_cache.clone(), d.counters.to_dict(), d.batch.slots.clone(),
              d.batch.tokens.clone(), d.batch.positions.clone())
    with pytest.raises(ValueError, match=words):
        d.step(*_cuda(tokens, positions, slots))
    torch.cuda.synchronize()
    assert torch.equal(model.k_cache, before[0]) and d.counters.to_dict() == before[1]
    assert all(torch.equal(a, b) for a, b in zip((d.batch.slots, d.batch.tokens, d.batch.positions),
                                                  before[2:]))
    d.release()


def test_graph_dispatcher_is_correct_from_two_threads(model):
    d = PaddingDispatcher(model, [1, 2, 4], progress=False)
    batches = [_cuda([3, 4], [5, 6], [0, 1]), _cuda([7, 8, 9], [2, 9, 4], [2, 3, 4])]
    expected = [d.step(*b) for b in batches]
    wrong, errors = [0, 0], []
    barrier = threading.Barrier(2)

    def worker(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(100):
                if not torch.equal(d.step(*batches[i]), expected[i]):
                    wrong[i] += 1
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    assert errors == [] and wrong == [0, 0]
    d.release()


def test_decode_step_check_true_is_refused_inside_capture(model):
    t, p, s = _cuda([1], [0], [8])
    with pytest.raises(Exception, match="check=True"):
        capture_callable(lambda a, b, c: model.decode_step(a, b, c, check=True), t, p, s,
                         warmup=0)
    # unchecked (the default on CUDA) captures fine and writes the scratch slot only
    g = capture_callable(lambda a, b, c: model.decode_step(a, b, c), t, p, s, warmup=1)
    assert g.replay().shape == (1, 97)
