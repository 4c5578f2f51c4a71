"""`benchctl tune MODEL [--runtime R]`: write a sweep file that races the flags that matter for one model on
this machine (a candidate matrix from the runtime's adapter, `Checks.tune_matrix`), with the
contexts a coding agent needs. It never submits: the file is for the user to read, `validate` and `submit`.

Reasons and facts: docs/sweep-file.md#candidate-matrix.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import click

from benchctl import exitcodes

#: The prompt sizes a coding agent works at (a file or two, a repository map, a long session), kept to
#: the model's trained context where the file says it.
AGENT_CONTEXTS = (4096, 16384, 32768, 65536)


def _runtime_of(model: str) -> str:
    return "llama-server" if model.endswith(".gguf") else "mlx_lm.server"


def _value(v: Any) -> str:
    return json.dumps(v) if isinstance(v, (str, bool)) else str(v)


def _contexts(model: str) -> tuple[list[int], str]:
    from benchd.engine.modelcheck import trained_context

    try:
        trained, source = trained_context(model)
    except Exception as exc:  # a file we cannot read: the sweep check names it
        trained, source = None, f"not read ({type(exc).__name__})"
    if trained is None:
        return list(AGENT_CONTEXTS), f"the model's trained context is unknown ({source})"
    kept = [c for c in AGENT_CONTEXTS if c + 512 <= trained] or [min(AGENT_CONTEXTS[0], max(64, trained // 2))]
    return kept, f"kept under the model's trained context {trained} ({source})"


def tune_toml(model: str, runtime: str, cores: int, cache_dir: Path) -> str:
    """The sweep file's text."""
    from benchd.schemas import Candidate
    from benchd.servers.runtimes import get_adapter

    adapter = get_adapter(runtime)
    binary: str | None = None
    try:
        command, _ = adapter.launcher.command(Candidate(id="tune", runtime=runtime, model=model), cache_dir)  # type: ignore[arg-type]
        binary = command[0]
    except Exception:  # no runtime installed: the build's own lists are not read (validate says how to install)
        binary = None
    matrix, why = adapter.checks.tune_matrix(model, binary, cores)
    contexts, ctx_why = _contexts(model)
    ident = re.sub(r"[^a-z0-9-]+", "-", Path(model.rstrip("/")).name.lower().removesuffix(".gguf")).strip("-")[:24] or "model"
    lines = [f"# A sweep written by `benchctl tune` for {model} ({runtime}, {cores} cores). Not submitted:",
             "# read it, then `benchctl validate` and `benchctl submit` it. Every combination of the matrix is a",
             "# candidate; racing drops the dominated ones as the rounds show it (docs/measuring.md#racing).",
             *(f"#   {w}" for w in why), f"#   contexts: the sizes a coding agent works at, {ctx_why}", "",
             f'name = "tune {ident}"', f"contexts = {contexts}", "gen_tokens = 128", "racing = true", "",
             "[[candidates]]", f'id = "{ident}"', f'runtime = "{runtime}"', f"model = {json.dumps(model)}", ""]
    if matrix:
        lines.append("[candidates.matrix]")
        lines += [f"{json.dumps(k)} = [{', '.join(_value(v) for v in vals)}]" for k, vals in matrix.items()]
    return "\n".join(lines) + "\n"


@click.command()
@click.argument("model")
@click.option("--runtime", type=click.Choice(["llama-server", "mlx_lm.server", "mlx_vlm.server"]), default=None,
              help="Default: llama-server for a .gguf file, else mlx_lm.server.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the sweep here (refused if it exists) instead of printing it.")
def tune(model: str, runtime: str | None, output: str | None) -> None:
    """Write a sweep file that races this model's server flags on this machine (never submits it)."""
    from benchd.config import Config

    path = os.path.abspath(os.path.expanduser(model))
    if not os.path.exists(path):
        click.echo(f"error: {model}: no such model file or directory", err=True)
        raise SystemExit(exitcodes.BAD_INPUT)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    text = tune_toml(path, runtime or _runtime_of(path), cores, Config.resolve().cache_dir)
    if output is None:
        click.echo(text, nl=False)
        return
    out = Path(output)
    if out.exists():
        click.echo(f"error: {output} exists; choose another file (tune never overwrites)", err=True)
        raise SystemExit(exitcodes.BAD_INPUT)
    out.write_text(text)
    click.echo(f"wrote {output}: read it, then `benchctl validate {output}` and `benchctl submit {output}`", err=True)
