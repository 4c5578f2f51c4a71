"""The human lock against a real llama-server: `benchctl locked --command` gives the argv of a tiny
draft-model candidate, and the server it starts answers /health."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import msgspec
import pytest
from runbook_factory import fill_job, setup_state

from benchd.errors import BenchdError
from benchd.results import runbook
from benchd.schemas import Candidate, Spec
from tests.results.test_lock import _cli


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _real_runtime(request: pytest.FixtureRequest) -> tuple[Path, Path, Path]:
    """(llama-server binary, target gguf, identical draft) from the conftest fixtures when they exist,
    else from the same places they read (the provisioned runtime and the cached tiny models)."""
    try:
        binary = Path(request.getfixturevalue("llama_server_bin"))
        tiny = request.getfixturevalue("tiny_models")
        return binary, tiny.target, tiny.draft_identical
    except pytest.FixtureLookupError:
        pass
    from benchctl import tinymodels
    from benchd.config import default_cache_dir
    from benchd.servers import locate

    try:
        binary = locate.resolve_llama_binary(None, default_cache_dir())[0]
    except BenchdError as exc:
        pytest.skip(f"no llama-server: {exc}")
    tiny = tinymodels.ensure(default_cache_dir())
    return binary, tiny.target, tiny.draft_identical


@pytest.mark.slow
def test_locked_command_starts_real_llama_server(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    binary, target, draft = _real_runtime(request)
    config, store, sweep, _ = setup_state(tmp_path)
    real = Candidate(id="gguf-spec", runtime="llama-server", model=str(target), args=["-t", "1"], ctx_size=512,
                     binary=str(binary), spec=Spec(kind="draft", draft_model=str(draft), draft_max=4))
    sweep = msgspec.structs.replace(sweep, candidates=[real, *sweep.candidates[1:]])
    fill_job(store, sweep)
    runbook.write_runbook(config, store, "20261130-020000-abcd", charts=False)
    store.close()
    assert _cli(config, "lock", "--candidate", "gguf-spec").returncode == 0
    port = _free_port()
    res = _cli(config, "locked", "--command", "--port", str(port), "--json")
    assert res.returncode == 0, res.stderr
    argv = json.loads(res.stdout)["argv"]
    assert argv[0] == str(binary) and str(port) in argv
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        body = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                    if resp.status == 200:
                        body = json.loads(resp.read())
                        break
            except OSError:
                pass
            time.sleep(0.2)
        assert body == {"status": "ok"}, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
