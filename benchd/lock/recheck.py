"""A recheck of the lock: the sweep that re-measures the locked candidate, and its verdict.
Reasons: docs/locking.md#the-recheck-sweep.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchd.config import Config
from benchd.errors import BenchdError
from benchd.lock.lockfile import Locked, LockFile, baseline_from_lock, locked_candidate
from benchd.results.compare import MetricComparison, compare_runbooks
from benchd.results.runbook import load_runbook
from benchd.schemas import Deferred, Fingerprint, RecheckEntry, Runbook, Sustained, Sweep
from benchd.stats.comparison import ALPHA, AXES, AxisVerdict, compare_to_history
from benchd.store import utcnow

#: A recheck runs at least this many probes per cell (two give a spread; three give the rank guard its floor).
MIN_RECHECK_PROBES = 3
#: Earlier rechecks of the same lock needed before their spread is judged too.
MIN_HISTORY = 3
NOT_RECHECKED = (
    Deferred(axis="eval", reason="a recheck of the lock measures speed, memory and energy only"),
    Deferred(axis="sustained", reason="a recheck of the lock measures speed, memory and energy only"),
)


def recheck_probes(evidence_probes: int) -> int:
    """The evidence's probe count, at least MIN_RECHECK_PROBES."""
    return max(MIN_RECHECK_PROBES, evidence_probes)


def recheck_contexts(locked: Locked) -> list[int]:
    """The lock's evidence contexts, or the subset a person named in `recheck_contexts`."""
    contexts = sorted(int(c) for c in locked.evidence)
    if locked.recheck_contexts:
        unknown = sorted(set(locked.recheck_contexts) - set(contexts))
        if unknown:
            raise BenchdError("invalid_lock", f"recheck_contexts {unknown} are not among the lock's evidence contexts "
                              f"{contexts}", "locked.recheck_contexts")
        contexts = [c for c in contexts if c in locked.recheck_contexts]
    if not contexts:
        raise BenchdError("invalid_lock", "the lock has no evidence contexts to recheck", "locked.evidence")
    return contexts


def evidence_runbook(locked: Locked, config: Config) -> Runbook:
    try:
        return load_runbook(locked.runbook, config)
    except BenchdError as exc:
        raise BenchdError("no_evidence", f"cannot recheck: the lock's evidence runbook {locked.runbook} cannot be "
                          f"read ({exc.message}); re-lock on a current runbook") from exc


def recheck_sweep(locked: Locked, config: Config) -> Sweep:
    """The sweep that re-measures the locked candidate on the evidence's settings."""
    rb = evidence_runbook(locked, config)
    src = rb.sweep
    planned = src.probe_plan().min  # a fixed count, or the low end of `probes = "auto"`
    return Sweep(
        name=f"recheck-{locked.candidate}", contexts=recheck_contexts(locked), gen_tokens=src.gen_tokens,
        candidates=[locked_candidate(locked, supply=True)], probes=recheck_probes(planned), warmup=src.warmup,
        eval_tier="none", probe_timeout_s=src.probe_timeout_s, sampling=locked.sampling,
        sustained=Sustained(tokens=0, window=src.sustained.window), cooldown=src.cooldown,
        deferred=[*src.deferred, *NOT_RECHECKED],
    )


def describe(m: MetricComparison, history: AxisVerdict | None = None) -> tuple[str, bool]:
    """(verdict text, is a regression) for one metric of one cell, `history` the earlier rechecks'."""
    v = m.detail
    if v is None:
        return m.verdict, False
    against = f"; against earlier rechecks: {history.text}" if history is not None else ""
    if v.verdict == "different" and v.ratio is not None:
        words = AXES[m.metric].words if m.metric in AXES else ("higher", "lower")
        word = words[0] if v.ratio > 1 else words[1]
        return f"{abs(v.ratio - 1) * 100:.1f} % {word}: {v.text}{against}", _worse(v, history)
    if v.verdict == "tied":
        return f"same: {v.text}{against}", False
    return f"{v.text}{against}", False


def _worse(v: AxisVerdict, history: AxisVerdict | None) -> bool:
    return v.b_better is False and (history is None or (history.verdict == "different"
                                                        and history.b_better is False))


def verdicts(evidence: Runbook, recheck: Runbook, candidate: str, threshold_pct: float,
             history: Sequence[RecheckEntry] = ()) -> tuple[dict[str, dict[str, str]], list[str],
                                                          dict[str, dict[str, float]]]:
    """(verdict texts per context and metric, regressions, medians); `history` oldest first."""
    cmp = compare_runbooks(evidence, recheck, margin_pct=threshold_pct)
    out: dict[str, dict[str, str]] = {}
    medians: dict[str, dict[str, float]] = {}
    regressions = []
    for cell in cmp.cells:
        if cell.candidate != candidate:
            continue
        ctx = str(cell.context)
        for m in cell.metrics:
            past = [e.medians[ctx][m.metric] for e in history if m.metric in e.medians.get(ctx, {})]
            judged = None
            if m.median_b is not None:
                medians.setdefault(ctx, {})[m.metric] = m.median_b
                if len(past) >= MIN_HISTORY:
                    judged = compare_to_history(past, m.median_b, axis=m.metric, better=m.better,  # type: ignore[arg-type]
                                                margin_pct=threshold_pct, alpha=ALPHA)
            text, worse = describe(m, judged)
            out.setdefault(ctx, {})[m.metric] = text
            if worse:
                label = AXES[m.metric].label if m.metric in AXES else m.metric
                regressions.append(f"{label} at context {cell.context}: {text}")
    return out, regressions, medians


def finish_entry(config: Config, lf: LockFile, *, job: str, outcome: str, runbook_id: str | None,
                 lock_runbook: str, locked_at: str, cause: list[str], fingerprint: Fingerprint | None,
                 threshold_pct: float, error: str | None = None) -> RecheckEntry:
    """The [[rechecks]] entry of a recheck job that ended (verdicts only when it left a runbook)."""
    fields: dict[str, Any] = {}
    if runbook_id is not None:
        try:
            fields = _verdict_fields(config, lf, runbook_id, lock_runbook, locked_at, threshold_pct)
        except BenchdError as exc:
            error = f"{error}; " if error else ""
            error += f"no verdict: {exc.message}"
    if outcome == "succeeded" and not fields.get("verdicts") and error is None:
        error = "no cell of the recheck could be compared with the evidence"
    return RecheckEntry(at=utcnow(), job=job, outcome=outcome,  # type: ignore[arg-type]
                        candidate=lf.locked.candidate, locked_at=locked_at, lock_runbook=lock_runbook,
                        runbook=runbook_id, cause=cause, fingerprint=fingerprint, threshold_pct=threshold_pct,
                        regressed=bool(fields.get("regressions")), error=error, **fields)


def _verdict_fields(config: Config, lf: LockFile, runbook_id: str, lock_runbook: str, locked_at: str,
                    threshold_pct: float) -> dict[str, Any]:
    """`verdicts`, `regressions` and `medians` of a recheck runbook. Raises BenchdError (a runbook unread)."""
    evidence = load_runbook(lock_runbook, config)
    earlier = [e for e in lf.rechecks if e.locked_at == locked_at and e.candidate == lf.locked.candidate
               and e.outcome == "succeeded" and e.medians]
    found = verdicts(evidence, load_runbook(runbook_id, config), lf.locked.candidate, threshold_pct, earlier)
    return dict(zip(("verdicts", "regressions", "medians"), found, strict=True))


def last_recheck(lf: LockFile) -> RecheckEntry | None:
    """The newest recheck of the lock in force (entries of replaced locks are history only)."""
    mine = [e for e in lf.rechecks if e.locked_at == lf.locked.locked_at and e.candidate == lf.locked.candidate]
    return mine[-1] if mine else None


def baseline(lf: LockFile) -> Fingerprint:
    """What the current fingerprint is compared with: the newest recheck's of this lock, else the lock's."""
    last = last_recheck(lf)
    if last is not None and last.fingerprint is not None:
        return last.fingerprint
    return lf.locked.fingerprint or baseline_from_lock(lf.locked)


def summary(entry: RecheckEntry) -> str:
    """One line for `locked`, `status` and the notification."""
    if entry.outcome != "succeeded" or entry.error:
        return f"recheck {entry.outcome}" + (f": {entry.error}" if entry.error else "")
    if entry.regressed and entry.confirming:
        return f"suspected regression, being confirmed by recheck job {entry.confirming}: " + "; ".join(entry.regressions)
    if entry.regressed:
        confirmed = f" (confirmed by a second run; first: job {entry.confirms})" if entry.confirms else ""
        return f"REGRESSED{confirmed}: " + "; ".join(entry.regressions)
    return _no_regression(entry)


def _no_regression(entry: RecheckEntry) -> str:
    worst = [f"{m} at {ctx}: {v}" for ctx, per in entry.verdicts.items() for m, v in per.items()
             if not v.startswith(("same", "not measured"))]
    head = f"not confirmed (job {entry.confirms}'s regression did not repeat): no regression" if entry.confirms \
        else "no regression"
    return head + (f" ({'; '.join(worst)})" if worst else ": every metric the same")
