"""Convert a llama-architecture GGUF with a GPT-2 BPE vocabulary into an MLX / Hugging Face model directory.

`convert(gguf, out)` writes `config.json` (from the GGUF's metadata), `model.safetensors` (every tensor
dequantized by the `gguf` package's own `gguf.quants.dequantize`, q/k rows permuted back to HF's
rotate-half layout, stored as `DTYPE`), `tokenizer.json` (the GGUF's tokens and merges as a `tokenizers`
BPE model with the pre-tokenizer its `tokenizer.ggml.pre` names), `tokenizer_config.json` and
`chat_template.jinja` (the GGUF's template, copied), `generation_config.json`, `README.md` (source,
licence) and `manifest.json` (last). Nothing here imports mlx.

Reasons and facts: docs/testing.md#the-real-model.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: Bump when anything that changes the written bytes changes (the cache dir's name carries it).
CONVERT_VERSION = 1
#: float32: the dequantized Q4_1 values (f16 scale x 4-bit + f16 min) are exact in it, and MLX's CPU
#: backend multiplies float32 with BLAS without converting the weights per call.
DTYPE = "float32"

#: `tokenizer.ggml.pre` -> the Hugging Face pre-tokenizer llama.cpp's regexes for it correspond to
#: (`src/llama-vocab.cpp`: SMOLLM = "\p{N}" then the GPT-2 regex; no space added in front).
PRE_TOKENIZERS: dict[str, list[dict[str, Any]]] = {
    "smollm": [{"type": "Digits", "individual_digits": True},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}],
}
#: GGUF `tokenizer.ggml.token_type` values (gguf.TokenType).
CONTROL, USER_DEFINED = 3, 4


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """GGML interleaved q/k rows -> HF rotate-half rows (the inverse of convert_hf_to_gguf's permute)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _meta(reader: Any) -> dict[str, Any]:
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def hf_config(meta: dict[str, Any], tied: bool) -> dict[str, Any]:
    """config.json of a `LlamaForCausalLM` from the GGUF's `llama.*` and tokenizer keys."""
    arch = meta["general.architecture"]
    if arch != "llama":
        raise ValueError(f"only llama-architecture GGUFs convert here, not {arch!r}")
    n_embd, n_head = int(meta["llama.embedding_length"]), int(meta["llama.attention.head_count"])
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": n_embd, "intermediate_size": int(meta["llama.feed_forward_length"]),
        "num_hidden_layers": int(meta["llama.block_count"]), "num_attention_heads": n_head,
        "num_key_value_heads": int(meta["llama.attention.head_count_kv"]),
        "head_dim": int(meta.get("llama.rope.dimension_count", n_embd // n_head)),
        "rms_norm_eps": float(meta["llama.attention.layer_norm_rms_epsilon"]),
        "rope_theta": float(meta["llama.rope.freq_base"]),
        "max_position_embeddings": int(meta["llama.context_length"]),
        "vocab_size": len(meta["tokenizer.ggml.tokens"]),
        "tie_word_embeddings": tied, "attention_bias": False, "mlp_bias": False, "hidden_act": "silu",
        "bos_token_id": int(meta["tokenizer.ggml.bos_token_id"]), "eos_token_id": int(meta["tokenizer.ggml.eos_token_id"]),
        "torch_dtype": DTYPE,
    }


_NAMES = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
          "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
          "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight"}


def hf_name(name: str) -> str:
    if name in _TOP:
        return _TOP[name]
    blk, i, part, kind = name.split(".")
    if blk != "blk" or part not in _NAMES:
        raise ValueError(f"unexpected GGUF tensor {name!r}")
    return f"model.layers.{i}.{_NAMES[part]}.{kind}"


def tensors(reader: Any, config: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every tensor dequantized (`gguf.quants.dequantize`), in HF names and layout, as `DTYPE`."""
    from gguf.quants import dequantize

    out: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        rows = [int(d) for d in reversed(t.shape.tolist())]  # GGUF lists dims fastest first
        w = w.reshape(rows)
        name = hf_name(t.name)
        if name.endswith("q_proj.weight"):
            w = _unpermute(w, config["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            w = _unpermute(w, config["num_key_value_heads"])
        out[name] = np.ascontiguousarray(w, dtype=DTYPE)
    return out


def tokenizer_json(meta: dict[str, Any]) -> dict[str, Any]:
    """The GGUF's GPT-2 BPE vocabulary as a `tokenizers` JSON: its tokens (ids as in the GGUF), its merges
    in rank order, control tokens as special added tokens, byte-level decoding."""
    model, pre = meta["tokenizer.ggml.model"], meta.get("tokenizer.ggml.pre", "default")
    if model != "gpt2" or pre not in PRE_TOKENIZERS:
        raise ValueError(f"tokenizer {model!r} / pre-tokenizer {pre!r} is not one this converter knows "
                         f"(gpt2 with {', '.join(PRE_TOKENIZERS)})")
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    types: list[int] = list(meta["tokenizer.ggml.token_type"])
    added = [{"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": types[i] == CONTROL} for i, tok in enumerate(tokens) if types[i] in (CONTROL, USER_DEFINED)]
    unk = meta.get("tokenizer.ggml.unknown_token_id")
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": PRE_TOKENIZERS[pre]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": tokens[int(unk)] if unk is not None else None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False,
                  "vocab": {tok: i for i, tok in enumerate(tokens)},
                  "merges": [m.split(" ", 1) for m in meta["tokenizer.ggml.merges"]]},
    }


def tokenizer_config(meta: dict[str, Any]) -> dict[str, Any]:
    tokens = meta["tokenizer.ggml.tokens"]

    def tok(key: str) -> str | None:
        i = meta.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[int(i)] if i is not None else None

    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": tok("bos"), "eos_token": tok("eos"),
            "unk_token": tok("unknown"), "pad_token": tok("padding"),
            "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)), "add_eos_token": False,
            "add_prefix_space": False, "clean_up_tokenization_spaces": False,
            "model_max_length": int(meta["llama.context_length"]), "chat_template": meta["tokenizer.chat_template"]}


def convert(gguf_path: Path, out: Path, log: Callable[[str], None] | None = None) -> None:
    """Write the MLX directory of `gguf_path` into `out` (an existing empty dir), its manifest last."""
    from gguf import GGUFReader
    from safetensors.numpy import save_file

    say = log or (lambda _m: None)
    reader = GGUFReader(str(gguf_path))
    meta = _meta(reader)
    names = {t.name for t in reader.tensors}
    config = hf_config(meta, tied="output.weight" not in names)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    say(f"dequantizing {len(reader.tensors)} tensors to {DTYPE}")
    weights = tensors(reader, config)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "mlx"})
    say("writing the tokenizer and the chat template")
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json(meta), ensure_ascii=False))
    cfg = tokenizer_config(meta)
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(
        {k: cfg[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token") if cfg[k] is not None}, indent=2) + "\n")
    (out / "chat_template.jinja").write_text(meta["tokenizer.chat_template"])
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"], "do_sample": False}, indent=2) + "\n")
    from benchctl.realmodel import GGUF_SHA256, LICENSE, LICENSE_SOURCE, MODEL, PACKAGE, VERSION

    source_sha = hashlib.sha256(gguf_path.read_bytes()).hexdigest()
    (out / "README.md").write_text(
        f"---\nlicense: {meta.get('general.license', LICENSE.lower())}\nbase_model: {MODEL}\n---\n\n"
        f"{MODEL}, converted by benchctl from `{gguf_path.name}` (sha256 {source_sha}; from the PyPI package "
        f"{PACKAGE}=={VERSION}): every tensor dequantized with gguf.quants.dequantize and stored as {DTYPE}. "
        f"Licence: {LICENSE} ({LICENSE_SOURCE}).\n")
    manifest = {
        "convert_version": CONVERT_VERSION, "dtype": DTYPE, "model": MODEL, "license": LICENSE,
        "converted_from": {"file": gguf_path.name, "sha256": source_sha, "pinned_sha256_matches": source_sha == GGUF_SHA256},
        "method": "gguf.quants.dequantize per tensor; q/k un-permuted to rotate-half; tokenizer from the GGUF vocab "
                  f"and merges (pre-tokenizer {meta.get('tokenizer.ggml.pre')}); chat template copied",
        "n_params": int(sum(w.size for w in weights.values())),
        "files": {p.name: p.stat().st_size for p in sorted(out.iterdir())},
        "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
