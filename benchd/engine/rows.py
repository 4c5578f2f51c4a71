"""Assemble one normalized `Row` (pure); every metric left null gets a reason here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from benchd.engine.energy import EnergyFigures
from benchd.schemas import Candidate, CooldownRecord, Invalidated, Row, RowKind, RowStatus, Sweep
from benchd.sensors.memory.sampler import MemoryResult
from benchd.servers.runtimes.base import Normalized, RuntimeAdapter
from benchd.servers.server import Server
from benchd.stats.rows import carried_metrics

RowFields = dict[str, Any]  # `Row`'s keyword arguments, gathered part by part


@dataclass(frozen=True)
class Placement:
    """A probe's round and position in it (None outside the rounds), and `why`, the row's words for it."""

    round: int | None
    visit: int | None
    why: str


SEQUENTIAL = Placement(None, None, "order sequential: each candidate's probes run back to back, no rounds")
#: Rows outside the rounds (sessions, parallel batches, failed rows of a server that never started).
OUTSIDE = Placement(None, None, "not a probe of the rounds (only recorded probes are placed in rounds)")


@dataclass(frozen=True)
class Cell:
    """Where a row belongs: the key (candidate, context, kind, probe) plus the job and its place."""

    job: str
    candidate: Candidate
    context: int
    kind: RowKind
    probe: int
    place: Placement = OUTSIDE


@dataclass
class ServerRun:
    """Where a session or a parallel level runs: job, server, adapter, candidate, context and sweep."""

    job: str
    adapter: RuntimeAdapter
    server: Server
    candidate: Candidate
    context: int
    sweep: Sweep


@dataclass(frozen=True)
class Invalidation:
    """A probe thrown away: the machine slept or the server was stopped while it ran."""

    kind: Invalidated
    why: str


@dataclass(frozen=True)
class Decision:
    """A row's status and what it says about it (`decide`)."""

    status: RowStatus
    error: str | None
    invalidated: Invalidated | None = None


#: Cached prompt tokens an external server's probe may report and stay ok (docs/sweep-file.md#external-servers).
EXTERNAL_CACHE_ALLOWANCE = 32


_STATUSES: dict[str, RowStatus] = {"ok": "ok", "timeout": "timeout"}


def decide(*, result_status: str, error: str | None, crash: str | None = None, cached_tokens: int | None = None,
           invalidation: Invalidation | None = None, killed: bool = False, cache_allowance: int = 0,
           during: str = "probe") -> Decision:
    """The one place a row's status is decided. `result_status`: "ok", "timeout" or "failed"; `killed`: after
    a timeout; a `crash` (exit status, mid-`during`), too many cached tokens or an `invalidation` fail it."""
    status = _STATUSES.get(result_status, "failed")
    if crash is not None:
        status, error = "failed", f"server crashed mid-{during} ({crash}): {error or 'failed'}"
    elif status == "ok" and (cached_tokens or 0) > cache_allowance:
        status, error = "failed", f"prompt cache served {cached_tokens} tokens: prompt throughput would be fake"
    if killed and error:
        error = f"{error}; the server was killed"
    if invalidation is not None:
        return _invalidated(invalidation, error)
    return Decision(status, error)


def _invalidated(invalidation: Invalidation, error: str | None) -> Decision:
    return Decision("failed", f"invalidated: {invalidation.why}; its numbers are not used and the probe is run again"
                    + (f" (the probe itself: {error})" if error else ""), invalidation.kind)


def failed_row(cell: Cell, error: str, *, started_at: str, server: ServerFacts | None, **kw: Any) -> Row:
    """A row failed outside a request (no server, no room, a broken session), its status from `decide`."""
    d = decide(result_status="failed", error=error)
    return build_row(cell, status=d.status, started_at=started_at, server=server, error=d.error, **kw)


@dataclass(frozen=True)
class ServerFacts:
    """The server-side provenance every row repeats."""

    ctx_size: int | None
    binary: str | None
    server_version: str | None
    fit: str | None = None
    fit_note: str = ""
    layer_split: str | None = None
    split_note: str = ""
    #: The candidate's server start number in the job (`Server.start_no`).
    start: int | None = None

    @classmethod
    def of(cls, server: Server) -> ServerFacts:
        return cls(server.ctx_size, server.binary, server.version, server.fit, server.fit_note,
                   server.layer_split, server.split_note, server.start_no)

    def record(self, sources: dict[str, str], reasons: dict[str, str]) -> None:
        """The fit and split facts' sources (or null reasons) for a row."""
        if self.fit is not None:
            sources["fit"] = self.fit_note
        if self.layer_split is not None:
            sources["layer_split"] = self.split_note
        elif self.split_note:
            reasons["layer_split"] = self.split_note


def model_files(candidate: Candidate) -> list[str]:
    """The files (or MLX model dirs) a candidate's server loads, for the memory sampler's resident count."""
    spec = candidate.spec
    if candidate.external:  # its files are the server's own business: none is known
        return []
    return [candidate.model, *([spec.draft_model] if spec is not None and spec.draft_model else [])]


def build_row(
    cell: Cell,
    *,
    status: RowStatus,
    started_at: str,
    server: ServerFacts | None,
    metrics: Normalized | None = None,
    memory: MemoryResult | None = None,
    cooldown: CooldownRecord | None = None,
    error: str | None = None,
    exit_status: str | None = None,
    log_tail: str | None = None,
    extra: Mapping[str, object] | None = None,
    extra_sources: dict[str, str] | None = None,
    energy: EnergyFigures | None = None,
    extra_reasons: dict[str, str] | None = None,
) -> Row:
    """One row. `extra` sets sustained-only fields (window_tps, sustain_ratio, thermal_after)."""
    fields: RowFields = _server_fields(server)
    sources: dict[str, str] = {}
    reasons: dict[str, str] = {}
    if metrics is not None:
        fields.update(_metric_fields(metrics))
        sources.update(metrics.sources)
        reasons.update(metrics.null_reasons)
    if memory is not None:
        _memory_part(memory, fields, sources, reasons)
    if cooldown is not None:
        _cooldown_part(cooldown, fields, sources)
    fields.update(extra or {})
    sources.update(extra_sources or {})
    reasons.update(extra_reasons or {})
    if server is not None:
        server.record(sources, reasons)
    if energy is not None:
        fields.update(energy.fields)
        sources.update(energy.sources)
        reasons.update(energy.reasons)
    _metric_reasons(cell.kind, status, error, fields, reasons)
    _place_part(cell.place, fields, sources, reasons)
    fields, null_reasons = _row_fields(fields, reasons)
    return Row(
        job=cell.job,
        candidate=cell.candidate.id,
        runtime=cell.candidate.runtime,
        context=cell.context,
        kind=cell.kind,
        probe=cell.probe,
        status=status,
        error=error,
        started_at=started_at,
        exit_status=exit_status,
        log_tail=log_tail,
        sources=sources,
        null_reasons=null_reasons,
        **fields,
    )


def _metric_fields(metrics: Normalized) -> RowFields:
    return {k: v for k, v in metrics.row_fields().items() if k not in ("sources", "null_reasons")}


def _place_part(place: Placement, fields: RowFields, sources: dict[str, str], reasons: dict[str, str]) -> None:
    fields["round"], fields["visit"] = place.round, place.visit
    if place.round is None:
        reasons["round"] = reasons["visit"] = place.why
    else:
        sources["round"] = sources["visit"] = place.why


def _row_fields(fields: RowFields, reasons: dict[str, str]) -> tuple[RowFields, dict[str, str]]:
    """The fields a `Row` has, and the null reasons of those left null."""
    kept = {k: v for k, v in fields.items() if k in Row.__struct_fields__}
    return kept, {k: v for k, v in reasons.items() if k in Row.__struct_fields__ and kept.get(k) is None}


def _memory_part(memory: MemoryResult, fields: RowFields, sources: dict[str, str],
                 reasons: dict[str, str]) -> None:
    fields["mem_peak_bytes"] = memory.peak_bytes
    fields["mem_source"] = memory.source if memory.peak_bytes is not None else None
    for name in ("rss_anon_bytes", "rss_file_bytes", "footprint_peak_bytes", "resident_peak_bytes",
                 "model_resident_bytes"):
        fields[_memory_field(name)] = getattr(memory, name)
    fields["swap_in_bytes"] = memory.swap_in_bytes
    fields["swap_out_bytes"] = memory.swap_out_bytes
    sources.update({_memory_field(k): v for k, v in memory.sources.items()})
    if memory.peak_bytes is not None:
        sources["mem_peak_bytes"] = memory.source if memory.exact else f"{memory.source} ({memory.source_note})"
    if memory.rss_anon_bytes is not None and memory.split_note:
        sources["mem_rss_anon_bytes"] = sources["mem_rss_file_bytes"] = memory.split_note
    for key, why in memory.null_reasons.items():
        reasons.setdefault(_memory_field(key), why)


def _cooldown_part(cooldown: CooldownRecord, fields: RowFields, sources: dict[str, str]) -> None:
    fields["cooldown_s"] = round(cooldown.waited_s, 3)
    fields["cooldown_reason"] = cooldown.reason
    fields["cooldown_note"] = cooldown.note
    fields["thermal_before"] = cooldown.after or cooldown.before
    sources["cooldown_s"] = f"cooldown:{cooldown.policy}"


def _metric_reasons(kind: str, status: RowStatus, error: str | None, fields: RowFields,
                    reasons: dict[str, str]) -> None:
    """Give every null metric of the row's kind a reason: the probe's failure, else "not reported"."""
    default = "not reported for this probe" if status == "ok" else f"probe {status}: {error or status}"[:300]
    for name in carried_metrics(kind):
        if fields.get(name) is None:
            reasons.setdefault(name, default)


def _server_fields(server: ServerFacts | None) -> RowFields:
    if server is None:
        return dict.fromkeys(("ctx_size", "binary", "server_version", "fit", "layer_split", "start"))
    return {"ctx_size": server.ctx_size, "binary": server.binary, "server_version": server.server_version,
            "fit": server.fit, "layer_split": server.layer_split, "start": server.start}


def _memory_field(key: str) -> str:
    return {"peak_bytes": "mem_peak_bytes", "rss_anon_bytes": "mem_rss_anon_bytes",
            "rss_file_bytes": "mem_rss_file_bytes", "footprint_peak_bytes": "mem_footprint_peak_bytes",
            "resident_peak_bytes": "mem_resident_peak_bytes",
            "model_resident_bytes": "mem_model_resident_bytes"}.get(key, key)


def shortfall(adapter: RuntimeAdapter, cand: Candidate, *, asked: int, norm: Normalized,
              finish_reason: str | None, run_to_length: bool) -> dict[str, object]:
    """`short`/`short_reason` for a probe that generated fewer tokens than asked ({} when it did not)."""
    got = norm.gen_tokens
    if got is None or got >= asked:
        return {}
    return {"short": True, "short_reason": adapter.reader.short_reason(
        cand, asked=asked, got=got, finish_reason=finish_reason, run_to_length=run_to_length)}
