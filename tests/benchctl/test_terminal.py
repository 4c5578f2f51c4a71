"""The terminal contract: NO_COLOR (https://no-color.org) drops every style of every command on a TTY
too (doctor, service, prune print click styles), and with `--json` an error is a JSON object on stdout
with the exit code, whatever raised it (the daemon unreachable, a bad id, a usage error)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

BENCHCTL = [sys.executable, "-m", "benchctl"]


def _on_a_tty(args: list[str], env: dict[str, str]) -> bytes:
    """The command's stdout and stderr as a terminal shows them (a pseudo-terminal: click keeps styles)."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([*BENCHCTL, *args], stdout=slave, stderr=slave, stdin=subprocess.DEVNULL, env=env)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            out += chunk
        proc.wait(timeout=120)
        return out
    finally:
        os.close(master)


@pytest.mark.parametrize("args", [["doctor"], ["prune", "--older-than", "1d", "--dry-run"]])
def test_no_color_on_a_tty(args: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "BENCHD_STATE_DIR": str(tmp_path / "state"), "BENCHD_SOCKET": str(tmp_path / "none.sock")}
    env.pop("NO_COLOR", None)
    coloured = _on_a_tty(args, env)
    plain = _on_a_tty(args, {**env, "NO_COLOR": "1"})
    assert plain.strip(), plain
    assert b"\x1b[" not in plain, plain
    if args == ["doctor"]:
        assert b"\x1b[" in coloured, coloured  # the check itself sees colour where NO_COLOR is unset


def test_json_errors_are_json(tmp_path: Path) -> None:
    env = {**os.environ, "BENCHD_STATE_DIR": str(tmp_path / "state"), "BENCHD_SOCKET": str(tmp_path / "none.sock")}
    (tmp_path / "state").mkdir()
    cases = [(["jobs", "--json", "--socket", str(tmp_path / "none.sock")], 3, "unreachable"),
             (["report", "no-such-runbook", "--json"], 2, "not_found"),
             (["report", "--json", "--no-such-option"], 2, "usage"),
             (["logs", "NOT!AN-ID", "--json"], 2, None), (["prune", "--older-than", "soon", "--json"], 2, None),
             (["models", "tiny", "--kind", "vision", "--size", "medium", "--json", "--cache-dir", str(tmp_path)], 2,
              "bad_option")]
    for args, rc, code in cases:
        out = subprocess.run([*BENCHCTL, *args], capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == rc, (args, out.stdout, out.stderr)
        err = json.loads(out.stdout)["error"]
        assert err["code"] == code and err["exit_code"] == rc and err["message"], (args, err)


def test_runtimes_list_prints_paths_whole_at_any_width(tmp_path: Path) -> None:
    """`runtimes list` piped or on a 40-column terminal: each path (or reason) stands whole on a line of its
    own (a table folded them at 80 columns), so it can be copied."""
    from benchctl.commands.runtimes import runtime_lines

    long_path = "/opt/" + "very-long-folder-name/" * 6 + "bin/llama-server"
    lines = runtime_lines([{"name": "llama-server", "installed": True, "version": "b1-0c1e570", "how": "env",
                            "path": long_path}])
    assert lines == ["llama-server: installed (b1-0c1e570, found by env)", f"  {long_path}"]
    env = {**os.environ, "COLUMNS": "40"}
    out = subprocess.run([*BENCHCTL, "runtimes", "list", "--cache-dir", str(tmp_path / "empty")], capture_output=True,
                         text=True, timeout=120, env={k: v for k, v in env.items() if not k.startswith("BENCHD_")})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    detail = lines[lines.index(next(x for x in lines if x.startswith("llama-server: "))) + 1].strip()
    found_on_path = Path(detail).is_file()  # a machine with llama-server on PATH lists that file, whole
    assert found_on_path or (detail.startswith("no llama-server found (") and detail.endswith("`")), out.stdout
