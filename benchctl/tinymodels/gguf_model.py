"""Write HF-layout weights as a llama-architecture GGUF (f32, f16, q8_0, q4_0) with the tiny vocabulary.

Reasons and facts: docs/testing.md#tiny-gguf-models.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchctl.tinymodels.vocab import BOS_ID, CHAT_TEMPLATE, EOS_ID, PAD_ID, UNK_ID, Vocab
from benchctl.tinymodels.weights import Arch, Weights

FORMATS = ("f32", "f16", "q8_0", "q4_0")


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotate-half q/k rows -> GGML interleaved rows (convert_hf_to_gguf.LlamaModel.permute)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _gguf_tensors(w: Weights, arch: Arch) -> list[tuple[str, np.ndarray]]:
    out = [("token_embd.weight", w["model.embed_tokens.weight"])]
    for i in range(arch.n_layer):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        out += [
            (b + "attn_norm.weight", w[p + "input_layernorm.weight"]),
            (b + "attn_q.weight", _permute(w[p + "self_attn.q_proj.weight"], arch.n_head)),
            (b + "attn_k.weight", _permute(w[p + "self_attn.k_proj.weight"], arch.n_head_kv)),
            (b + "attn_v.weight", w[p + "self_attn.v_proj.weight"]),
            (b + "attn_output.weight", w[p + "self_attn.o_proj.weight"]),
            (b + "ffn_norm.weight", w[p + "post_attention_layernorm.weight"]),
            (b + "ffn_gate.weight", w[p + "mlp.gate_proj.weight"]),
            (b + "ffn_up.weight", w[p + "mlp.up_proj.weight"]),
            (b + "ffn_down.weight", w[p + "mlp.down_proj.weight"]),
        ]
    out += [("output_norm.weight", w["model.norm.weight"]), ("output.weight", w["lm_head.weight"])]
    return out


def write_gguf(path: Path, w: Weights, arch: Arch, vocab: Vocab, fmt: str, name: str,
               chat_template: str = CHAT_TEMPLATE) -> None:
    """One GGUF file; `fmt` is one of FORMATS."""
    import gguf

    if fmt not in FORMATS:
        raise ValueError(f"unknown GGUF format {fmt!r}; expected one of {', '.join(FORMATS)}")
    qtype = {
        "f32": gguf.GGMLQuantizationType.F32,
        "f16": gguf.GGMLQuantizationType.F16,
        "q8_0": gguf.GGMLQuantizationType.Q8_0,
        "q4_0": gguf.GGMLQuantizationType.Q4_0,
    }[fmt]
    ftype = {
        "f32": gguf.LlamaFileType.ALL_F32,
        "f16": gguf.LlamaFileType.MOSTLY_F16,
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
        "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
    }[fmt]

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(arch.n_ctx)
    writer.add_embedding_length(arch.n_embd)
    writer.add_block_count(arch.n_layer)
    writer.add_feed_forward_length(arch.n_ff)
    writer.add_head_count(arch.n_head)
    writer.add_head_count_kv(arch.n_head_kv)
    writer.add_rope_dimension_count(arch.head_dim)
    writer.add_rope_freq_base(arch.rope_theta)
    writer.add_layer_norm_rms_eps(arch.rms_eps)
    writer.add_vocab_size(vocab.size)
    writer.add_file_type(int(ftype))

    writer.add_tokenizer_model("llama")
    writer.add_token_list(vocab.tokens)
    writer.add_token_scores(vocab.scores)
    writer.add_token_types(vocab.types)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_eot_token_id(EOS_ID)
    writer.add_unk_token_id(UNK_ID)
    writer.add_pad_token_id(PAD_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(True)
    writer.add_chat_template(chat_template)

    for tname, arr in _gguf_tensors(w, arch):
        if arr.ndim == 1 or fmt == "f32":
            writer.add_tensor(tname, np.ascontiguousarray(arr, dtype=np.float32))
        elif fmt == "f16":
            writer.add_tensor(tname, np.ascontiguousarray(arr, dtype=np.float16))
        else:
            data = gguf.quants.quantize(np.ascontiguousarray(arr, dtype=np.float32), qtype)
            writer.add_tensor(tname, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
