"""No server benchd starts inherits a secret of the daemon (issue 36; the unit cases are in
test_hostile_external.py): a real llama-server started with a secret-looking variable in benchd's
environment does not have it, and its start records the name as removed."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from benchd.schemas import Candidate


async def test_a_started_server_has_no_secret_of_the_daemon(tmp_path: Path, cache_dir: Path, tiny_models,
                                                          llama_server_bin: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    from benchd.config import Config
    from benchd.servers.supervisor import Supervisor

    monkeypatch.setenv("BENCHD_HOSTILE_API_TOKEN", "t-789")
    sup = Supervisor(Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir), grace_s=3.0)
    c = msgspec.convert({"id": "env", "runtime": "llama-server", "model": str(tiny_models.target),
                         "binary": str(llama_server_bin)}, Candidate)
    try:
        server = await sup.start("job-env", c, 512)
        seen = psutil.Process(server.pid).environ()
    finally:
        await sup.stop_all()
    assert "BENCHD_HOSTILE_API_TOKEN" not in seen and "t-789" not in seen.values()
    assert "BENCHD_HOSTILE_API_TOKEN" in server.env_removed
