"""Tiny random-weight idefics3 vision-language models: an mlx_vlm dir and a llama.cpp text GGUF + projector.

Reasons and facts: docs/testing.md#tiny-vision-models.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from benchctl.tinymodels.vocab import BOS_ID, EOS_ID, TT_CONTROL, TT_NORMAL, Vocab, build_vocab
from benchctl.tinymodels.weights import SIZES, Weights, impose_structure, n_params, random_weights

#: Bump when anything that changes the vision sets' bytes changes.
VISION_VERSION = 1
#: Vision tile (the vision tower's input size), patch size, pixel-shuffle factor.
TILE, PATCH, SCALE_FACTOR = 128, 16, 2
TOKENS_PER_TILE = (TILE // PATCH) ** 2 // SCALE_FACTOR**2
#: The largest resolution (each side) the tiny model takes; the vocabulary has row/col tokens for its grid.
MAX_RESOLUTION = 1024
MAX_GRID = MAX_RESOLUTION // TILE
#: Vision tower shape: tiny, but every stage (patch conv, attention, MLP, connector) runs.
V_EMBD, V_HEADS, V_FF, V_LAYERS, V_EPS = 32, 2, 64, 2, 1e-6
IMAGE_MEAN = IMAGE_STD = [0.5, 0.5, 0.5]

FAKE_TOKEN, IMAGE_TOKEN, END_OF_UTTERANCE, GLOBAL_IMG = (
    "<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>")
NEWLINE, PARAGRAPH = "\n", "\n\n"
_VISION_SEED_OFFSET = 15_485_863

#: ChatML that takes a string or a list of typed parts (an image part becomes `<image>`, which both
#: runtimes expand: mlx_vlm's processor into the tile tokens, llama-server's mtmd at its media marker).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or part['type'] == 'image_url' %}{{ '<image>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class VisionModels:
    root: Path
    seed: int
    mlx_vlm_dir: Path
    text_gguf: Path
    mmproj: Path
    n_params: int
    n_vocab: int
    image_token_id: int


def vision_dir_name(seed: int) -> str:
    return f"tiny-vision-seed{seed}-v{VISION_VERSION}"


def row_col_tokens() -> list[str]:
    return [f"<row_{r}_col_{c}>" for r in range(1, MAX_GRID + 1) for c in range(1, MAX_GRID + 1)]


@functools.lru_cache(maxsize=1)
def vision_vocab() -> Vocab:
    """The tiny vocabulary plus idefics3's tokens (control: never generated) and the `\\n`/`\\n\\n` pieces
    that mtmd looks up by text around an image (`mtmd.cpp`: `lookup_token("\\n\\n")`)."""
    base = build_vocab()
    low = min(base.scores) - 1.0
    extra = [FAKE_TOKEN, IMAGE_TOKEN, END_OF_UTTERANCE, GLOBAL_IMG, *row_col_tokens()]
    return replace(
        base,
        tokens=[*base.tokens, *extra, NEWLINE, PARAGRAPH],
        scores=[*base.scores, *([0.0] * len(extra)), low, low - 1.0],
        types=[*base.types, *([TT_CONTROL] * len(extra)), TT_NORMAL, TT_NORMAL],
        merges=[*base.merges, (NEWLINE, NEWLINE)],
    )


def vision_weights(seed: int) -> Weights:
    """Vision tower + connector in Hugging Face Idefics3 names (PyTorch layouts), float32."""
    rng = np.random.default_rng(seed + _VISION_SEED_OFFSET)
    d_text = SIZES["small"].n_embd

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    p = "model.vision_model."
    w: Weights = {
        p + "embeddings.patch_embedding.weight": normal((V_EMBD, 3, PATCH, PATCH), (3 * PATCH * PATCH) ** -0.5),
        p + "embeddings.patch_embedding.bias": np.zeros(V_EMBD, dtype=np.float32),
        p + "embeddings.position_embedding.weight": normal(((TILE // PATCH) ** 2, V_EMBD), 0.02),
        p + "post_layernorm.weight": np.ones(V_EMBD, dtype=np.float32),
        p + "post_layernorm.bias": np.zeros(V_EMBD, dtype=np.float32),
    }
    for i in range(V_LAYERS):
        q = f"{p}encoder.layers.{i}."
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            w[q + f"self_attn.{name}.weight"] = normal((V_EMBD, V_EMBD), V_EMBD**-0.5)
            w[q + f"self_attn.{name}.bias"] = np.zeros(V_EMBD, dtype=np.float32)
        for norm in ("layer_norm1", "layer_norm2"):
            w[q + f"{norm}.weight"] = np.ones(V_EMBD, dtype=np.float32)
            w[q + f"{norm}.bias"] = np.zeros(V_EMBD, dtype=np.float32)
        w[q + "mlp.fc1.weight"] = normal((V_FF, V_EMBD), V_EMBD**-0.5)
        w[q + "mlp.fc1.bias"] = np.zeros(V_FF, dtype=np.float32)
        w[q + "mlp.fc2.weight"] = normal((V_EMBD, V_FF), V_FF**-0.5)
        w[q + "mlp.fc2.bias"] = np.zeros(V_EMBD, dtype=np.float32)
    proj = normal((d_text, V_EMBD * SCALE_FACTOR**2), (V_EMBD * SCALE_FACTOR**2) ** -0.5)
    proj[0, :] = 0.0  # the text model's constant dimension 0 (weights.py) stays untouched by image tokens
    w["model.connector.modality_projection.proj.weight"] = proj
    return w


def _mlx_config(vocab: Vocab) -> dict[str, object]:
    arch = SIZES["small"]
    return {
        "architectures": ["Idefics3ForConditionalGeneration"],
        "model_type": "idefics3",
        "image_token_id": vocab.tokens.index(IMAGE_TOKEN),
        "scale_factor": SCALE_FACTOR,
        "vocab_size": vocab.size,
        "eos_token_id": [EOS_ID],
        "bos_token_id": BOS_ID,
        "torch_dtype": "float16",
        "text_config": {
            "model_type": "llama", "hidden_size": arch.n_embd, "intermediate_size": arch.n_ff,
            "num_hidden_layers": arch.n_layer, "num_attention_heads": arch.n_head,
            "num_key_value_heads": arch.n_head_kv, "rms_norm_eps": arch.rms_eps, "rope_theta": arch.rope_theta,
            "max_position_embeddings": arch.n_ctx, "vocab_size": vocab.size, "tie_word_embeddings": False,
        },
        "vision_config": {
            "model_type": "idefics3_vision", "hidden_size": V_EMBD, "num_attention_heads": V_HEADS,
            "patch_size": PATCH, "image_size": TILE, "num_hidden_layers": V_LAYERS,
            "intermediate_size": V_FF, "num_channels": 3, "layer_norm_eps": V_EPS,
        },
    }


def _preprocessor_config() -> dict[str, object]:
    return {
        "image_processor_type": "Idefics3ImageProcessor",
        "processor_class": "Idefics3Processor",
        "do_convert_rgb": True, "do_resize": False, "size": {"longest_edge": MAX_RESOLUTION},
        "resample": 1, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": IMAGE_MEAN, "image_std": IMAGE_STD, "do_pad": True,
        "do_image_splitting": True, "max_image_size": {"longest_edge": TILE},
    }


def write_mlx_vlm_dir(out: Path, text: Weights, vis: Weights, vocab: Vocab) -> None:
    """config.json, model.safetensors (float16, HF names that mlx_vlm's idefics3 `sanitize` maps),
    tokenizer files, chat template, preprocessor_config.json, processor_config.json."""
    from safetensors.numpy import save_file

    from benchctl.tinymodels import mlx_model

    out.mkdir(parents=True, exist_ok=True)
    named = {("lm_head.weight" if k == "lm_head.weight" else "model.text_model." + k.split(".", 1)[1]): v
             for k, v in text.items()}
    named.update(vis)
    tensors = {k: np.ascontiguousarray(v, dtype=np.float16) for k, v in sorted(named.items())}
    # Reuse the text writer for the tokenizer and template files, then replace config and weights.
    mlx_model.write_mlx_dir(out, text, SIZES["small"], vocab, CHAT_TEMPLATE)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(_mlx_config(vocab), indent=2) + "\n")
    (out / "preprocessor_config.json").write_text(json.dumps(_preprocessor_config(), indent=2) + "\n")
    (out / "processor_config.json").write_text(
        json.dumps({"processor_class": "Idefics3Processor", "image_seq_len": TOKENS_PER_TILE}, indent=2) + "\n")


def write_mmproj(path: Path, vis: Weights, name: str) -> None:
    """The projector GGUF mtmd loads for `PROJECTOR_TYPE_IDEFICS3` (keys and tensor names from
    `clip-impl.h`; fc1/fc2 as ffn_up/ffn_down, so `clip.cpp` sees no swapped legacy layout)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_name(name)
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    writer.add_clip_has_vision_encoder(True)
    writer.add_clip_projector_type("idefics3")
    writer.add_vision_image_size(TILE)
    writer.add_vision_patch_size(PATCH)
    writer.add_vision_embedding_length(V_EMBD)
    writer.add_vision_feed_forward_length(V_FF)
    writer.add_vision_block_count(V_LAYERS)
    writer.add_vision_head_count(V_HEADS)
    writer.add_vision_attention_layernorm_eps(V_EPS)
    writer.add_vision_projection_dim(SIZES["small"].n_embd)
    writer.add_vision_image_mean(IMAGE_MEAN)
    writer.add_vision_image_std(IMAGE_STD)
    writer.add_vision_use_gelu(True)
    writer.add_vision_projector_scale_factor(SCALE_FACTOR)
    p = "model.vision_model."
    tensors: list[tuple[str, np.ndarray]] = [
        ("v.patch_embd.weight", vis[p + "embeddings.patch_embedding.weight"]),
        ("v.patch_embd.bias", vis[p + "embeddings.patch_embedding.bias"]),
        ("v.position_embd.weight", vis[p + "embeddings.position_embedding.weight"]),
        ("v.post_ln.weight", vis[p + "post_layernorm.weight"]),
        ("v.post_ln.bias", vis[p + "post_layernorm.bias"]),
        ("mm.model.fc.weight", vis["model.connector.modality_projection.proj.weight"]),
    ]
    names = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "out_proj": "attn_out",
             "layer_norm1": "ln1", "layer_norm2": "ln2", "fc1": "ffn_up", "fc2": "ffn_down"}
    for i in range(V_LAYERS):
        q = f"{p}encoder.layers.{i}."
        for hf, gg in names.items():
            part = "self_attn." if hf.endswith("proj") else ("mlp." if hf.startswith("fc") else "")
            for kind in ("weight", "bias"):
                tensors.append((f"v.blk.{i}.{gg}.{kind}", vis[f"{q}{part}{hf}.{kind}"]))
    for tname, arr in tensors:
        keep32 = arr.ndim == 1 or tname == "v.position_embd.weight"
        writer.add_tensor(tname, np.ascontiguousarray(arr, dtype=np.float32 if keep32 else np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def load_vision(root: Path) -> VisionModels:
    m = json.loads((root / "manifest.json").read_text())
    return VisionModels(root=root, seed=m["seed"], mlx_vlm_dir=root / "mlx", text_gguf=root / "text.gguf",
                        mmproj=root / "mmproj.gguf", n_params=m["n_params"], n_vocab=m["n_vocab"],
                        image_token_id=m["image_token_id"])


def _write_all(tmp: Path, seed: int, log: Callable[[str], None]) -> None:
    from benchctl.tinymodels import gguf_model

    voc = vision_vocab()
    arch = SIZES["small"]
    text = impose_structure(random_weights(arch, voc.size, seed), voc.suppressed_ids())
    vis = vision_weights(seed)
    name = f"benchd-tiny-vision-seed{seed}"
    log("writing text.gguf")
    gguf_model.write_gguf(tmp / "text.gguf", text, arch, voc, "f16", name, CHAT_TEMPLATE)
    log("writing mmproj.gguf")
    write_mmproj(tmp / "mmproj.gguf", vis, name + "-mmproj")
    log("writing mlx/")
    write_mlx_vlm_dir(tmp / "mlx", text, vis, voc)
    manifest = {
        "format_version": VISION_VERSION,
        "kind": "vision",
        "seed": seed,
        "n_params": n_params(text) + n_params(vis),
        "n_vocab": voc.size,
        "vocab_sha256": hashlib.sha256(json.dumps(voc.tokens).encode()).hexdigest(),
        "image_token_id": voc.tokens.index(IMAGE_TOKEN),
        "tile": TILE, "patch": PATCH, "scale_factor": SCALE_FACTOR, "tokens_per_tile": TOKENS_PER_TILE,
        "max_resolution": MAX_RESOLUTION,
        "files": {p.name: p.stat().st_size for p in sorted(tmp.glob("*.gguf"))},
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def generate_vision(out: Path, seed: int = 0, log: Callable[[str], None] | None = None) -> VisionModels:
    """Write a vision set to `out` (created; must not exist or be empty), atomically."""
    from benchctl.tinymodels import check_args, publish

    check_args("small", seed)
    out = Path(out).expanduser().absolute()
    publish(out, lambda tmp: _write_all(tmp, seed, log or (lambda _m: None)))
    return load_vision(out)


def ensure_vision(cache_dir: Path, seed: int = 0, log: Callable[[str], None] | None = None) -> VisionModels:
    """The cached vision set for `seed`, generated on first use (idempotent, cheap when present)."""
    from benchctl.tinymodels import check_args

    check_args("small", seed)
    root = Path(cache_dir).expanduser().absolute() / "models" / vision_dir_name(seed)
    if (root / "manifest.json").is_file():
        return load_vision(root)
    return generate_vision(root, seed, log)
