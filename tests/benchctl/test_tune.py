"""`benchctl tune` (issue 38) writes a sweep file with a candidate matrix of the runtime's flags (threads from
the core count, the build's KV types, --n-cpu-moe only for a MoE GGUF, --kv-bits for MLX), the contexts a
coding agent needs under the model's trained context, and never submits: `validate` accepts what it writes."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import gguf
from testlib import benchctl_inproc

BENCHCTL = [sys.executable, "-m", "benchctl"]


def tune(*args: str) -> subprocess.CompletedProcess[str]:
    # it must not need (or reach) a daemon
    return benchctl_inproc("tune", *args, env={"BENCHD_SOCKET": "/nonexistent/benchd.sock"})


def header_gguf(path: Path, arch: str, **meta: int) -> Path:
    """A GGUF with metadata only (tune reads the header, never the tensors)."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in meta.items():
        w.add_uint32(f"{arch}.{key}", value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_dense_gguf_gets_the_llama_matrix_and_validates(tmp_path: Path) -> None:
    model = header_gguf(tmp_path / "dense.gguf", "llama", block_count=4, context_length=32768)
    out = tmp_path / "tune.toml"
    got = tune(str(model), "-o", str(out))
    assert got.returncode == 0, got.stderr
    doc = tomllib.loads(out.read_text())
    (cand,) = doc["candidates"]
    cores = len(os.sched_getaffinity(0))
    assert cand["runtime"] == "llama-server" and cand["model"] == str(model)
    assert cand["matrix"]["-t"] == sorted({str(max(1, cores // 2)), str(cores)}, key=int)
    assert cand["matrix"]["-ctk"] == ["f16", "q8_0"] and cand["matrix"]["-fa"] == ["on", "off"]
    assert "--n-cpu-moe" not in cand["matrix"]  # a dense model
    assert doc["contexts"] == [4096, 16384] and doc["racing"] is True  # under its 32768 trained tokens
    assert "Not submitted" in out.read_text()
    check = benchctl_inproc("validate", str(out), "--json")
    assert '"matrices"' in check.stdout and "left out" not in check.stderr
    assert tune(str(model), "-o", str(out)).returncode == 2  # never overwrites


def test_a_moe_gguf_gets_n_cpu_moe_and_an_mlx_dir_gets_kv_bits(tmp_path: Path) -> None:
    moe = header_gguf(tmp_path / "moe.gguf", "qwen3moe", block_count=48, expert_count=128, context_length=262144)
    doc = tomllib.loads(tune(str(moe)).stdout)
    assert doc["candidates"][0]["matrix"]["--n-cpu-moe"] == [False, "24"]
    assert doc["contexts"] == [4096, 16384, 32768, 65536]
    mlx = tmp_path / "mlx-model"
    mlx.mkdir()
    (mlx / "config.json").write_text('{"model_type": "llama", "max_position_embeddings": 8192}')
    doc = tomllib.loads(tune(str(mlx)).stdout)
    assert doc["candidates"][0]["runtime"] == "mlx_lm.server"
    assert doc["candidates"][0]["matrix"]["--kv-bits"] == [False, "8", "4"]
    assert tune(str(tmp_path / "nothing.gguf")).returncode == 2
