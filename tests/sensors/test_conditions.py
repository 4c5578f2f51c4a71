"""benchd.sensors.conditions: `--when idle` / `--when ac-power`, with load and power injected through Probes."""

from __future__ import annotations

import math
import time

import pytest

from benchd.schemas import Cooldown
from benchd.sensors import conditions
from benchd.sensors.conditions import Probes, unmet
from benchd.sensors.power.status import PowerStatus

AC = PowerStatus(source="ac", method="test")
BATTERY = PowerStatus(source="battery", percent=54.0, method="test")
UNKNOWN = PowerStatus(source="unknown", reason="test: no supply")


def probes(load: float | None = 0.1, power: PowerStatus = AC) -> Probes:
    return Probes(load_per_core=lambda: load, power=lambda: power)


async def test_no_conditions_never_wait() -> None:
    assert await unmet([], Cooldown(), probes=probes(load=9.0, power=BATTERY)) is None


async def test_idle_waits_above_max_load_and_says_why() -> None:
    assert await unmet(["idle"], Cooldown(max_load=0.5), probes=probes(load=1.734)) == (
        "waiting for idle: load 1.73/core > 0.50"
    )
    assert await unmet(["idle"], Cooldown(max_load=0.5), probes=probes(load=0.5)) is None
    assert await unmet(["idle"], Cooldown(max_load=2.0), probes=probes(load=1.734)) is None


async def test_idle_without_a_load_figure_runs() -> None:
    assert await unmet(["idle"], Cooldown(), probes=probes(load=None)) is None


async def test_ac_power() -> None:
    assert await unmet(["ac-power"], Cooldown(), probes=probes(power=BATTERY)) == "waiting for AC power: on battery 54 %"
    no_pct = PowerStatus(source="battery", method="test")
    assert await unmet(["ac-power"], Cooldown(), probes=probes(power=no_pct)) == "waiting for AC power: on battery"
    assert await unmet(["ac-power"], Cooldown(), probes=probes(power=AC)) is None
    # The OS cannot tell: run (the runbook records "unknown"), never wait forever.
    assert await unmet(["ac-power"], Cooldown(), probes=probes(power=UNKNOWN)) is None


async def test_both_conditions_report_both_reasons_then_clear() -> None:
    state = {"load": 3.0, "power": BATTERY}
    live = Probes(load_per_core=lambda: state["load"], power=lambda: state["power"])  # type: ignore[arg-type,return-value]
    reason = await unmet(["idle", "ac-power"], Cooldown(max_load=0.5), probes=live)
    assert reason == "waiting for idle: load 3.00/core > 0.50; waiting for AC power: on battery 54 %"
    state["power"] = AC
    assert await unmet(["idle", "ac-power"], Cooldown(max_load=0.5), probes=live) == (
        "waiting for idle: load 3.00/core > 0.50"
    )
    state["load"] = 0.2
    assert await unmet(["idle", "ac-power"], Cooldown(max_load=0.5), probes=live) is None


async def test_unknown_condition_is_a_bug() -> None:
    with pytest.raises(ValueError, match="sunny"):
        await unmet(["sunny"], Cooldown(), probes=probes())


async def test_first_check_without_an_interval_measures_a_short_window() -> None:
    answers = iter([math.nan, 0.9])
    reason = await unmet(["idle"], Cooldown(max_load=0.5), probes=Probes(load_per_core=lambda: next(answers)))
    assert reason == "waiting for idle: load 0.90/core > 0.50"
    # Still no figure after the window: run rather than wait on a number that does not exist.
    assert await unmet(["idle"], Cooldown(), probes=Probes(load_per_core=lambda: math.nan)) is None


def test_recent_load_uses_the_cooldown_measure() -> None:
    meter = conditions.RecentLoad()
    nothing = meter()
    assert nothing is not None and math.isnan(nothing)  # no interval yet
    time.sleep(0.3)
    first = meter()
    assert first is not None and 0.0 <= first <= 1.0  # busy fraction of all cores (cooldown.CpuLoad)
    assert meter() == first  # a second check within REUSE_WITHIN_S reuses the figure


async def test_default_probes_read_this_machine() -> None:
    # Real probes: whatever this machine says, the answer is None or a reason in the documented form.
    reason = await unmet(["idle", "ac-power"], Cooldown(max_load=1000.0))
    assert reason is None or reason.startswith("waiting for AC power")
