"""Time to ready in the runbook, the report and `compare`, from `server_ready` events as the engine
writes them (the real starts are tests/servers/test_ready_time_real.py and tests/daemon/test_ready_real.py):
warm and cold medians, nulls with their reasons, and B against A through the one comparison."""

from __future__ import annotations

from pathlib import Path

import pytest
from runbook_factory import fill_job, setup_state

from benchd.results import report, runbook
from benchd.results.compare import compare_runbooks
from benchd.servers.supervisor import health_gap

WARM = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0]


def _starts(store, job: str, scale: float, cold: bool) -> None:  # type: ignore[no-untyped-def]
    for s in WARM:
        store.events.append(job, "server_ready", {
            "candidate": "gguf-plain", "ready_s": s * scale, "purpose": "ready", "load_s": s * scale / 2,
            "load_note": "log: first seen 'model loaded'", "cache": "warm", "cache_note": "mincore(2): 9 of 9 pages",
            "cold": False, "resident_before": 1.0,
            "ready_note": "benchd: spawn -> health answered (monotonic clock), to within 40 ms (the check before it)"})
        if cold:
            store.events.append(job, "server_ready", {
                "candidate": "gguf-plain", "ready_s": 3 * s * scale, "purpose": "ready", "load_s": None,
                "load_note": "the log has no 'model loaded' line before health answered", "cache": "cold",
                "cache_note": "posix_fadvise(POSIX_FADV_DONTNEED); mincore(2): 0 of 9 pages", "cold": True,
                "resident_before": 0.0})


def _runbook(tmp: Path, job: str, scale: float, cold: bool = True):  # type: ignore[no-untyped-def]
    config, store, sweep, _ = setup_state(tmp)
    fill_job(store, sweep, job_id=job)
    _starts(store, job, scale, cold)
    rb = runbook.build_runbook(config, store, job)
    store.close()
    return rb


def test_summary_report_and_nulls(tmp_path: Path) -> None:
    rb = _runbook(tmp_path, "20261130-020000-abcd", 1.0)
    by = {s.candidate: s for s in rb.ready_summary}
    plain = by["gguf-plain"]
    assert plain.warm_n == len(WARM) and plain.cold_n == len(WARM)
    assert plain.warm_median_s == sorted(WARM)[2] / 2 + sorted(WARM)[3] / 2
    assert plain.cold_median_s is not None and plain.cold_median_s > plain.warm_median_s
    # the factory's other starts carry no time-to-ready figures: their nulls say why
    assert by["mlx-lm"].warm_median_s is None and by["mlx-lm"].null_reasons["warm"]
    assert by["broken"].null_reasons["warm"] == "no server start"
    text = report.render_text(rb)
    line = next(x for x in text.splitlines() if x.startswith("gguf-plain") and "n 6" in x)
    assert f"{plain.warm_median_s:.2f}" in line and f"{plain.cold_median_s / plain.warm_median_s:.2f}" in line
    assert "## Time to ready" in report.render_markdown(rb)
    assert report.report_json(rb)["ready"][0]["candidate"] == "gguf-spec"


def test_compare_through_the_one_comparison(tmp_path: Path) -> None:
    a = _runbook(tmp_path / "a", "20261130-020000-aaaa", 1.0)
    b = _runbook(tmp_path / "b", "20261130-020000-bbbb", 2.0, cold=False)
    got = {(r.candidate, r.cache): r.verdict for r in compare_runbooks(a, b).ready}
    warm = got[("gguf-plain", "warm")]
    assert warm.verdict == "different" and warm.b_better is False and warm.axis == "ready_s"
    assert warm.ci_low is not None and warm.ci_low > 1.0
    cold = got[("gguf-plain", "cold")]
    assert cold.verdict == "unresolved" and cold.n_b == 0
    # the axis's margin (±10 %, as the Pareto view uses) and the comparison's α, not the per-probe defaults
    assert warm.margin_pct == 10.0 and warm.alpha == 0.05
    (strict,) = [r.verdict for r in compare_runbooks(a, b, alpha=0.01).ready if r.cache == "warm"]
    assert strict.alpha == 0.01 and strict.margin_pct == 10.0


def test_each_start_names_its_resolution_and_a_start_from_before_the_note_the_old_checks(tmp_path: Path) -> None:
    """A start's `ready_s` source is its own `ready_note` (how close the check before it was); an event written
    before the note existed says the fixed 0.1 s checks of that benchd."""
    rb = _runbook(tmp_path, "20261130-020000-abcd", 1.0)
    warm = [s for s in rb.ready if s.candidate == "gguf-plain" and s.cache == "warm"]
    assert warm and {s.sources["ready_s"] for s in warm} == {
        "benchd: spawn -> health answered (monotonic clock), to within 40 ms (the check before it)"}
    cold = [s for s in rb.ready if s.candidate == "gguf-plain" and s.cache == "cold"]
    assert cold and {s.sources["ready_s"] for s in cold} == {
        "benchd: spawn -> health answered (monotonic clock), checked every 0.1 s"}


def test_health_checks_come_closer_together_the_sooner_after_spawn() -> None:
    """Each pause is 5 % of the time since spawn, 5 ms to the poll interval: a start is timed to within ~5 %."""
    assert [health_gap(t, 0.1) for t in (0.0, 0.05, 0.4, 1.0, 30.0)] == pytest.approx([0.005, 0.005, 0.02, 0.05, 0.1])


def test_a_stopped_server_has_no_time_to_ready_and_a_stall_is_named(tmp_path: Path) -> None:
    """The probes' rules for starts: any stop of the server makes `ready_s` null with the measured figure in its
    reason (the summary's medians leave the start out); more than 0.25 s of stall is named in its source."""
    config, store, sweep, _ = setup_state(tmp_path)
    job = "20261130-020000-abcd"
    fill_job(store, sweep, job_id=job)
    for ready_s, stalled, stopped in ((1.0, 0.0, 0.0), (1.2, 0.06, 0.0), (2.4, 1.31, 0.0), (3.0, 0.0, 2.0)):
        store.events.append(job, "server_ready", {
            "candidate": "gguf-plain", "ready_s": ready_s, "purpose": "ready", "cache": "warm",
            "stalled_s": stalled, "server_stopped_s": stopped})
    rb = runbook.build_runbook(config, store, job)
    store.close()
    starts = [s for s in rb.ready if s.candidate == "gguf-plain"]
    assert [s.ready_s for s in starts] == [1.0, 1.2, 2.4, None]
    assert [s.stalled_s for s in starts] == [0.0, 0.06, 1.31, 0.0]
    assert [("benchd was not run" in s.sources["ready_s"]) for s in starts[:3]] == [False, False, True]
    assert starts[2].sources["ready_s"].endswith("benchd was not run for ~1.3 s during the start (its 0.1 s poll woke "
                                                 "that late: the machine or the daemon was paused); the figures "
                                                 "include the pause")
    assert starts[3].null_reasons["ready_s"] == ("the server process was stopped for ~2.0 s during the start: it would "
                                                 "measure the stop (3.000 s measured)")
    (plain,) = [s for s in rb.ready_summary if s.candidate == "gguf-plain"]
    assert plain.warm_n == 3 and plain.warm_median_s == 1.2 and plain.warm_max_s == 2.4
