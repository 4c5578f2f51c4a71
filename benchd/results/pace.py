"""`benchctl validate`'s measured pace: an earlier runbook of the same candidates, its rows and time, scaled by
rows to this sweep (docs/sweep-file.md#the-estimate)."""

from __future__ import annotations

import os
import statistics
from datetime import datetime
from typing import NamedTuple

import msgspec

from benchd.config import Config
from benchd.results.runbook import RunbookHead, runbook_files
from benchd.schemas import Candidate, EvalSummary, Sweep

MAX_RUNBOOKS = 30  # read at the most, newest first


class _Ran(RunbookHead, kw_only=True):
    """What the pace needs of a runbook: its head (job times), its sweep, how many rows (not their contents)."""

    sweep: Sweep | None = None
    rows: list[msgspec.Raw] = msgspec.field(default_factory=list)


class Pace(NamedTuple):
    """`runbook` ran `rows` rows in `seconds`; `differs` names the grid settings that differ from this sweep."""

    runbook: str
    finished_at: str
    rows: int
    seconds: float
    differs: list[str]

    def scaled(self, rows: int) -> float:
        """Seconds for `rows` rows at this pace."""
        return self.seconds * rows / self.rows


def previous_pace(sweep: Sweep, config: Config) -> Pace | None:
    """The newest succeeded runbook whose sweep has all of `sweep`'s candidates, as they are; None if none."""
    decoder = msgspec.json.Decoder(_Ran)
    for path in runbook_files(config.runbooks_dir)[:MAX_RUNBOOKS]:
        try:
            ran = decoder.decode(path.read_bytes())
        except (OSError, msgspec.ValidationError, msgspec.DecodeError):
            continue
        job, theirs = ran.job, ran.sweep
        if ran.outcome != "succeeded" or job is None or theirs is None or not job.started_at or not job.finished_at:
            continue
        try:
            took = (datetime.fromisoformat(job.finished_at) - datetime.fromisoformat(job.started_at)).total_seconds()
        except (ValueError, TypeError):  # a hand-edited time, or one aware and one naive
            continue
        if took > 0 and ran.rows and _same_candidates(sweep.candidates, theirs.candidates):
            return Pace(ran.id, job.finished_at, len(ran.rows), took, _differs(sweep, theirs))
    return None


def _same_candidates(mine: list[Candidate], theirs: list[Candidate]) -> bool:
    by_id = {c.id: c for c in theirs}
    return all(by_id.get(c.id) == c for c in mine)


def _differs(mine: Sweep, theirs: Sweep) -> list[str]:
    settings = {"candidates": ([c.id for c in mine.candidates], [c.id for c in theirs.candidates]),
                "contexts": (mine.contexts, theirs.contexts), "gen_tokens": (mine.gen_tokens, theirs.gen_tokens),
                "cooldown": (mine.cooldown, theirs.cooldown), "eval tier": (mine.eval_tier, theirs.eval_tier),
                "sustained": (mine.sustained, theirs.sustained)}
    return [name for name, (a, b) in settings.items() if a != b]


class _Model(msgspec.Struct):
    path: str


class _Cand(msgspec.Struct):
    candidate: str
    runtime: str
    model: _Model


class _Prov(msgspec.Struct):
    candidates: list[_Cand]


class _Median(msgspec.Struct):
    median: float | None = None


class _Cell(msgspec.Struct):
    candidate: str
    context: int
    gen_tps: _Median
    prompt_tps: _Median


class _Start(msgspec.Struct):
    candidate: str
    purpose: str
    ready_s: float | None = None


class _Measured(RunbookHead, kw_only=True):
    provenance: _Prov
    cells: list[_Cell] = msgspec.field(default_factory=list)
    ready: list[_Start] = msgspec.field(default_factory=list)
    eval_summary: list[EvalSummary] = msgspec.field(default_factory=list)


class Rates(NamedTuple):
    """The slowest cell medians `runbooks` measured of a sweep's models, up to context `context` (the smallest
    of the models' largest), of their median times to ready and, per suite all ran, of seconds a task."""

    runbooks: tuple[str, ...]
    gen_tps: float
    prompt_tps: float | None
    context: int
    ready_s: float | None
    task_s: dict[str, float]


def _model_rates(ran: _Measured, ids: set[str]) -> Rates | None:
    """The rates of one model, run as the candidates `ids` of `ran`; None when none of its cells has a median."""
    cells = [c for c in ran.cells if c.candidate in ids and c.gen_tps.median]
    if not cells:
        return None
    starts: dict[str, list[float]] = {}
    for st in ran.ready:
        if st.candidate in ids and st.purpose == "sweep" and st.ready_s is not None:
            starts.setdefault(st.candidate, []).append(st.ready_s)
    task_s: dict[str, float] = {}
    for e in ran.eval_summary:
        seconds = e.task_s_median or e.latency_s_median  # an older runbook has no sandbox seconds
        if e.candidate in ids and seconds:
            task_s[e.tier] = max(task_s.get(e.tier, 0.0), seconds)
    prompt = [c.prompt_tps.median for c in cells if c.prompt_tps.median]
    return Rates((ran.id,), min(c.gen_tps.median or 0.0 for c in cells), min(prompt) if prompt else None,
                 max(c.context for c in cells), max((statistics.median(v) for v in starts.values()), default=None),
                 task_s)


def measured_rates(sweep: Sweep, config: Config) -> Rates | None:
    """Each model of `sweep` (same runtime and model file, any server args) as the newest succeeded runbook
    that measured it had it; the slowest of them; None if a model was not measured."""
    decoder = msgspec.json.Decoder(_Measured)
    wanted = {(c.runtime, os.path.realpath(c.model)) for c in sweep.candidates if not c.external}
    found: dict[tuple[str, str], Rates] = {}
    for path in runbook_files(config.runbooks_dir)[:MAX_RUNBOOKS] if wanted else []:
        try:
            ran = decoder.decode(path.read_bytes())
        except (OSError, msgspec.ValidationError, msgspec.DecodeError):
            continue
        keys = {c.candidate: (c.runtime, os.path.realpath(c.model.path)) for c in ran.provenance.candidates}
        for key in wanted - found.keys() if ran.outcome == "succeeded" else ():
            if (got := _model_rates(ran, {cid for cid, k in keys.items() if k == key})) is not None:
                found[key] = got
        if found.keys() == wanted:
            break
    if not wanted or found.keys() != wanted:
        return None
    each = list(found.values())
    prompt = [r.prompt_tps for r in each if r.prompt_tps]
    ready = [r.ready_s for r in each if r.ready_s is not None]
    suites = set.intersection(*(set(r.task_s) for r in each))
    return Rates(tuple(sorted({r.runbooks[0] for r in each}, reverse=True)), min(r.gen_tps for r in each),
                 min(prompt) if prompt else None, min(r.context for r in each), max(ready) if ready else None,
                 {s: max(r.task_s[s] for r in each) for s in sorted(suites)})
