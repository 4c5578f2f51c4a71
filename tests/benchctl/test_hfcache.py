"""An MLX candidate's model given as a Hugging Face id is resolved offline to its snapshot folder in
the local hub cache (the path names the commit, so the runbook records the revision); an id that is
not cached is a clear error naming the field (exit 2), never a relative path or a download."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchctl.sweepfile import read_sweep_dict
from benchd.errors import BenchdError

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _cache(root: Path) -> Path:
    repo = root / "models--mlx-community--Qwen3-4B-4bit"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"max_position_embeddings": 40960}))
    return snap


def _sweep(tmp_path: Path, model: str, runtime: str = "mlx_lm.server") -> Path:
    f = tmp_path / "s.toml"
    f.write_text(f'name = "n"\ncontexts = [512]\ngen_tokens = 16\n[[candidates]]\nid = "c"\nruntime = "{runtime}"\n'
                 f'model = "{model}"\n')
    return f


def test_an_id_resolves_to_its_cached_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snap = _cache(tmp_path / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    data = read_sweep_dict(_sweep(tmp_path, "mlx-community/Qwen3-4B-4bit"))
    assert data["candidates"][0]["model"] == str(snap)
    assert read_sweep_dict(_sweep(tmp_path, f"mlx-community/Qwen3-4B-4bit@{COMMIT}"))["candidates"][0]["model"] == str(snap)
    with pytest.raises(BenchdError, match=r"revision 'v2' is not in the local cache .*cached refs: main"):
        read_sweep_dict(_sweep(tmp_path, "mlx-community/Qwen3-4B-4bit@v2"))
    # llama-server takes a file: the same text is a relative path there, resolved beside the sweep
    gguf = read_sweep_dict(_sweep(tmp_path, "mlx-community/Qwen3-4B-4bit", "llama-server"))["candidates"][0]["model"]
    assert gguf == str(tmp_path / "mlx-community" / "Qwen3-4B-4bit")


def test_an_id_not_in_the_cache_is_refused_naming_the_field(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "empty-hub")}
    out = subprocess.run([sys.executable, "-m", "benchctl", "validate", str(_sweep(tmp_path, "mlx-community/Gone-4bit"))],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "candidates[0].model 'mlx-community/Gone-4bit' reads as a Hugging Face id, and it is not in the local cache" \
        in out.stderr + out.stdout
    assert "benchd never downloads" in out.stderr + out.stdout
