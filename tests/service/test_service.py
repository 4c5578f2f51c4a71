"""benchd.service.manager: the LaunchAgent plist and the systemd user unit, rendered for this install, and the
install/uninstall/status flow (live on Linux only where a user systemd answers; here it usually does not)."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from benchd.service import launchd as service_darwin
from benchd.service import manager as service

VENV_BIN = Path(sys.executable).parent
BENCHCTL = VENV_BIN / "benchctl"
AWKWARD = "st ate & <x> %h $HOME"  # spaces, XML specials, systemd specifiers and expansions
DATA = Path(__file__).parents[1] / "data" / "darwin"


def test_benchd_executable_is_the_venvs() -> None:
    exe = service.benchd_executable()
    assert exe == VENV_BIN / "benchd" and os.access(exe, os.X_OK)


def test_launchd_plist_parses_and_has_the_required_keys(tmp_path: Path) -> None:
    state = tmp_path / AWKWARD
    env = {"PATH": "/opt/homebrew/bin:/usr/bin", "BENCHD_CACHE_DIR": "/c & d", "BENCHD_STATE_DIR": "/ignored"}
    plan = service.plan(state, manager="launchd", environ=env)
    data = plistlib.loads(plan.text.encode())
    assert data["Label"] == "dev.benchd"
    assert data["ProgramArguments"] == [str(VENV_BIN / "benchd"), "--state-dir", str(state), "--launchd"]
    assert data["ExitTimeOut"] == service_darwin.EXIT_TIMEOUT_S
    assert data["ProcessType"] == "Interactive"
    assert data["RunAtLoad"] is True
    assert data["KeepAlive"] == {"SuccessfulExit": False}  # restart after a crash only
    assert data["ThrottleInterval"] >= 10  # ... and not in a tight loop
    assert data["StandardOutPath"] == str(state / "logs" / "launchd.stdout.log")
    assert data["StandardErrorPath"] == str(state / "logs" / "launchd.stderr.log")
    assert data["WorkingDirectory"] == str(state)
    # The state dir goes in as a flag, not through the environment.
    assert data["EnvironmentVariables"] == {"PATH": "/opt/homebrew/bin:/usr/bin", "BENCHD_CACHE_DIR": "/c & d"}
    assert plan.path == Path.home() / "Library" / "LaunchAgents" / "dev.benchd.plist"
    assert any("benchd.log" in line for line in plan.logs)


def _unit_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def test_systemd_unit_has_restart_policy_and_quoted_paths(tmp_path: Path) -> None:
    state = tmp_path / AWKWARD
    plan = service.plan(state, manager="systemd", environ={"PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    lines = _unit_lines(plan.text)
    for needed in ("Restart=on-failure", "RestartSec=10", "StartLimitIntervalSec=600", "StartLimitBurst=5",
                   "RestartPreventExitStatus=2 3 4", "WantedBy=default.target", 'Environment="PATH=/usr/bin:/bin"'):
        assert needed in lines
    exec_start = next(ln for ln in lines if ln.startswith("ExecStart="))
    escaped_state = str(state).replace("%", "%%").replace("$", "$$")
    assert exec_start == f'ExecStart="{VENV_BIN / "benchd"}" --state-dir "{escaped_state}"'
    assert plan.path == tmp_path / "cfg" / "systemd" / "user" / "benchd.service"
    assert "journal: journalctl --user -u benchd" in plan.logs


def _analyze(unit: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    # --user needs a runtime dir; an empty private one is enough for verify (checked in this container).
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    return subprocess.run(["systemd-analyze", "verify", "--user", str(unit)], capture_output=True, text=True, env=env)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    state = tmp_path / AWKWARD
    unit = tmp_path / "benchd.service"
    unit.write_text(service.plan(state, manager="systemd").text)
    probe = _analyze(unit, tmp_path)
    if "Failed to initialize manager" in probe.stderr or "RuntimeDirectory" in probe.stderr:
        pytest.skip(f"systemd-analyze cannot run a user manager here: {probe.stderr.strip()}")
    assert probe.returncode == 0, probe.stderr
    assert probe.stderr.strip() == "", probe.stderr  # warnings (unknown keys, bad values) land here
    # The check has teeth: the same verify flags a bad value and an unknown key in this file.
    broken = tmp_path / "broken" / "benchd.service"
    broken.parent.mkdir()
    broken.write_text(unit.read_text().replace("Restart=on-failure", "Restart=sometimes\nBogusKey=1"))
    bad = _analyze(broken, tmp_path)
    assert "sometimes" in bad.stderr and "BogusKey" in bad.stderr


def test_service_environment_passes_path_and_benchd_vars() -> None:
    env = service.service_environment(
        {"PATH": "/bin", "HOME": "/h", "BENCHD_CACHE_DIR": "/c", "BENCHD_STATE_DIR": "/s", "BENCHD_LLAMA_SERVER": "/l", "BENCHD_X": ""}
    )
    assert env == {"PATH": "/bin", "BENCHD_CACHE_DIR": "/c", "BENCHD_LLAMA_SERVER": "/l"}


def test_launchctl_print_parser_on_sample() -> None:
    props = service_darwin.parse_print((DATA / "launchctl_print_running.txt").read_text())
    assert props["state"] == "running"
    assert props["pid"] == "48213"
    assert props["last exit code"] == "1"
    assert props["path"] == "/Users/ada/Library/LaunchAgents/dev.benchd.plist"
    assert props["jetsam memory limit (active)"] == "(unlimited)"  # keys with parentheses too
    assert "arguments" not in props and "PATH" not in props


def test_launchctl_commands() -> None:
    plist = Path("/Users/ada/Library/LaunchAgents/dev.benchd.plist")
    assert service_darwin.bootstrap_command(plist, uid=501) == ["launchctl", "bootstrap", "gui/501", str(plist)]
    assert service_darwin.enable_command("dev.benchd", uid=501) == ["launchctl", "enable", "gui/501/dev.benchd"]
    assert service_darwin.kickstart_command("dev.benchd", uid=501) == ["launchctl", "kickstart", "-k", "gui/501/dev.benchd"]
    assert service_darwin.bootout_command("dev.benchd", uid=501) == ["launchctl", "bootout", "gui/501/dev.benchd"]
    assert service_darwin.print_command("dev.benchd", uid=501) == ["launchctl", "print", "gui/501/dev.benchd"]


class FakeLaunchd:
    """launchctl cannot run on Linux: this stand-in answers the way launchd does after `bootout` (issue 14,
    finding 2): the job stays visible to `print` for a few polls while it stops, and `bootstrap` fails
    with "Bootstrap failed: 5: Input/output error" while it is there and for a while after."""

    def __init__(self, loaded: bool, stopping_polls: int = 0, eio_bootstraps: int = 0) -> None:
        self.loaded = loaded
        self.stopping = False
        self.stopping_polls = stopping_polls
        self.eio_bootstraps = eio_bootstraps
        self.calls: list[str] = []
        self.slept = 0.0
        self.sample = (DATA / "launchctl_print_running.txt").read_text()

    def sleep(self, s: float) -> None:
        self.slept += s

    def __call__(self, cmd: list[str]) -> subprocess.CompletedProcess[str]:
        verb = cmd[1]
        self.calls.append(verb if verb != "kickstart" else "kickstart -k")
        if verb == "print":
            if self.stopping:
                self.stopping_polls -= 1
                self.loaded = self.stopping = self.stopping_polls > 0
            if self.loaded:
                return subprocess.CompletedProcess(cmd, 0, self.sample, "")
            return subprocess.CompletedProcess(cmd, 113, "", 'Could not find service "dev.benchd" in domain for port')
        if verb == "bootout":
            if not self.loaded:
                return subprocess.CompletedProcess(cmd, 3, "", "Boot-out failed: 3: No such process")
            self.stopping = True  # returns at once; the job goes away only later
            return subprocess.CompletedProcess(cmd, 0, "", "")
        if verb == "bootstrap":
            if self.loaded or self.eio_bootstraps > 0:
                self.eio_bootstraps -= 1
                return subprocess.CompletedProcess(cmd, 5, "", "Bootstrap failed: 5: Input/output error")
            self.loaded = True
        return subprocess.CompletedProcess(cmd, 0, "", "")


def test_reinstall_over_a_running_service_waits_for_it_to_go(tmp_path: Path) -> None:
    """bootout returns while the job stops; bootstrap must wait for `print` to fail and retry error 5."""
    fake = FakeLaunchd(loaded=True, stopping_polls=4, eio_bootstraps=2)
    done = service_darwin.load_agent("dev.benchd", tmp_path / "p.plist", changed=True, run=fake,
                                     uid=501, sleep=fake.sleep)
    assert fake.calls[:2] == ["print", "bootout"]
    assert fake.calls.count("print") >= 5 and fake.calls.index("enable") > fake.calls.index("bootout")
    assert fake.calls[-3:] == ["bootstrap", "bootstrap", "bootstrap"] and fake.loaded
    assert "waited until gui/501/dev.benchd was gone" in done and "attempt 3" in done[-1]
    assert fake.slept <= service_darwin.EXIT_TIMEOUT_S + service_darwin.GONE_MARGIN_S + 10


def test_unchanged_plist_restarts_in_place(tmp_path: Path) -> None:
    fake = FakeLaunchd(loaded=True)
    done = service_darwin.load_agent("dev.benchd", tmp_path / "p.plist", changed=False, run=fake, uid=501)
    assert fake.calls == ["print", "kickstart -k"] and "restarted in place" in done[0]


def test_fresh_install_bootstraps_without_bootout(tmp_path: Path) -> None:
    fake = FakeLaunchd(loaded=False)
    service_darwin.load_agent("dev.benchd", tmp_path / "p.plist", changed=True, run=fake, uid=501)
    assert fake.calls == ["print", "enable", "bootstrap"] and fake.loaded


def test_a_job_that_never_goes_is_a_clear_error(tmp_path: Path) -> None:
    fake = FakeLaunchd(loaded=True, stopping_polls=10**6)
    clock = iter(range(0, 10**6)).__next__  # one "second" per poll
    with pytest.raises(service_darwin.LaunchctlError, match="still loaded 35 s after bootout"):
        service_darwin.load_agent("dev.benchd", tmp_path / "p.plist", changed=True, run=fake, uid=501,
                                  sleep=fake.sleep, clock=lambda: float(clock()))
    assert "bootstrap" not in fake.calls


def test_persistent_error_5_gives_up(tmp_path: Path) -> None:
    fake = FakeLaunchd(loaded=False, eio_bootstraps=10**6)
    with pytest.raises(service_darwin.LaunchctlError, match="5: Input/output error"):
        service_darwin.load_agent("dev.benchd", tmp_path / "p.plist", changed=True, run=fake, uid=501,
                                  sleep=fake.sleep)
    assert fake.calls.count("bootstrap") == service_darwin.BOOTSTRAP_RETRIES


def test_launchd_install_status_uninstall_flow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """launchctl cannot run on Linux: a recording stand-in answers for it (the live path is macOS-only)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    fake = FakeLaunchd(loaded=False)
    run = fake

    plan = service.plan(tmp_path / "state", manager="launchd")
    done = service.install(plan, run=run)
    assert plan.path.read_text() == plan.text and plan.path.parent == tmp_path / "home" / "Library" / "LaunchAgents"
    assert (tmp_path / "state" / "logs").is_dir()  # launchd does not create the log dir itself
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    assert fake.calls == ["print", "enable", "bootstrap"]
    assert done[0] == f"wrote {plan.path}"
    fake.calls.clear()
    done = service.install(plan, run=run)  # again, same plist, service loaded: restart in place
    assert fake.calls == ["print", "kickstart -k"] and done[0] == f"{plan.path} is up to date"
    st = service.status(plan, run=run)
    assert (st.installed, st.current, st.state, st.pid, st.last_exit) == (True, True, "running", 48213, "1")
    done = service.uninstall(plan, run=run)
    assert not plan.path.exists() and f"removed {plan.path}" in done


def _user_systemd_error() -> str | None:
    if shutil.which("systemctl") is None:
        return "systemctl is not installed"
    return service.user_systemd_error()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="systemd is Linux-only")
def test_install_without_user_systemd_is_a_clear_error(tmp_path: Path) -> None:
    why = _user_systemd_error()
    if why is None:
        pytest.skip("this machine has a working user systemd (the live install test covers it)")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "BENCHD_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([str(BENCHCTL), "service", "install"], capture_output=True, text=True, env=env)
    assert done.returncode == 1
    assert "systemctl --user is not available here" in done.stderr and why in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "cfg").exists() and not (tmp_path / "state").exists()  # nothing was changed
    dry = subprocess.run([str(BENCHCTL), "service", "install", "--dry-run"], capture_output=True, text=True, env=env)
    assert dry.returncode == 0
    assert dry.stdout == service.plan(tmp_path / "state", manager="systemd").text
    assert str(tmp_path / "cfg" / "systemd" / "user" / "benchd.service") in dry.stderr
    status = subprocess.run([str(BENCHCTL), "service", "status"], capture_output=True, text=True, env=env)
    assert status.returncode == 0 and "not installed" in status.stdout and "unavailable" in status.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="systemd is Linux-only")
def test_install_uninstall_with_real_user_systemd(tmp_path: Path) -> None:
    why = _user_systemd_error()
    if why is not None:
        pytest.skip(f"no user systemd on this machine: {why}")
    name = f"benchd-test-{uuid.uuid4().hex[:8]}"  # never touches a real benchd.service
    plan = service.plan(tmp_path / "state", manager="systemd", name=name)
    try:
        service.install(plan)
        st = service.status(plan)
        assert st.installed and st.current and st.state.startswith("active"), st
        assert st.pid is not None
    finally:
        service.uninstall(plan)
    assert not plan.path.exists()
    assert not service.status(plan).state.startswith("active (running)")


@pytest.mark.darwin
@pytest.mark.skipif(sys.platform != "darwin", reason="needs macOS (plutil)")
def test_plist_passes_plutil_lint(tmp_path: Path) -> None:
    plist = tmp_path / "dev.benchd.plist"
    plist.write_text(service.plan(tmp_path / AWKWARD, manager="launchd").text)
    done = subprocess.run(["plutil", "-lint", str(plist)], capture_output=True, text=True)
    assert done.returncode == 0 and "OK" in done.stdout, done.stdout + done.stderr
