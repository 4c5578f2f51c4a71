"""Runbook flags, found in the rows: `layer_split_changed`, `thinking_mixed`, `short_probes`.
What each means: docs/metrics.md#deferred-axes-and-flags."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from benchd.schemas import Row, RunbookFlag
from benchd.stats.notation import plural


def layer_split_flags(rows: Sequence[Row]) -> list[RunbookFlag]:
    splits: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for r in rows:
        if r.kind == "probe" and r.status == "ok":
            splits[r.candidate][r.context].add(r.layer_split or "null")
    out = []
    for cand, by_ctx in splits.items():
        if len(set().union(*by_ctx.values())) > 1:
            detail = "; ".join(f"context {ctx}: {', '.join(sorted(v))}" for ctx, v in sorted(by_ctx.items()))
            out.append(RunbookFlag(candidate=cand, flag="layer_split_changed",
                                   detail=f"the layer split differs between contexts ({detail}): an offload "
                                          "to the CPU reads as a context effect"))
    return out


def thinking_flags(rows: Sequence[Row]) -> list[RunbookFlag]:
    seen: dict[int, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for r in rows:
        if r.kind == "probe" and r.status == "ok" and r.thinking:
            seen[r.context][r.candidate].add(r.thinking)
    out = []
    for ctx, by_cand in sorted(seen.items()):
        states = set().union(*by_cand.values())
        if len(states) > 1:
            who = ", ".join(f"{c} {'/'.join(sorted(s))}" for c, s in sorted(by_cand.items()))
            out.append(RunbookFlag(candidate=None, flag="thinking_mixed", context=ctx,
                                   detail=f"context {ctx}: thinking {who}; gen tok/s and TTFT count reasoning "
                                          "tokens on one side only (set the sweep's `thinking` to compare like "
                                          "with like)"))
    return out


def short_flags(rows: Sequence[Row]) -> list[RunbookFlag]:
    by_cand: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r.status == "ok" and r.short:
            by_cand[r.candidate].append(r)
    return [RunbookFlag(candidate=cand, flag="short_probes",
                        detail=f"{plural(len(rs), 'probe')} ended short, kept out of the medians: "
                               + "; ".join(sorted({r.short_reason or "no reason recorded" for r in rs})))
            for cand, rs in sorted(by_cand.items())]


def runbook_flags(rows: Sequence[Row]) -> list[RunbookFlag]:
    return [*layer_split_flags(rows), *thinking_flags(rows), *short_flags(rows)]
