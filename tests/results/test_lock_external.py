"""The lock of an external candidate: it records the URL and the detected server, says benchd does not
start it, and `locked --command` prints how it was detected; its fingerprint changes only on evidence."""

from __future__ import annotations

from pathlib import Path

from benchd.config import Config
from benchd.lock.lockfile import (
    Locked,
    LockFile,
    encode_lock,
    locked_candidate,
    read_lock,
    server_argv,
    server_command_line,
)
from benchd.schemas import ExternalServer, Fingerprint
from benchd.servers.fingerprint import changes

FOUND = ExternalServer(url="http://127.0.0.1:8080", kind="llama-server", version="llama.cpp b1-abc", slot_ctx=512,
                       total_slots=1, detected_by=["GET /props: HTTP 200", "GET /slots: HTTP 200"],
                       sources={"slot_ctx": "GET /props default_generation_settings.n_ctx"})


def _locked() -> Locked:
    return Locked(schema_version=2, candidate="ext", runtime="openai", model_path="tiny", request_model="tiny",
                  binary="llama-server at http://127.0.0.1:8080", binary_version="llama.cpp b1-abc",
                  runbook="2026-01-01-abcdefgh", locked_at="2026-01-01T00:00:00Z", url="http://127.0.0.1:8080",
                  api_key_env="MY_KEY", external=FOUND, started_by_benchd=False)


def test_external_lock_round_trips_and_prints_its_detection(tmp_path: Path) -> None:
    config = Config.resolve(state_dir=tmp_path / "s", cache_dir=tmp_path / "c")
    path = tmp_path / "locked.toml"
    path.write_text(encode_lock(LockFile(locked=_locked())))
    back = read_lock(path).locked
    assert back.external == FOUND and back.started_by_benchd is False and back.api_key_env == "MY_KEY"
    assert "started_by_benchd = false" in path.read_text()
    text = server_command_line(back, config)
    assert text.startswith("# benchd does not start this server: llama-server at http://127.0.0.1:8080")
    assert "GET /props" in text and "llama.cpp b1-abc" in text
    assert server_argv(back, config) == []
    cand = locked_candidate(back)
    assert cand.external and cand.url == back.url and cand.request_model == "tiny" and cand.model == ""


def test_external_fingerprint_changes_only_on_evidence() -> None:
    old = Fingerprint(taken_at="t", source="s", runtime="openai", binary="llama-server at u",
                      version="llama.cpp b1-abc", model_path="tiny")
    silent = Fingerprint(taken_at="t", source="s", runtime="openai", model_path="tiny",
                         null_reasons={"version": "did not answer"})
    assert changes(old, silent) == []
    upgraded = Fingerprint(taken_at="t", source="s", runtime="openai", binary="llama-server at u",
                           version="llama.cpp b2-def", model_path="tiny")
    assert changes(old, upgraded) == ["version: llama.cpp b1-abc -> llama.cpp b2-def"]
