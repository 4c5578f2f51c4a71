"""The locked candidate as a shell script, a llama-swap entry, a llama-server preset or an MLX command, each built
from the one argv and environment the daemon ran (`lockfile.server_argv` / `server_env`).
Reasons: docs/locking.md#the-lock-in-other-forms.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable

from benchd.config import Config
from benchd.errors import BenchdError
from benchd.lock.lockfile import Locked, server_argv, server_command_line, server_env
from benchd.servers.runtimes.environment import REDACTED

FORMATS = ("shell", "llama-swap", "llama-server-preset", "mlx-command")
MLX_RUNTIMES = ("mlx_lm.server", "mlx_vlm.server")
#: The flags llama-server's router sets for each model it starts (its tools/server/README.md).
_ROUTER_FLAGS = ("--host", "--port", "--api-key", "-a", "--alias", "-hf", "--hf-repo")
#: The placeholder llama-swap fills with the port it gives the model.
SWAP_PORT = "${PORT}"
#: llama-swap's macro for a variable of its own environment: a secret the lock records by name only.
SWAP_ENV = "${{env.{}}}"


def _started(locked: Locked, fmt: str) -> None:
    if not locked.started_by_benchd:
        raise BenchdError("not_started_by_benchd", f"--format {fmt}: {locked.candidate!r} is an external server "
                          f"at {locked.url}; benchd never started it, so there is no command to give", "format")


def _with_port(argv: list[str], port: str) -> list[str]:
    """argv with the value after `--port` replaced (the adapters all pass `--port N`)."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a == "--port":
            out[i + 1] = port
    return out


def shell(locked: Locked, config: Config, port: int | None = None) -> str:
    """A POSIX shell script that starts the server as measured (`exec`, the environment in front)."""
    _started(locked, "shell")
    return ("#!/bin/sh\n"
            f"# benchd lock: {locked.candidate} ({locked.runtime}), measured in runbook {locked.runbook}\n"
            f"exec {server_command_line(locked, config, port)}\n")


def llama_swap(locked: Locked, config: Config) -> str:
    """A llama-swap `models:` entry (YAML, strings JSON-quoted) with `${PORT}` where benchd passed its port."""
    _started(locked, "llama-swap")
    argv = _with_port(server_argv(locked, config, 8080), SWAP_PORT)
    lines = ["models:", f"  {json.dumps(locked.candidate)}:",
             f"    # benchd lock: {locked.runtime}, measured in runbook {locked.runbook}",
             f"    cmd: {json.dumps(shlex.join(argv).replace(shlex.quote(SWAP_PORT), SWAP_PORT))}",
             f"    proxy: {json.dumps('http://127.0.0.1:' + SWAP_PORT)}"]
    env = server_env(locked, config)
    if env:
        lines.append("    env:")
        # a secret's value is llama-swap's env macro (its loading fails while NAME is unset), never `<redacted>`
        lines += [f"      - {json.dumps(f'{k}=' + (SWAP_ENV.format(k) if v == REDACTED else v))}" for k, v in env.items()]
    return "\n".join(lines) + "\n"


def _ini_value(v: str) -> str:
    return v if v and v.strip() == v and not any(c in v for c in ";#\n") else json.dumps(v)


def llama_server_preset(locked: Locked, config: Config) -> str:
    """The router-mode preset (`llama-server --models-preset FILE`): one section, a key per flag (`c = 8192`,
    a bare flag `= true`) but the router's own; `LLAMA_ARG_*` variables as keys, others as comments."""
    _started(locked, "llama-server-preset")
    if locked.runtime != "llama-server":
        raise BenchdError("wrong_runtime", f"--format llama-server-preset: {locked.candidate!r} runs on "
                          f"{locked.runtime}; the preset is llama-server's (use --format mlx-command or llama-swap)",
                          "format")
    argv = server_argv(locked, config, 8080)[1:]  # the binary is the router's own
    lines = ["version = 1", "", f"; benchd lock: {locked.candidate}, measured in runbook {locked.runbook}",
             "; as the router starts it: llama-server --models-preset THIS_FILE", f"[{locked.candidate}]"]
    lines += [f"{flag.lstrip('-')} = {_ini_value(value) if value is not None else 'true'}"
              for flag, value in _flag_pairs(argv) if flag not in _ROUTER_FLAGS]
    lines += [_preset_env_line(k, v) for k, v in server_env(locked, config).items()]
    return "\n".join(lines) + "\n"


def _flag_pairs(argv: list[str]) -> list[tuple[str, str | None]]:
    """(flag, its value or None for a bare flag) in argv order."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        flag, value = argv[i], None
        if "=" in flag and flag.startswith("--"):
            flag, value = flag.split("=", 1)
        elif i + 1 < len(argv) and not (argv[i + 1].startswith("-") and not _number(argv[i + 1])):
            value = argv[i + 1]
            i += 1
        i += 1
        out.append((flag, value))
    return out


def _preset_env_line(k: str, v: str) -> str:
    if v == REDACTED:  # a preset has no variable reference: the router's environment supplies a secret
        return f"; the router's environment needs {k} set (a secret: export {k} before starting it)"
    if k.startswith("LLAMA_ARG_"):
        return f"{k} = {_ini_value(v)}"
    return f"; the router's environment needs {k}={v} (a preset cannot set it)"


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def mlx_command(locked: Locked, config: Config, port: int | None = None) -> str:
    """The MLX server's command line as measured (an MLX lock only)."""
    _started(locked, "mlx-command")
    if locked.runtime not in MLX_RUNTIMES:
        raise BenchdError("wrong_runtime", f"--format mlx-command: {locked.candidate!r} runs on {locked.runtime}, "
                          "not an MLX server (use --format shell, llama-swap or llama-server-preset)", "format")
    return server_command_line(locked, config, port) + "\n"


def render(fmt: str, locked: Locked, config: Config, port: int | None = None) -> str:
    """The lock in `fmt` (one of FORMATS)."""
    writers: dict[str, Callable[[], str]] = {
        "shell": lambda: shell(locked, config, port),
        "llama-swap": lambda: llama_swap(locked, config),
        "llama-server-preset": lambda: llama_server_preset(locked, config),
        "mlx-command": lambda: mlx_command(locked, config, port),
    }
    if fmt not in writers:
        raise BenchdError("invalid", f"unknown format {fmt!r} (allowed: {', '.join(FORMATS)})", "format")
    return writers[fmt]()
