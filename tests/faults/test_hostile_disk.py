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


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What `benchd.atomic` fsyncs, in order: "file" or "dir" per call of its one sync function."""
    calls: list[str] = []
    real = atomic._sync

    def spy(fd: int) -> None:
        calls.append("dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real(fd)

    monkeypatch.setattr(atomic, "_sync", spy)
    return calls


def test_atomic_write_syncs_the_file_and_its_directory(tmp_path: Path, synced: list[str]) -> None:
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


def test_atomic_write_sets_an_exact_mode_and_streams_a_file(tmp_path: Path) -> None:
    """`mode` (an installed binary's 0o755, a service unit's 0o644) whatever the umask; `file_chunks` copies a
    file in pieces (an installed binary)."""
    src = tmp_path / "built"
    src.write_bytes(b"\x7fELF" + bytes(range(256)) * 90)  # several 4 KiB pieces
    old = os.umask(0o077)
    try:
        atomic_write(tmp_path / "bin" / "tool", atomic.file_chunks(src, size=4096), mode=0o755)
        atomic_write(tmp_path / "unit", "[Unit]\n", mode=0o644)
    finally:
        os.umask(old)
    assert (tmp_path / "bin" / "tool").read_bytes() == src.read_bytes()
    assert (tmp_path / "bin" / "tool").stat().st_mode & 0o7777 == 0o755
    assert (tmp_path / "unit").stat().st_mode & 0o7777 == 0o644
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["tool"]


def test_a_check_that_fails_at_the_end_of_a_stream_keeps_the_old_file(tmp_path: Path) -> None:
    """A download's hash is known only after its last piece: raising then leaves the old file, no temp."""
    target = tmp_path / "sdist.tar.gz"
    atomic_write(target, b"old")

    def download():
        yield b"a" * 100
        raise ValueError("sha256 mismatch")

    with pytest.raises(ValueError, match="mismatch"):
        atomic_write(target, download())
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["sdist.tar.gz"]


def test_atomic_replace_syncs_and_renames_a_file_a_tool_wrote(tmp_path: Path, synced: list[str]) -> None:
    tmp = tmp_path / "logits.kld.tmp"
    tmp.write_bytes(b"logits")  # as llama-perplexity --kl-divergence-base writes it
    atomic.atomic_replace(tmp, tmp_path / "logits.kld")
    assert (tmp_path / "logits.kld").read_bytes() == b"logits" and not tmp.exists()
    assert synced == ["file", "dir"]
    with pytest.raises(FileNotFoundError):
        atomic.atomic_replace(tmp_path / "missing.tmp", tmp_path / "other")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logits.kld"]


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
