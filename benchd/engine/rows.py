"""Assemble one normalized `Row` from what a probe produced: the adapter's metrics, the memory sampler's
facts, the cooldown record and the server that answered.

Pure: no I/O, so the same assembly serves real probes, failed probes (a crash, a timeout, a server that
never started) and aborted ones, and every row carries the same provenance fields (llama-bench's "every
parameter in the row"). Every metric left null gets a reason here if nobody gave one earlier.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from benchd.engine.energy import ENERGY_FIELDS, EnergyFigures
from benchd.schemas import Candidate, CooldownRecord, Invalidated, Row, RowKind, RowStatus, Sweep
from benchd.sensors.memory.sampler import MemoryResult
from benchd.servers.runtimes.base import Normalized, RuntimeAdapter
from benchd.servers.server import Server

#: Metrics a reader expects in every row; a null one must say why.
METRICS = (
    "prompt_tokens", "cached_tokens", "gen_tokens", "prompt_tps", "gen_tps", "gen_tps_client",
    "ttft_ms", "e2e_ms", "draft_n", "draft_accepted", "draft_acceptance", "mem_peak_bytes",
    "ttfat_ms", "reasoning_tokens", "thinking", "layer_split", *ENERGY_FIELDS,
)


@dataclass(frozen=True)
class Placement:
    """Where a probe sits in the sweep's design: its round and its position in that round (None in the
    sequential order, `why` then says so), and the words naming that source in the row."""

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
    """Where a session or a parallel level runs: the job, the server and its adapter, the cell's candidate and
    context, under the sweep's settings (each request kind's run adds its own fields)."""

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


#: Cached prompt tokens an external server's probe may report and stay ok: the chat template's header before
#: the prompt's nonce is the same in every request, and a server benchd does not start keeps its own prompt
#: cache (mlx_lm.server's default `--prompt-cache-size 10` always serves those few tokens).
EXTERNAL_CACHE_ALLOWANCE = 32


def decide(*, result_status: str, error: str | None, crash: str | None = None, cached_tokens: int | None = None,
           invalidation: Invalidation | None = None, killed: bool = False, cache_allowance: int = 0) -> Decision:
    """The one place a probe row's status is decided, from what happened to it.

    `result_status`: "ok", "timeout" or "failed" as the step or the request ended (a guarded step that
    timed out or raised, or the chat request); `crash`: the server's exit status when it died under the
    probe; `killed`: the engine killed the server after a timeout. An ok request whose prompt the server
    served from its cache measured fake prompt throughput (failed; up to `cache_allowance` tokens are the
    template's shared header, allowed for external servers). A sleep or a stopped server during
    the probe invalidates any finished probe (failed, `invalidated`, run again)."""
    status: RowStatus = "ok" if result_status == "ok" else "timeout" if result_status == "timeout" else "failed"
    if crash is not None:
        status, error = "failed", f"server crashed mid-probe ({crash}): {error or 'failed'}"
    elif status == "ok" and cached_tokens is not None and cached_tokens > cache_allowance:
        status, error = "failed", f"prompt cache served {cached_tokens} tokens: prompt throughput would be fake"
    if killed and error and "the server was killed" not in error:
        error = f"{error}; the server was killed"
    if invalidation is not None:
        return Decision("failed", f"invalidated: {invalidation.why}; its numbers are not used and the probe is run again"
                        + (f" (the probe itself: {error})" if error else ""), invalidation.kind)
    return Decision(status, error)


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
    """The files (or MLX model dirs) a candidate's server maps or loads: the memory sampler counts their
    resident pages, which macOS's footprint leaves out when they are mmap'd."""
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
    fields: dict[str, Any] = {}
    sources: dict[str, str] = {}
    reasons: dict[str, str] = {}
    if metrics is not None:
        fields.update({k: v for k, v in metrics.row_fields().items() if k not in ("sources", "null_reasons")})
        sources.update(metrics.sources)
        reasons.update(metrics.null_reasons)
    if memory is not None:
        fields["mem_peak_bytes"] = memory.peak_bytes
        fields["mem_source"] = memory.source if memory.peak_bytes is not None else None
        fields["mem_rss_anon_bytes"] = memory.rss_anon_bytes
        fields["mem_rss_file_bytes"] = memory.rss_file_bytes
        fields["swap_in_bytes"] = memory.swap_in_bytes
        fields["swap_out_bytes"] = memory.swap_out_bytes
        fields["mem_footprint_peak_bytes"] = memory.footprint_peak_bytes
        fields["mem_resident_peak_bytes"] = memory.resident_peak_bytes
        fields["mem_model_resident_bytes"] = memory.model_resident_bytes
        sources.update({_memory_field(k): v for k, v in memory.sources.items()})
        if memory.peak_bytes is not None:
            sources["mem_peak_bytes"] = memory.source if memory.exact else f"{memory.source} ({memory.source_note})"
        if memory.rss_anon_bytes is not None and memory.split_note:
            sources["mem_rss_anon_bytes"] = sources["mem_rss_file_bytes"] = memory.split_note
        for key, why in memory.null_reasons.items():
            reasons.setdefault(_memory_field(key), why)
    if cooldown is not None:
        fields["cooldown_s"] = round(cooldown.waited_s, 3)
        fields["cooldown_reason"] = cooldown.reason
        fields["cooldown_note"] = cooldown.note
        fields["thermal_before"] = cooldown.after or cooldown.before
        sources["cooldown_s"] = f"cooldown:{cooldown.policy}"
    if extra:
        fields.update(extra)
    if extra_sources:
        sources.update(extra_sources)
    if extra_reasons:
        reasons.update(extra_reasons)
    if server is not None:
        server.record(sources, reasons)
    if energy is not None:
        fields.update(energy.fields)
        sources.update(energy.sources)
        reasons.update(energy.reasons)
    if status != "ok":
        why = error or status
        for name in METRICS:
            if fields.get(name) is None:
                reasons.setdefault(name, f"probe {status}: {why}"[:300])
    for name in METRICS:
        if fields.get(name) is None and name not in reasons:
            reasons[name] = "not reported for this probe"
    place = cell.place
    fields["round"], fields["visit"] = place.round, place.visit
    if place.round is None:
        reasons["round"] = reasons["visit"] = place.why
    else:
        sources["round"] = sources["visit"] = place.why
    fields = {k: v for k, v in fields.items() if k in Row.__struct_fields__}
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
        ctx_size=server.ctx_size if server else None,
        binary=server.binary if server else None,
        server_version=server.server_version if server else None,
        fit=server.fit if server else None,
        layer_split=server.layer_split if server else None,
        start=server.start if server else None,
        exit_status=exit_status,
        log_tail=log_tail,
        sources=sources,
        null_reasons={k: v for k, v in reasons.items() if k in Row.__struct_fields__ and fields.get(k) is None},
        **fields,
    )


def _memory_field(key: str) -> str:
    """The sampler names its nulls by its own field names; rows use mem_* names."""
    return {"peak_bytes": "mem_peak_bytes", "rss_anon_bytes": "mem_rss_anon_bytes",
            "rss_file_bytes": "mem_rss_file_bytes", "footprint_peak_bytes": "mem_footprint_peak_bytes",
            "resident_peak_bytes": "mem_resident_peak_bytes",
            "model_resident_bytes": "mem_model_resident_bytes"}.get(key, key)


def shortfall(adapter: RuntimeAdapter, cand: Candidate, *, asked: int, norm: Normalized,
              finish_reason: str | None, run_to_length: bool) -> dict[str, object]:
    """`short`/`short_reason` for a probe that generated fewer tokens than asked ({} when it did not).

    A short probe compared different work from its cell's others: it is kept out of the medians
    (`metrics.cell_stats`), counted and named there, never dropped."""
    got = norm.gen_tokens
    if got is None or got >= asked:
        return {}
    return {"short": True, "short_reason": adapter.reader.short_reason(
        cand, asked=asked, got=got, finish_reason=finish_reason, run_to_length=run_to_length)}
