"""The model-loaded line and `load_s`: a line seen before health answered, one the server writes just after
(the pinned llama-server flags itself ready, then logs `model loaded` from its logger thread), and none.
The log is a plain file the test writes; the Server handle is a namespace with the two fields the marker
sets (a real server cannot be made to log its line late on demand)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from benchd.servers import supervisor
from benchd.servers.supervisor import _LoadMarker


def _server() -> Any:
    return SimpleNamespace(load_s=None, load_note="")


def test_a_line_seen_before_health_answered_is_its_own_time(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("old start: model loaded\n")
    offset = log.stat().st_size  # this start's header: the older start's line does not count
    started = time.monotonic() - 1.0
    marker, server = _LoadMarker("model loaded", log, offset, started), _server()
    assert not marker.look(server) and server.load_s is None
    with log.open("a") as f:
        f.write("srv load_model: model loaded\n")
    assert marker.look(server)
    assert 1.0 <= server.load_s < 5.0 and "first seen" in server.load_note
    asyncio.run(marker.settle(server, ready_s=9.0, poll_s=0.01))  # already known: left as seen
    assert server.load_s < 5.0


def test_a_line_written_after_health_answered_gives_the_ready_time(tmp_path: Path, monkeypatch: Any) -> None:
    """The line is written between the marker's first look after health answered and its second (the log
    read is wrapped to write it then), so the order does not hang on the machine's speed."""
    log = tmp_path / "server.log"
    log.write_text("")
    marker, server = _LoadMarker("model loaded", log, 0, time.monotonic()), _server()
    reads = []
    real_read = supervisor._read_from

    def read_then_write(path: Path, offset: int, max_bytes: int) -> str:
        got = real_read(path, offset, max_bytes)
        reads.append(got)
        if len(reads) == 1:
            log.write_text("srv main: model loaded\n")
        return got

    monkeypatch.setattr(supervisor, "_read_from", read_then_write)
    asyncio.run(marker.settle(server, ready_s=0.75, poll_s=0.01))
    assert reads[0] == "" and len(reads) == 2
    assert server.load_s == 0.75
    assert "first seen after health answered" in server.load_note


def test_no_line_within_the_wait_is_null_with_the_reason(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(supervisor, "LATE_LINE_S", 0.1)
    log = tmp_path / "server.log"
    log.write_text("srv main: loading\n")
    marker, server = _LoadMarker("model loaded", log, 0, time.monotonic()), _server()
    asyncio.run(marker.settle(server, ready_s=0.5, poll_s=0.01))
    assert server.load_s is None
    assert server.load_note == "the log has no 'model loaded' line within 0.1 s of health answering"
