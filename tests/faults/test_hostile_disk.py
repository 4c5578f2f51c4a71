"""The disk under benchd (issue 36): durable atomic writes that leave no temporary file on error, a log
rotation that fails on a full disk without ending the server's watch, and a corrupt state database that
gives one clear error and its own exit code (4) instead of a restart loop."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from testlib import clean_env

from benchd import atomic
from benchd.atomic import atomic_write
from benchd.servers.supervisor import Supervisor


def test_atomic_write_syncs_the_file_and_its_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = atomic._sync

    def spy(fd: int) -> None:
        synced.append("dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real(fd)

    monkeypatch.setattr(atomic, "_sync", spy)
    atomic_write(tmp_path / "a.json", b"{}")
    assert (tmp_path / "a.json").read_bytes() == b"{}"
    assert synced == ["file", "dir"]


def test_a_failed_write_leaves_no_temporary_file_and_the_old_content(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    atomic_write(target, b"old")

    def pieces():  # the disk fills half way through
        yield b"new-part"
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(target, pieces())
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


async def test_a_full_disk_during_log_rotation_keeps_the_cap_and_the_watch(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "srv.log"
    log.write_bytes(b"x" * 4096)

    def full(src: object, dst: object) -> None:
        Path(str(dst)).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("benchd.servers.supervisor.shutil.copyfile", full)
    with pytest.raises(OSError):
        await Supervisor._rotate_if_needed(log, cap=1024)
    assert log.stat().st_size == 0, "the cap holds even when the copy fails"
    assert not (tmp_path / "srv.log.1").exists(), "a partial copy was left behind"


def test_a_corrupt_database_is_one_clear_error_and_exit_4() -> None:
    state = Path(os.environ.get("TMPDIR", "/tmp")) / f"bd-corrupt-{os.getpid()}"
    state.mkdir(mode=0o700, exist_ok=True)
    try:
        (state / "benchd.sqlite3").write_bytes(b"this is not a database, it is a hostile file" * 100)
        cmd = [sys.executable, "-m", "benchd", "--state-dir", str(state)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=clean_env())
        assert out.returncode == 4, out.stderr[-2000:]
        assert "corrupt" in out.stderr and "move it aside" in out.stderr and "Traceback" not in out.stderr
        under = subprocess.run([*cmd, "--launchd"], capture_output=True, text=True, timeout=120, env=clean_env())
        assert under.returncode == 0 and "corrupt" in under.stderr  # launchd would restart a non-zero exit
        assert (state / "benchd.sqlite3").read_bytes().startswith(b"this is not a database"), "it was touched"
    finally:
        subprocess.run(["rm", "-rf", str(state)], check=False)
