"""`benchctl validate` reads the model files before a night is spent on them: a model of the wrong kind
for its runtime, and contexts beyond the model's trained context (GGUF `context_length`, MLX
`max_position_embeddings`), each named on its candidate's `model` field, all in one pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gguf

from benchd.engine.modelcheck import model_problems, trained_context
from benchd.schemas import Candidate, Sweep


def _gguf(path: Path, context_length: int) -> Path:
    """A GGUF header with an architecture and its context_length (no tensors: validate reads the header)."""
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_context_length(context_length)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


def _mlx(folder: Path, n: int) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": n}}))
    return folder


def _sweep(contexts: list[int], *cands: Candidate) -> Sweep:
    return Sweep(name="s", contexts=contexts, gen_tokens=64, candidates=list(cands))


def test_trained_context_from_gguf_and_mlx(tmp_path: Path) -> None:
    assert trained_context(str(_gguf(tmp_path / "m.gguf", 32768))) == (32768, "GGUF qwen3.context_length")
    assert trained_context(str(_mlx(tmp_path / "mlx", 4096))) == (4096, "config.json text_config.max_position_embeddings")
    (tmp_path / "bare.gguf").write_bytes(b"GGUF")
    assert trained_context(str(tmp_path / "bare.gguf"))[0] is None  # a header that does not say: no guess


def test_contexts_beyond_the_trained_one_and_the_wrong_kind(tmp_path: Path) -> None:
    model = str(_gguf(tmp_path / "m.gguf", 32768))
    mlx = str(_mlx(tmp_path / "mlx", 4096))
    gguf_cand = Candidate(id="g", runtime="llama-server", model=model)
    sweep = _sweep([1024, 32768, 131072], gguf_cand)
    ((field, why),) = model_problems(gguf_cand, sweep)
    assert field == "model" and "trained for a context of 32,768 tokens (GGUF qwen3.context_length)" in why
    assert "contexts 32,768, 131,072 plus gen_tokens 64 exceed it (contexts allowed: up to 32,704)" in why
    assert model_problems(gguf_cand, _sweep([1024], gguf_cand)) == []
    wrong = [Candidate(id="a", runtime="mlx_lm.server", model=model), Candidate(id="b", runtime="llama-server", model=mlx)]
    texts = [model_problems(c, _sweep([512], c))[0][1] for c in wrong]
    assert "is a GGUF file; mlx_lm.server loads a folder with config.json" in texts[0]
    assert "is a folder; llama-server loads one .gguf file" in texts[1]


def test_validate_lists_them_all_in_one_pass(tmp_path: Path) -> None:
    model = _gguf(tmp_path / "m.gguf", 32768)
    mlx = _mlx(tmp_path / "mlx", 4096)
    f = tmp_path / "s.toml"
    f.write_text(f'''name = "night"
contexts = [1024, 131072]
gen_tokens = 64
[[candidates]]
id = "long"
runtime = "llama-server"
model = "{model}"
[[candidates]]
id = "gguf-to-mlx"
runtime = "mlx_lm.server"
model = "{model}"
[[candidates]]
id = "mlx-to-llama"
runtime = "llama-server"
model = "{mlx}"
''')
    out = subprocess.run([sys.executable, "-m", "benchctl", "validate", str(f), "--json"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    problems = json.loads(out.stdout)["problems"]
    assert any(p.startswith(f"{f}: candidates[0] (long).model: the model was trained for a context of 32,768") for p in problems)
    assert any(p.startswith(f"{f}: candidates[1] (gguf-to-mlx).model: ") and "is a GGUF file" in p for p in problems)
    assert any(p.startswith(f"{f}: candidates[2] (mlx-to-llama).model: ") and "is a folder" in p for p in problems)


def test_a_probe_plan_that_cannot_resolve_is_warned(tmp_path: Path) -> None:
    """probes = 3 is below the cell verdict's minimum: validate says so (a warning; the sweep is valid)."""
    model = _gguf(tmp_path / "m.gguf", 32768)
    f = tmp_path / "s.toml"
    f.write_text(f'name = "n"\ncontexts = [512]\ngen_tokens = 16\nprobes = 3\n[[candidates]]\nid = "c"\n'
                 f'runtime = "llama-server"\nmodel = "{model}"\n')
    out = subprocess.run([sys.executable, "-m", "benchctl", "validate", str(f), "--json"], capture_output=True,
                         text=True, timeout=120)
    (warning,) = json.loads(out.stdout)["warnings"]
    assert warning.startswith("probes = 3: every cell's verdict will be 'too few'"), warning
