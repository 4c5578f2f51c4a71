"""A recheck of the lock: the sweep that re-measures the locked candidate, and its verdict.

The sweep is the locked candidate exactly as the lock records it (binary path, model, args, env, spec,
context size), on the lock's contexts (or the `recheck_contexts` a person named in the lock), with the
evidence runbook's settings (gen tokens, warm-up, cooldown, probe timeout, sampling: the lock itself
does not hold them). Speed only: no evals, no sustained run (said in the sweep's deferred axes).
Probes: the evidence's count, raised to the fewest with which the exact test can reach α against the
evidence's n (three evidence probes alone can never be called significantly different).

The verdict per context and metric comes from `results.compare` (medians, exact Mann–Whitney U):
`same` when the test finds no difference or the change is under the threshold (the figures follow in
brackets), else `faster by X %` / `slower by X % (p = …)` (memory: `larger` / `smaller`). A regression
is a significant change for the worse beyond the threshold (default 5 %).
"""

from __future__ import annotations

from typing import Any

from benchd.config import Config
from benchd.errors import BenchdError
from benchd.lock.lockfile import Locked, LockFile, baseline_from_lock, locked_candidate
from benchd.results.compare import ALPHA, EXACT_LIMIT, MetricComparison, compare_runbooks, min_p_value
from benchd.results.runbook import load_runbook
from benchd.schemas import Deferred, Fingerprint, RecheckEntry, Runbook, Sustained, Sweep
from benchd.store import utcnow

#: Words for a metric that got higher / lower (time metrics read the other way round).
WORDS = {"gen_tps": ("faster", "slower"), "prompt_tps": ("faster", "slower"),
         "ttft_ms": ("slower", "faster"), "mem_peak_bytes": ("larger", "smaller")}
#: Which word is the worse one.
WORSE = {"slower", "larger"}
MAX_RECHECK_PROBES = 30
NOT_RECHECKED = (
    Deferred(axis="evals", reason="a recheck of the lock measures speed and memory only"),
    Deferred(axis="sustained generation", reason="a recheck of the lock measures speed and memory only"),
)


def recheck_probes(evidence_probes: int, evidence_n: int) -> int:
    """The evidence's probe count, raised until the exact test can reach α against `evidence_n`."""
    n = max(1, evidence_probes)
    while n < MAX_RECHECK_PROBES and (min_p_value(evidence_n, n) > ALPHA and evidence_n + n < EXACT_LIMIT):
        n += 1
    return n


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
    evidence_n = min((ev.n_ok for ev in locked.evidence.values()), default=planned) or planned
    return Sweep(
        name=f"recheck-{locked.candidate}", contexts=recheck_contexts(locked), gen_tokens=src.gen_tokens,
        candidates=[locked_candidate(locked)], probes=recheck_probes(planned, evidence_n), warmup=src.warmup,
        eval_tier="none", probe_timeout_s=src.probe_timeout_s, sampling=locked.sampling,
        sustained=Sustained(tokens=0, window=src.sustained.window), cooldown=src.cooldown,
        deferred=[*src.deferred, *NOT_RECHECKED],
    )


def describe(m: MetricComparison, threshold_pct: float) -> tuple[str, bool]:
    """(verdict text, is a regression) for one metric of one cell."""
    if m.verdict.startswith("not measured") or m.ratio_b_over_a is None:
        return (m.verdict if m.verdict.startswith("not measured") else "not measured"), False
    change = (m.ratio_b_over_a - 1.0) * 100.0
    up, down = WORDS.get(m.metric, ("higher", "lower"))
    word = up if change > 0 else down
    signed = f"{change:+.1f} %"
    if m.p_value is None:
        return f"no verdict: {m.verdict} ({signed} on medians)", False
    if m.p_value >= ALPHA or abs(change) < threshold_pct:
        why = "not significant" if m.p_value >= ALPHA else f"under the {threshold_pct:g} % threshold"
        return f"same ({signed}, p = {m.p_value:.2g}: {why})", False
    return f"{word} by {abs(change):.1f} % (p = {m.p_value:.2g})", word in WORSE


def verdicts(evidence: Runbook, recheck: Runbook, candidate: str,
             threshold_pct: float) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Per context, per metric: the verdict text; and the regressions as one line each."""
    cmp = compare_runbooks(evidence, recheck)
    out: dict[str, dict[str, str]] = {}
    regressions = []
    for cell in cmp.cells:
        if cell.candidate != candidate:
            continue
        for m in cell.metrics:
            text, worse = describe(m, threshold_pct)
            out.setdefault(str(cell.context), {})[m.metric] = text
            if worse:
                regressions.append(f"{m.metric} at context {cell.context}: {text}")
    return out, regressions


def finish_entry(config: Config, lf: LockFile, *, job: str, outcome: str, runbook_id: str | None,
                 lock_runbook: str, locked_at: str, cause: list[str], fingerprint: Fingerprint | None,
                 threshold_pct: float, error: str | None = None) -> RecheckEntry:
    """The [[rechecks]] entry of a recheck job that ended (verdicts only when it left a runbook)."""
    fields: dict[str, Any] = {}
    if runbook_id is not None:
        try:
            evidence = load_runbook(lock_runbook, config)
            fields["verdicts"], fields["regressions"] = verdicts(evidence, load_runbook(runbook_id, config),
                                                                  lf.locked.candidate, threshold_pct)
        except BenchdError as exc:
            error = f"{error}; " if error else ""
            error += f"no verdict: {exc.message}"
    if outcome == "succeeded" and not fields.get("verdicts") and error is None:
        error = "no cell of the recheck could be compared with the evidence"
    return RecheckEntry(at=utcnow(), job=job, outcome=outcome,  # type: ignore[arg-type]
                        candidate=lf.locked.candidate, locked_at=locked_at, lock_runbook=lock_runbook,
                        runbook=runbook_id, cause=cause, fingerprint=fingerprint, threshold_pct=threshold_pct,
                        regressed=bool(fields.get("regressions")), error=error, **fields)


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
    worst = [f"{m} at {ctx}: {v}" for ctx, per in entry.verdicts.items() for m, v in per.items()
             if not v.startswith(("same", "not measured"))]
    head = f"not confirmed (job {entry.confirms}'s regression did not repeat): no regression" if entry.confirms \
        else "no regression"
    return head + (f" ({'; '.join(worst)})" if worst else ": every metric the same")
