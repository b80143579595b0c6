"""The engine-settings mapping: vLLM 0.13.0 and SGLang 0.5.6 default capture sizes, modes,
speculative-decoding rounding and memory budgets, with values written out from their rules."""

from __future__ import annotations

import pytest

from labkit.sizes import engines as es

# vLLM 0.13.0: [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)
VLLM_512 = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]


def test_vllm_default_sizes_follow_the_rule():
    assert es.vllm_default_capture_sizes(512) == VLLM_512
    assert len(VLLM_512) == 51 and VLLM_512[-3:] == [480, 496, 512]
    assert es.vllm_default_capture_sizes(32) == [1, 2, 4, 8, 16, 24, 32]
    assert es.vllm_default_capture_sizes(6) == [1, 2, 4]
    assert es.vllm_default_capture_sizes(300) == VLLM_512[:VLLM_512.index(288) + 1]


def test_from_vllm_defaults_on_an_h200():
    s = es.from_vllm()  # max_num_seqs 1024, max_num_batched_tokens 8192, FULL_AND_PIECEWISE
    assert s.capture_sizes == tuple(VLLM_512) and s.max_capture_size == 512
    # a decode step is a uniform decode batch: vLLM replays FULL graphs for it
    assert s.cudagraph_mode == "FULL_AND_PIECEWISE" and s.mode == "full"
    assert s.full_max_size == 512 and s.max_batch == 1024


@pytest.mark.parametrize("seqs, largest", [(16, 32), (64, 128), (100, 200), (128, 256),
                                           (256, 512), (1024, 512)])
def test_vllm_default_largest_size_is_twice_max_num_seqs_up_to_512(seqs, largest):
    s = es.from_vllm(max_num_seqs=seqs)
    assert s.max_capture_size == largest
    assert s.capture_sizes == tuple(es.vllm_default_capture_sizes(largest))
    # FULL decode graphs cover at most max_num_seqs requests
    assert s.full_max_size == max(x for x in s.capture_sizes if x <= seqs)


def test_vllm_max_num_batched_tokens_caps_the_sizes():
    s = es.from_vllm(max_num_seqs=256, max_num_batched_tokens=100)
    assert s.max_capture_size == 96 and s.capture_sizes[-1] == 96


def test_vllm_explicit_sizes_and_the_consistency_check():
    s = es.from_vllm(cudagraph_capture_sizes=[8, 1, 4, 4], cudagraph_mode="FULL")
    assert s.capture_sizes == (1, 4, 8) and s.mode == "full" and s.full_max_size is None
    with pytest.raises(ValueError, match="max_cudagraph_capture_size=16 must equal"):
        es.from_vllm(cudagraph_capture_sizes=[1, 8], max_cudagraph_capture_size=16)
    s = es.from_vllm(max_cudagraph_capture_size=20)
    assert s.capture_sizes == (1, 2, 4, 8, 16) and s.max_capture_size == 16


def test_vllm_eager_and_none_capture_nothing():
    for s in (es.from_vllm(enforce_eager=True), es.from_vllm(cudagraph_mode="none")):
        assert s.mode == "eager" and s.capture_sizes == () and s.padded(3) is None
        assert s.dispatcher_kwargs(16) is None


def test_vllm_speculative_decoding_pads_by_tokens():
    # k = 3: 4 tokens per request; largest = min(64 * 4 * 2, 512) = 512, every size rounded
    # up to a multiple of 4
    s = es.from_vllm(max_num_seqs=64, num_speculative_tokens=3)
    assert s.tokens_per_request == 4
    assert s.capture_sizes[:4] == (4, 8, 16, 24) and s.capture_sizes[-1] == 512
    assert all(x % 4 == 0 for x in s.capture_sizes)
    assert s.full_max_size == 256  # 64 requests x 4 tokens
    # 10 requests verify 40 tokens: the 40-token graph
    assert s.padded(10 * 4) == 40
    # plain FULL mode is not rounded (vLLM rounds only for separate decode graphs)
    f = es.from_vllm(max_num_seqs=8, num_speculative_tokens=2, cudagraph_mode="FULL")
    assert f.capture_sizes == (1, 2, 4, 8, 16, 24, 32, 40, 48)


def test_vllm_spec_rounding_edge_cases():
    assert es.vllm_spec_decode_sizes([1, 2, 3], 3, 3) == [3]
    assert es.vllm_spec_decode_sizes([5], 6, 4) == [4]  # nothing fits: one request's tokens
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        es.vllm_spec_decode_sizes([1], 2, 4)


def test_vllm_padding_table():
    vllm = es.from_vllm(cudagraph_capture_sizes=VLLM_512)
    assert [vllm.padded(n) for n in (1, 3, 5, 9, 250, 257, 513)] == \
        [1, 4, 8, 16, 256, 272, None]


@pytest.mark.parametrize("mib, tp, want", [(None, 1, 160), (16 * 1024, 1, 8),
                                           (24 * 1024, 1, 24), (24 * 1024, 4, 80),
                                           (40 * 1024, 1, 32), (81559, 1, 256),
                                           (81559, 8, 512), (143771, 1, 256),
                                           (183359, 1, 512)])
def test_sglang_default_max_bs_by_gpu_memory(mib, tp, want):
    assert es.sglang_default_max_bs(mib, tp) == want


def test_from_sglang_defaults_on_an_h200():
    s = es.from_sglang()
    want = [1, 2, 4, 8, 12, *range(16, 257, 8)]
    assert s.capture_sizes == tuple(want) and s.max_capture_size == 256
    assert s.mode == "full" and s.padding and s.padded(13) == 16 and s.padded(257) is None


def test_sglang_padding_off_captures_every_size_and_pads_nothing():
    s = es.from_sglang(cuda_graph_max_bs=16, disable_cuda_graph_padding=True)
    assert s.capture_sizes == tuple(range(1, 17)) and s.mode == "exact"
    s = es.from_sglang(cuda_graph_bs=[1, 2, 4, 8], disable_cuda_graph_padding=True)
    assert s.padded(3) is None and s.padded(4) == 4 and s.max_capture_size == 8


def test_sglang_speculative_list_and_pool_cut():
    s = es.from_sglang(cuda_graph_max_bs=48, speculative_num_draft_tokens=4)
    assert s.capture_sizes == tuple(list(range(1, 9)) + list(range(10, 33, 2)) + [40, 44, 48])
    assert s.tokens_per_request == 4
    s = es.from_sglang(cuda_graph_max_bs=64, max_running_requests=20)
    assert s.capture_sizes == (1, 2, 4, 8, 12, 16, 20) and s.max_batch == 20
    assert es.from_sglang(disable_cuda_graph=True).mode == "eager"


def test_dispatcher_kwargs_follow_vllms_batch_composition_rule():
    # labkit decodes pure decode batches: FULL graphs at every size up to full_max_size
    assert es.from_vllm(max_num_seqs=16).dispatcher_kwargs(16) == {
        "capture_sizes": [1, 2, 4, 8, 16], "cudagraph_mode": "FULL"}
    assert es.from_vllm().dispatcher_kwargs(64)["cudagraph_mode"] == "FULL"
    assert es.from_vllm(cudagraph_mode="FULL_DECODE_ONLY").dispatcher_kwargs(8) == {
        "capture_sizes": [1, 2, 4, 8], "cudagraph_mode": "FULL"}
    # max_num_seqs 20 is no capture size: sizes 24..40 have no FULL decode key, so a decode
    # batch padded there replays a PIECEWISE graph (FULL_AND_PIECEWISE) or runs eager
    assert es.from_vllm(max_num_seqs=20).dispatcher_kwargs(64) == {
        "capture_sizes": [1, 2, 4, 8, 16, 24, 32, 40], "cudagraph_mode": "FULL_AND_PIECEWISE",
        "max_num_seqs": 16}
    assert es.from_vllm(max_num_seqs=20, cudagraph_mode="FULL_DECODE_ONLY"
                        ).dispatcher_kwargs(64) == {"capture_sizes": [1, 2, 4, 8, 16],
                                                    "cudagraph_mode": "FULL"}
    assert es.from_vllm(cudagraph_mode="PIECEWISE").dispatcher_kwargs(4) == {
        "capture_sizes": [1, 2, 4], "cudagraph_mode": "PIECEWISE"}
    assert es.from_sglang().dispatcher_kwargs(12) == {"capture_sizes": [1, 2, 4, 8, 12],
                                                      "cudagraph_mode": "FULL"}


def test_budgets():
    gib = 2 ** 30
    b = es.vllm_kv_budget(140 * gib, 0.9, non_kv_bytes=20 * gib, graph_bytes=2 * gib)
    assert b["requested"] == pytest.approx(126 * gib)
    assert b["kv_cache"] == pytest.approx(106 * gib)
    assert b["headroom_left"] == pytest.approx(12 * gib)
    # H200 defaults: reserved = 512 + 8192 * 1.5 + 256 * 2 + 1 / 8 * 1024 = 13440 MiB
    assert es.sglang_mem_fraction_static(143771) == round((143771 - 13440) / 143771, 3)
    # small GPU: reserved floor of 10 GiB does not apply below 60 GiB
    assert es.sglang_mem_fraction_static(24 * 1024, chunked_prefill_size=2048,
                                         cuda_graph_max_bs=24) == \
        round((24576 - (512 + 3072 + 48 + 128)) / 24576, 3)
    # gpt2 shape, bf16: a 16-token block is 2 * 12 * 16 * 12 * 64 * 2 = 589824 bytes
    assert es.labkit_num_blocks(589824 * 10 + 5, n_layer=12, n_head=12, head_dim=64) == 11


@pytest.mark.parametrize("call, error, match", [
    (lambda: es.from_vllm(cudagraph_mode="ALWAYS"), ValueError, "cudagraph_mode"),
    (lambda: es.from_vllm(max_num_seqs=0), ValueError, "max_num_seqs must be >= 1"),
    (lambda: es.from_vllm(max_num_seqs="8"), TypeError, "max_num_seqs must be an int"),
    (lambda: es.from_vllm(num_speculative_tokens=-1), ValueError, "num_speculative_tokens"),
    (lambda: es.from_vllm(cudagraph_capture_sizes=[]), ValueError,
     "cudagraph_capture_sizes must not be empty"),
    (lambda: es.from_vllm(cudagraph_capture_sizes=[9000]), ValueError,
     "max_num_batched_tokens"),
    (lambda: es.from_vllm(cudagraph_capture_sizes=[1, 2.5]), TypeError,
     r"cudagraph_capture_sizes\[1\] must be an int"),
    (lambda: es.from_sglang(cuda_graph_bs=[0, 2]), ValueError, r"cuda_graph_bs\[0\] must be >= 1"),
    (lambda: es.from_sglang(cuda_graph_bs=4), TypeError, "cuda_graph_bs must be a list"),
    (lambda: es.from_sglang(disable_cuda_graph="yes"), TypeError,
     "disable_cuda_graph must be True or False"),
    (lambda: es.sglang_default_max_bs(-5), ValueError, "gpu_memory_mib"),
    (lambda: es.vllm_kv_budget(1.0, 1.5, 0, 0), ValueError, "gpu_memory_utilization"),
    (lambda: es.labkit_num_blocks(10, n_layer=1, n_head=1, head_dim=1), ValueError, "kv_bytes"),
    (lambda: es.labkit_num_blocks(10**9, n_layer=0, n_head=1, head_dim=1), ValueError,
     "n_layer must be >= 1"),
    (lambda: es.from_vllm().padded(0), ValueError, "n must"),
    (lambda: es.from_vllm().dispatcher_kwargs(True), TypeError, "max_batch must be an int"),
])
def test_bad_settings_name_themselves(call, error, match):
    with pytest.raises(error, match=match):
        call()
