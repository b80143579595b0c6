"""vLLM's CUDA-graph rules stated once (labkit.rules): checked against an independent
transcription of vLLM 0.13.0's source over many inputs, and no second statement of them
elsewhere in the package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import assume, given, settings, strategies as st

from labkit import rules
from labkit.mixed import TokenDispatcher
from labkit.sizes import engines

# ------------------------------------------------------------------ the transcription
# Written from vLLM 0.13.0's source, independently of labkit.rules (no shared code):
#   vllm/config/vllm.py           the padding table bs_to_padded_graph_size (built by a
#                                 walk over consecutive sizes) and _set_cudagraph_sizes
#   vllm/config/compilation.py    CUDAGraphMode.decode_mode/mixed_mode/separate_routine and
#                                 adjust_cudagraph_sizes_for_spec_decode
#   vllm/v1/worker/gpu_model_runner.py  _check_and_update_cudagraph_mode: when it rounds
#   vllm/v1/cudagraph_dispatcher.py     initialize_cudagraph_keys, dispatch,
#                                       _create_padded_batch_descriptor

_DECODE_MIXED = {"NONE": ("NONE", "NONE"), "PIECEWISE": ("PIECEWISE", "PIECEWISE"),
                 "FULL": ("FULL", "FULL"), "FULL_DECODE_ONLY": ("FULL", "NONE"),
                 "FULL_AND_PIECEWISE": ("FULL", "PIECEWISE")}


def _vllm_pad_table(sizes):
    top = sizes[-1]
    table = [0] * (top + 1)
    for end, start in zip([*sizes, top + 1], [0, *sizes]):
        for bs in range(start, end):
            table[bs] = start if bs == start else end
    return table


def _vllm_round_up(x, m):
    return ((x + m - 1) // m) * m


def _vllm_adjust_for_spec(sizes, q, top):
    out = sorted({_vllm_round_up(s, q) for s in sizes if _vllm_round_up(s, q) <= top})
    if len(out) == 0 and q <= top:
        out = [q]
    if len(out) == 0:
        raise ValueError("No valid cudagraph sizes after rounding")
    return out


def _vllm_sizes(sizes, mode, q):
    sizes = sorted(sizes)
    decode, mixed = _DECODE_MIXED[mode]
    if decode == "FULL" and decode != mixed and q > 1:
        return _vllm_adjust_for_spec(sizes, q, sizes[-1])
    return sizes


def _vllm_dispatch(sizes, mode, q, max_num_seqs, lens):
    decode, mixed = _DECODE_MIXED[mode]
    keys = {"FULL": set(), "PIECEWISE": set()}
    if mixed != "NONE":
        for bs in sizes:
            keys[mixed].add((bs, None, False))
    if decode == "FULL" and decode != mixed:
        for bs in [x for x in sizes if q <= x <= q * max_num_seqs]:
            keys["FULL"].add((bs, bs // q, True))
    num_tokens = sum(lens)
    # the runner's uniform_decode: the longest query is q and every request has it
    uniform = max(lens) == q and num_tokens == max(lens) * len(lens)
    if mode == "NONE" or num_tokens > sizes[-1]:
        return "NONE", num_tokens
    padded = _vllm_pad_table(sizes)[num_tokens]
    if uniform and "FULL" in (decode, mixed):
        assert padded % q == 0, "vLLM asserts here"
        desc = (padded, padded // q, True)
    else:
        desc = (padded, min(padded, max_num_seqs), False)
    relaxed = (padded, None, False)
    if desc in keys["FULL"]:
        return "FULL", padded
    if relaxed in keys["FULL"]:
        return "FULL", padded
    if relaxed in keys["PIECEWISE"]:
        return "PIECEWISE", padded
    return "NONE", num_tokens


# ------------------------------------------------------------------ checks against it

SIZE_SETS = st.lists(st.integers(1, 80), min_size=1, max_size=8, unique=True)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(sizes=SIZE_SETS, n=st.integers(1, 120))
def test_padding_is_vllms_table(sizes, n):
    ordered = sorted(sizes)
    table = _vllm_pad_table(ordered)
    want = table[n] if n < len(table) else None
    assert rules.padded_size(ordered, n) == want
    assert rules.padding_table(ordered, 120)[n] == (want or 0)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(sizes=SIZE_SETS, q=st.integers(1, 6), mode=st.sampled_from(rules.GRAPH_MODES))
def test_spec_rounding_is_vllms_and_only_where_vllm_rounds(sizes, q, mode):
    try:
        want = _vllm_sizes(sizes, mode, q)
    except ValueError:
        with pytest.raises(ValueError, match="no capture size is left"):
            TokenDispatcher(sizes, 8, mode, q, support="ALWAYS")
        return
    assert rules.capture_sizes(sizes, mode, q) == want
    assert TokenDispatcher(sizes, 8, mode, q, support="ALWAYS").sizes == want


@settings(max_examples=600, deadline=None, derandomize=True)
@given(sizes=SIZE_SETS, q=st.integers(1, 4), mode=st.sampled_from(rules.GRAPH_MODES),
       seqs=st.integers(1, 16), lens=st.lists(st.sampled_from([1, 1, 2, 3, 4, 9]), min_size=1,
                                              max_size=16), same=st.booleans())
def test_dispatch_is_vllms(sizes, q, mode, seqs, lens, same):
    lens = ([q] * len(lens) if same else lens)[:seqs]
    try:
        adjusted = _vllm_sizes(sizes, mode, q)
        want = _vllm_dispatch(adjusted, mode, q, seqs, lens)
    except (ValueError, AssertionError):
        assume(False)  # vLLM refuses the configuration, or asserts on it
    d = TokenDispatcher(sizes, seqs, mode, q, support="ALWAYS")
    got, key = d.dispatch(sum(lens), all(n == q for n in lens))
    assert (got, key.num_tokens) == want
    if got == "FULL" and key.uniform:
        assert key.num_reqs * q == key.num_tokens


def test_labkits_attention_resolves_full_to_full_and_piecewise_then_dispatches_as_vllm():
    d = TokenDispatcher([1, 2, 4, 8, 16], 8, "FULL", 3)  # UNIFORM_BATCH: vLLM's fallback
    assert d.mode == "FULL_AND_PIECEWISE" and d.sizes == [3, 6, 9]
    for lens in ([3, 3], [3, 3, 3], [1, 4], [9]):
        got, key = d.dispatch(sum(lens), all(n == 3 for n in lens))
        assert (got, key.num_tokens) == _vllm_dispatch(d.sizes, "FULL_AND_PIECEWISE", 3, 8, lens)


def test_default_sizes_are_vllms_and_sglangs():
    assert rules.vllm_default_capture_sizes(512)[:6] == [1, 2, 4, 8, 16, 24]
    assert len(rules.vllm_default_capture_sizes(512)) == 3 + 31 + 17
    assert rules.vllm_default_capture_sizes(512)[-3:] == [480, 496, 512]
    assert rules.vllm_default_max_capture_size(1024) == 512
    assert rules.vllm_default_max_capture_size(8, 3) == 48
    assert rules.sglang_default_max_bs(143771.0) == 256 and rules.sglang_default_max_bs(None) == 160
    assert rules.sglang_default_capture_sizes(24)[:6] == [1, 2, 4, 8, 12, 16]
    # the engines module offers the same lists, checked, and the same versions
    assert engines.vllm_default_capture_sizes(300) == rules.vllm_default_capture_sizes(300)
    assert engines.VLLM_VERSION == rules.VLLM_VERSION == "vLLM 0.13.0"
    assert engines.SGLANG_VERSION == rules.SGLANG_VERSION == "SGLang 0.5.6"


def test_from_vllm_rounds_only_with_separate_full_decode_graphs():
    sizes = [1, 2, 4, 8, 16]
    piecewise = engines.from_vllm(cudagraph_mode="PIECEWISE", cudagraph_capture_sizes=sizes,
                                  num_speculative_tokens=2)
    both = engines.from_vllm(cudagraph_mode="FULL_AND_PIECEWISE",
                             cudagraph_capture_sizes=sizes, num_speculative_tokens=2)
    assert piecewise.capture_sizes == (1, 2, 4, 8, 16) and both.capture_sizes == (3, 6, 9)
    assert TokenDispatcher(sizes, 1024, "PIECEWISE", 3).sizes == list(piecewise.capture_sizes)
    assert TokenDispatcher(sizes, 1024, "FULL_AND_PIECEWISE", 3).sizes == \
        list(both.capture_sizes)


# ------------------------------------------------------------------ stated once

PACKAGE = Path(__file__).resolve().parents[1] / "labkit"
#: modules that bisect for something other than a capture size (a curve, a Pareto front)
BISECT_ELSEWHERE = {"sizes/fit.py", "sizes/search.py"}
RESTATEMENTS = {
    "a padding search (bisect over capture sizes)": re.compile(r"bisect\.bisect_(left|right)\("),
    "a padding scan (the first size >= n)": re.compile(
        r"next\(\(\s*\w+\s+for\s+\w+\s+in\s+[^)]*\bif\s+\w+\s*>=\s*\w+\s*\)"),
    "a padding table built by a loop": re.compile(r"\btable\[\w+\]\s*=(?!=)"),
    "spec-decode rounding (round up to a multiple of 1 + k)": re.compile(
        r"-\(-\s*\w+\s*//\s*q\s*\)\s*\*\s*q|round_up\(|//\s*q\)\s*\*\s*q"),
    "the decode/mixed mode table of CUDAGraphMode": re.compile(
        r"\"FULL_DECODE_ONLY\"\s*:\s*\(\s*\"FULL\"\s*,\s*\"NONE\"\s*\)"),
    "the default vLLM size list": re.compile(r"range\(8,\s*min\("),
    "the default SGLang size list": re.compile(r"\[1,\s*2,\s*4,\s*8,\s*12,"),
}


def _restatements(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "rules.py":
            continue
        text = path.read_text()
        for what, pattern in RESTATEMENTS.items():
            if what.startswith("a padding search") and rel in BISECT_ELSEWHERE:
                continue
            for m in pattern.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{rel}:{line}: {what}")
    return found


def test_every_rule_is_stated_once_in_rules():
    assert _restatements(PACKAGE) == [], "state the rule in labkit/rules.py and call it"


def test_the_restatement_search_finds_a_planted_copy(tmp_path):
    (tmp_path / "rules.py").write_text("import bisect\nbisect.bisect_left(s, n)\n")
    (tmp_path / "copy.py").write_text(
        "import bisect\n"
        "def pad(sizes, n):\n    i = bisect.bisect_left(sizes, n)\n"
        "def spec(sizes, q):\n    return sorted({-(-s // q) * q for s in sizes})\n"
        "MODES = {\"FULL_DECODE_ONLY\": (\"FULL\", \"NONE\")}\n"
        "def scan(sizes, n):\n    return next((s for s in sizes if s >= n), None)\n")
    found = _restatements(tmp_path)
    assert sorted(f.split(": ", 1)[1] for f in found) == sorted([
        "a padding search (bisect over capture sizes)",
        "spec-decode rounding (round up to a multiple of 1 + k)",
        "the decode/mixed mode table of CUDAGraphMode",
        "a padding scan (the first size >= n)"])


def test_rules_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, labkit.rules; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
