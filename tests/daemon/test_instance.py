"""Single instance, file modes, stale sockets, the peer-uid check and signals — on a real benchd process."""

from __future__ import annotations

import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchd import peercred
from benchd.config import Config
from benchd.daemon.instance import AlreadyRunning, InstanceGuard, ensure_private_dir


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_modes_and_sigterm_exit(run_daemon) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    assert mode(d.state_dir) == 0o700
    assert stat.S_ISSOCK(os.lstat(d.socket).st_mode) and mode(d.socket) == 0o600
    assert mode(d.state_dir / "benchd.sqlite3") == 0o600
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    assert d.wait(timeout=10) == 0
    assert time.monotonic() - t0 < 10
    assert not d.socket.exists()  # unlinked on the way out
    assert "benchd stopped" in d.output()


def test_second_daemon_exits_3_and_first_keeps_serving(run_daemon) -> None:  # type: ignore[no-untyped-def]
    first = run_daemon()
    second = run_daemon(wait=False)
    assert second.wait(timeout=20) == 3
    assert "another benchd" in second.output()
    assert first.client().health()["pid"] == first.pid  # its socket was not stolen
    assert first.socket.exists()


def test_stale_socket_is_cleaned_up(run_daemon, short_base: Path) -> None:  # type: ignore[no-untyped-def]
    state = short_base / "s"
    state.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(state / "benchd.sock"))
    stale.close()  # a socket file nobody listens on: what a kill -9'd daemon leaves
    assert stat.S_ISSOCK(os.lstat(state / "benchd.sock").st_mode)
    d = run_daemon()
    assert d.client().health()["pid"] == d.pid


def test_not_a_socket_at_socket_path_is_bad_config(run_daemon, short_base: Path) -> None:  # type: ignore[no-untyped-def]
    state = short_base / "s"
    state.mkdir(mode=0o700)
    (state / "benchd.sock").write_text("precious")
    d = run_daemon(wait=False)
    assert d.wait(timeout=20) == 2
    assert (state / "benchd.sock").read_text() == "precious"
    assert "not a socket" in d.output()


def test_too_long_socket_path_is_bad_config(run_daemon) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon(wait=False, args=("--socket", "/tmp/" + "x" * 120 + ".sock"))
    assert d.wait(timeout=20) == 2
    assert "limit of Unix sockets" in d.output()


def test_under_launchd_refusals_exit_0_with_the_reason(run_daemon) -> None:  # type: ignore[no-untyped-def]
    """Issue 14, finding 8: KeepAlive{SuccessfulExit=false} restarts any non-zero exit every 30 s for
    ever; with --launchd (the plist passes it) exits 2 and 3 log why and exit 0 instead."""
    bad = run_daemon(wait=False, args=("--socket", "/tmp/" + "x" * 120 + ".sock", "--launchd"))
    assert bad.wait(timeout=20) == 0
    assert "limit of Unix sockets" in bad.output() and "exiting 0 instead of 2" in bad.output()
    first = run_daemon()
    second = run_daemon(wait=False, args=("--launchd",))
    assert second.wait(timeout=20) == 0
    assert "another benchd" in second.output() and "exiting 0 instead of 3" in second.output()
    assert first.client().health()["pid"] == first.pid


def test_loosened_state_dir_is_fixed_at_start(run_daemon, short_base: Path) -> None:  # type: ignore[no-untyped-def]
    state = short_base / "s"
    state.mkdir()
    os.chmod(state, 0o777)
    d = run_daemon()
    assert mode(state) == 0o700
    assert "fixed loose permissions" in d.output()


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown to another uid")
def test_state_dir_owned_by_another_user_is_refused(run_daemon, short_base: Path) -> None:  # type: ignore[no-untyped-def]
    state = short_base / "s"
    state.mkdir(mode=0o700)
    os.chown(state, 65534, 65534)
    d = run_daemon(wait=False)
    assert d.wait(timeout=20) == 2
    assert "owned by uid 65534" in d.output()


def test_instance_guard_in_process(tmp_path: Path) -> None:
    cfg = Config.resolve(state_dir=tmp_path, cache_dir=tmp_path)
    a, b = InstanceGuard(cfg), InstanceGuard(cfg)
    a.acquire()
    with pytest.raises(AlreadyRunning) as info:
        b.acquire()
    assert str(os.getpid()) in str(info.value)
    a.release()
    b.acquire()  # released → the next one gets it
    b.release()


def test_ensure_private_dir_refuses_a_file(tmp_path: Path) -> None:
    from benchd.errors import BenchdError

    f = tmp_path / "f"
    f.write_text("")
    with pytest.raises(BenchdError, match="not a directory"):
        ensure_private_dir(f)


# ------------------------------------------------------------------------------------------ peer uid

_PEER_CLIENT = r"""
import os, socket, sys
os.setgid(65534); os.setgroups([]); os.setuid(65534)
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
try:
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
except BrokenPipeError:
    pass  # the daemon answered and closed before reading anything: the 403 is still in our buffer
data = b""
while True:
    try:
        got = s.recv(65536)
    except ConnectionResetError:
        break
    if not got:
        break
    data += got
sys.stdout.write(data.decode(errors="replace"))
"""


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid (CI runs as root)")
def test_other_uid_is_refused_by_the_peer_check(run_daemon) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    # Loosen every mode on the way so the file permissions cannot be what stops the other user.
    for p in (d.base, d.state_dir):
        os.chmod(p, 0o755)
    os.chmod(d.socket, 0o777)
    out = subprocess.run([sys.executable, "-c", _PEER_CLIENT, str(d.socket)], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr  # it connected: the kernel let it through the file modes
    assert out.stdout.startswith("HTTP/1.1 403"), out.stdout
    assert '"code":"forbidden"' in out.stdout
    assert '"version"' not in out.stdout  # the health body never reached it
    assert "refused a connection from uid 65534" in d.output()
    assert d.client().health()["pid"] == d.pid  # same uid: still served


# ---------------------------------------------------------------------------- peercred struct layout


def test_ucred_layout() -> None:
    raw = struct.pack("iII", 1234, 501, 20)
    assert peercred.parse_ucred(raw) == (1234, 501, 20)
    assert peercred.UCRED_SIZE == 12


def test_xucred_layout_matches_darwin_header() -> None:
    """<sys/ucred.h>: u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16] → 76 bytes.

    Offsets: cr_version 0, cr_uid 4, cr_ngroups 8, (2 bytes padding), cr_groups 12..76.
    """
    assert peercred.XUCRED_SIZE == 76
    buf = bytearray(76)
    struct.pack_into("I", buf, 0, peercred.XUCRED_VERSION)
    struct.pack_into("I", buf, 4, 501)
    struct.pack_into("h", buf, 8, 3)
    struct.pack_into("3I", buf, 12, 20, 12, 61)
    assert peercred.parse_xucred(bytes(buf)) == 501
    version, uid, ngroups, *groups = struct.unpack(peercred.XUCRED_FORMAT, bytes(buf))
    assert (version, uid, ngroups, groups[:3]) == (0, 501, 3, [20, 12, 61])
    bad = bytearray(buf)
    struct.pack_into("I", bad, 0, 7)
    with pytest.raises(peercred.PeerCredError):
        peercred.parse_xucred(bytes(bad))


def test_peer_uid_of_a_real_socketpair() -> None:
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        if sys.platform.startswith("linux"):
            assert peercred.peer_uid(a) == os.getuid()
    with pytest.raises(peercred.PeerCredError):
        peercred.peer_uid(None)


def test_live_socket_of_another_state_dir_is_not_stolen(run_daemon, short_base: Path) -> None:  # type: ignore[no-untyped-def]
    first = run_daemon()
    other = run_daemon(wait=False, state_dir=short_base / "t", args=("--socket", str(first.socket)))
    assert other.wait(timeout=20) == 3
    assert first.client().health()["pid"] == first.pid


def test_sigint_is_a_clean_exit_too(run_daemon) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    d.signal(signal.SIGINT)
    assert d.wait(timeout=10) == 0
    assert not d.socket.exists()
