"""Public eval suites compared between two runbooks: per suite the per-task outcomes paired on the shared
task ids, judged by `comparison.compare_outcomes`; each suite is an axis."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from msgspec import Struct

from benchd.schemas import EvalResult, Runbook
from benchd.stats.axes import SUITE_AXES
from benchd.stats.comparison import ALPHA, AxisVerdict, compare_outcomes


class EvalComparison(Struct, kw_only=True):
    """One candidate's suite in A and B: tasks each ran, tasks both ran, and the verdict on those."""

    candidate: str
    suite: str
    axis: str
    n_a: int
    n_b: int
    shared: int
    verdict: AxisVerdict


def outcomes(evals: Iterable[EvalResult], candidate: str, suite: str) -> dict[str, bool]:
    """Task id -> passed, for one candidate's suite."""
    return {e.task: e.passed for e in evals if e.candidate == candidate and e.tier == suite}


def suite_outcomes(evals: Iterable[EvalResult]) -> dict[str, dict[str, Mapping[str, bool]]]:
    """Candidate -> axis -> per-task outcomes (the Pareto axes' samples)."""
    out: dict[str, dict[str, dict[str, bool]]] = {}
    for e in evals:
        axis = SUITE_AXES.get(e.tier)
        if axis is not None:
            out.setdefault(e.candidate, {}).setdefault(axis, {})[e.task] = e.passed
    return out  # type: ignore[return-value]


def compare_evals(a: Runbook, b: Runbook, alpha: float = ALPHA) -> list[EvalComparison]:
    """Every (candidate, suite) both runbooks ran, compared on their shared task ids."""
    out = []
    cands = sorted({e.candidate for e in a.evals} & {e.candidate for e in b.evals})
    for cand in cands:
        for suite, axis in SUITE_AXES.items():
            oa, ob = outcomes(a.evals, cand, suite), outcomes(b.evals, cand, suite)
            if not oa or not ob:
                continue
            out.append(EvalComparison(candidate=cand, suite=suite, axis=axis, n_a=len(oa), n_b=len(ob),
                                      shared=len(set(oa) & set(ob)), verdict=compare_outcomes(oa, ob, axis=axis, alpha=alpha)))
    return out
