"""The verdict statistics (issue 15), pure: Mann–Kendall exact vs enumeration, Theil–Sen, the CI stop rule,
the four verdicts, the throttle check, and the adaptive series' stop/re-run decisions."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import msgspec
import pytest

from benchd.engine import cooldown, rows, series, verdict
from benchd.results import text
from benchd.schemas import ProbePlan, Row, ThermalReading
from benchd.sensors.suspend.sensor import STALL_THRESHOLD_S, LinuxClock, stall_text
from benchd.stats import cells

AUTO = ProbePlan(True, 6, 30, 2.0, "gen_tps", 15.0)
FIXED3 = ProbePlan(False, 3, 3, 2.0, "gen_tps", 15.0)


def _row(i: int, gen: float | None = 100.0, status: str = "ok", invalidated: str | None = None) -> Row:
    return Row(job="j", candidate="c", runtime="llama-server", context=128, kind="probe", probe=i,
               status=status, gen_tps=gen, invalidated=invalidated)  # type: ignore[arg-type]


def test_mann_kendall_exact_matches_enumeration() -> None:
    """The Mahonian DP gives the same p-value as counting every permutation of 6 values."""
    xs = [3.0, 1.0, 4.0, 1.5, 5.0, 9.0]
    s, p, method = cells.mann_kendall(xs)
    assert method == "exact"

    def stat(v: tuple[float, ...]) -> int:
        return sum((v[j] > v[i]) - (v[j] < v[i]) for i in range(len(v)) for j in range(i + 1, len(v)))

    perms = list(itertools.permutations(xs))
    extreme = sum(1 for q in perms if abs(stat(q)) >= abs(s))
    assert p == pytest.approx(extreme / len(perms))
    assert cells.mann_kendall([1, 2, 3, 4, 5, 6])[1] == pytest.approx(2 / math.factorial(6))


def test_mann_kendall_false_positive_rate_is_alpha() -> None:
    rng = random.Random(7)
    hits = sum(cells.mann_kendall([rng.random() for _ in range(10)])[1] < 0.05 for _ in range(1000))
    assert 20 <= hits <= 80  # 5 % of 1000, generous binomial bounds


def test_theil_sen_slope_and_interval() -> None:
    xs = [10.0 + 0.5 * i for i in range(12)]
    slope, lo, hi = cells.theil_sen(xs)
    assert slope == pytest.approx(0.5) and lo == pytest.approx(0.5) and hi == pytest.approx(0.5)
    rng = random.Random(3)
    noisy = [100 - 1.0 * i + rng.gauss(0, 0.5) for i in range(20)]
    slope, lo, hi = cells.theil_sen(noisy)
    assert lo is not None and hi is not None and lo <= slope <= hi and hi < 0


def test_verdicts() -> None:
    rng = random.Random(1)
    flat = [100 + rng.gauss(0, 0.5) for _ in range(12)]
    v = verdict.judge(flat, metric="gen_tps", target_ci_pct=2.0, probes_used=12, adaptive=True)
    assert v.verdict == "steady" and v.ci_half_width_pct is not None and v.ci_half_width_pct <= 2.0
    wide = [100 + rng.gauss(0, 15) for _ in range(30)]
    v = verdict.judge(wide, metric="gen_tps", target_ci_pct=2.0, probes_used=30, adaptive=True)
    assert v.verdict == "unsteady" and v.ci_half_width_pct is not None and v.ci_half_width_pct > 2.0
    assert text.verdict_text(v).startswith("unsteady ±")
    # The half-width is the CI's, not its excess over the target: "CI ±w %, wider than the ±2 % target".
    assert v.reason is not None and v.reason.startswith(f"CI ±{v.ci_half_width_pct:.2f} %, wider than the ±2 % target")
    # A slow slide inside a narrow CI: the CI target is met, the trend still makes it drifting.
    slide = [100 - 0.4 * i + rng.gauss(0, 0.1) for i in range(20)]
    assert verdict.ci_target_met(slide, 2.0)
    v = verdict.judge(slide, metric="gen_tps", target_ci_pct=2.0, probes_used=20, adaptive=True)
    assert v.verdict == "drifting" and v.trend is not None and v.trend.drift_pct < -2.0
    v = verdict.judge([100.0, 101.0, 99.0], metric="gen_tps", target_ci_pct=2.0, probes_used=3, adaptive=False)
    assert v.verdict == "too few" and "fixed probe count" in v.reason
    # a fixed count the CI can use, cut short (the race dropped the candidate) or with failed probes
    v = verdict.judge([100.0, 101.0, 99.0], metric="gen_tps", target_ci_pct=2.0, probes_used=3, adaptive=False,
                      planned=6)
    assert v.reason.endswith("needs 6 (3 of the fixed 6 probes ran)"), v.reason
    v = verdict.judge([100.0, 101.0, 99.0], metric="gen_tps", target_ci_pct=2.0, probes_used=6, adaptive=False,
                      planned=6)
    assert v.reason.endswith("needs 6 (3 of 6 probes not ok)"), v.reason
    v = verdict.judge([], metric="prompt_tps", target_ci_pct=2.0, probes_used=6, adaptive=True, null_reason="no timing")
    assert v.verdict is None and v.reason == "no timing"


def test_throttle_check() -> None:
    nominal = dict(metric="gen_tps", threshold_pct=15.0, thermal_nominal=True, thermal_text="pressure nominal")
    assert not verdict.throttle_check([100, 101], 50, **nominal).suspect  # type: ignore[arg-type]
    c = verdict.throttle_check([100, 101, 99], 60, **nominal)  # type: ignore[arg-type]
    assert c.suspect and c.running_median == 100 and c.drop_pct == pytest.approx(40) and "nominal" in c.note
    assert not verdict.throttle_check([100, 101, 99], 90, **nominal).suspect  # type: ignore[arg-type]
    hot = verdict.throttle_check([100, 101, 99], 60, metric="gen_tps", threshold_pct=15.0, thermal_nominal=False,
                                 thermal_text="90 °C")
    assert not hot.suspect and "explained" in hot.note


def test_series_fixed_count_and_reruns() -> None:
    s = series.CellSeries(FIXED3)
    assert s.next_probe() == 0
    for i in range(3):
        s.add(_row(i))
    assert s.next_probe() is None
    s = series.CellSeries(FIXED3, [_row(0), _row(1, invalidated="server-stopped", status="failed"), _row(2)])
    assert s.next_probe() == 3  # the invalidated probe does not count: one more runs
    s = series.CellSeries(FIXED3, [_row(0), _row(1, status="aborted")])
    assert s.next_probe() == 1  # an aborted probe runs again at its index
    many = [_row(i, invalidated="machine-slept", status="failed") for i in range(series.MAX_RERUNS + 1)]
    assert series.CellSeries(FIXED3, many).next_probe() is None  # a machine that keeps sleeping cannot stall


def test_series_adaptive_stop_rule() -> None:
    steady = series.CellSeries(AUTO, [_row(i, 100.0 + 0.1 * (i % 2)) for i in range(6)])
    assert steady.next_probe() is None  # CI within 2 % after min
    wide = series.CellSeries(AUTO, [_row(i, g) for i, g in enumerate([100, 80, 120, 90, 110, 70])])
    assert wide.next_probe() == 6
    full = series.CellSeries(AUTO, [_row(i, 100.0 + (30 if i % 2 else 0)) for i in range(30)])
    assert full.next_probe() is None  # max reached
    nothing = series.CellSeries(AUTO, [_row(i, None) for i in range(6)])
    assert nothing.next_probe() is None  # no value to converge on after min
    assert series.CellSeries(AUTO, [_row(0)]).pending_floor() == [1, 2, 3, 4, 5]


def test_annotate_flags_throttle_and_a_suspended_probe_is_invalidated() -> None:
    clock = LinuxClock()
    row = _row(3, 50.0)
    cool = ThermalReading(source="test", celsius=40.0)
    got = series.annotate(row, earlier=[100, 100, 100], plan=AUTO, thermal=cool, target_celsius=65,
                          clock=clock, slept_s=0.0, stopped_s=0.0, stalled_s=0.0)
    assert got.status == "ok" and got.throttle is not None and got.throttle.suspect and "40.0 °C" in got.throttle.note
    assert series.invalidation(clock.source, 0.0, 0.0) is None
    stopped = series.invalidation(clock.source, 0.0, 3.1)
    assert stopped is not None and stopped.kind == "server-stopped" and "3.1 s" in stopped.why
    d = rows.decide(result_status="ok", error=None, invalidation=stopped)
    assert d.status == "failed" and d.invalidated == "server-stopped" and "3.1 s" in (d.error or "")
    # a stall is flagged, not invalidated: the figures keep it, its words say so
    assert stall_text(STALL_THRESHOLD_S) is None and stall_text(None) is None
    assert (stall_text(1.3) or "").startswith("benchd was not run for ~1.3 s during the probe")
    slept = series.invalidation(clock.source, 42.0, 0.0)
    assert slept is not None and slept.kind == "machine-slept" and clock.source in slept.why
    marked = series.annotate(msgspec.structs.replace(row, status="failed", invalidated="machine-slept"), earlier=[],
                             plan=AUTO, thermal=None, target_celsius=65, clock=clock, slept_s=42.0, stopped_s=0.0,
                             stalled_s=None)
    assert marked.throttle is None and marked.sources["suspended_s"] == clock.source
    assert marked.stalled_s is None and "unreadable" in marked.null_reasons["stalled_s"]


def test_decide_is_the_one_status_rule() -> None:
    """Every way a probe ends maps to one status: timeout, crash, a cached prompt, a plain failure."""
    assert rows.decide(result_status="ok", error=None).status == "ok"
    assert rows.decide(result_status="ok", error=None, cached_tokens=12).status == "failed"
    t = rows.decide(result_status="timeout", error="probe timed out after 1 s", killed=True)
    assert t.status == "timeout" and (t.error or "").endswith("the server was killed")
    c = rows.decide(result_status="failed", error="read failed", crash="signal 9")
    assert c.status == "failed" and "crashed mid-probe (signal 9)" in (c.error or "")
    b = rows.decide(result_status="timeout", error=None, crash="signal 9", during="batch")
    assert b.status == "failed" and b.error == "server crashed mid-batch (signal 9): failed"


def test_a_session_turn_is_decided_by_the_same_rule() -> None:
    """A session stops on a failed turn or a crashed server, in `decide`'s words; an answered turn goes on."""
    from types import SimpleNamespace

    from benchd.engine import session
    from benchd.probe_result import ProbeResult

    def failure(status: str, error: str | None, crashed: str | None) -> str | None:
        server = SimpleNamespace(crashed=SimpleNamespace(status=crashed) if crashed else None)
        result = ProbeResult(status=status, error=error, http_status=200, started=0.0, ended=1.0)  # type: ignore[arg-type]
        return session._failure(SimpleNamespace(server=server), result)  # type: ignore[arg-type]

    assert failure("ok", None, None) is None
    assert failure("failed", "HTTP 500", None) == "HTTP 500"
    assert failure("ok", None, "signal 9") == "server crashed mid-session (signal 9): the server ended mid-session"
    assert failure("timeout", "timed out", "exit 1") == "server crashed mid-session (exit 1): timed out"


async def test_recheck_extends_until_back_within_threshold() -> None:
    """The thermal extension's loop with scripted check rates (the real check probe runs in the
    scheduler against a server: tests/engine/test_verdicts_real.py)."""
    from benchd.schemas import CooldownRecord

    rates = iter([60.0, 70.0, 95.0, 99.0])
    t = [0.0]

    async def check() -> float | None:
        return next(rates)

    async def sleep(s: float) -> None:
        t[0] += s

    async def drive(rec: CooldownRecord, max_seconds: float, check: Any) -> CooldownRecord:
        c = cooldown.ThrottleChecks(rec, baseline=100.0, threshold_pct=15.0, max_seconds=max_seconds, pause_s=2.0,
                                    clock=lambda: t[0])
        while c.due():
            c.add(await check())
            if c.due():
                await sleep(c.pause())
        return c.record()

    rec = CooldownRecord(policy="thermal", waited_s=5.0, reason="sensor-unavailable", note="no sensor")
    got = await drive(rec, 60.0, check)
    assert got.throttle_checks == [60.0, 70.0, 95.0] and got.extended_s == pytest.approx(4.0)
    assert "back within 15 %" in (got.note or "") and got.note.startswith("no sensor")
    slow = iter([10.0] * 100)

    async def check_slow() -> float | None:
        return next(slow)

    t[0] = 0.0
    got = await drive(rec, 11.0, check_slow)
    assert got.waited_s == pytest.approx(11.0) and "max_seconds" in (got.note or "")


def _annotated(values: list[float], plan: ProbePlan = FIXED3) -> list[Row]:
    """Rows as the engine records them: each ok probe annotated against the cell's earlier ok probes, with
    no thermal sensor (this VM's case: a slowdown it cannot explain is suspect)."""
    clock = LinuxClock()
    rows: list[Row] = []
    for i, v in enumerate(values):
        rows.append(series.annotate(_row(i, v), earlier=series.CellSeries(plan, rows).values(), plan=plan,
                                    thermal=None, target_celsius=65, clock=clock, slept_s=0.0, stopped_s=0.0,
                                    stalled_s=0.0))
    return rows


def test_a_step_down_halfway_is_drifting_and_every_slow_probe_is_throttle_suspect() -> None:
    """What a CPU hog started halfway through a quiet cell gives: a level shift, not a slope."""
    rng = random.Random(5)
    values = [100 + rng.gauss(0, 1) for _ in range(8)] + [40 + rng.gauss(0, 1) for _ in range(8)]
    rows = _annotated(values)
    assert [r.probe for r in rows if r.throttle and r.throttle.suspect] == list(range(8, 16))
    assert all("below the running median" in r.throttle.note for r in rows[8:] if r.throttle)
    v = verdict.cell_verdict(rows, ProbePlan(False, 16, 16, 2.0, "gen_tps", 15.0))
    assert v.verdict == "drifting" and v.trend is not None and v.trend.drift_pct < -2.0 and "moved" in v.reason
    assert v.throttle_suspects == 8


def test_a_noisy_step_is_unsteady_and_still_named_by_its_throttle_suspects() -> None:
    """A slowed half so noisy the trend test cannot call it (the CI is then ±100 %): the verdict says
    unsteady with its width, and the probes far below the running median are throttle-suspect."""
    values = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.1, 5.0, 150.0, 3.0, 160.0, 4.0, 170.0, 6.0, 140.0]
    rows = _annotated(values)
    v = verdict.cell_verdict(rows, ProbePlan(False, 16, 16, 2.0, "gen_tps", 15.0))
    assert v.verdict == "unsteady" and v.ci_half_width_pct is not None and v.ci_half_width_pct > 2.0
    assert f"CI ±{v.ci_half_width_pct:.2f} %" in v.reason
    assert v.throttle_suspects == sum(1 for x in values[8:] if x < 50) > 0


def test_the_adaptive_rule_replayed_on_steady_sliding_and_wide_series() -> None:
    """The stop decision replayed over a series, probe by probe, as the engine makes it."""
    rng = random.Random(11)
    flat = [_row(i, 100 + rng.gauss(0, 0.3)) for i in range(30)]
    assert next(k for k in range(1, 31) if series.CellSeries(AUTO, flat[:k]).done()) == AUTO.min
    assert verdict.cell_verdict(flat[:AUTO.min], AUTO).verdict == "steady"
    # A slide inside a tight CI meets the CI rule: the series stops, and the verdict still names the trend.
    slide = [_row(i, 100 - 0.6 * i + rng.gauss(0, 0.05)) for i in range(30)]
    stop = next(k for k in range(1, 31) if series.CellSeries(AUTO, slide[:k]).done())
    v = verdict.cell_verdict(slide[:stop], AUTO)
    assert v.verdict == "drifting" and v.probes_used == stop, v
    wide = [_row(i, 100.0 + (40 if i % 2 else 0)) for i in range(30)]
    assert [k for k in range(1, 31) if series.CellSeries(AUTO, wide[:k]).done()] == [30]
    assert verdict.cell_verdict(wide, AUTO).verdict == "unsteady"


def test_the_series_book_keeps_what_the_verdict_reads_and_gives_the_same_verdict() -> None:
    rng = random.Random(2)
    rows = _annotated([100 + rng.gauss(0, 1) for _ in range(8)] + [60.0, None, 61.0])  # type: ignore[list-item]
    rows[9] = msgspec.structs.replace(rows[9], null_reasons={"gen_tps": "no timings", "ttft_ms": "x"},
                                      sources={"gen_tps": "server:timings"}, error="e")
    book = series.SeriesBook(FIXED3, rows)
    kept = book.series("c", 128).rows
    assert [r.probe for r in kept] == [r.probe for r in rows]
    assert kept[9].null_reasons == {"gen_tps": "no timings"} and kept[9].sources == {} and kept[9].error is None
    plan = ProbePlan(False, 11, 11, 2.0, "gen_tps", 15.0)
    assert verdict.cell_verdict(kept, plan) == verdict.cell_verdict(rows, plan)
    assert series.CellSeries(AUTO, kept).values() == series.CellSeries(AUTO, rows).values()
    assert [r.throttle for r in kept] == [r.throttle for r in rows]
