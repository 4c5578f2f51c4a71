"""`benchctl locked --format`: the lock as a shell script, a llama-swap entry, llama-server's router-mode
preset and the MLX command, each from the one argv the daemon ran (`lockfile.server_argv`), refused
with the reason where the form does not fit the locked runtime (exit 2)."""

from __future__ import annotations

import configparser
import json
import shlex
import sys
from pathlib import Path

import msgspec
import pytest
from runbook_factory import fill_job, setup_state
from testlib import benchctl_inproc

from benchd.errors import BenchdError
from benchd.lock import formats
from benchd.lock import lockfile as lock
from benchd.results import runbook

BENCHCTL = [sys.executable, "-m", "benchctl"]


@pytest.fixture()
def state(tmp_path: Path):
    config, store, sweep, models = setup_state(tmp_path)
    rid = runbook.write_runbook(config, store, fill_job(store, sweep), charts=False)
    fake_bin = config.state_dir / "llama-server"
    fake_bin.write_text("#!/bin/sh\n")
    fake_bin.chmod(0o755)
    yield config, runbook.load_runbook(rid, config), models, str(fake_bin)
    store.close()


def test_llama_swap_and_shell_start_what_was_measured(state) -> None:
    config, rb, _models, fake_bin = state
    locked = msgspec.structs.replace(lock.build_lock(rb, "gguf-spec"), binary=fake_bin)
    swap = formats.llama_swap(locked, config)
    lines = swap.splitlines()
    assert lines[0] == "models:" and lines[1] == '  "gguf-spec":'
    cmd = json.loads(next(x for x in lines if x.startswith("    cmd: ")).removeprefix("    cmd: "))
    argv = shlex.split(cmd)
    assert argv[argv.index("--port") + 1] == "${PORT}" and "'${PORT}'" not in cmd  # llama-swap's macro, unquoted
    want = lock.server_argv(locked, config, 8080)
    assert [a if a != "${PORT}" else "8080" for a in argv] == want
    assert '    proxy: "http://127.0.0.1:${PORT}"' in lines
    script = formats.shell(locked, config, 18080)
    assert script.startswith("#!/bin/sh\n") and f"exec {lock.server_command_line(locked, config, 18080)}\n" in script
    with pytest.raises(BenchdError, match="not an MLX server"):
        formats.mlx_command(locked, config)


def test_the_preset_is_the_routers_ini(state) -> None:
    config, rb, models, fake_bin = state
    locked = msgspec.structs.replace(lock.build_lock(rb, "gguf-spec"), binary=fake_bin)
    text = formats.llama_server_preset(locked, config)
    ini = configparser.ConfigParser(comment_prefixes=(";",), interpolation=None)
    ini.read_string("[top]\n" + text)  # keys before the first section belong to the file (version = 1)
    assert ini["top"]["version"] == "1"
    sec = ini["gguf-spec"]
    assert sec["m"] == str(models["gguf"]) and sec["md"] == str(models["draft"]) and sec["c"] == "4096"
    assert sec["t"] == "1" and sec["metrics"] == "true"
    assert "host" not in sec and "port" not in sec  # the router owns them
    fake_mlx = config.state_dir / "mlx_lm.server"
    fake_mlx.write_text("#!/bin/sh\n")
    fake_mlx.chmod(0o755)
    mlx = msgspec.structs.replace(lock.build_lock(rb, "mlx-lm", force=True), binary=str(fake_mlx))
    with pytest.raises(BenchdError, match="the preset is llama-server's"):
        formats.llama_server_preset(mlx, config)
    assert "mlx_lm" in formats.mlx_command(mlx, config)


def test_cli_format(state) -> None:
    config, _rb, _models, fake_bin = state
    path, _ = lock.lock_candidate(config, "gguf-spec")
    doc = lock.read_lock(path)
    lock.write_lock(path, msgspec.structs.replace(doc.locked, binary=fake_bin))
    env = {"BENCHD_CACHE_DIR": str(config.cache_dir)}
    out = benchctl_inproc("locked", "--format", "llama-swap", "--state-dir", str(config.state_dir), env=env)
    assert out.returncode == 0 and out.stdout.startswith('models:\n  "gguf-spec":\n'), out.stderr
    bad = benchctl_inproc("locked", "--format", "mlx-command", "--state-dir", str(config.state_dir), env=env)
    assert bad.returncode == 2 and "not an MLX server" in bad.stderr


def test_lock_warns_when_the_evidence_is_thin(state) -> None:
    """The factory's cells have three probes ("too few"), and gguf-plain is undecided against frontier
    members at 1024: `lock` locks it and says both (stderr, and `warnings` in --json)."""
    config, _rb, _models, _fake_bin = state
    env = {"BENCHD_CACHE_DIR": str(config.cache_dir)}
    out = benchctl_inproc("lock", "--candidate", "gguf-plain", "--state-dir", str(config.state_dir), env=env)
    assert out.returncode == 0, out.stderr
    assert "warning: thin evidence: gguf-plain's cells at contexts 512, 1024 have too few probes" in out.stderr
    line = next(x for x in out.stderr.splitlines() if "undecided against gguf-spec (on the frontier)" in x)
    assert line.startswith("warning: thin evidence: at context 1024 gguf-plain") and "generation speed" in line
    assert "; would decide it: more rounds: the interval" in line, line  # the lever the report names, not a guess
    assert line.count("generation speed") == 1, line  # the axes are named once, by what would decide them
    doc = json.loads(benchctl_inproc("lock", "--candidate", "gguf-plain", "--json", "--state-dir",
                                     str(config.state_dir), env=env).stdout)
    assert len(doc["warnings"]) >= 2
