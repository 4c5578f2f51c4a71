"""What a job writes: its events, its rows (each with its `probe_finished` event, in one transaction), and
the failed rows of cells whose server is missing; it keeps the progress record (`SeriesBook`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import msgspec

from benchd.engine import vision
from benchd.engine.groups import Group
from benchd.engine.racing import Race
from benchd.engine.rows import Cell, ServerFacts, failed_row
from benchd.engine.series import SeriesBook
from benchd.schemas import Candidate, Event, Row, Sweep, events
from benchd.servers.server import ServerStartError
from benchd.store import Store, utcnow

#: The events every probe writes (its row is in the rows table): a scan for server starts skips them.
P = TypeVar("P", bound=msgspec.Struct)
PROBE_EVENTS = ("probe_started", "probe_finished", "cooldown_started", "cooldown_finished", "cell_finished")


class Recorder:
    """The job's writer: `emit` an event, `commit` a row, `fail_group` a missing server's pending cells."""

    def __init__(self, job: str, sweep: Sweep, store: Store, notify: Callable[[Event], None], book: SeriesBook) -> None:
        self.job, self.sweep, self.store, self.notify, self.book = job, sweep, store, notify, book
        self.plan = sweep.probe_plan()
        self.race: Race | None = None  # racing (the engine sets it): it keeps what its looks read of each row

    def emit(self, type_: str, **payload: object) -> None:
        self.notify(self.store.events.append(self.job, type_, payload))

    def commit(self, row: Row) -> None:
        cand = next((c for c in self.sweep.candidates if c.id == row.candidate), None)
        if cand is not None and cand.external:
            row = external_row(row, cand)
        self.notify(self.store.results.commit_row(row))
        self.book.add(row)
        if self.race is not None:
            self.race.add(row)

    def rows(self, cand: str, context: int, kind: str = "probe") -> list[Row]:
        return self.book.rows(cand, context, kind)

    def past_events(self, types: Iterable[str]) -> list[Event]:
        """The job's stored events of `types` (probe events skipped by the scan), in order."""
        want = set(types)
        return [e for e in self.store.events.iterate(self.job, exclude_types=PROBE_EVENTS) if e.type in want]

    def past(self, kind: type[P]) -> list[P]:
        """The payloads of the job's stored events of that struct's type (probe events skipped by the scan)."""
        want = {t for t, c in events.PAYLOADS.items() if c is kind}
        return [events.decode(e, kind) for e in self.store.events.iterate(self.job, exclude_types=PROBE_EVENTS)
                if e.type in want]

    def vision_pending(self, cand: Candidate) -> list[tuple[vision.VisionCell, int]]:
        """(cell, row probe number) of the candidate's image probes not stored yet."""
        return [(vc, vc.probe_number(p)) for vc in vision.vision_cells(self.sweep, cand) for p in range(self.plan.min)
                if vc.probe_number(p) not in {r.probe for r in self.book.rows(cand.id, vc.context, "vision")}]

    def fail_group(self, cand: Candidate, g: Group, error: str, exc: ServerStartError | None) -> None:
        """Every pending cell of a group becomes a failed row naming why the server is missing."""
        cells = [(c, "probe", p) for c in g.contexts for p in self.book.series(cand.id, c).pending_floor()]
        if g.sustained:
            ctx = min(self.sweep.contexts)
            cells += [(ctx, "sustained", p) for p in self.book.series(cand.id, ctx, "sustained").pending_floor()]
        if g.vision:
            cells += [(vc.context, "vision", n) for vc, n in self.vision_pending(cand)]
        for context, kind, p in cells:
            self.commit(failed_row(
                Cell(self.job, cand, context, kind, p), error,  # type: ignore[arg-type]
                started_at=utcnow(), server=ServerFacts(g.ctx_size, None, None),
                exit_status=exc.exit_status if exc else None, log_tail=exc.log_tail if exc else None,
            ))


#: What no row of an external candidate can know, and why (benchd did not start its server).
EXTERNAL_UNKNOWN = {
    "server_args": "an external server: benchd does not start it, so its arguments are unknown",
    "server_env": "an external server: its environment is unknown",
    "restart_memory": "an external server serves every context from one start: no memory figure per fresh start",
    "fit": "an external server: its --fit (if any) is unknown",
    "layer_split": "an external server: its layer split is unknown (it was not started by benchd)",
}
_MEMORY_FIELDS = ("mem_peak_bytes", "mem_rss_anon_bytes", "mem_rss_file_bytes", "swap_in_bytes", "swap_out_bytes",
                  "mem_footprint_peak_bytes", "mem_resident_peak_bytes", "mem_model_resident_bytes")


def external_row(row: Row, cand: Candidate) -> Row:
    """An external candidate's row: what it cannot know null with the reason, detection as the source."""
    nulls = {**row.null_reasons, **EXTERNAL_UNKNOWN}
    sources = dict(row.sources)
    if cand.pid is None:
        for name in _MEMORY_FIELDS:
            if getattr(row, name) is None:
                nulls[name] = "an external server without `pid` / `process`: benchd cannot sample its memory"
    else:
        sources.setdefault("pid", f"the candidate's pid {cand.pid}" + (f" (process {cand.process!r}, resolved at "
                                                                        "submit)" if cand.process else ""))
    if row.ctx_size is not None:
        sources.setdefault("ctx_size", "external: the server's context per slot, as detected at the candidate's url")
    else:
        nulls.setdefault("ctx_size", "the external server reports no context size")
    if row.binary is not None:
        sources.setdefault("binary", "external: detected at the candidate's url")
    if row.server_version is not None:
        sources.setdefault("server_version", "external: detected at the candidate's url")
    return msgspec.structs.replace(row, null_reasons=nulls, sources=sources)
