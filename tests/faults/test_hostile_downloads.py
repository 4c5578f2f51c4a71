"""What is downloaded and built is the pinned file (issue 36): the llama-cpp-python sdist is checked
against its sha256 after every download and when given by `BENCHD_LLAMA_SDIST`; a mismatch is a clear
error and nothing is extracted or built from it (never a silent rebuild). The eval wheels' pinned
hashes are checked by `benchd.engine.suites` (tests/engine)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from benchd.errors import BenchdError
from benchd.servers import provision


def test_the_cached_sdist_is_the_pinned_one(cache_dir: Path) -> None:
    sdist = provision.llama_dir(cache_dir) / "dl" / f"llama_cpp_python-{provision.LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    if not sdist.is_file():
        pytest.skip(f"no cached sdist at {sdist} (a machine set up from BENCHD_LLAMA_SDIST)")
    provision.check_sdist(sdist)  # raises on a mismatch


def test_a_tampered_sdist_is_refused_and_nothing_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / f"llama_cpp_python-{provision.LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    inner = tmp_path / "CMakeLists.txt"
    inner.write_text("project(hostile)\n")
    with tarfile.open(fake, "w:gz") as tar:
        tar.add(inner, arcname=f"llama_cpp_python-{provision.LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/CMakeLists.txt")
    monkeypatch.setenv("BENCHD_LLAMA_SDIST", str(fake))
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(BenchdError) as info:
        provision._llama_source(root, lambda msg: None)
    assert info.value.code == "hash_mismatch" and provision.LLAMA_SDIST_SHA256 in info.value.message
    assert not (root / "src").exists(), "a tampered sdist was extracted"
