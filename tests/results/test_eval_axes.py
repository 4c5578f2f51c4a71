"""The public suites as axes: code_pass_rate / tool_pass_rate join the Pareto view only when a sweep ran
them, and are judged on the per-task outcomes both candidates share (the one comparison's
compare_outcomes); `compare` pairs two runbooks' suites on the task ids both ran."""

from __future__ import annotations

import msgspec

from benchd.results import pareto
from benchd.results.evalcompare import compare_evals
from benchd.schemas import EvalResult, Row

CANDS = ("a", "b")


def _rows() -> list[Row]:
    """Identical cells with a ±0.1 % wobble (a rate never repeats exactly: zero spread would be noise
    unknown): tied on speed and memory, so only the suite can decide."""
    wobble = (1.0, 1.001, 0.999)
    return [Row(job="j", candidate=c, runtime="llama-server", context=512, kind="probe", probe=p, status="ok",
                gen_tps=100.0 * wobble[p % 3], prompt_tps=800.0 * wobble[p % 3], mem_peak_bytes=1_000_000,
                gen_tokens=32)
            for c in CANDS for p in range(6)]


def _evals(passes: dict[str, int], n: int = 40, suite: str = "tools", first: int = 0) -> list[EvalResult]:
    return [EvalResult(job="j", candidate=c, tier=suite, task=f"t{i}", passed=i - first < k)
            for c, k in passes.items() for i in range(first, first + n)]


def test_suite_axis_absent_unless_run() -> None:
    [ctx] = pareto.pareto_from_rows(_rows(), [])
    assert all("tool_pass_rate" not in p.values and "code_pass_rate" not in p.values for p in ctx.points)
    assert not any("tool_pass_rate" in d.skipped_axes for ds in ctx.dominated.values() for d in ds)


def test_a_clear_gap_dominates_and_a_small_one_does_not() -> None:
    [ctx] = pareto.pareto_from_rows(_rows(), _evals({"a": 40, "b": 0}))
    assert {p.candidate: p.values["tool_pass_rate"] for p in ctx.points} == {"a": 1.0, "b": 0.0}
    assert [d.by for d in ctx.dominated.get("b", [])] == ["a"]
    assert "tool_pass_rate" in ctx.dominated["b"][0].better_on
    [close] = pareto.pareto_from_rows(_rows(), _evals({"a": 21, "b": 20}))
    assert not close.dominated


def test_compare_pairs_only_shared_task_ids() -> None:
    a = _Evals(evals=_evals({"a": 40}, n=40, first=0))
    b = _Evals(evals=_evals({"a": 40}, n=40, first=10))
    [cmp] = compare_evals(a, b)  # type: ignore[arg-type]
    assert (cmp.n_a, cmp.n_b, cmp.shared) == (40, 40, 30)
    assert cmp.axis == "tool_pass_rate" and cmp.verdict.n_a == 30 and cmp.verdict.alpha == 0.05
    [strict] = compare_evals(a, b, alpha=0.01)  # type: ignore[arg-type]
    assert strict.verdict.alpha == 0.01  # the comparison's α (the stop rule's, after planned looks), as every cell's


class _Evals(msgspec.Struct):
    """compare_evals reads only a runbook's `evals`."""

    evals: list[EvalResult]
