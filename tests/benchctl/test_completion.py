"""`benchctl completion`: the scripts, and click answering the completion protocol they use."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCHCTL = Path(sys.executable).parent / "benchctl"


def _complete(words: str, cword: int) -> list[str]:
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(cword), "_BENCHCTL_COMPLETE": "bash_complete"}
    done = subprocess.run([str(BENCHCTL)], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    return [line.split(",", 1)[1] for line in done.stdout.splitlines()]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_script(shell: str) -> None:
    done = subprocess.run([str(BENCHCTL), "completion", shell], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "_BENCHCTL_COMPLETE" in done.stdout and f"{shell}_complete" in done.stdout
    if shutil.which(shell):
        check = subprocess.run([shell, "-n"], input=done.stdout, capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stderr


def test_completion_answers_commands_and_subcommands() -> None:
    assert "completion" in _complete("benchctl comp", 1)
    assert _complete("benchctl service ", 2) == ["install", "status", "uninstall"]
    assert _complete("benchctl completion ", 2) == ["bash", "fish", "zsh"]


def test_completion_rejects_unknown_shell() -> None:
    done = subprocess.run([str(BENCHCTL), "completion", "tcsh"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "tcsh" in done.stderr and "Traceback" not in done.stderr
