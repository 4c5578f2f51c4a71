"""Helpers shared by the test suites (daemon, faults, benchctl): a real `benchd` process per test, polling,
and a hand-written HTTP request over the socket.

A real `benchd` process per test, on a short temporary state dir (socket path well under 100 bytes).

`run_daemon()` starts `benchd --state-dir <tmp>/s` as a subprocess, waits until `/v1/health` answers and
returns a `DaemonProc`; teardown kills whatever is left (the daemon and every process it spawned,
found through psutil before the kill, since servers live in their own sessions).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psutil
import pytest

from benchctl.client import Client, Unreachable

BENCHD = [sys.executable, "-m", "benchd"]
BENCHCTL = [sys.executable, "-m", "benchctl"]


@contextlib.asynccontextmanager
async def loopback_app(app: Any) -> AsyncIterator[str]:
    """Serve an aiohttp `web.Application` (a test's double) on 127.0.0.1 at a free port; yields its base URL."""
    from aiohttp import web

    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("BENCHD_STATE_DIR", "BENCHD_SOCKET")}
    env.update(extra)
    return env


def benchctl_inproc(*args: str, env: dict[str, str] | None = None,
                    input: str | None = None) -> subprocess.CompletedProcess[str]:
    """`benchctl ARGS` through its real entry point (`benchctl.__main__.main`: exit codes, --json errors) in
    this process, with click's stream capture: a subprocess's Python start-up and imports (~0.5-1 s a call)
    buy nothing where the test checks only the output and the exit code. `env` is added to os.environ for
    the call (keep a subprocess where the test needs a fresh interpreter or a replaced environment)."""
    from click.testing import CliRunner

    from benchctl.__main__ import main

    saved = sys.argv
    with CliRunner().isolation(input=input, env=env) as (out, err, _):
        sys.argv = ["benchctl", *args]
        try:
            main()
            rc = 0
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.argv = saved
        stdout, stderr = out.getvalue().decode(errors="replace"), err.getvalue().decode(errors="replace")
    return subprocess.CompletedProcess(["benchctl", *args], rc, stdout, stderr)


@dataclass
class DaemonProc:
    base: Path
    state_dir: Path
    proc: subprocess.Popen[bytes]
    out_path: Path
    spawned: set[int] = field(default_factory=set)

    @property
    def socket(self) -> Path:
        return self.state_dir / "benchd.sock"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def client(self, timeout: float = 30.0) -> Client:
        return Client(self.socket, timeout=timeout)

    def output(self) -> str:
        try:
            return self.out_path.read_text(errors="replace")
        except OSError:
            return ""

    def descendants(self) -> list[psutil.Process]:
        try:
            kids = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        self.spawned.update(k.pid for k in kids)
        return kids

    def signal(self, sig: int) -> None:
        self.descendants()
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def benchctl_argv(self) -> list[str]:
        return list(BENCHCTL)

    def benchctl_env(self) -> dict[str, str]:
        return clean_env(BENCHD_SOCKET=str(self.socket))

    def benchctl(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*BENCHCTL, *args], capture_output=True, text=True, timeout=timeout,
                              env=self.benchctl_env())


def wait_healthy(socket: Path, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    client = Client(socket, timeout=2.0)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"benchd exited with {proc.returncode} before it answered")
        try:
            return client.health()
        except Unreachable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def start_benchd(base: Path, state_dir: Path | None = None, wait: bool = True, args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> DaemonProc:
    state = state_dir or base / "s"
    out_path = base / f"benchd-{time.monotonic_ns()}.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen([*BENCHD, "--state-dir", str(state), "--log-level", "debug", *args],
                                stdout=out, stderr=subprocess.STDOUT, env=env or clean_env(),
                                start_new_session=True)
    d = DaemonProc(base=base, state_dir=state, proc=proc, out_path=out_path)
    if wait:
        try:
            wait_healthy(d.socket, proc)
        except Exception:
            proc.kill()
            raise RuntimeError(f"benchd did not come up:\n{d.output()}") from None
    return d


def _kill_all(daemons: list[DaemonProc]) -> None:
    for d in daemons:
        d.descendants()
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait(timeout=10)
    for d in daemons:
        for pid in d.spawned:
            try:
                p = psutil.Process(pid)
                os.killpg(os.getpgid(pid), signal.SIGKILL)
                _until_dead(p, timeout=5)
            except (psutil.NoSuchProcess, ProcessLookupError, PermissionError):
                pass


def _until_dead(p: psutil.Process, timeout: float) -> None:
    """Wait until `p` is gone or a zombie. A zombie is dead: the daemon's orphans are reaped by PID 1 on
    its own schedule, which psutil's `wait` (it waits for the pid to vanish) sat through for ~1 s each."""
    deadline = time.monotonic() + timeout
    while p.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.01)


class MachineStalls:
    """Time this process was kept from running while a block ran: a thread that asks to wake every 10 ms
    adds up how late each wake came beyond 20 ms. A test that bounds a wall time (a contract such as
    cancel's 2 s) adds this to its bound, so its verdict does not depend on the machine: this VM stops
    every process for up to about 2 s, for reasons not known (docs/testing.md#machine-stalls)."""

    def __init__(self) -> None:
        self.stalled_s = 0.0
        self._stop = False
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def _tick(self) -> None:
        last = time.monotonic()
        while not self._stop:
            time.sleep(0.01)
            now = time.monotonic()
            self.stalled_s += max(0.0, now - last - 0.02)
            last = now

    def __enter__(self) -> MachineStalls:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._thread.join()


@pytest.fixture
def short_base() -> Iterator[Path]:
    """A short temporary folder (/tmp/bd-XXXX): `<it>/s/benchd.sock` stays far below 100 bytes."""
    base = Path(tempfile.mkdtemp(prefix="bd-", dir="/tmp"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def run_daemon(short_base: Path) -> Iterator[Callable[..., DaemonProc]]:
    """Factory: `run_daemon()` → a healthy DaemonProc on `<short_base>/s`; call again to restart."""
    started: list[DaemonProc] = []

    def start(**kwargs: Any) -> DaemonProc:
        d = start_benchd(short_base, **kwargs)
        started.append(d)
        return d

    try:
        yield start
    finally:
        _kill_all(started)
        for d in started:
            if d.proc.returncode not in (0, None) and os.environ.get("BENCHD_TEST_SHOW_LOGS"):
                print(d.output())


@pytest.fixture(scope="module")
def shared_daemon() -> Iterator[DaemonProc]:
    """One daemon for a module's read-mostly tests (bad-input cases that must not change its state)."""
    base = Path(tempfile.mkdtemp(prefix="bd-", dir="/tmp"))
    d = start_benchd(base)
    try:
        yield d
    finally:
        _kill_all([d])
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def poll() -> Callable[..., Any]:
    return wait_until


def wait_until(pred: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll `pred` until it returns something truthy; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(interval)


async def until(pred: Callable[[], object], what: str, within_s: float = 30.0) -> None:
    """Wait in the event loop for `pred()` to hold (the event under test); AssertionError after `within_s`."""
    deadline = time.monotonic() + within_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within_s} s")
        await asyncio.sleep(0.02)


def raw_request(sock_path: Path, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
                timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """A hand-written HTTP/1.1 request (so the test controls every byte), read to the close."""
    hdrs = {"Host": "benchd", "Connection": "close", "Content-Length": str(len(body)), **(headers or {})}
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(sock_path))
        try:
            s.sendall(head.encode() + body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer 413 and close before taking the whole body
        chunks = []
        while True:
            try:
                got = s.recv(65536)
            except ConnectionResetError:
                break
            if not got:
                break
            chunks.append(got)
    data = b"".join(chunks)
    head_b, _, rest = data.partition(b"\r\n\r\n")
    lines = head_b.decode(errors="replace").split("\r\n")
    status = int(lines[0].split()[1])
    headers_out = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if headers_out.get("transfer-encoding") == "chunked":
        out, buf = b"", rest
        while buf:
            size_s, _, buf = buf.partition(b"\r\n")
            size = int(size_s or b"0", 16)
            if size == 0:
                break
            out, buf = out + buf[:size], buf[size + 2:]
        rest = out
    return status, headers_out, rest


# ------------------------------------------------------------------------------ fake powercap tree


class FakeRapl:
    """A powercap tree laid out like /sys/class/powercap: `intel-rapl:0` (package-0) with sub-zones
    `intel-rapl:0:0` (core) and `intel-rapl:0:1` (dram), each with `name`, `energy_uj` and
    `max_energy_range_uj`.

    A test double because this VM and CI have no powercap (no RAPL passthrough): only the kernel's files
    are faked; benchd's reader, wrap-around and phase arithmetic run for real on them. `set`/`add` move
    a counter (wrapping to 0 at the range, as the kernel's do); `drive(watts)` advances every counter
    from a separate process at a constant power per zone until `stop()`.
    """

    ZONES: ClassVar[dict[str, str]] = {"package-0": "intel-rapl:0", "core": "intel-rapl:0:0", "dram": "intel-rapl:0:1"}

    def __init__(self, root: Path, max_uj: int = 262_143_328_850) -> None:
        self.root = root
        self.max_uj = max_uj
        self.values = dict.fromkeys(self.ZONES, 0)
        self._stop: Any = None
        root.mkdir(parents=True, exist_ok=True)
        (root / "intel-rapl").mkdir(exist_ok=True)  # the control type: no counter, must be ignored
        for name, zone in self.ZONES.items():
            d = root / zone
            d.mkdir(exist_ok=True)
            (d / "name").write_text(name + "\n")
            (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
            self.set(name, 0)

    def set(self, name: str, uj: int) -> None:
        self.values[name] = uj % self.max_uj
        path = self.root / self.ZONES[name] / "energy_uj"
        tmp = path.with_name(".energy_uj.tmp")
        tmp.write_text(f"{self.values[name]}\n")
        os.replace(tmp, path)

    def add(self, name: str, uj: int) -> None:
        self.set(name, self.values[name] + uj)

    def drive(self, watts: dict[str, float], period_s: float = 0.002) -> None:
        """Advance the counters at `watts` per zone from a separate process (a thread would wait for the
        GIL while the test's event loop reads a stream, and a phase would see no energy at all)."""
        import json

        self._stop = subprocess.Popen([sys.executable, "-c", _DRIVE, str(self.root), json.dumps(
            {self.ZONES[n]: w for n, w in watts.items()}), json.dumps(self.values), str(self.max_uj), str(period_s)])

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.kill()
            self._stop.wait()


_DRIVE = """
import json, os, sys, time
root, watts, start, max_uj, period = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
names = {"intel-rapl:0": "package-0", "intel-rapl:0:0": "core", "intel-rapl:0:1": "dram"}
t0 = time.perf_counter()
while True:
    time.sleep(period)
    dt = time.perf_counter() - t0
    for zone, w in watts.items():
        path = os.path.join(root, zone, "energy_uj")
        tmp = os.path.join(root, zone, ".energy_uj.drive")
        with open(tmp, "w") as f:
            f.write(str((start[names[zone]] + round(w * dt * 1e6)) % max_uj) + chr(10))
        os.replace(tmp, path)
"""


def assert_golden(path: Path, name: str, got: Any, indent: int = 0) -> None:
    """`got` (JSON data) equals the entry `name` recorded in `path`; BENCHD_GOLDEN_RECORD=1 records it instead."""
    import json

    got = json.loads(json.dumps(got))  # tuples → lists, as the file holds them
    recorded = json.loads(path.read_text()) if path.exists() else {}
    if os.environ.get("BENCHD_GOLDEN_RECORD"):
        recorded[name] = got
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(recorded, indent=indent, sort_keys=True) + "\n")
    assert name in recorded, f"nothing recorded for {name} in {path.name}: run with BENCHD_GOLDEN_RECORD=1"
    assert got == recorded[name]


def printed_comparison(text: str, label: str, a: list[float], b: list[float], axis: str, names: tuple[str, str],
                       *, paired: bool = True, family_alpha: float | None = None,
                       starts: int | None = None) -> tuple[str, list[str]]:
    """The line of a Pareto text that compares `names` on `axis` (found by the axis's `label`, e.g. "peak
    memory"), and the sentences the one formatter writes for the comparison recomputed from the samples
    `a`, `b` at the α printed on that line (either orientation, either subject), each without its medians'
    clause (that comes from the cell points, not the paired samples): the line matches one of them when the
    report printed the comparison of these samples.

    The line prints α to 3 significant digits; recomputing at that rounded value can move a bound or the
    rounds-to-resolve advice across a rounding edge. With `family_alpha` (the view's `ContextPareto.alpha`)
    the exact α is recovered as the family α split over the pair's axes (the divisor whose 3-digit print
    is the printed one). `starts`: the server starts the samples rest on (`Samples.starts`), said in the
    sentence."""
    import re

    from benchd.results.text import comparison_sentence
    from benchd.stats.axes import AXES
    from benchd.stats.comparison import compare_axis

    line = next(x.strip() for x in text.splitlines() if label in x and "α = " in x and "CI" in x
                and all(n in x for n in names))
    shown = line.rsplit("α = ", 1)[1].rstrip(")")
    alpha = float(shown)
    if family_alpha is not None:
        alpha = next(family_alpha / k for k in range(1, 64) if f"{family_alpha / k:.3g}" == shown)
    spec = AXES[axis]

    def bare(t: str) -> str:
        return re.sub(r"; medians [^;)]*", "", t)

    sentences = [bare(comparison_sentence(compare_axis(x, y, axis=axis, better=spec.better, margin_pct=spec.margin_pct,
                                                       alpha=alpha, paired=paired, starts=starts),
                                          *names, subject=subject))
                 for x, y in ((a, b), (b, a)) for subject in ("a", "b")]
    return bare(line), sentences
