"""Deferred axes: one line for everything a sweep did not measure, and why (the sweep file's, the fixed
ones, those found in the rows and evals): docs/metrics.md#deferred-axes-and-flags."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from benchd.schemas import ENERGY_FIELDS, Candidate, Deferred, EvalResult, Row, Sweep
from benchd.stats.axes import AXES, SUITE_AXES
from benchd.stats.rows import carried_metrics

NO_REASON = "null without a recorded reason (engine bug: every null metric needs one)"


def fixed_deferred(sweep: Sweep) -> list[Deferred]:
    """Axes never measured by this version, and the sweep's own scope choices."""
    out = [
        Deferred(axis="contexts", reason=f"only the context grid {list(sweep.contexts)} was measured; other "
                 "context sizes are not"),
        *_quality_deferred(sweep),
    ]
    if not sweep.parallel_levels():
        out.append(Deferred(axis="concurrency", reason="probes run one request at a time (concurrency = [1]); "
                            "throughput and latency under parallel requests are not measured"))
    if sweep.session.turns == 0:
        out.append(Deferred(axis="prefix-cache", reason="no session probes (session.turns = 0): every prompt is "
                            "unique at its start, so speed with a warm prompt cache (multi-turn chat) is not measured"))
    if sweep.sustained.tokens == 0:
        out.append(Deferred(axis="sustained", reason="sustained generation off (sustained.tokens = 0): "
                            "no throttling/slow-down figure"))
    for c in sweep.candidates:
        if c.external:
            out.append(Deferred(axis=f"external:{c.id}", reason=(
                f"{c.id} is a server benchd does not start ({c.url}): its time to ready, its server args and "
                "environment, and a memory figure per fresh start at each context are not measured"
                + ("; without `pid` / `process` its memory is not sampled at all" if c.pid is None else ""))))
    s = sweep.sampling
    out.append(Deferred(axis="sampling", reason=f"only temperature={s.temperature:g}, seed={s.seed} was "
                        "measured; speed and quality with other sampling settings are not"))
    return out


def _quality_deferred(sweep: Sweep) -> list[Deferred]:
    """Quality beyond the eval tier and the public suites; with tier none, whether any quality check ran."""
    named = ", ".join(AXES[SUITE_AXES[suite]].label.removesuffix(" pass rate") for suite in sweep.evals)
    out = [Deferred(axis="quality", reason=f"quality beyond the eval tier ({sweep.eval_tier})"
                    f"{f' and the public suites ({named})' if named else ''} is not measured")]
    if sweep.eval_tier == "none":
        out.append(Deferred(axis="eval", reason="eval_tier none: " + (
            f"the built-in eval tasks did not run (the public suites did: {named}, each its own axis)" if named
            else "no quality check ran")))
    return out


def vision_deferred(sweep: Sweep, rows: Sequence[Row]) -> list[Deferred]:
    """What was not measured with images, per candidate (text candidates in one line)."""
    text = [_cand_label(c.id, c.runtime) for c in sweep.candidates if not c.vision]
    out = []
    if text:
        out.append(Deferred(axis="vision", reason=f"{', '.join(text)}: no image probe (vision = false: a text "
                            "candidate, or its vision model was not asked for); their image figures are null"[:2000]))
    return out + [d for c in sweep.candidates if c.vision and (d := _no_ok_image(c, rows)) is not None]


def _no_ok_image(c: Candidate, rows: Sequence[Row]) -> Deferred | None:
    mine = [r for r in rows if r.candidate == c.id and r.kind == "vision"]
    if any(r.status == "ok" for r in mine):
        return None
    why = "; ".join(sorted({(r.error or r.status)[:200] for r in mine})) or "no image probe ran"
    return Deferred(axis="vision", reason=f"{_cand_label(c.id, c.runtime)}: no successful image probe: {why}"[:2000])


def _null_metrics(row: Row) -> list[str]:
    names = [m for m in carried_metrics(row.kind) if getattr(row, m) is None]
    # Anything else the engine declared null (e.g. a new metric) is listed too.
    names += [k for k in sorted(row.null_reasons) if k not in names and getattr(row, k, None) is None]
    return [n for n in names if n not in NOT_LISTED_HERE]  # energy has its own lines; a row's place is no measurement


NOT_LISTED_HERE = frozenset((*ENERGY_FIELDS, "energy_channels", "window_j", "round", "visit"))


def _energy_nulls(ok: list[Row]) -> dict[str, tuple[set[str], set[tuple[str, int, str, int]]]]:
    """Per null reason: the energy fields it nulls and the rows (keys) it nulls them in."""
    groups: dict[str, tuple[set[str], set[tuple[str, int, str, int]]]] = {}
    for r in ok:
        names = [*ENERGY_FIELDS, *(("window_j",) if r.kind == "sustained" else ())]
        for name in (n for n in names if getattr(r, n) is None):
            fields, keys = groups.setdefault(r.null_reasons.get(name) or NO_REASON, (set(), set()))
            fields.add(name)
            keys.add((r.candidate, r.context, r.kind, r.probe))
    return groups


def energy_deferred(rows: Sequence[Row]) -> list[Deferred]:
    """Energy not measured, one line per distinct reason over the ok rows (all fields null = axis "energy")."""
    ok = [r for r in rows if r.status == "ok"]
    if not ok:
        return [Deferred(axis="energy", reason="no successful probe row: no energy figure")]
    out = []
    for reason, (fields, keys) in _energy_nulls(ok).items():
        axis = "energy" if set(ENERGY_FIELDS) <= fields else "energy: " + ", ".join(sorted(fields))
        out.append(Deferred(axis=axis[:200], reason=f"{reason} — null in {len(keys)} of {len(ok)} ok rows"[:2000]))
    return out


def _cand_label(cand: str, runtime: str) -> str:
    return f"{cand} ({runtime})"


def _labels(sweep: Sweep, rows: Sequence[Row]) -> dict[str, str]:
    """Candidate -> its label: the sweep's candidates in order, then the others the rows name, sorted."""
    labels = {c.id: _cand_label(c.id, c.runtime) for c in sweep.candidates}
    others = sorted({r.candidate for r in rows} - set(labels))
    return labels | {cand: _cand_label(cand, next(r.runtime for r in rows if r.candidate == cand)) for cand in others}


def row_deferred(sweep: Sweep, rows: Sequence[Row], left: Mapping[str, str] | None = None) -> list[Deferred]:
    """Entries from the rows: one line per axis and reason, naming every candidate it applies to. `left`:
    candidate -> how it left the race (why its planned rows are missing)."""
    listed = {c.id for c in sweep.candidates}
    merged: dict[tuple[str, str], list[str]] = {}  # (axis, reason) -> "who" parts, in first-seen order
    singles: list[Deferred] = []
    for cand, label in _labels(sweep, rows).items():
        mine = [r for r in rows if r.candidate == cand]
        singles += _candidate_entries(sweep if cand in listed else None, label, mine, merged, (left or {}).get(cand))
    out = [Deferred(axis=axis, reason=f"{reason} — {'; '.join(who)}"[:2000]) for (axis, reason), who in merged.items()]
    return out + singles


def _rows_per_null_metric(rows: list[Row]) -> dict[str, list[Row]]:
    per_metric: dict[str, list[Row]] = {}
    for r in rows:
        for m in _null_metrics(r):
            per_metric.setdefault(m, []).append(r)
    return per_metric


def _candidate_entries(sweep: Sweep | None, label: str, mine: list[Row],
                       merged: dict[tuple[str, str], list[str]], left: str | None = None) -> list[Deferred]:
    """One candidate's own entries; shared ones go into `merged` (`sweep` None: not in the sweep)."""
    ok = [r for r in mine if r.status == "ok"]
    _null_metric_entries(label, ok, merged)
    _thermal_entries(label, ok, merged)
    own = _failed_entries(label, mine)
    never = f"(it {left})" if left else "(never ran)"
    return own + (_missing_entries(sweep, label, mine, merged, never) if sweep is not None else [])


def _null_metric_entries(label: str, ok: list[Row], merged: dict[tuple[str, str], list[str]]) -> None:
    """Null metrics in ok rows, grouped by identical (kind, reasons) so a trio like draft_* is one line."""
    groups: dict[tuple[str, str], list[str]] = {}
    counts: dict[tuple[str, str], tuple[int, int]] = {}
    for kind in ("probe", "sustained", "sentinel", "vision"):
        kind_rows = [r for r in ok if r.kind == kind]
        for m, rs in _rows_per_null_metric(kind_rows).items():
            key = (kind, "; ".join(sorted({r.null_reasons.get(m) or NO_REASON for r in rs})))
            groups.setdefault(key, []).append(m)
            n, total = counts.get(key, (0, len(kind_rows)))
            counts[key] = (max(n, len(rs)), total)
    for (kind, reason), metrics in groups.items():
        n, total = counts[(kind, reason)]
        who = merged.setdefault((", ".join(metrics)[:200], reason), [])
        count = f"{n} of {total} ok {kind} rows"
        if who and who[-1].startswith(f"{label}: null in "):
            who[-1] += f" and {count}"  # the same candidate's other row kind: one phrase
        else:
            who.append(f"{label}: null in {count}")


def _thermal_entries(label: str, ok: list[Row], merged: dict[tuple[str, str], list[str]]) -> None:
    """Thermal readings that exist but say the sensor was unavailable."""
    unavailable = sorted({
        t.reason or t.source for r in ok for t in (r.thermal_before, r.thermal_after)
        if t is not None and not t.available
    })
    if unavailable:
        merged.setdefault(("thermal", f"sensor unavailable: {'; '.join(unavailable)}"), []).append(label)


def _failed_entries(label: str, mine: list[Row]) -> list[Deferred]:
    """Failed / aborted probes: their metrics are missing as a whole."""
    bad = [r for r in mine if r.status != "ok"]
    if not bad:
        return []
    by_status: dict[str, int] = {}
    for r in bad:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    errors = sorted({(r.error or "no error recorded").splitlines()[0][:200] for r in bad})
    summary = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items()))
    return [Deferred(axis="probes", reason=f"{label}: {summary} of {len(mine)} rows; no metrics "
                     f"from those probes; errors: {' | '.join(errors)}"[:2000])]


def _missing_entries(sweep: Sweep, label: str, mine: list[Row],
                     merged: dict[tuple[str, str], list[str]], never: str) -> list[Deferred]:
    """Planned probes without a row, a missing sustained row; `never`: why, in parentheses (the race, or the
    job ended before them)."""
    per_cell = sweep.probe_plan().min
    out: list[Deferred] = []
    have = {(r.context, r.probe) for r in mine if r.kind == "probe"}
    for ctx in sweep.contexts:
        missing = [p for p in range(per_cell) if (ctx, p) not in have]
        if missing:
            out.append(Deferred(axis="probes", reason=f"{label}: context {ctx}: {len(missing)} of "
                                f"{per_cell} planned probes have no row {never}"))
    if sweep.sustained.tokens > 0 and not any(r.kind == "sustained" for r in mine):
        merged.setdefault(("sustained", f"no sustained row {never}"), []).append(label)
    return out


def eval_deferred(sweep: Sweep, evals: Iterable[EvalResult]) -> list[Deferred]:
    """Candidates with no eval result although a tier was set, and answers run without a sandbox."""
    if sweep.eval_tier == "none":
        return []
    results = list(evals)
    out: list[Deferred] = []
    for c in sweep.candidates:
        mine = [e for e in results if e.candidate == c.id]
        if not mine:
            out.append(Deferred(axis="eval", reason=f"{_cand_label(c.id, c.runtime)}: eval tier "
                                f"{sweep.eval_tier} set but no result recorded"))
        unsandboxed = [e.task for e in mine if e.sandboxed is False]
        if unsandboxed:
            out.append(Deferred(axis="eval-sandbox", reason=f"{_cand_label(c.id, c.runtime)}: "
                                f"{len(unsandboxed)} answers ran outside the eval sandbox "
                                f"(eval_sandbox = \"none\"): {', '.join(unsandboxed)}"))
    return out


def automatic_deferred(sweep: Sweep, rows: Sequence[Row], evals: Iterable[EvalResult] | None = None,
                       left: Mapping[str, str] | None = None) -> list[Deferred]:
    """Fixed entries, then entries from the rows (`left`: `row_deferred`'s), then (when given) from the eval
    results."""
    out = fixed_deferred(sweep) + vision_deferred(sweep, rows) + energy_deferred(rows) + row_deferred(sweep, rows, left)
    if evals is not None:
        out += eval_deferred(sweep, evals)
    return out
