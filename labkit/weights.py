"""Real GPT-2 weights in the tiny GPT: load a Hugging Face GPT-2 ``model.safetensors`` with the
``safetensors`` package alone (no ``transformers``).

:class:`labkit.model.TinyGPT` has GPT-2's architecture; GPT-2's ``Conv1D`` weights
(``c_attn``, ``c_proj``, ``c_fc``: ``(in, out)``) are transposed on load, and its head, tied to
``wte``, is copied into labkit's own. Heads come from the argument, a ``config.json`` beside
the file, or GPT-2's sizes. For notebooks: :func:`gpt2_weights_path` and :func:`decode_gpt2`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Mapping, Sequence

import torch

from labkit.support import envvars
from labkit.model import GPTConfig, TinyGPT, as_device, generate

#: GPT-2's model sizes: d_model -> heads (small, medium, large, xl)
GPT2_HEADS: dict[int, int] = {768: 12, 1024: 16, 1280: 20, 1600: 25}
_PREFIX = "transformer."
_IGNORED = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)")
# labkit block parameter -> (GPT-2 name inside h.N, stored transposed (Conv1D))
_BLOCK = {
    "ln1.weight": ("ln_1.weight", False), "ln1.bias": ("ln_1.bias", False),
    "qkv.weight": ("attn.c_attn.weight", True), "qkv.bias": ("attn.c_attn.bias", False),
    "proj.weight": ("attn.c_proj.weight", True), "proj.bias": ("attn.c_proj.bias", False),
    "ln2.weight": ("ln_2.weight", False), "ln2.bias": ("ln_2.bias", False),
    "fc.weight": ("mlp.c_fc.weight", True), "fc.bias": ("mlp.c_fc.bias", False),
    "fc_out.weight": ("mlp.c_proj.weight", True), "fc_out.bias": ("mlp.c_proj.bias", False),
}


def read_gpt2_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of a GPT-2 safetensors file, without the ``transformer.`` prefix."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no GPT-2 checkpoint at {path}; give the path of a Hugging "
                                "Face GPT-2 model.safetensors (or set LABKIT_GPT2_WEIGHTS)")
    out: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                name = key[len(_PREFIX):] if key.startswith(_PREFIX) else key
                if _IGNORED.fullmatch(name):
                    continue
                if name in out:
                    raise ValueError(f"{path.name} holds {name!r} twice (with and without the "
                                     f"'{_PREFIX}' prefix); keep one")
                out[name] = f.get_tensor(key)
    except SafetensorError as exc:
        raise ValueError(f"{path} is not a readable safetensors file ({exc}); give a GPT-2 "
                         "model.safetensors") from exc
    return out


def _heads(d_model: int, n_head: int | None, config_json: Path | None) -> int:
    if n_head is not None:
        return n_head
    if config_json is not None and config_json.is_file():
        cfg = json.loads(config_json.read_text(encoding="utf-8"))
        if isinstance(cfg.get("n_head"), int):
            return cfg["n_head"]
    if d_model in GPT2_HEADS:
        return GPT2_HEADS[d_model]
    raise ValueError(f"the checkpoint's width d_model={d_model} is not a GPT-2 size "
                     f"({sorted(GPT2_HEADS)}) and no config.json with n_head lies beside it; "
                     "pass n_head=...")


def gpt2_config(tensors: Mapping[str, torch.Tensor], *, n_head: int | None = None,
                config_json: Path | None = None, **overrides) -> GPTConfig:
    """The :class:`GPTConfig` of a GPT-2 checkpoint (``overrides`` set any field)."""
    for key in ("wte.weight", "wpe.weight"):
        if key not in tensors:
            raise KeyError(f"the checkpoint has no tensor {key!r} (looked for it with and "
                           f"without the '{_PREFIX}' prefix); is it a GPT-2 model.safetensors?")
    vocab, d_model = tensors["wte.weight"].shape
    n_pos = tensors["wpe.weight"].shape[0]
    layers = sorted({int(m.group(1)) for k in tensors if (m := re.match(r"h\.(\d+)\.", k))})
    if not layers:
        raise KeyError("the checkpoint has no transformer blocks (no 'h.0.*' tensors); is it a "
                       "GPT-2 model.safetensors?")
    if layers != list(range(len(layers))):
        missing = sorted(set(range(layers[-1] + 1)) - set(layers))
        raise KeyError(f"the checkpoint lacks block(s) {missing} (found h.{layers[0]} .. "
                       f"h.{layers[-1]}); the file is incomplete")
    max_seq = overrides.pop("max_seq", min(n_pos, 256))
    if max_seq > n_pos:
        raise ValueError(f"max_seq={max_seq} is longer than the checkpoint's {n_pos} learned "
                         f"positions (wpe); use max_seq <= {n_pos}")
    return GPTConfig(vocab_size=vocab, n_layer=len(layers), d_model=d_model,
                     n_head=_heads(d_model, n_head, config_json), max_seq=max_seq,
                     **{"max_batch": 4, **overrides})


def gpt2_state_dict(tensors: Mapping[str, torch.Tensor], cfg: GPTConfig) -> dict[str, torch.Tensor]:
    """GPT-2 tensors as a :class:`TinyGPT` state dict for ``cfg``, every shape checked."""
    d, v = cfg.d_model, cfg.vocab_size

    def take(name: str, shape: tuple[int, ...], transpose: bool = False) -> torch.Tensor:
        if name not in tensors:
            raise KeyError(f"the checkpoint has no tensor {name!r} (looked for it with and "
                           f"without the '{_PREFIX}' prefix); is it a complete GPT-2 "
                           "model.safetensors?")
        t = tensors[name]
        want = shape[::-1] if transpose else shape
        if tuple(t.shape) != want:
            raise ValueError(f"tensor {name!r} has shape {tuple(t.shape)}, expected {want} for "
                             f"d_model={d}, vocab_size={v}"
                             + (" (GPT-2 stores it as Conv1D: (in, out))" if transpose else ""))
        return t.t() if transpose else t

    shapes = {"ln1": (d,), "ln2": (d,), "qkv": (3 * d, d), "proj": (d, d), "fc": (4 * d, d),
              "fc_out": (d, 4 * d)}
    out = {"tok_emb.weight": take("wte.weight", (v, d)),
           "pos_emb.weight": take("wpe.weight", (tensors["wpe.weight"].shape[0], d))
           [:cfg.max_seq],
           "ln_f.weight": take("ln_f.weight", (d,)), "ln_f.bias": take("ln_f.bias", (d,))}
    for i in range(cfg.n_layer):
        for ours, (theirs, transposed) in _BLOCK.items():
            part, kind = ours.split(".")
            shape = shapes[part] if kind == "weight" else (shapes[part][0],)
            out[f"blocks.{i}.{ours}"] = take(f"h.{i}.{theirs}", shape, transposed)
    head = "lm_head.weight" if "lm_head.weight" in tensors else "wte.weight"  # tied
    out["lm_head.weight"] = take(head, (v, d))
    return out


def load_gpt2(path: str | Path, *, n_head: int | None = None,
              device: str | torch.device = "cpu", **overrides) -> TinyGPT:
    """A :class:`TinyGPT` with the GPT-2 weights of ``path`` (``overrides``: config fields)."""
    path = Path(path)
    device = as_device(device)
    tensors = read_gpt2_tensors(path)
    cfg = gpt2_config(tensors, n_head=n_head, config_json=path.with_name("config.json"),
                      **overrides)
    state = gpt2_state_dict(tensors, cfg)
    model = TinyGPT(cfg)
    model.load_state_dict(state)
    return model.to(device).eval()


def gpt2_weights_path(path: str | Path | None = None) -> Path | None:
    """The GPT-2 checkpoint: ``path`` (it must exist), else ``LABKIT_GPT2_WEIGHTS``, else None."""
    if path is None:
        return envvars.gpt2_weights()
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "model.safetensors"
    if not p.is_file():
        raise FileNotFoundError(f"no GPT-2 checkpoint at {p}; give the path of a model."
                                "safetensors, or None to use LABKIT_GPT2_WEIGHTS")
    return p


@dataclass
class Tokenizer:
    """GPT-2 byte-pair encoding found offline: ``encode(text) -> ids``, ``decode(ids)``."""

    source: str
    encode: Callable[[str], list[int]]
    decode: Callable[[Sequence[int]], str]


def gpt2_tokenizer(weights: str | Path | None = None) -> Tokenizer | None:
    """GPT-2's tokenizer if one is available offline, else None."""
    if weights is not None:
        tj = Path(weights).with_name("tokenizer.json")
        if tj.is_file():
            try:
                from tokenizers import Tokenizer as HFTokenizer
            except ImportError:
                pass
            else:
                tok = HFTokenizer.from_file(str(tj))
                return Tokenizer("tokenizers (tokenizer.json)",
                                 lambda s: tok.encode(s).ids, lambda ids: tok.decode(list(ids)))
    try:
        import tiktoken
    except ImportError:
        return None
    try:
        enc = tiktoken.get_encoding("gpt2")
    except Exception:
        return None
    return Tokenizer("tiktoken gpt2", enc.encode, lambda ids: enc.decode(list(ids)))


def decode_gpt2(model: TinyGPT, prompt: str | Sequence[int], max_new_tokens: int = 20,
                tokenizer: Tokenizer | None = None, step_fn: Callable | None = None) -> dict:
    """Greedy continuation of ``prompt`` (text needs ``tokenizer``): ``{"prompt_ids",
    "new_ids", "text" (None without a tokenizer), "note"}``; ``step_fn``: another step."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("a text prompt needs a GPT-2 tokenizer and none is available "
                             "offline (gpt2_tokenizer() returned None); pass token ids instead, "
                             "e.g. [464, 3290, 286] ('The capital of')")
        ids = tokenizer.encode(prompt)
    else:
        ids = list(prompt)
    new = generate(model, [ids], max_new_tokens, step_fn=step_fn)[0]
    if tokenizer is None:
        return {"prompt_ids": ids, "new_ids": new, "text": None,
                "note": "no GPT-2 tokenizer available offline (install tokenizers and put "
                        "tokenizer.json beside the weights, or cache tiktoken's gpt2): token "
                        "ids only"}
    return {"prompt_ids": ids, "new_ids": new, "text": tokenizer.decode(ids + new),
            "note": f"decoded with {tokenizer.source}"}
