"""`benchctl doctor`, driven through its entry point in this process with --json, on this machine with and without each runtime.

Runtimes are hidden or shown through the documented knobs only: an empty $BENCHD_CACHE_DIR, a PATH
without llama-server, $BENCHD_LLAMA_SERVER / $BENCHD_MLX_PYTHON pointing at the real cached builds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testlib import benchctl_inproc

from benchd.config import default_cache_dir
from benchd.errors import BenchdError
from benchd.servers.locate import resolve_llama_binary
from benchd.servers.provision import mlx_dir

BIN = Path(sys.executable).parent
CLEAN_PATH = f"{BIN}:/usr/bin:/bin"  # no llama-server (checked below), no MLX


def _real_llama() -> Path | None:
    try:
        path, _ = resolve_llama_binary(None, default_cache_dir())
    except BenchdError:
        return None
    return path


def _real_mlx_python() -> Path | None:
    py = mlx_dir(default_cache_dir()) / "venv" / "bin" / "python"
    return py if py.exists() else None


REAL_LLAMA = _real_llama()
REAL_MLX_PY = _real_mlx_python()


def doctor(tmp_path: Path, *args: str, state: Path | None = None, **env: str) -> tuple[int, Any, str]:
    cache = tmp_path / "empty-cache"
    cache.mkdir(exist_ok=True)
    if state is None:
        state = tmp_path / "state"
        state.mkdir(mode=0o700, exist_ok=True)
    unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("BENCHD_")}
    full = {**unset, "PATH": CLEAN_PATH, "BENCHD_CACHE_DIR": str(cache), "BENCHD_STATE_DIR": str(state), **env}
    done = benchctl_inproc("doctor", *args, env=full)  # type: ignore[arg-type]
    assert "Traceback" not in done.stderr, done.stderr
    out = json.loads(done.stdout) if "--json" in args else done.stdout
    return done.returncode, out, done.stderr


def _runtime(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in report["runtimes"] if r["name"] == name)


def _check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == name)


def test_clean_path_has_no_llama_server() -> None:
    assert not any((Path(d) / "llama-server").exists() for d in CLEAN_PATH.split(":"))


def test_no_runtime_at_all_is_a_problem(tmp_path: Path) -> None:
    rc, report, _ = doctor(tmp_path, "--json")
    assert rc == 1 and report["ok"] is False
    for name in ("llama-server", "mlx_lm.server", "mlx_vlm.server"):
        rt = _runtime(report, name)
        assert rt["installed"] is False and rt["reason"]
        assert _check(report, name)["status"] == "warn" and "benchctl runtimes install" in _check(report, name)["fix"]
    runtimes = _check(report, "runtimes")
    assert runtimes["status"] == "problem" and "benchctl runtimes install all" in runtimes["fix"]
    assert report["problems"] == [runtimes["summary"]]


def test_no_runtime_human_output_says_what_to_do(tmp_path: Path) -> None:
    rc, text, _ = doctor(tmp_path)
    assert rc == 1
    assert "✗ runtimes" in text and "fix: benchctl runtimes install all" in text
    assert "\x1b[" not in text  # no colour codes when stdout is not a terminal
    assert "1 problem to fix" in text


@pytest.mark.skipif(REAL_LLAMA is None, reason="no llama-server built in the cache (benchctl runtimes install llama-server)")
def test_llama_server_via_env_var(tmp_path: Path) -> None:
    rc, report, _ = doctor(tmp_path, "--json", BENCHD_LLAMA_SERVER=str(REAL_LLAMA))
    assert rc == 0 and report["ok"] is True, report["problems"]
    rt = _runtime(report, "llama-server")
    assert rt["installed"] and rt["how"] == "env" and rt["path"] == str(REAL_LLAMA)
    # The version is what the real binary prints for `--version` (build and commit).
    out = subprocess.run([str(REAL_LLAMA), "--version"], capture_output=True, text=True, timeout=30)
    assert rt["version"] and rt["version"].split("-")[-1] in out.stdout + out.stderr
    assert _runtime(report, "mlx_lm.server")["installed"] is False  # still hidden


@pytest.mark.skipif(REAL_LLAMA is None, reason="no llama-server built in the cache")
def test_llama_server_from_the_real_cache(tmp_path: Path) -> None:
    rc, report, _ = doctor(tmp_path, "--json", BENCHD_CACHE_DIR=str(default_cache_dir()))
    assert rc == 0
    rt = _runtime(report, "llama-server")
    assert rt["installed"] and rt["how"] == "cache" and rt["version"]


@pytest.mark.skipif(REAL_MLX_PY is None, reason="no MLX venv in the cache (benchctl runtimes install mlx)")
def test_mlx_only_via_env_var(tmp_path: Path) -> None:
    rc, report, _ = doctor(tmp_path, "--json", BENCHD_MLX_PYTHON=str(REAL_MLX_PY))
    assert rc == 0, report["problems"]
    assert _runtime(report, "llama-server")["installed"] is False
    lm = _runtime(report, "mlx_lm.server")
    assert lm["installed"] and lm["how"] == "env" and lm["version"]
    out = subprocess.run([str(REAL_MLX_PY), "-c", "import importlib.metadata as m; print(m.version('mlx-lm'))"],
                         capture_output=True, text=True, timeout=60)
    assert lm["version"] == out.stdout.strip()


@pytest.mark.skipif(REAL_LLAMA is None, reason="needs a runtime so the state dir is the only problem")
def test_state_dir_permissions(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    rc, report, _ = doctor(tmp_path, "--json", state=loose, BENCHD_LLAMA_SERVER=str(REAL_LLAMA))
    check = _check(report, "state dir")
    assert rc == 1 and check["status"] == "problem" and check["fix"] == f"chmod 700 {loose}"
    assert report["state_dir"]["mode"] == "0755"
    missing = tmp_path / "not-yet"
    rc, report, _ = doctor(tmp_path, "--json", state=missing, BENCHD_LLAMA_SERVER=str(REAL_LLAMA))
    assert rc == 0 and _check(report, "state dir")["status"] == "ok" and report["state_dir"]["exists"] is False


@pytest.fixture
def daemon() -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    state = Path(tempfile.mkdtemp(prefix="bd-doc-"))
    proc = subprocess.Popen([str(BIN / "benchd"), "--state-dir", str(state)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not (state / "benchd.sock").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "benchd did not start"
            time.sleep(0.1)
        yield state, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_daemon_reachable_and_not(tmp_path: Path, daemon: tuple[Path, subprocess.Popen[bytes]]) -> None:
    state, proc = daemon
    _, report, _ = doctor(tmp_path, "--json", state=state)
    assert report["daemon"]["reachable"] is True
    assert report["daemon"]["health"]["pid"] == proc.pid
    assert _check(report, "daemon")["status"] == "ok"
    _, report, _ = doctor(tmp_path, "--json")  # its own empty state dir: nobody listens there
    assert report["daemon"]["reachable"] is False
    assert _check(report, "daemon")["status"] == "warn" and "benchd --state-dir" in _check(report, "daemon")["fix"]


def test_sources_power_and_sleep_are_reported(tmp_path: Path) -> None:
    _, report, _ = doctor(tmp_path, "--json")
    for kind in ("thermal", "memory"):
        assert report[kind], kind
        for src in report[kind]:
            assert "name" in src and "available" in src
            assert src["available"] or src.get("reason"), src  # unavailable says why
    assert report["power"]["source"] in ("ac", "battery", "unknown")
    sleep = report["sleep_prevention"]
    assert sleep["prevented"] or sleep["reason"]
    assert _check(report, "sleep prevention")["status"] == ("ok" if sleep["prevented"] else "warn")


def test_energy_source_and_one_reading(tmp_path: Path) -> None:
    """Over a fake powercap tree driven at 12 W (package 10 W + DRAM 2 W; the double: no RAPL on this VM),
    doctor names the counters and reads about 12 W; without powercap it says why, as a warning."""
    from tests.testlib import FakeRapl

    fake = FakeRapl(tmp_path / "powercap")
    fake.drive({"package-0": 10.0, "core": 6.0, "dram": 2.0})
    try:
        _, report, _ = doctor(tmp_path, "--json", BENCHD_POWERCAP_ROOT=str(fake.root))
    finally:
        fake.stop()
    energy = report["energy"]
    assert energy["available"] and energy["source"] == "rapl:package-0 + rapl:package-0/dram"
    assert energy["reading"]["watts"] == pytest.approx(12.0, rel=0.3), energy
    assert set(energy["reading"]["channels"]) == {"package-0", "package-0/core", "package-0/dram"}
    assert _check(report, "energy")["status"] == "ok" and "system energy" in _check(report, "energy")["summary"]
    _, report, _ = doctor(tmp_path, "--json", BENCHD_POWERCAP_ROOT=str(tmp_path / "none"))
    check = _check(report, "energy")
    assert check["status"] == "warn" and "no powercap" in check["summary"] and report["energy"]["reading"] is None
