"""Wakes the followers of a job's event stream without polling: the API waits, the queue and engine notify."""

from __future__ import annotations

import asyncio
import threading

from benchd.schemas import Event


class EventHub:
    """Wakes a job's stream followers: take `waiter(job)` BEFORE reading the store; `notify` is thread-safe."""

    def __init__(self) -> None:
        self._waiters: dict[str, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self.closing = asyncio.Event()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.get_ident()

    def waiter(self, job: str) -> asyncio.Event:
        ev = self._waiters.get(job)
        if ev is None:
            ev = self._waiters[job] = asyncio.Event()
        return ev

    def notify(self, event: Event) -> None:
        if self._loop is not None and threading.get_ident() != self._thread:
            self._loop.call_soon_threadsafe(self._wake, event.job)
        else:
            self._wake(event.job)

    def _wake(self, job: str) -> None:
        ev = self._waiters.pop(job, None)
        if ev is not None:
            ev.set()

    def close(self) -> None:
        """Shutdown: every follower returns (its client reconnects with `since`)."""
        self.closing.set()
        for ev in self._waiters.values():
            ev.set()
        self._waiters.clear()
