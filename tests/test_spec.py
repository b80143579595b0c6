"""Speculative decoding's host side (labkit.serving.spec): the prompt-lookup drafter on vLLM's
cases, greedy acceptance, and the loop giving exactly plain greedy's tokens through two
reference verify steps (the full forward pass, and the model's own cache token by token)."""

from __future__ import annotations

import pytest
import torch

from labkit.model import TinyGPT, build_model, generate, preset
from labkit.serving.spec import SpecStats, accept_greedy, generate_speculative, propose_ngram

PROMPTS = [[1, 2, 3], [40, 41, 42, 43, 44, 45, 46], [7, 8, 9, 10, 11]]
#: one token repeated: the test model (seed 0) answers it by repeating a token of its own, so
#: the drafts there get accepted (found by trying repeated prompts)
REPETITIVE = [[90] * 12]


@pytest.fixture(scope="module")
def model() -> TinyGPT:
    return build_model(preset("test"), seed=0)


def forward_verify(model: TinyGPT, prompts):
    """A reference verify: each slot's tokens kept on the host (the prompt, then what each
    call feeds from its first position on) and its whole context run through
    ``model.forward``. Checks the batch is uniform as the loop promises."""
    hist = {i: list(p) for i, p in enumerate(prompts)}

    def verify(tokens, positions, slots, q):
        rows = []
        for r in range(tokens.shape[0] // q):
            part = slice(r * q, (r + 1) * q)
            s, p0 = int(slots[r * q]), int(positions[r * q])
            assert slots[part].tolist() == [s] * q
            assert positions[part].tolist() == list(range(p0, p0 + q))
            assert p0 <= len(hist[s]), "a gap in the positions"
            hist[s] = hist[s][:p0] + tokens[part].tolist()
            rows.append(model(torch.tensor([hist[s]]))[0, -q:])
        return torch.cat(rows)
    return verify


def decode_verify(model: TinyGPT):
    """A cached reference verify: ``model.decode_step`` over the batch once per query
    position, writing and reading the model's own KV cache (rejected positions stay written
    until a later step overwrites them)."""
    def verify(tokens, positions, slots, q):
        steps = [model.decode_step(tokens[j::q], positions[j::q], slots[j::q])
                 for j in range(q)]
        return torch.stack(steps, 1).reshape(tokens.shape[0], -1)
    return verify


@pytest.mark.parametrize("context, k, min_n, max_n, drafts", [
    # the example of vLLM's NgramProposer.propose: [4,2,3] finds nothing, [2,3] does and is
    # followed by only three tokens
    ([1, 2, 3, 4, 2, 3], 4, 2, 3, [4, 2, 3]),
    # two earlier [1,2]: vLLM takes the earliest
    ([1, 2, 9, 1, 2, 8, 1, 2], 1, 1, 2, [9]),
    # the longest n wins over an earlier shorter match
    ([5, 1, 2, 7, 3, 1, 2, 6, 9, 3, 1, 2], 3, 1, 3, [6, 9, 3]),
    # a match may overlap the suffix; the earliest leaves two tokens to draft
    ([1, 1, 1, 1, 1], 4, 1, 3, [1, 1]),
    # a match near the end: fewer than k, up to the end of the context
    ([1, 2, 3, 1, 2], 5, 1, 3, [3, 1, 2]),
    ([7, 7], 3, 1, 3, [7]),
    # min_n rules out the one-token match that min_n=1 finds
    ([1, 2, 3, 2], 2, 2, 3, []),
    ([1, 2, 3, 2], 2, 1, 3, [3, 2]),
    # no earlier occurrence; a context of min_n tokens; an empty context
    ([1, 2, 3, 4], 2, 1, 3, []),
    ([4, 4], 2, 2, 3, []),
    ([], 2, 1, 3, []),
])
def test_propose_ngram_follows_vllm(context, k, min_n, max_n, drafts):
    assert propose_ngram(context, k, min_n, max_n) == drafts


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(k=0), ValueError, "k must be >= 1"),
    (dict(k=2.5), TypeError, "k must be an int"),
    (dict(k=2, min_n=0), ValueError, "min_n must be >= 1"),
    (dict(k=2, min_n=3, max_n=2), ValueError, "max_n must be >= 3"),
    (dict(k=2, max_n=True), TypeError, "max_n must be an int"),
])
def test_propose_ngram_refuses_bad_k_and_n(kwargs, error, words):
    with pytest.raises(error, match=words):
        propose_ngram([1, 2, 1], **kwargs)


@pytest.mark.parametrize("drafts, target, emitted", [
    ([1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4]),  # all accepted: the bonus token follows
    ([1, 2, 3], [5, 2, 3, 4], [5]),           # the first rejected: the target's token
    ([1, 2, 3], [1, 9, 3, 4], [1, 9]),        # later ones never count after a mismatch
    ([], [7], [7]),
])
def test_accept_greedy(drafts, target, emitted):
    assert accept_greedy(drafts, target) == emitted


def test_accept_greedy_needs_one_target_per_position():
    with pytest.raises(ValueError, match="2 drafts need 3 target tokens"):
        accept_greedy([1, 2], [1, 2])


@pytest.mark.parametrize("k", [1, 2, 4])
def test_speculative_equals_plain_greedy(model, k):
    n = 12
    for prompts in (PROMPTS, REPETITIVE):
        plain = generate(model, prompts, n)
        spec, stats = generate_speculative(model, prompts, n, k, forward_verify(model, prompts))
        assert spec == plain
        assert stats.emitted == sum(len(o) - 1 for o in spec)
        assert stats.drafted == k * stats.rows
        assert 1 <= stats.tokens_per_step <= k + 1
    assert stats.acceptance_rate > 0  # the repetitive prompt: drafts were accepted
    assert stats.steps < n - 1


def test_speculative_stats_under_the_fixed_seed(model):
    """k=1 on the repetitive prompt, traced by hand from plain greedy's tokens
    0 67 0 28 28 28 28 28 28 90 28 28 (prefill: 0): no match, pad 0, emit 67; no match, pad
    67, emit 0; [0] drafts 67, emit 28; no match, pad 28, accepted: 28 28; [28 28] drafts 28,
    accepted: 28 28; [28 28 28] drafts 28, accepted: 28 90; [90] drafts 90, emit 28; [28]
    drafts 28, accepted, the bonus cut at 12: 8 steps, 4 of 8 drafts accepted, 11 tokens."""
    assert generate(model, REPETITIVE, 12) == [[0, 67, 0, 28, 28, 28, 28, 28, 28, 90, 28, 28]]
    _, stats = generate_speculative(model, REPETITIVE, 12, 1, forward_verify(model, REPETITIVE))
    assert stats == SpecStats(steps=8, rows=8, drafted=8, accepted=4, emitted=11)
    assert (stats.acceptance_rate, stats.tokens_per_step) == (4 / 8, 11 / 8)


@pytest.mark.parametrize("layout", ["slot", "paged"])
@pytest.mark.parametrize("k", [1, 4])
def test_speculative_over_the_cache_equals_plain_greedy(k, layout):
    model = build_model(preset("test", kv_layout=layout, block_size=8), seed=0)
    prompts = PROMPTS + REPETITIVE
    plain = generate(model, prompts, 12)
    spec, _ = generate_speculative(model, prompts, 12, k, decode_verify(model))
    assert spec == plain
    if layout == "paged":
        assert model.cache.allocator.used == 0  # every block given back


@pytest.mark.parametrize("n", [0, 1, 2])
def test_few_new_tokens_stop_exactly(model, n):
    spec, stats = generate_speculative(model, PROMPTS, n, 4, forward_verify(model, PROMPTS))
    assert spec == generate(model, PROMPTS, n)
    assert stats.steps == (1 if n == 2 else 0)


def test_the_drafts_room_is_checked_before_anything_is_written():
    model = build_model(preset("test", kv_layout="paged", block_size=8), seed=0)
    before = model.cache.kv.clone()
    prompt = [[3] * 20]  # 20 + 12 - 1 = 31 positions fit plain greedy, not 2 drafts more

    def never(*args):
        raise AssertionError("verify ran")
    with pytest.raises(ValueError, match=r"needs 33 cache positions .* max_seq=32"):
        generate_speculative(model, prompt, 12, 2, never)
    assert torch.equal(model.cache.kv, before) and model.cache.allocator.used == 0
    assert len(generate(model, prompt, 12)[0]) == 12


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(k=0), ValueError, "k must be >= 1"),
    (dict(min_n=2, max_n=1), ValueError, "max_n must be >= 2"),
    (dict(verify=3), TypeError, "verify must be callable"),
    (dict(verify=lambda t, p, s, q: torch.zeros(1, 97)), ValueError, "verify returned logits"),
])
def test_bad_arguments_are_named(model, kwargs, error, words):
    args = {"k": 2, "verify": forward_verify(model, PROMPTS), **kwargs}
    with pytest.raises(error, match=words):
        generate_speculative(model, PROMPTS, 4, **args)


@pytest.mark.parametrize("layout", ["slot", "paged"])
def test_a_verify_of_another_models_runner_is_refused_before_anything_is_written(layout):
    from labkit.runner import MixedRunner

    model = build_model(preset("test", kv_layout=layout, block_size=8), seed=0)
    other = build_model(preset("test", kv_layout=layout, block_size=8), seed=1)
    before = model.cache.kv.clone()
    runner = MixedRunner(other, [3, 6, 12], uniform_query_len=3, capture=False)
    with pytest.raises(ValueError, match="runner of another model"):
        generate_speculative(model, PROMPTS, 6, 2, runner.verify)
    assert torch.equal(model.cache.kv, before)
    # the runner's own 1 + k must match k: refused before the prefill, not after
    mine = MixedRunner(model, [2, 4, 8], uniform_query_len=2, capture=False)
    with pytest.raises(ValueError, match=r"uniform_query_len=2.*k=2"):
        generate_speculative(model, PROMPTS, 6, 2, mine.verify)
    assert torch.equal(model.cache.kv, before)
    if layout == "paged":
        assert model.cache.allocator.used == 0
