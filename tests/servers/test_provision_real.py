"""Provisioning on the real cache (the session fixtures provision it once): a second install is a no-op, and
`benchctl runtimes list` / `install` and the MLX resolution read what is installed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from benchd.servers import locate, provision
from tests.servers.test_provision import BENCHCTL


def test_install_llama_second_run_is_a_no_op(cache_dir: Path, llama_server_bin: Path) -> None:
    lines: list[str] = []
    started = time.monotonic()
    bin_dir = provision.install_llama(cache_dir, lines.append)
    assert time.monotonic() - started < 60  # a build takes minutes; a no-op, seconds
    assert bin_dir == provision.llama_dir(cache_dir) / "bin"
    assert lines and "already installed" in lines[0]
    marker = json.loads((provision.llama_dir(cache_dir) / "installed.json").read_text())
    assert marker["version"] == provision.LLAMA_CPP_PYTHON_VERSION
    assert set(marker["binaries"]) == {"llama-server", "llama-bench", "llama-perplexity", "llama-tokenize"}
    assert "-DLLAMA_BUILD_UI=OFF" in marker["cmake_options"]
    for name in ("llama-server", "llama-bench", "llama-perplexity", "llama-tokenize"):
        assert os.access(bin_dir / name, os.X_OK)


def test_install_mlx_second_run_is_a_no_op(cache_dir: Path, mlx_argv: dict[str, list[str]]) -> None:
    lines: list[str] = []
    started = time.monotonic()
    venv = provision.install_mlx(cache_dir, lines.append)
    assert time.monotonic() - started < 60 and "already installed" in lines[0]  # an install takes minutes
    assert venv.name == "venv" and venv.parent == provision.mlx_dir(cache_dir)
    marker = json.loads((venv.parent / "installed.json").read_text())
    assert marker["requirements"] == provision.mlx_requirements()
    assert marker["requirements"][1:] == ["mlx-lm==0.32.2", "mlx-vlm==0.7.10"]
    assert marker["lock_sha256"] == provision._mlx_lock_sha256()  # installed from the lock shipped, if any


def test_list_runtimes_on_the_real_cache(cache_dir: Path, llama_server_bin: Path,
                                         mlx_argv: dict[str, list[str]]) -> None:
    entries = {e["name"]: e for e in locate.list_runtimes(cache_dir)}
    assert set(entries) == {*provision.LLAMA_TARGETS, "mlx_lm.server", "mlx_vlm.server"}
    assert all(e["installed"] for e in entries.values())
    assert re.fullmatch(r"b\d+-[0-9a-f]+", str(entries["llama-server"]["version"]))
    assert entries["llama-server"]["path"] == str(llama_server_bin)
    assert entries["mlx_lm.server"]["version"] == provision.MLX_LM_VERSION
    assert entries["mlx_vlm.server"]["version"] == provision.MLX_VLM_VERSION
    out = subprocess.run([*BENCHCTL, "runtimes", "list", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert [e["name"] for e in json.loads(out.stdout)] == list(entries)


def test_cli_install_is_fast_when_installed(llama_server_bin: Path, mlx_argv: dict[str, list[str]]) -> None:
    started = time.monotonic()
    out = subprocess.run([*BENCHCTL, "runtimes", "install", "all"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - started < 20
    assert "already installed" in out.stderr and len(out.stdout.splitlines()) == 2


def test_mlx_cache_venv_resolves(cache_dir: Path, mlx_argv: dict[str, list[str]]) -> None:
    venv_bin = provision.mlx_dir(cache_dir) / "venv" / "bin"
    assert mlx_argv["mlx_lm.server"] == [str(venv_bin / "mlx_lm.server")]
    assert mlx_argv["mlx_vlm.server"] == [str(venv_bin / "python"), "-m", "mlx_vlm.server"]
