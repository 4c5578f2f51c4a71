"""The eval summary's counts: server errors out of the pass rate (counted, with a completion rate), and the
tools suite per BFCL category with BFCL's unweighted aggregate, irrelevance apart."""

from __future__ import annotations

from benchd.results.runbook import _eval_summary
from benchd.schemas import EvalResult


def _r(task: str, cat: str, passed: bool, failure: str | None = None) -> EvalResult:
    return EvalResult(job="j", candidate="c", tier="tools", task=task, passed=passed, category=cat,
                      failure=None if passed else (failure or "argument_mismatch"))


def test_server_errors_are_out_of_the_pass_rate_and_bfcl_is_per_category() -> None:
    rows = [_r("s1", "simple_python", True), _r("s2", "simple_python", True), _r("s3", "simple_python", False),
            _r("s4", "simple_python", False, "server_error"),
            _r("m1", "multiple", True), _r("m2", "multiple", False),
            _r("i1", "irrelevance", True), _r("i2", "irrelevance", True), _r("i3", "irrelevance", True)]
    (summ,) = _eval_summary(rows)
    assert (summ.passed, summ.completed, summ.failed, summ.errors, summ.total) == (6, 8, 2, 1, 9)
    assert summ.pass_rate == 6 / 8 and summ.completion_rate == 8 / 9
    assert summ.categories["simple_python"].pass_rate == 2 / 3 and summ.categories["simple_python"].errors == 1
    assert summ.aggregate == (2 / 3 + 1 / 2) / 2  # unweighted over categories, irrelevance apart
    assert summ.irrelevance_rate == 1.0
    assert summ.aggregate_label == ("BFCL v4 subset, function-calling mode, 5 tasks (unweighted mean of 2 "
                                    "categories, irrelevance apart)")


def test_all_server_errors_is_no_pass_rate() -> None:
    (summ,) = _eval_summary([_r("s1", "simple_python", False, "server_error")])
    assert summ.pass_rate is None and summ.ci_low is None and summ.completed == 0 and summ.completion_rate == 0.0


def test_seconds_a_task_count_the_sandbox_beside_the_requests() -> None:
    rows = [EvalResult(job="j", candidate="c", tier="code", task=f"t{i}", passed=True, latency_s=lat, grade_s=sandbox)
            for i, (lat, sandbox) in enumerate(((1.0, 4.0), (2.0, None), (3.0, 0.5)))]
    (summ,) = _eval_summary(rows)
    assert summ.latency_s_median == 2.0 and summ.task_s_median == 3.5  # of 5.0, 2.0, 3.5
