"""The tiny models: deterministic bytes, readable GGUFs, a real vocabulary, the suppression trick, the CLI.

No server here (tests/contract/ runs them on real servers); these read the files with the `gguf`,
`tokenizers` and `safetensors` packages.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchctl import tinymodels
from benchctl.tinymodels import vocab, weights
from benchd.errors import BenchdError

BENCHCTL = [sys.executable, "-m", "benchctl"]


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*")) if p.is_file() and p.name != "manifest.json"
    }


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tinymodels.TinyModels:
    return tinymodels.generate(tmp_path_factory.mktemp("tiny") / "small", "small", 0)


def test_same_seed_same_bytes_other_seed_other_weights(small: tinymodels.TinyModels, tmp_path: Path) -> None:
    again = tinymodels.generate(tmp_path / "again", "small", 0)
    assert _digests(again.root) == _digests(small.root)
    other = tinymodels.generate(tmp_path / "other", "small", 1)
    assert _digests(other.root)["target-f16.gguf"] != _digests(small.root)["target-f16.gguf"]
    assert _digests(other.root)["mlx/tokenizer.json"] == _digests(small.root)["mlx/tokenizer.json"]


def test_vocab_is_the_same_in_another_process() -> None:
    """`tokenizers`' trainer must not depend on hash seeds: a fresh interpreter gets the same vocab."""
    code = ("import hashlib, json; from benchctl.tinymodels.vocab import build_vocab; "
            "print(hashlib.sha256(json.dumps(build_vocab().tokens).encode()).hexdigest())")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == hashlib.sha256(json.dumps(vocab.build_vocab().tokens).encode()).hexdigest()


def test_layout_and_manifest(small: tinymodels.TinyModels) -> None:
    assert small.target == small.gguf["f16"]
    for path in [*small.gguf.values(), small.draft_identical, small.draft_noisy, small.draft_unrelated]:
        assert path.is_file() and path.stat().st_size > 50_000
    assert small.draft_identical.read_bytes() == small.target.read_bytes()
    assert small.mlx_vlm_dir == small.mlx_dir
    manifest = json.loads((small.root / "manifest.json").read_text())
    assert manifest["format_version"] == tinymodels.FORMAT_VERSION and manifest["target"] == "target-f16.gguf"
    assert 150_000 < small.n_params < 300_000 and small.n_vocab == vocab.build_vocab().size
    assert small.gguf["f32"].stat().st_size < 1_000_000  # "~0.5 MB" class (0.84 MB f32, 0.43 MB f16)
    assert not list(small.root.parent.glob(".small.tmp-*"))  # the temp dir was renamed away


@pytest.mark.parametrize(("fmt", "qtype"), [("f32", "F32"), ("f16", "F16"), ("q8_0", "Q8_0"), ("q4_0", "Q4_0")])
def test_gguf_metadata_and_tensor_types(small: tinymodels.TinyModels, fmt: str, qtype: str) -> None:
    import gguf

    reader = gguf.GGUFReader(small.gguf[fmt])
    fields = reader.fields

    def scalar(key: str) -> object:
        return fields[key].contents()

    assert scalar("general.architecture") == "llama"
    assert scalar("llama.block_count") == 2 and scalar("llama.embedding_length") == 64
    assert scalar("llama.context_length") == 32768
    assert scalar("tokenizer.ggml.model") == "llama"
    assert "<|im_start|>" in str(scalar("tokenizer.chat_template"))
    assert scalar("tokenizer.ggml.eos_token_id") == vocab.EOS_ID
    assert len(fields["tokenizer.ggml.tokens"].data) == small.n_vocab
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["blk.0.attn_q.weight"] == qtype and types["output.weight"] == qtype
    assert types["blk.0.attn_norm.weight"] == "F32"  # 1-D tensors stay f32 in every format
    assert len(types) == 2 + 2 * 9 + 1


def test_drafts_share_the_vocab(small: tinymodels.TinyModels) -> None:
    import gguf

    def tokens(path: Path) -> list[str]:
        return list(gguf.GGUFReader(path).fields["tokenizer.ggml.tokens"].contents())

    target = tokens(small.target)
    for draft in (small.draft_identical, small.draft_noisy, small.draft_unrelated):
        assert tokens(draft) == target
    assert gguf.GGUFReader(small.draft_unrelated).fields["llama.block_count"].contents() == 1


def test_suppressed_tokens_can_never_win() -> None:
    """With the constant-dimension trick, for any residual the model can produce (here: every token
    embedding plus noise as big as two layers add), every suppressed logit is far below the best one."""
    voc = vocab.build_vocab()
    sup = voc.suppressed_ids()
    w = weights.impose_structure(weights.random_weights(weights.SIZES["small"], voc.size, 0), sup)
    rng = np.random.default_rng(1)
    h = w["model.embed_tokens.weight"] + rng.standard_normal(w["model.embed_tokens.weight"].shape) * 0.6
    h[:, 0] = 1.0
    h = h / np.sqrt((h**2).mean(axis=1, keepdims=True) + 1e-5)
    logits = h @ w["lm_head.weight"].T
    allowed = np.ones(voc.size, dtype=bool)
    allowed[sup] = False
    assert (logits[:, ~allowed].max(axis=1) < logits[:, allowed].max(axis=1) - 100).all()
    assert vocab.EOS_ID in sup and vocab.IM_START_ID in sup
    assert vocab.BYTE_BASE + 0x0A not in sup and vocab.BYTE_BASE + 0xC3 in sup


def test_tokenizer_rate_and_roundtrip(small: tinymodels.TinyModels) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(small.mlx_dir / "tokenizer.json"))
    src = (Path(os.__file__).parent / "argparse.py").read_text()[:30000]
    ids = tok.encode(src).ids
    assert 1.8 <= len(src) / len(ids) <= 6.0  # a real vocabulary (a byte vocab would be ~1.0)
    for text in ["def f(self):\n        return None  # done", "Hello, world! é ✓"]:
        assert tok.decode(tok.encode(text).ids) == text  # byte fallback covers non-ASCII


def test_mlx_dir_matches_config(small: tinymodels.TinyModels) -> None:
    from safetensors.numpy import load_file

    cfg = json.loads((small.mlx_dir / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["tie_word_embeddings"] is False
    tensors = load_file(str(small.mlx_dir / "model.safetensors"))
    assert tensors["model.embed_tokens.weight"].shape == (cfg["vocab_size"], cfg["hidden_size"])
    assert tensors["lm_head.weight"].dtype == np.float16
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    assert tensors["model.layers.0.self_attn.k_proj.weight"].shape == (kv, cfg["hidden_size"])
    assert len([k for k in tensors if k.startswith("model.layers.")]) == 9 * cfg["num_hidden_layers"]
    tcfg = json.loads((small.mlx_dir / "tokenizer_config.json").read_text())
    assert tcfg["eos_token"] == "<|im_end|>" and "<|im_start|>" in tcfg["chat_template"]


def test_medium_size_is_tens_of_millions_of_params() -> None:
    arch = weights.SIZES["medium"]
    w = weights.random_weights(arch, vocab.build_vocab().size, 0)
    assert 10_000_000 < weights.n_params(w) < 60_000_000


def test_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BenchdError, match="unknown model size 'huge'"):
        tinymodels.ensure(tmp_path, "huge")
    with pytest.raises(BenchdError, match="non-negative"):
        tinymodels.generate(tmp_path / "x", "small", -1)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "other.txt").write_text("x")
    with pytest.raises(BenchdError, match="not an empty directory"):
        tinymodels.generate(tmp_path / "full", "small", 0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(BenchdError, match="cannot write models"):
        tinymodels.generate(tmp_path / "file" / "sub", "small", 0)


def test_ensure_is_idempotent(tmp_path: Path) -> None:
    first = tinymodels.ensure(tmp_path, "small", 3)
    assert first.root == tmp_path / "models" / "tiny-small-seed3-v1"
    mtime = first.target.stat().st_mtime_ns
    assert tinymodels.ensure(tmp_path, "small", 3) == first
    assert first.target.stat().st_mtime_ns == mtime


def test_cli_models_tiny(tmp_path: Path) -> None:
    out = subprocess.run([*BENCHCTL, "models", "tiny", "--out", str(tmp_path / "m"), "--seed", "2", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    paths = json.loads(out.stdout)
    assert paths["seed"] == 2 and Path(paths["target"]).is_file() and Path(paths["mlx_dir"], "config.json").is_file()
    bad = subprocess.run([*BENCHCTL, "models", "tiny", "--out", str(tmp_path / "n"), "--size", "huge"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "unknown model size 'huge'" in bad.stderr and "small, medium" in bad.stderr


def test_vision_kind_cli_same_seed_same_bytes(tmp_path: Path) -> None:
    """`--kind vision`: an idefics3 mlx_vlm dir and a text + projector GGUF pair, the same bytes per seed."""
    import gguf

    outs = []
    for name in ("a", "b"):
        out = subprocess.run([*BENCHCTL, "models", "tiny", "--kind", "vision", "--out", str(tmp_path / name), "--json"],
                             capture_output=True, text=True, check=True)
        outs.append(json.loads(out.stdout))
    assert _digests(tmp_path / "a") == _digests(tmp_path / "b")
    paths = outs[0]
    reader = gguf.GGUFReader(paths["mmproj"])
    fields = {f.name: f for f in reader.fields.values()}
    assert bytes(fields["clip.projector_type"].parts[-1]).decode() == "idefics3"
    assert "mm.model.fc.weight" in {t.name for t in reader.tensors}
    assert (Path(paths["mlx_vlm_dir"]) / "preprocessor_config.json").is_file()
    bad = subprocess.run([*BENCHCTL, "models", "tiny", "--kind", "vision", "--size", "medium", "--out",
                          str(tmp_path / "c")], capture_output=True, text=True)
    assert bad.returncode == 2 and "--size" in bad.stderr
