"""Shared plumbing for the benchmark scripts: machine facts, a real llama-server, a real benchd daemon,
CPU accounting of process trees, llama-server's Prometheus counters.

Why a module and not copies: every script measures RATIOS side by side in one run, and they must all
start servers and daemons the same way (same binary, same flags benchd itself uses) for the ratios to
mean anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchd.config import default_cache_dir  # noqa: E402


def cache_dir() -> Path:
    return default_cache_dir()


def llama_bin(name: str = "llama-server") -> Path:
    from benchd.servers import locate

    path, _how = locate.resolve_llama_binary(None, cache_dir(), name)
    return Path(path)


def tiny(size: str = "small") -> Any:
    from benchctl.tinymodels import ensure

    return ensure(cache_dir(), size=size, seed=0)


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "cores_logical": psutil.cpu_count(),
        "cores_physical": psutil.cpu_count(logical=False),
        "cpu_model": model or platform.processor(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "loadavg_1m": os.getloadavg()[0],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_json(url: str, body: Any = None, timeout: float = 60.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def http_text(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


# ----------------------------------------------------------------------------------- llama-server


def server_argv(binary: Path, model: str, port: int, ctx: int, threads: int, extra: list[str] | None = None) -> list[str]:
    """The same argv benchd's llama-server adapter builds (`--metrics`, `-np 1`, `-c`), plus `-t`."""
    return [str(binary), "-m", model, "--host", "127.0.0.1", "--port", str(port), "--metrics",
            "-c", str(ctx), "-np", "1", "-t", str(threads), *(extra or [])]


@dataclass
class LlamaServer:
    argv: list[str]
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metrics(self) -> dict[str, float]:
        from benchd.engine.probe import parse_prometheus

        return parse_prometheus(http_text(self.base + "/metrics"))


def on_cpus(cpus: set[int] | None) -> Any:
    """A `preexec_fn` that pins the child (and every thread it creates) to `cpus`; None: no pinning."""
    if not cpus:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


@contextlib.contextmanager
def llama_server(model: str, ctx: int, threads: int = 1, extra: list[str] | None = None,
                 cpus: set[int] | None = None) -> Iterator[LlamaServer]:
    port = free_port()
    argv = server_argv(llama_bin(), model, port, ctx, threads, extra)
    log = Path(tempfile.mkstemp(prefix="bench-llama-", suffix=".log")[1])
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=on_cpus(cpus))
    srv = LlamaServer(argv, port, proc, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited {proc.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(OSError, ValueError):
                if http_json(srv.base + "/health", timeout=2).get("status") == "ok":
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("llama-server not ready in 60 s")
            time.sleep(0.1)
        yield srv
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.unlink(missing_ok=True)


def decode_rate(before: dict[str, float], after: dict[str, float]) -> tuple[float | None, float]:
    """(server decode tok/s over the interval, tokens predicted) from llama-server's cumulative counters."""
    n = after.get("llamacpp:tokens_predicted_total", 0) - before.get("llamacpp:tokens_predicted_total", 0)
    s = after.get("llamacpp:tokens_predicted_seconds_total", 0) - before.get("llamacpp:tokens_predicted_seconds_total", 0)
    return (n / s if s > 0 else None), n


def prompt_rate(before: dict[str, float], after: dict[str, float]) -> float | None:
    n = after.get("llamacpp:prompt_tokens_total", 0) - before.get("llamacpp:prompt_tokens_total", 0)
    s = after.get("llamacpp:prompt_seconds_total", 0) - before.get("llamacpp:prompt_seconds_total", 0)
    return n / s if s > 0 else None


# ---------------------------------------------------------------------------------------- CPU


def children_cpu() -> float:
    """User+system CPU of this process's reaped descendants (a finished subprocess's whole tree,
    as long as each parent waited for its children — true for the tools measured here)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def proc_cpu(pid: int) -> float:
    """A live process's own user+system CPU (all its threads; not its children)."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def run_measured(argv: list[str], env: dict[str, str] | None = None, timeout: float = 900,
                 cwd: str | None = None, cpus: set[int] | None = None) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run a tool to completion: (result, CPU-seconds of its whole process tree, wall seconds)."""
    c0, w0 = children_cpu(), time.perf_counter()
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                         preexec_fn=on_cpus(cpus))
    return res, children_cpu() - c0, time.perf_counter() - w0


# ---------------------------------------------------------------------------------------- benchd


@dataclass
class Daemon:
    state: Path
    proc: subprocess.Popen[bytes]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def socket(self) -> Path:
        return self.state / "benchd.sock"

    def client(self) -> Any:
        from benchctl.client import Client

        return Client(self.socket, timeout=60)

    def wait_job(self, job: str, timeout: float = 1800) -> dict[str, Any]:
        """Follow the job's event stream to its end (one connection, no polling), then read the job."""
        c = self.client()
        deadline = time.monotonic() + timeout
        for _line in c.events(job, follow=True):
            if time.monotonic() > deadline:
                raise TimeoutError(job)
        return c.job(job)  # type: ignore[no-any-return]

    def events(self, job: str) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.client().events(job, follow=False)]


@contextlib.contextmanager
def benchd_daemon(state: Path | None = None, src: Path | None = None, cpus: set[int] | None = None) -> Iterator[Daemon]:
    """A real daemon on `state` (a temp dir by default). `src`: run another checkout's benchd (its
    folder first on PYTHONPATH, this venv's packages) — e.g. main before a change, for A/B in one run.
    `cpus`: the daemon (every thread, and what it spawns) pinned there."""
    tmp = None
    if state is None:
        tmp = tempfile.mkdtemp(prefix="benchd-bench-")
        state = Path(tmp) / "state"
    env = dict(os.environ, BENCHD_STATE_DIR=str(state))
    env.pop("BENCHD_SOCKET", None)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    # cwd: `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH
    proc = subprocess.Popen([sys.executable, "-m", "benchd", "--state-dir", str(state)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=on_cpus(cpus), cwd=str(src) if src is not None else None)
    d = Daemon(state, proc, env)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"benchd exited {proc.returncode}")
            with contextlib.suppress(Exception):
                d.client().health()
                break
            if time.monotonic() > deadline:
                raise RuntimeError("benchd not reachable in 30 s")
            time.sleep(0.1)
        yield d
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------- statistics


def med(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs: list[float]) -> tuple[float, float] | None:
    xs = sorted(x for x in xs if x is not None)
    return (xs[0], xs[-1]) if xs else None


def fmt(x: float | None, nd: int = 3) -> str:
    return "null" if x is None else f"{x:.{nd}f}"


@dataclass
class EngineRun:
    """One sweep run in-process on the daemon's engine (`run_job`, real servers): its outcome, wall time,
    and the store still open for the reader's questions (`run_engine`'s `read`)."""

    config: Any
    store: Any
    job: str
    outcome: Any
    wall_s: float


def run_engine(sweep: Any, state: Path, read: Any, on_event: Any = None) -> Any:
    """Run `sweep` on the engine in a fresh state dir `state` and return `read(EngineRun)` (the store is
    closed after it): every script that times a whole sweep starts it the same way."""
    import asyncio

    from benchd.config import Config
    from benchd.engine.scheduler import run_job
    from benchd.store import Store

    config = Config.resolve(state_dir=state, cache_dir=cache_dir())
    state.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    try:
        job, _ = store.create_job(sweep)
        t0 = time.monotonic()
        outcome = asyncio.run(run_job(job.id, sweep, store, config, on_event or (lambda e: None)))
        return read(EngineRun(config, store, job.id, outcome, time.monotonic() - t0))
    finally:
        store.close()
