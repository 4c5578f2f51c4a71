"""Time to ready in the runbook: every server start's `server_ready` event as a `ReadyStart`, and per
candidate the median of its warm and its cold starts (`ReadySummary`). A start counts as cold only when
its model files had no page resident just before the spawn (mincore), warm only when all were; a
"partial" start is in neither figure. Pure (events in, records out)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TypeVar

from msgspec import UnsetType

from benchd.schemas import Event, ReadyStart, ReadySummary
from benchd.schemas import events as ev

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
        sources = {"ready_s": "benchd: spawn -> health answered (monotonic clock)"}
        nulls: dict[str, str] = {}
        if load_s is not None:
            sources["load_s"] = load_note or "log"
        else:
            nulls["load_s"] = load_note or "this benchd did not record the model's load time"
        if cache is not None:
            sources["cache"] = cache_note or "mincore(2)"
        else:
            nulls["cache"] = cache_note or "this benchd did not record the page-cache state"
        out.append(ReadyStart(candidate=p.candidate, time=e.time, purpose=p.purpose, ready_s=p.ready_s, load_s=load_s,
                              cache=cache, cold_requested=bool(_set(p.cold)),
                              resident_before=_set(p.resident_before), sources=sources, null_reasons=nulls))
    return out


def _set(x: T | UnsetType) -> T | None:
    return None if isinstance(x, UnsetType) else x


def ready_summary(starts: Sequence[ReadyStart], candidates: Sequence[str]) -> list[ReadySummary]:
    out = []
    for cand in candidates:
        mine = [s for s in starts if s.candidate == cand and s.ready_s is not None]
        warm = [s.ready_s for s in mine if s.cache == "warm" and s.ready_s is not None]
        cold = [s.ready_s for s in mine if s.cache == "cold" and s.ready_s is not None]
        loads = [s.load_s for s in mine if s.load_s is not None]
        nulls: dict[str, str] = {}
        if not warm:
            nulls["warm"] = "no start with the model files fully in the page cache" if mine else "no server start"
        if not cold:
            asked = [s for s in mine if s.cold_requested]
            nulls["cold"] = ("the pages could not all be dropped: " + (asked[0].sources.get("cache") or "")
                             if asked else "no cold start was asked for (`[ready] starts`)" if mine
                             else "no server start")
        if not loads:
            nulls["load"] = next((s.null_reasons["load_s"] for s in mine if "load_s" in s.null_reasons),
                                 "no server start")
        out.append(ReadySummary(
            candidate=cand, warm_n=len(warm), cold_n=len(cold),
            warm_median_s=statistics.median(warm) if warm else None, warm_min_s=min(warm, default=None),
            warm_max_s=max(warm, default=None), cold_median_s=statistics.median(cold) if cold else None,
            cold_min_s=min(cold, default=None), cold_max_s=max(cold, default=None),
            load_median_s=statistics.median(loads) if loads else None, null_reasons=nulls))
    return out
