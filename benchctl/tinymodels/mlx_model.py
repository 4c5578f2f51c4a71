"""Write the same weights as an MLX/Hugging Face llama model directory, without importing mlx.

Reasons and facts: docs/testing.md#tiny-mlx-models.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchctl.tinymodels.vocab import BOS_ID, CHAT_TEMPLATE, EOS_ID, Vocab
from benchctl.tinymodels.weights import Arch, Weights


def mlx_config(arch: Arch, vocab: Vocab) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": arch.n_embd,
        "intermediate_size": arch.n_ff,
        "num_hidden_layers": arch.n_layer,
        "num_attention_heads": arch.n_head,
        "num_key_value_heads": arch.n_head_kv,
        "head_dim": arch.head_dim,
        "rms_norm_eps": arch.rms_eps,
        "rope_theta": arch.rope_theta,
        "max_position_embeddings": arch.n_ctx,
        "vocab_size": vocab.size,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "hidden_act": "silu",
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "torch_dtype": "float16",
    }


def write_mlx_dir(out: Path, w: Weights, arch: Arch, vocab: Vocab, chat_template: str = CHAT_TEMPLATE,
                  eos_ids: tuple[int, ...] = (EOS_ID,)) -> None:
    """config.json, model.safetensors (float16), tokenizer.json, tokenizer_config.json, chat template.

    `eos_ids`: generation_config.json's `eos_token_id` (a list when more than one, as in Qwen3's)."""
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(mlx_config(arch, vocab), indent=2) + "\n")
    tensors = {k: np.ascontiguousarray(v, dtype=np.float16) for k, v in sorted(w.items())}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "mlx"})
    (out / "tokenizer.json").write_text(json.dumps(vocab.hf_tokenizer_json(), ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(
        json.dumps({**vocab.hf_tokenizer_config(), "chat_template": chat_template}, indent=2) + "\n"
    )
    (out / "special_tokens_map.json").write_text(json.dumps(vocab.hf_special_tokens_map(), indent=2) + "\n")
    (out / "chat_template.jinja").write_text(chat_template)
    eos: int | list[int] = eos_ids[0] if len(eos_ids) == 1 else list(eos_ids)
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": BOS_ID, "eos_token_id": eos, "do_sample": False}, indent=2) + "\n"
    )
