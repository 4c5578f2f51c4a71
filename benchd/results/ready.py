"""Time to ready: each `server_ready` event as a `ReadyStart`, and per candidate the medians of its warm
and its cold starts (`ReadySummary`; a "partial" start is in neither). Pure."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TypeVar

from msgspec import UnsetType

from benchd.engine.series import invalidation
from benchd.schemas import Event, ReadyStart, ReadySummary
from benchd.schemas import events as ev
from benchd.sensors.suspend.sensor import stall_text

T = TypeVar("T")


def ready_starts(events: Sequence[Event]) -> list[ReadyStart]:
    out = []
    for e in events:
        if e.type != "server_ready":
            continue
        p = ev.decode(e, ev.ServerReady)
        if isinstance(p.ready_s, UnsetType):  # an external server's attach: no time to ready
            continue
        load_s, load_note, cache, cache_note = (_set(p.load_s), _set(p.load_note), _set(p.cache), _set(p.cache_note))
        sources = {"ready_s": _set(p.ready_note) or "benchd: spawn -> health answered (monotonic clock), checked every 0.1 s"}
        nulls: dict[str, str] = {}
        if load_s is not None:
            sources["load_s"] = load_note or "log"
        else:
            nulls["load_s"] = load_note or "this benchd did not record the model's load time"
        if cache is not None:
            sources["cache"] = cache_note or "mincore(2)"
        else:
            nulls["cache"] = cache_note or "this benchd did not record the page-cache state"
        stalled, stopped = _set(p.stalled_s), _set(p.server_stopped_s)
        ready_s: float | None = p.ready_s
        if paused := invalidation("", None, stopped, during="the start"):
            ready_s, nulls["ready_s"] = None, f"{paused.why}: it would measure the stop ({p.ready_s:.3f} s measured)"
        if stall := stall_text(stalled, "the start"):
            sources["ready_s"] += f"; {stall}"
        out.append(ReadyStart(candidate=p.candidate, time=e.time, purpose=p.purpose, ready_s=ready_s, load_s=load_s,
                              cache=cache, cold_requested=bool(_set(p.cold)),
                              resident_before=_set(p.resident_before), stalled_s=stalled, server_stopped_s=stopped,
                              sources=sources, null_reasons=nulls))
    return out


def _set(x: T | UnsetType) -> T | None:
    return None if isinstance(x, UnsetType) else x


def ready_times(starts: Sequence[ReadyStart], cache: str) -> list[float]:
    """The measured ready_s of the `cache` ("warm" | "cold") starts among `starts`."""
    return [s.ready_s for s in starts if s.cache == cache and s.ready_s is not None]


def _spread(values: list[float]) -> tuple[float | None, float | None, float | None]:
    return (statistics.median(values), min(values), max(values)) if values else (None, None, None)


def _cold_null(mine: list[ReadyStart]) -> str:
    asked = [s for s in mine if s.cold_requested]
    if asked:
        return "the pages could not all be dropped: " + (asked[0].sources.get("cache") or "")
    return "no cold start was asked for (`[ready] starts`)" if mine else "no server start"


def _summary_nulls(mine: list[ReadyStart], warm: list[float], cold: list[float], loads: list[float]) -> dict[str, str]:
    nulls: dict[str, str] = {}
    if not warm:
        nulls["warm"] = "no start with ≥ 99 % of the model files' pages in the page cache" if mine else "no server start"
    if not cold:
        nulls["cold"] = _cold_null(mine)
    if not loads:
        nulls["load"] = next((s.null_reasons["load_s"] for s in mine if "load_s" in s.null_reasons),
                             "no server start")
    return nulls


def ready_summary(starts: Sequence[ReadyStart], candidates: Sequence[str]) -> list[ReadySummary]:
    out = []
    for cand in candidates:
        mine = [s for s in starts if s.candidate == cand and s.ready_s is not None]
        warm, cold = ready_times(mine, "warm"), ready_times(mine, "cold")
        loads = [s.load_s for s in mine if s.load_s is not None]
        (warm_median, warm_min, warm_max), (cold_median, cold_min, cold_max) = _spread(warm), _spread(cold)
        out.append(ReadySummary(
            candidate=cand, warm_n=len(warm), cold_n=len(cold),
            warm_median_s=warm_median, warm_min_s=warm_min, warm_max_s=warm_max, cold_median_s=cold_median,
            cold_min_s=cold_min, cold_max_s=cold_max, load_median_s=_spread(loads)[0],
            null_reasons=_summary_nulls(mine, warm, cold, loads)))
    return out
