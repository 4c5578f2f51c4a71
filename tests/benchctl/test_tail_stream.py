"""`tail`'s stream: each line decoded as an `Event`, `since` carried across a dropped stream, a newer daemon's
event type shown as sent, the exit code from the terminal event, an unreadable line a clear error.

The client here is a test double: a stream that drops mid-job, a type no benchd of this version sends and a
broken line are what a real daemon cannot be made to produce on demand."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest

from benchctl import exitcodes
from benchctl.client import Unreachable
from benchctl.commands.tail import follow_job, stream_events


def _line(seq: int, type_: str, payload: dict[str, object]) -> bytes:
    return msgspec.json.encode({"seq": seq, "time": f"2026-12-07T21:00:0{seq}.000Z", "type": type_, "job": "j",
                                "payload": payload})


class _Stream:
    """Serves `parts` one per connection; a part ending in None drops the stream there."""

    socket_path = "/tmp/benchd-test.sock"

    def __init__(self, *parts: list[bytes | None]) -> None:
        self.parts = list(parts)
        self.since: list[int] = []

    def events(self, job_id: str, since: int = 0, follow: bool = False) -> Iterator[bytes]:
        self.since.append(since)
        for line in self.parts.pop(0):
            if line is None:
                raise Unreachable(self.socket_path, "stream dropped")
            yield line

    def job(self, job_id: str) -> dict[str, object]:
        return {"id": job_id, "name": "demo", "state": "running", "created_at": "2026-12-07T21:00:00.000Z"}


def test_a_dropped_stream_resumes_after_the_last_seq_and_ends_at_the_terminal_event() -> None:
    client = _Stream([_line(1, "job_started", {}), _line(2, "something_new", {"n": 3}), None],
                     [_line(3, "job_finished", {"done": 4})])
    got = list(stream_events(client, "j", sleep=lambda s: None))
    assert [(ev.seq, ev.type) for ev, _ in got] == [(1, "job_started"), (2, "something_new"), (3, "job_finished")]
    assert client.since == [0, 2]
    assert got[1][1] == _line(2, "something_new", {"n": 3})  # the line as sent, for --json


def test_follow_prints_each_event_and_exits_with_the_terminal_events_code(capsys: pytest.CaptureFixture[str]) -> None:
    client = _Stream([_line(1, "something_new", {"candidate": "a", "n": 3}), _line(2, "job_cancelled", {"done": 1, "reason": "by the user"})])
    assert follow_job(client, "j", as_json=False) == exitcodes.CANCELLED
    out = capsys.readouterr().out.splitlines()
    assert out == ["21:00:01 #1 something_new candidate=a n=3", "21:00:02 #2 job_cancelled after 1 row: by the user"]


def test_a_line_that_is_not_an_event_is_a_clear_error_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    client = _Stream([_line(1, "job_started", {}), b'{"seq": "one"}'])
    with pytest.raises(SystemExit) as exc:
        follow_job(client, "j", as_json=False)
    assert exc.value.code == exitcodes.FAILED  # as any answer that is not its type (commands.common.decoded)
    assert "an event line that is not an Event: Expected `int`, got `str` - at `$.seq`" in capsys.readouterr().err
