"""labkit.weights: a Hugging Face GPT-2 safetensors checkpoint (made here, random, in GPT-2's
format) loaded into the tiny GPT gives the logits of GPT-2's forward pass written out below."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from labkit.support import envvars
from labkit.support.envvars import EnvVarError
from labkit.fused import make_fused_step
from labkit.model import generate
from labkit.weights import (decode_gpt2, gpt2_config, gpt2_tokenizer, gpt2_weights_path,
                            load_gpt2, read_gpt2_tensors)

V, P, D, L, H = 97, 40, 32, 2, 4


def gpt2_tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    """A random GPT-2 checkpoint as Hugging Face stores it: Conv1D weights (in, out), the
    attention-mask buffer, no lm_head (tied to wte)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale

    t = {"wte.weight": r(V, D, scale=0.5), "wpe.weight": r(P, D, scale=0.1),
         "ln_f.weight": 1 + r(D, scale=0.1), "ln_f.bias": r(D, scale=0.1)}
    for i in range(L):
        t.update({f"h.{i}.ln_1.weight": 1 + r(D, scale=0.1), f"h.{i}.ln_1.bias": r(D, scale=0.1),
                  f"h.{i}.attn.c_attn.weight": r(D, 3 * D), f"h.{i}.attn.c_attn.bias": r(3 * D),
                  f"h.{i}.attn.c_proj.weight": r(D, D), f"h.{i}.attn.c_proj.bias": r(D),
                  f"h.{i}.ln_2.weight": 1 + r(D, scale=0.1), f"h.{i}.ln_2.bias": r(D, scale=0.1),
                  f"h.{i}.mlp.c_fc.weight": r(D, 4 * D), f"h.{i}.mlp.c_fc.bias": r(4 * D),
                  f"h.{i}.mlp.c_proj.weight": r(4 * D, D), f"h.{i}.mlp.c_proj.bias": r(D),
                  f"h.{i}.attn.bias": torch.tril(torch.ones(1, 1, P, P))})
    return t


def gpt2_forward(t: dict[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """GPT-2's forward pass, written out from its definition (Conv1D: x @ W + b, gelu_new,
    causal softmax attention, tied head): logits (B, T, V)."""
    b, n = ids.shape
    hd = D // H

    def ln(x, p):
        return F.layer_norm(x, (D,), t[p + ".weight"], t[p + ".bias"], 1e-5)

    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    x = t["wte.weight"][ids] + t["wpe.weight"][:n]
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    for i in range(L):
        p = f"h.{i}."
        qkv = ln(x, p + "ln_1") @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]
        q, k, v = (z.view(b, n, H, hd).transpose(1, 2) for z in qkv.split(D, dim=-1))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, n, D)
        x = x + y @ t[p + "attn.c_proj.weight"] + t[p + "attn.c_proj.bias"]
        m = gelu_new(ln(x, p + "ln_2") @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"])
        x = x + m @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
    return ln(x, "ln_f") @ t["wte.weight"].t()


def _save(tmp_path: Path, tensors: dict, prefix: str = "", name: str = "model.safetensors",
          n_head: int | None = H) -> Path:
    path = tmp_path / name
    save_file({prefix + k: v.contiguous() for k, v in tensors.items()}, str(path))
    if n_head is not None:
        (tmp_path / "config.json").write_text(json.dumps({"n_head": n_head, "n_embd": D}))
    return path


@pytest.mark.parametrize("prefix", ["", "transformer."])
def test_loaded_logits_equal_gpt2s_forward(tmp_path, prefix):
    t = gpt2_tensors()
    model = load_gpt2(_save(tmp_path, t, prefix), max_seq=P)
    assert (model.cfg.n_layer, model.cfg.n_head, model.cfg.d_model) == (L, H, D)
    ids = torch.randint(0, V, (3, 17), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(ids), gpt2_forward(t, ids), rtol=1e-4, atol=1e-4)
    assert torch.equal(model.lm_head.weight, t["wte.weight"])  # the tied head, copied


def test_greedy_decode_with_the_cache_follows_gpt2(tmp_path):
    t = gpt2_tensors(seed=2)
    model = load_gpt2(_save(tmp_path, t), max_seq=P)
    prompts = [[5, 17, 3], [40, 2, 88, 9, 1]]
    got = generate(model, prompts, 8)
    assert generate(model, prompts, 8, step_fn=make_fused_step(model)) == got
    for p, new in zip(prompts, got):  # the same greedy tokens from the full forward pass
        ids = list(p)
        for _ in range(8):
            ids.append(int(gpt2_forward(t, torch.tensor([ids]))[0, -1].argmax()))
        assert ids[len(p):] == new


def test_a_stored_lm_head_is_used_and_heads_come_from_the_size_table(tmp_path):
    t = gpt2_tensors()
    t["lm_head.weight"] = t["wte.weight"] * 2
    path = _save(tmp_path, t, "transformer.", n_head=None)
    with pytest.raises(ValueError, match="pass n_head"):
        load_gpt2(path)
    model = load_gpt2(path, n_head=2, max_seq=16, dtype="bfloat16")
    assert model.cfg.n_head == 2 and model.cfg.max_seq == 16
    assert model.lm_head.weight.dtype == torch.bfloat16
    torch.testing.assert_close(model.lm_head.weight.float(), t["lm_head.weight"],
                               rtol=1e-2, atol=1e-2)
    cfg = gpt2_config({"wte.weight": torch.zeros(50257, 768), "wpe.weight": torch.zeros(1024, 768),
                       "h.0.ln_1.weight": torch.zeros(768)})
    assert (cfg.n_head, cfg.max_seq, cfg.max_batch) == (12, 256, 4)


@pytest.mark.parametrize("edit, match", [
    (lambda t: t.pop("h.1.mlp.c_fc.bias"), "'h.1.mlp.c_fc.bias'"),
    (lambda t: t.update({"h.0.attn.c_attn.weight": torch.zeros(3 * D, D)}),
     r"'h.0.attn.c_attn.weight' has shape \(96, 32\), expected \(32, 96\).*Conv1D"),
    (lambda t: t.update({"ln_f.bias": torch.zeros(D + 1)}), r"'ln_f.bias' has shape \(33,\)"),
    (lambda t: t.pop("wpe.weight"), "'wpe.weight'"),
    (lambda t: [t.pop(k) for k in list(t) if k.startswith("h.0.")], r"lacks block\(s\) \[0\]"),
])
def test_bad_checkpoints_name_the_tensor(tmp_path, edit, match):
    t = gpt2_tensors()
    edit(t)
    with pytest.raises((KeyError, ValueError), match=match):
        load_gpt2(_save(tmp_path, t), max_seq=P)


def test_bad_paths_and_lengths(tmp_path):
    with pytest.raises(FileNotFoundError, match="no GPT-2 checkpoint"):
        load_gpt2(tmp_path / "missing.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="not a readable safetensors"):
        read_gpt2_tensors(bad)
    with pytest.raises(ValueError, match="longer than the checkpoint's 40 learned positions"):
        load_gpt2(_save(tmp_path, gpt2_tensors()), max_seq=64)


def test_the_hook_finds_the_file_and_decodes_ids(tmp_path, monkeypatch):
    path = _save(tmp_path, gpt2_tensors())
    monkeypatch.delenv("LABKIT_GPT2_WEIGHTS", raising=False)
    assert gpt2_weights_path() is None
    monkeypatch.setenv("LABKIT_GPT2_WEIGHTS", str(tmp_path))       # a folder: its model file
    assert gpt2_weights_path() == path
    assert gpt2_weights_path(path) == path
    with pytest.raises(FileNotFoundError):
        gpt2_weights_path(tmp_path / "nope.safetensors")
    with pytest.raises(EnvVarError, match="LABKIT_GPT2_WEIGHTS"):
        envvars.gpt2_weights({"LABKIT_GPT2_WEIGHTS": str(tmp_path / "nope")})
    model = load_gpt2(path, max_seq=P)
    out = decode_gpt2(model, [5, 6, 7], 4, tokenizer=None)
    assert out["prompt_ids"] == [5, 6, 7] and len(out["new_ids"]) == 4
    assert out["text"] is None and "token ids only" in out["note"]
    with pytest.raises(ValueError, match="needs a GPT-2 tokenizer"):
        decode_gpt2(model, "Hello", 4, tokenizer=None)
    tok = gpt2_tokenizer(path)       # None offline unless tokenizers/tiktoken can serve GPT-2
    assert tok is None or callable(tok.encode)


def test_transformers_agrees_where_installed(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=P, n_embd=D, n_layer=L, n_head=H,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ref = transformers.GPT2LMHeadModel(cfg).eval()
    ref.save_pretrained(tmp_path, safe_serialization=True)
    model = load_gpt2(tmp_path / "model.safetensors", max_seq=P)
    ids = torch.randint(0, V, (2, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), ref(ids).logits, rtol=1e-4, atol=1e-4)
