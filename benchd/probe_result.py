"""What one streamed request did, as plain data: the probe client fills it, the adapters' `reader.normalize` reads it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ProbeStatus = Literal["ok", "failed", "timeout"]


@dataclass
class ProbeResult:
    """What one streamed request did; times are `time.perf_counter()` seconds. `final`: the last chunk with
    `usage` or `timings`. A content chunk carries any token (answer or reasoning); `chunk_times` has one
    arrival time per content chunk. `answer_text` / `reasoning_text` are filled only when asked."""

    status: ProbeStatus
    error: str | None
    http_status: int | None
    started: float
    ended: float
    first_content: float | None = None
    last_content: float | None = None
    content_chunks: int = 0
    reasoning_chunks: int = 0
    answer_chunks: int = 0
    first_answer: float | None = None
    first_is_reasoning: bool = False
    chunk_times: list[float] = field(default_factory=list)
    final: dict[str, Any] | None = None
    finish_reason: str | None = None
    done: bool = False
    answer_text: list[str] = field(default_factory=list)
    reasoning_text: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def ttft_ms(self) -> float | None:
        return None if self.first_content is None else (self.first_content - self.started) * 1000.0

    @property
    def ttfat_ms(self) -> float | None:
        """Time to the first answer token (after any reasoning)."""
        return None if self.first_answer is None else (self.first_answer - self.started) * 1000.0

    @property
    def e2e_ms(self) -> float:
        return (self.ended - self.started) * 1000.0

    @property
    def usage(self) -> dict[str, Any] | None:
        u = (self.final or {}).get("usage")
        return u if isinstance(u, dict) else None

    @property
    def timings(self) -> dict[str, Any] | None:
        t = (self.final or {}).get("timings")
        return t if isinstance(t, dict) else None

    @property
    def arrivals(self) -> int:
        """Distinct arrival times of content chunks (socket reads that carried content). Far fewer than
        `content_chunks` means the client was starved and read bunched chunks: its window is unreliable."""
        return len(set(self.chunk_times))

    def gen_tps_client(self, completion_tokens: int | None = None) -> float | None:
        """(tokens - 1) / (last - first content chunk time), tokens `completion_tokens` or else the content
        chunks; None without a window (bunched reads: docs/metrics.md#the-client-stream-window)."""
        n = completion_tokens if completion_tokens is not None else self.content_chunks
        if n < 2 or self.first_content is None or self.last_content is None:
            return None
        times = self.chunk_times
        if len(times) >= 3:
            bunched = _bunched_rate(read_ends(times), len(times))
            if bunched is not None:
                return None if bunched == 0.0 else bunched * (n - 1) / (len(times) - 1)
        window = self.last_content - self.first_content
        return (n - 1) / window if window > 0 else None


def read_ends(times: list[float]) -> list[tuple[float, int]]:
    """(read time, chunks received by the end of that read) per socket read: chunks of one read share its time."""
    ends: list[tuple[float, int]] = []
    for i, t in enumerate(times):
        if ends and ends[-1][0] == t:
            ends[-1] = (t, i + 1)
        else:
            ends.append((t, i + 1))
    return ends


def _bunched_rate(ends: list[tuple[float, int]], chunks: int) -> float | None:
    """Chunks per second from the end of the first read to the end of the second-to-last when the first or
    last read was bunched; 0.0 when bunched without such a window; None when not bunched."""
    if len(ends) < 2 or not (ends[0][1] > 1 or chunks - ends[-2][1] > 1):
        return None
    if len(ends) >= 3 and ends[-2][0] > ends[0][0]:
        (t0, c0), (t1, c1) = ends[0], ends[-2]
        return (c1 - c0) / (t1 - t0)
    return 0.0


def counter_diff(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """after - before for every counter present in both (cumulative counters: the probe's share)."""
    return {k: after[k] - before[k] for k in after.keys() & before.keys()}
