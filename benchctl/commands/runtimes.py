"""`benchctl runtimes install|list`: provision the inference runtimes into the cache, show what is found.

Works without the daemon (it only touches the cache dir). Errors are one line naming the problem and the
fix: bad input (unknown runtime, unwritable cache, missing compiler) exits 2, a failed build exits 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from benchctl import exitcodes
from benchctl.commands.common import _fail as fail

CACHE_HELP = "Cache dir for runtimes and models (default: $BENCHD_CACHE_DIR or the platform cache dir)."


def _cache(cache_dir: str | None) -> Path:
    from benchd.config import Config

    return Config.resolve(cache_dir=cache_dir).cache_dir


def _fail(exc: Exception) -> NoReturn:
    code = getattr(exc, "code", None)
    raise fail(f"error: {exc}", exitcodes.FAILED if code == "install_failed" else exitcodes.BAD_INPUT, slug=code)


@click.group("runtimes")
def runtimes() -> None:
    """Install or list the inference runtimes (llama-server, MLX)."""


@runtimes.command("install")
@click.argument("runtime", required=False, default="all", metavar="[llama-server|mlx|all]")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help=CACHE_HELP)
def install(runtime: str, cache_dir: str | None) -> None:
    """Build/install RUNTIME into the cache (idempotent: a second run takes seconds).

    \b
    llama-server  llama-server + llama-bench from the llama-cpp-python 0.3.36 sdist (~6 min, 2 cores)
    mlx           a venv with mlx (cpu on Linux), mlx-lm, mlx-vlm, pinned (~1-2 min, ~1 GB)
    all           both (default)
    """
    from benchd.errors import BenchdError
    from benchd.servers import provision

    def log(msg: str) -> None:
        click.echo(msg, err=True)

    try:
        paths = provision.install(runtime, _cache(cache_dir), log)
    except BenchdError as exc:
        _fail(exc)
    for path in paths:
        click.echo(str(path))


@runtimes.command("list")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help=CACHE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_(cache_dir: str | None, as_json: bool) -> None:
    """Show each runtime: installed?, version, path, and how it was found (candidate|env|path|cache)."""
    from benchd.servers import locate

    entries = locate.list_runtimes(_cache(cache_dir))
    if as_json:
        sys.stdout.write(json.dumps(entries, indent=2) + "\n")
        return
    for line in runtime_lines(entries):
        click.echo(line)


def runtime_lines(entries: list[dict[str, Any]]) -> list[str]:
    """A block per runtime: its name, whether installed, version and how it was found on one line, then its
    path (or why there is none) alone on the next, whole at any terminal width, so it can be copied."""
    lines: list[str] = []
    for e in entries:
        state = "installed" if e["installed"] else "not installed"
        facts = ", ".join(str(x) for x in (e["version"], f"found by {e['how']}" if e["how"] else None) if x)
        lines.append(f"{e['name']}: {state}" + (f" ({facts})" if facts else ""))
        lines.append(f"  {e['path'] or e.get('reason', '')}")
    return lines
