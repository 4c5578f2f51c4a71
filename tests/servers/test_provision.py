"""Provisioning: one-line errors and the binary resolution order (the idempotent installs on the real
cache are in test_provision_real.py).

The error tests use temp cache dirs and a PATH without the build tools. A real failing build is made by a
CMake project that stops with FATAL_ERROR (no test double: cmake really runs).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchd.errors import BenchdError
from benchd.servers import locate, provision

BENCHCTL = [sys.executable, "-m", "benchctl"]
NO_MLX_PYTHON = "BENCHD_MLX_PYTHON"


def _exe(path: Path, body: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No overrides, and a PATH with nothing but an empty dir (and the interpreter's own dir removed)."""
    for var in ("BENCHD_LLAMA_SERVER", "BENCHD_LLAMA_BENCH", "BENCHD_LLAMA_PERPLEXITY", NO_MLX_PYTHON, "BENCHD_LLAMA_SDIST"):
        monkeypatch.delenv(var, raising=False)
    empty = tmp_path / "emptybin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return empty


# ------------------------------------------------------------------------------------- errors


def test_unknown_runtime_cli_one_line() -> None:
    out = subprocess.run([*BENCHCTL, "runtimes", "install", "vllm"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: unknown runtime 'vllm': use llama-server, mlx or all (field runtime)"
    ]
    with pytest.raises(BenchdError) as exc:
        provision.install("vllm", Path("/nonexistent"), print)
    assert exc.value.code == "unknown_runtime"


def test_unwritable_cache_dir(tmp_path: Path) -> None:
    """A path under a regular file cannot be created, even by root."""
    (tmp_path / "file").write_text("")
    for install in (provision.install_llama, provision.install_mlx):
        with pytest.raises(BenchdError, match=r"not writable.*BENCHD_CACHE_DIR") as exc:
            install(tmp_path / "file" / "cache", print)
        assert exc.value.code == "cache_unwritable"
    out = subprocess.run([*BENCHCTL, "runtimes", "install", "llama-server", "--cache-dir", str(tmp_path / "file" / "c")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1


def test_missing_cmake_and_compiler_name_the_package(tmp_path: Path, clean_env: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(BenchdError, match=r"cmake not found.*(apt-get install|brew install)") as exc:
        provision.install_llama(tmp_path / "cache", print)
    assert exc.value.code == "missing_tool"
    _exe(clean_env / "cmake")
    with pytest.raises(BenchdError, match=r"no C\+\+ compiler.*(build-essential|xcode-select)"):
        provision.install_llama(tmp_path / "cache", print)


def test_failed_build_points_at_the_log(tmp_path: Path) -> None:
    """A source tree whose CMakeLists fails: the error names cmake.log, which holds cmake's message."""
    root = provision.llama_dir(tmp_path)
    src = root / "src" / f"llama_cpp_python-{provision.LLAMA_CPP_PYTHON_VERSION}" / "vendor" / "llama.cpp"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text('cmake_minimum_required(VERSION 3.14)\nmessage(FATAL_ERROR "boom-42")\n')
    with pytest.raises(BenchdError) as exc:
        provision.install_llama(tmp_path, print)
    assert exc.value.code == "install_failed"
    assert str(root / "cmake.log") in exc.value.message
    assert "boom-42" in (root / "cmake.log").read_text()
    assert not (root / "installed.json").exists()


# --------------------------------------------------------------------------------------- resolution


def test_llama_resolution_order(tmp_path: Path, clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(BenchdError, match="benchctl runtimes install llama-server") as exc:
        locate.resolve_llama_binary(None, cache)
    assert exc.value.code == "runtime_missing"
    cached = _exe(provision.llama_dir(cache) / "bin" / "llama-server")
    assert locate.resolve_llama_binary(None, cache) == (cached, "cache")
    on_path = _exe(clean_env / "llama-server")
    assert locate.resolve_llama_binary(None, cache) == (on_path, "path")
    env = _exe(tmp_path / "env" / "llama-server")
    monkeypatch.setenv("BENCHD_LLAMA_SERVER", str(env))
    assert locate.resolve_llama_binary(None, cache) == (env, "env")
    cand = _exe(tmp_path / "cand" / "my-llama")
    assert locate.resolve_llama_binary(str(cand), cache) == (cand, "candidate")
    bench = _exe(provision.llama_dir(cache) / "bin" / "llama-bench")
    assert locate.resolve_llama_binary(None, cache, "llama-bench") == (bench, "cache")
    (tmp_path / "notexec").write_text("")
    with pytest.raises(BenchdError, match="not an executable") as exc:
        locate.resolve_llama_binary(str(tmp_path / "notexec"), cache)
    assert exc.value.field == "binary"
    monkeypatch.setenv("BENCHD_LLAMA_SERVER", str(tmp_path / "missing"))
    with pytest.raises(BenchdError, match=r"\$BENCHD_LLAMA_SERVER"):
        locate.resolve_llama_binary(None, cache)


def test_mlx_resolution_order(tmp_path: Path, clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    python = _exe(tmp_path / "venv" / "bin" / "python")
    script = _exe(tmp_path / "venv" / "bin" / "mlx_lm.server")
    assert locate.resolve_mlx_command("mlx_lm.server", str(script), cache) == ([str(script)], "candidate")
    assert locate.resolve_mlx_command("mlx_vlm.server", str(python), cache) == (
        [str(python), "-m", "mlx_vlm.server"], "candidate")
    monkeypatch.setenv(NO_MLX_PYTHON, str(python))
    assert locate.resolve_mlx_command("mlx_lm.server", None, cache) == ([str(script)], "env")
    assert locate.resolve_mlx_command("mlx_vlm.server", None, cache) == (
        [str(python), "-m", "mlx_vlm.server"], "env")
    monkeypatch.delenv(NO_MLX_PYTHON)
    if locate._can_import(sys.executable, "mlx_lm"):
        pytest.skip("this interpreter has mlx_lm: the 'path' step wins before the cache")
    with pytest.raises(BenchdError, match="benchctl runtimes install mlx"):
        locate.resolve_mlx_command("mlx_lm.server", None, cache)
    with pytest.raises(BenchdError, match="unknown MLX runtime"):
        locate.resolve_mlx_command("llama-server", None, cache)


def test_cmake_options_match_the_reference() -> None:
    opts = provision.llama_cmake_options()
    for must in ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF",
                 "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF"):
        assert must in opts
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists() and " avx2" in cpuinfo.read_text():
        assert provision.LLAMA_CMAKE_X86_AVX2[0] == "-DGGML_NATIVE=OFF"
        assert set(provision.LLAMA_CMAKE_X86_AVX2) <= set(opts)


def _lock_entries(lock: Path) -> dict[str, list[str]]:
    """`name==version` -> its sha256 hashes, read from a pip hash lock."""
    entries: dict[str, list[str]] = {}
    current = ""
    for line in lock.read_text().splitlines():
        line = line.strip().rstrip("\\").strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("--hash=sha256:"):
            entries[current].append(line.removeprefix("--hash=sha256:"))
        else:
            current = line
            entries[current] = []
    return entries


def test_the_mlx_lock_pins_every_package_with_its_hash() -> None:
    """The shipped lock holds benchd's three pins at their versions and a sha256 for every package; on this
    platform the installed venv's marker names the lock it was installed from."""
    lock = provision.mlx_lock()
    if lock is None:
        pytest.skip(f"no MLX hash lock is shipped for {sys.platform}-{os.uname().machine}")
    entries = _lock_entries(lock)
    names = {e.split("==")[0].lower().replace("_", "-"): e.split("==")[1] for e in entries}
    assert names["mlx"] == names["mlx-cpu"] == provision.MLX_VERSION
    assert names["mlx-lm"] == provision.MLX_LM_VERSION and names["mlx-vlm"] == provision.MLX_VLM_VERSION
    assert all(hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes) for hashes in entries.values()), entries
    assert len(entries) > 50  # the dependencies are pinned too, not only the three


def test_a_package_whose_hash_differs_from_the_lock_is_a_clear_error(tmp_path: Path) -> None:
    """pip's own --require-hashes check on a local wheel whose sha256 is not the lock's: `hash_mismatch`,
    nothing installed (no network: the wheel is written here)."""
    import zipfile

    wheel = tmp_path / "demo_pkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("demo_pkg/__init__.py", "")
        z.writestr("demo_pkg-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 0.1\n")
        z.writestr("demo_pkg-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("demo_pkg-0.1.dist-info/RECORD", "")
    lock = tmp_path / "lock.txt"
    lock.write_text(f"{wheel} --hash=sha256:{'0' * 64}\n")
    target = tmp_path / "site"
    argv = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-index", "--require-hashes",
            "--no-deps", "--target", str(target), "-r", str(lock)]
    with pytest.raises(BenchdError) as err:
        provision._run_pip_locked(argv, tmp_path / "install.log")
    assert err.value.code == "hash_mismatch" and str(lock) in str(err.value), err.value
    assert not (target / "demo_pkg").exists()
