"""Time to ready in the runbook: every server start's `server_ready` event as a `ReadyStart`, and per
candidate the median of its warm and its cold starts (`ReadySummary`). A start counts as cold only when
its model files had no page resident just before the spawn (mincore), warm only when all were; a
"partial" start is in neither figure. Pure (events in, records out)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from benchd.schemas import ReadyStart, ReadySummary


def ready_starts(events: Sequence[Any]) -> list[ReadyStart]:
    out = []
    for e in events:
        p = e.payload
        if e.type != "server_ready" or "ready_s" not in p:
            continue
        sources = {"ready_s": "benchd: spawn -> health answered (monotonic clock)"}
        nulls: dict[str, str] = {}
        if p.get("load_s") is not None:
            sources["load_s"] = p.get("load_note") or "log"
        else:
            nulls["load_s"] = p.get("load_note") or "this benchd did not record the model's load time"
        if p.get("cache") is not None:
            sources["cache"] = p.get("cache_note") or "mincore(2)"
        else:
            nulls["cache"] = p.get("cache_note") or "this benchd did not record the page-cache state"
        out.append(ReadyStart(candidate=p["candidate"], time=e.time, purpose=p.get("purpose", "sweep"),
                              ready_s=p.get("ready_s"), load_s=p.get("load_s"), cache=p.get("cache"),
                              cold_requested=bool(p.get("cold")), resident_before=p.get("resident_before"),
                              sources=sources, null_reasons=nulls))
    return out


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
