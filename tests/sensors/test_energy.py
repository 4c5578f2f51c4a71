"""Energy readers: RAPL on a fake powercap tree (exact phase joules, wrap-around, unreadable zones),
the null reader of this VM, the IOReport channel math on committed samples, and the live loader (darwin)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from benchctl.commands.doctor import check_energy
from benchd.engine.energy import ENERGY_FIELDS, EnergySession, PhaseMarks, probe_energy, window_energy
from benchd.probe_result import ProbeResult
from benchd.sensors.energy import darwin, linux
from benchd.sensors.energy.choose import open_reader
from benchd.sensors.energy.reader import (
    POWERCAP_ENV,
    POWERCAP_ROOT,
    NullReader,
    Sample,
    one_reading,
)
from benchd.servers.runtimes.base import Normalized
from tests.testlib import FakeRapl

DATA = Path(__file__).parents[1] / "data" / "darwin"


@pytest.fixture
def rapl(tmp_path: Path) -> FakeRapl:
    return FakeRapl(tmp_path / "powercap", max_uj=10_000_000)


def _step(fake: FakeRapl, marks: PhaseMarks, name: str, package: int, core: int, dram: int) -> None:
    """Advance the counters by these µJ, then take the named sample."""
    fake.add("package-0", package)
    fake.add("core", core)
    fake.add("dram", dram)
    marks(name)


# ---------------------------------------------------------------------------------------- RAPL


def test_zones_labels_and_total(rapl: FakeRapl) -> None:
    zones = linux.find_zones(rapl.root)
    assert [(z.label, z.in_total) for z in zones] == [
        ("package-0", True), ("package-0/core", False), ("package-0/dram", True)]
    reader = open_reader({POWERCAP_ENV: str(rapl.root)})
    assert reader.available and reader.source == "rapl:package-0 + rapl:package-0/dram"
    assert "system energy" in reader.scope and "not the server alone" in reader.scope
    assert "1 ms" in reader.granularity


def test_phase_joules_and_j_per_token_are_exact(rapl: FakeRapl) -> None:
    reader = linux.open_rapl(rapl.root)
    idle0 = reader.sample()
    rapl.add("package-0", 2_000_000)  # 2 J of package over the cooldown, 0.5 J of DRAM
    rapl.add("dram", 500_000)
    idle1 = reader.sample()
    idle1 = Sample(idle0.t + 1.25, idle1.raw)  # a 1.25 s cooldown: 2.5 J -> 2 W
    marks = PhaseMarks(reader)
    marks("start")
    _step(rapl, marks, "first", package=2_000_000, core=1_500_000, dram=500_000)   # prompt phase: 2.5 J
    _step(rapl, marks, "end", package=2_600_000, core=2_000_000, dram=500_000)     # gen phase: 3.1 J
    fields, sources, reasons = probe_energy(reader, marks, reader.delta(idle0, idle1), 500, 32)
    assert fields["energy_prompt_j"] == 2.5 and fields["energy_gen_j"] == 3.1
    assert fields["j_per_prompt_token"] == 0.005  # 2.5 J / 500 prompt tokens
    assert fields["j_per_gen_token"] == 0.1  # 3.1 J / (32 - 1) generated tokens
    assert fields["idle_watts"] == 2.0
    assert fields["energy_channels"]["prompt"] == {"package-0": 2.0, "package-0/core": 1.5, "package-0/dram": 0.5}
    assert fields["energy_channels"]["gen"] == {"package-0": 2.6, "package-0/core": 2.0, "package-0/dram": 0.5}
    assert fields["energy_channels"]["idle_watts"] == {"package-0": 1.6, "package-0/core": 0.0, "package-0/dram": 0.4}
    gen_s = marks.samples["end"].t - marks.samples["first"].t
    assert fields["gen_watts"] == pytest.approx(3.1 / gen_s, rel=1e-5)
    assert fields["j_per_gen_token_above_idle"] == pytest.approx((3.1 - 2.0 * gen_s) / 31, abs=1e-8)
    assert fields["gen_watts_above_idle"] == pytest.approx(3.1 / gen_s - 2.0, rel=1e-5)
    assert sources["j_per_gen_token"].startswith("rapl:package-0 + rapl:package-0/dram")
    assert sources["idle_watts"].endswith("cooldown before the probe")
    assert not reasons


def test_wrap_around_at_max_energy_range(rapl: FakeRapl) -> None:
    reader = linux.open_rapl(rapl.root)
    rapl.set("package-0", 9_000_000)  # 1 J before the 10 J range wraps
    marks = PhaseMarks(reader)
    marks("start")
    _step(rapl, marks, "first", package=1_500_000, core=0, dram=0)  # wraps: 9.0 J -> 0.5 J
    assert rapl.values["package-0"] == 500_000
    _step(rapl, marks, "end", package=10_000_000 - 1, core=0, dram=250_000)  # wraps again, to 0.499999 J
    fields, _, reasons = probe_energy(reader, marks, None, 100, 11)
    assert fields["energy_prompt_j"] == 1.5 and fields["j_per_prompt_token"] == 0.015
    assert fields["energy_gen_j"] == 10.249999 and fields["j_per_gen_token"] == 1.0249999
    assert "no idle baseline" in reasons["idle_watts"] and "no idle baseline" in reasons["j_per_gen_token_above_idle"]
    assert linux.counter_delta_uj(9_000_000, 500_000, 10_000_000) == 1_500_000
    assert linux.counter_delta_uj(5, 3, None) is None


def test_short_cooldown_gives_no_baseline_with_reason(rapl: FakeRapl) -> None:
    reader = linux.open_rapl(rapl.root)
    a = reader.sample()
    idle = reader.delta(a, Sample(a.t + 0.1, reader.sample().raw))
    marks = PhaseMarks(reader)
    marks("start")
    fields, _, reasons = probe_energy(reader, marks, idle, 10, 10)
    assert fields["idle_watts"] is None and "under the 0.5 s a baseline needs" in reasons["idle_watts"]
    assert "no counter sample at the first token" in reasons["energy_prompt_j"]
    assert set(reasons) == set(ENERGY_FIELDS)


def _read_as_nobody(root: Path, doctor: bool = False) -> dict[str, object]:
    """open_rapl(root) in a forked child with uid/gid 65534, so file modes bind even though CI runs as root."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop to nobody, read, report, exit without running pytest's teardown
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            reader = linux.open_rapl(root)
            out = {"available": reader.available, "reason": reader.reason, "grantable": reader.grantable,
                   "unreadable": getattr(reader, "unreadable", {})}
            if doctor:
                os.environ[POWERCAP_ENV] = str(root)
                out["check"] = check_energy(0.01)[1]
            os.write(w, json.dumps(out).encode())
        except BaseException as exc:  # said in the parent: an empty pipe would only fail to decode
            os.write(w, json.dumps({"child_raised": f"{type(exc).__name__}: {exc}"}).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    got = json.loads(data)
    assert "child_raised" not in got, f"reading as nobody raised in the child: {got['child_raised']}"
    return cast(dict[str, object], got)


@pytest.fixture
def world_tree() -> Iterator[Path]:
    """A fake tree under /tmp that another user can traverse (pytest's tmp dirs are 0700 for root)."""
    base = Path(tempfile.mkdtemp(prefix="benchd-rapl-", dir="/tmp"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_unreadable_zone_is_null_with_the_grant_command(world_tree: Path) -> None:
    fake = FakeRapl(world_tree / "powercap")
    for p in (fake.root, *fake.root.iterdir()):
        os.chmod(p, 0o755)
    for zone in fake.ZONES.values():
        for f in ("name", "max_energy_range_uj"):
            os.chmod(fake.root / zone / f, 0o444)
    for zone in fake.ZONES.values():  # what Linux >= 5.10 does: energy_uj 0400 root
        os.chmod(fake.root / zone / "energy_uj", 0o400)
    if os.geteuid() == 0:
        got = _read_as_nobody(fake.root, doctor=True)
    else:
        reader = linux.open_rapl(fake.root)
        got = {"available": reader.available, "reason": reader.reason, "grantable": reader.grantable,
               "unreadable": reader.unreadable}
        os.environ[POWERCAP_ENV] = str(fake.root)
        try:
            got["check"] = check_energy(0.01)[1]
        finally:
            del os.environ[POWERCAP_ENV]
    assert got["available"] is False and got["grantable"] is True
    check = cast(dict[str, str], got["check"])  # doctor's fix is the grant, chosen by the field, not the words
    assert check["status"] == "warn" and check["fix"].startswith("give this user read access to the RAPL counters")
    reason = str(got["reason"])
    assert reason.startswith("needs root or a udev rule:") and "energy_uj" in reason
    assert f"sudo chmod a+r {fake.root}/intel-rapl:*/energy_uj" in reason and "udev/rules.d" in reason
    assert set(got["unreadable"]) == {"package-0", "package-0/core", "package-0/dram"}  # type: ignore[arg-type]


def test_one_unreadable_total_zone_nulls_the_total_keeps_the_rest(rapl: FakeRapl) -> None:
    reader = linux.open_rapl(rapl.root)
    marks = PhaseMarks(reader)
    marks("start")
    (rapl.root / "intel-rapl:0:1" / "energy_uj").unlink()  # dram vanishes between samples
    rapl.add("package-0", 1_000_000)
    marks("first")
    marks("end")
    fields, _, reasons = probe_energy(reader, marks, None, 10, 10)
    assert fields["energy_prompt_j"] is None and "cannot read" in reasons["energy_prompt_j"]
    assert "intel-rapl:0:1" in reasons["energy_prompt_j"]


def test_this_vm_has_no_counter_and_says_why(tmp_path: Path) -> None:
    reader = linux.open_rapl(tmp_path / "no-powercap", hwmon_root=tmp_path / "no-hwmon")
    assert isinstance(reader, NullReader) and not reader.available
    assert "no powercap" in str(reader.reason) and "no hwmon energy counter" in str(reader.reason)
    d = one_reading(reader, 0.01)
    assert d.total_j is None and d.reason == reader.reason
    fields, sources, reasons = probe_energy(reader, PhaseMarks(reader), None, 10, 10)
    assert all(v is None for v in fields.values()) and not sources
    assert all(r.startswith("energy not measured: no powercap") for r in reasons.values())
    if sys.platform.startswith("linux") and not Path(POWERCAP_ROOT).exists():
        assert not open_reader({}).available  # this VM: no powercap at all


class _CountingNull(NullReader):
    """A NullReader that counts its samples."""

    samples = 0

    def sample(self) -> Sample:
        self.samples += 1
        return super().sample()


def test_without_a_counter_nothing_is_read_in_the_stream_or_the_cooldown(rapl: FakeRapl) -> None:
    null = _CountingNull("no counter here")
    session = EnergySession(lambda: null)
    session.restart()
    start = session.sample()
    assert start is None and session.since(start) is None
    with session.probe(session.since(start), sustained=False) as recording:
        assert recording.client_marks is None  # the probe client reads no counter while it times the stream
    assert null.samples == 0
    got = recording.row(Normalized(prompt_tokens=10, gen_tokens=10), ProbeResult("ok", None, 200, 0.0, 1.0), 0)
    assert all(v is None for v in got.fields.values()) and not got.sources
    assert set(got.reasons.values()) == {"energy not measured: no counter here"}
    counting = EnergySession(lambda: linux.open_rapl(rapl.root))
    counting.restart()
    begun = counting.sample()
    assert begun is not None and counting.since(begun) is not None
    assert counting.probe(None, sustained=False).client_marks is not None


def test_window_energy_interpolates_and_refuses_short_windows(rapl: FakeRapl) -> None:
    reader = linux.open_rapl(rapl.root)
    samples = []
    for i in range(11):  # 10 W for 1 s, sampled every 0.1 s
        samples.append(Sample(float(i) / 10, reader.sample().raw))
        rapl.add("package-0", 1_000_000)
    chunk_times = [0.05 + 0.01 * k for k in range(81)]  # 81 tokens, one per 10 ms, windows of 40
    got, source = window_energy(reader, samples, chunk_times, 40, 0.25)
    assert got is None and "under two counter sampling periods" in source
    got, source = window_energy(reader, samples, chunk_times, 40, 0.02)
    assert got == [3.9, 4.0] and "interpolated at window ends" in source


# ---------------------------------------------------------------------------------------- macOS


def _sample(name: str) -> tuple[list[darwin.ChannelValue], float]:
    doc = json.loads((DATA / name).read_text())
    return darwin.parse_channels(doc), float(doc["seconds"])


def test_ioreport_components_on_m1_sample() -> None:
    chans, seconds = _sample("ioreport_energy_model_m1.json")
    d = darwin.delta_from_channels(chans, seconds)
    # per-core, per-cluster, CPM and GPU SRAM channels are parts of the totals: not added again
    assert d.channels == {"CPU": 1.745, "GPU": 4.32, "ANE": 0.0, "DRAM": 0.61}
    assert d.total_j == pytest.approx(6.675) and d.watts == pytest.approx(6.675)


def test_ioreport_multi_die_and_mixed_units() -> None:
    chans, seconds = _sample("ioreport_energy_model_ultra.json")
    d = darwin.delta_from_channels(chans, seconds)
    assert d.channels == pytest.approx({"CPU": 2.0, "GPU": 9.5, "ANE": 0.25, "DRAM": 0.75})
    assert d.total_j == pytest.approx(12.5) and d.watts == pytest.approx(25.0)  # the PMP group is ignored


def test_ioreport_unknown_unit_is_a_reason_not_a_guess() -> None:
    chans = [darwin.ChannelValue(group="Energy Model", name="CPU Energy", unit="mW", value=5)]
    d = darwin.delta_from_channels(chans, 1.0)
    assert d.total_j is None and "unit 'mW'" in str(d.reason)
    assert darwin.delta_from_channels([], 1.0).reason == "no CPU, GPU, ANE, DRAM channel in the IOReport 'Energy Model' group"


def test_powermetrics_parser_on_committed_sample() -> None:
    got = darwin.parse_powermetrics((DATA / "powermetrics_cpu_gpu_ane_power.txt").read_text())
    assert got == [(pytest.approx(0.10052), {"CPU": 7.421, "GPU": 0.012, "ANE": 0.0}),
                   (pytest.approx(0.10021), {"CPU": 6.98, "GPU": 0.85, "ANE": 0.12})]


@pytest.mark.darwin
def test_ioreport_loader_live() -> None:
    """On a real Mac: the subscription opens without root and a 0.3 s reading has CPU energy."""
    reader = darwin.open_darwin()
    assert reader.available, reader.reason
    d = one_reading(reader, 0.3)
    assert d.total_j is not None and d.total_j >= 0 and "CPU" in d.channels, d
    assert reader.source == darwin.IOREPORT_SOURCE


def test_a_counter_that_did_not_move_is_null_not_zero(rapl: FakeRapl) -> None:
    reader = linux.open_rapl(rapl.root)
    marks = PhaseMarks(reader)
    marks("start")
    rapl.add("package-0", 1_000_000)
    marks("first")
    marks("end")  # nothing moved: a real package never draws 0 W
    fields, _, reasons = probe_energy(reader, marks, None, 10, 10)
    assert fields["energy_prompt_j"] == 1.0
    assert fields["energy_gen_j"] is None and "did not move" in reasons["energy_gen_j"]
    assert fields["j_per_gen_token"] is None and "update interval" in reasons["j_per_gen_token"]


def test_bunched_first_read(rapl: FakeRapl) -> None:
    """A first read with 3 of 5 tokens: no split. With 2 of 12: the gen phase covers 12 - 2 tokens."""
    from benchd.engine.energy import row_energy

    reader = linux.open_rapl(rapl.root)

    def probe(chunk_times: list[float], gen: int) -> tuple[dict, dict, dict]:
        marks = PhaseMarks(reader)
        marks("start")
        _step(rapl, marks, "first", package=1_000_000, core=0, dram=0)
        _step(rapl, marks, "end", package=2_000_000, core=0, dram=0)
        return row_energy(reader, marks, None, 10, gen, chunk_times=chunk_times)

    fields, _, reasons = probe([1.0, 1.0, 1.0, 1.1, 1.2], 5)
    assert fields["energy_prompt_j"] is None and fields["energy_gen_j"] is None
    assert "arrived in one read with 2 more of 5" in reasons["j_per_gen_token"]
    assert "arrived in one read with 2 more of 5" in reasons["energy_prompt_j"]
    fields, sources, reasons = probe([1.0, 1.0, *(1.0 + 0.01 * i for i in range(1, 11))], 12)
    assert fields["energy_gen_j"] == 2.0 and fields["j_per_gen_token"] == 0.2  # 2 J over 12 - 2 tokens
    assert "the first read carried 2 tokens: over completion tokens - 2" in sources["j_per_gen_token"]
    assert fields["energy_prompt_j"] == 1.0 and fields["j_per_prompt_token"] == 0.1
