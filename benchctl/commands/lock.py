"""`benchctl lock` and `benchctl locked`: the human lock, written and read without the daemon.

`lock` refuses (exit 2, one clear line) an unknown candidate, one with no successful rows, and a
dominated one unless `--force` is given. `locked --command` prints the exact command that starts the
locked server as benchmarked, built by the runtime adapter (the same code the daemon uses).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from benchctl.commands.common import state_dir_option
from benchctl.commands.report import _config


@click.command()
@click.option("--candidate", "candidate", required=True, metavar="ID", help="The candidate you chose.")
@click.option("--runbook", "runbook_ref", default=None, metavar="R",
              help="Runbook id, job id or path (default: the newest runbook).")
@click.option("--note", default="", help="Why you chose it (kept in the lock file).")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Lock file to write (default: <state dir>/locked.toml).")
@click.option("--force", is_flag=True, help="Lock a candidate the Pareto view shows dominated.")
@click.option("--json", "as_json", is_flag=True, help="Print the written lock as JSON.")
@state_dir_option
def lock(candidate: str, runbook_ref: str | None, note: str, out: str | None, force: bool, as_json: bool,
         state_dir: str | None) -> None:
    """Write your choice to a reviewable TOML file: exactly what was benchmarked, and the evidence."""
    import msgspec

    from benchd.lock.evidence import thin_evidence
    from benchd.lock.lockfile import lock_candidate
    from benchd.results.runbook import load_runbook

    config = _config(state_dir)
    path, doc = lock_candidate(config, candidate, runbook_ref, note=note, out=Path(out) if out else None,
                               force=force)
    warnings = thin_evidence(load_runbook(runbook_ref, config), candidate)
    if as_json:
        click.echo(json.dumps({"path": str(path), "warnings": warnings, **msgspec.to_builtins(doc)}, indent=2))
        return
    lk = doc.locked
    click.echo(f"locked {lk.candidate} ({lk.runtime}) from runbook {lk.runbook} -> {path}")
    for w in warnings:
        click.echo(f"warning: thin evidence: {w}", err=True)
    if lk.forced:
        for ctx, who in lk.dominated_by.items():
            click.echo(f"note: forced; at context {ctx} it is dominated by {', '.join(who)}")
    if doc.previous is not None:
        click.echo(f"the previous lock ({doc.previous.candidate}, runbook {doc.previous.runbook}) "
                   "is kept in [previous]")


def _show(doc: Any, path: Path) -> None:
    from benchd.results.text import axis_word, fmt_with_unit

    lk = doc.locked
    click.echo(f"lock file: {path}")
    rows: list[tuple[str, Any]] = [
        ("candidate", lk.candidate), ("runtime", lk.runtime), ("model", lk.model_path),
        ("model bytes", lk.model_bytes), ("model sha256", lk.model_sha256), ("request model", lk.request_model),
        ("binary", lk.binary), ("binary version", lk.binary_version), ("args", " ".join(lk.args) or "-"),
        ("ctx size", f"{lk.ctx_size} ({lk.ctx_size_source})"),
        ("spec", f"{lk.spec.kind}, draft {lk.spec.draft_model}, max {lk.spec.draft_max}" if lk.spec else "none"),
        ("sampling", f"temperature {lk.sampling.temperature}, seed {lk.sampling.seed}"),
        ("runbook", lk.runbook), ("locked at", lk.locked_at), ("note", lk.note or "-"),
    ]
    if not lk.started_by_benchd:
        found = lk.external
        rows.append(("external", f"{lk.url}: benchd does not start it; detected "
                     + (f"{found.kind} {found.version or '(no version reported)'}" if found else "nothing")))
        if lk.api_key_env:
            rows.append(("api key", f"${lk.api_key_env} (the variable's name; the key is not recorded)"))
    if lk.forced:
        rows.append(("forced", "; ".join(f"ctx {c}: {', '.join(w)}" for c, w in lk.dominated_by.items())))
    for k, v in rows:
        click.echo(f"  {k:<15} {v if v is not None else 'null'}")
    click.echo("  evidence (cell medians it was chosen on):")
    for ctx, ev in lk.evidence.items():
        shown = {m: getattr(ev, m) for m in
                 ("gen_tps", "prompt_tps", "ttft_ms", "mem_peak_bytes", "eval_pass_rate", "sustain_ratio")} | ev.axes
        vals = ", ".join(f"{axis_word(m)} {fmt_with_unit(m, v)}" for m, v in shown.items()
                         if v is not None or m not in ev.null_reasons)  # a null with a reason has its own line
        click.echo(f"    context {ctx}: {vals}{'; noisy (a CV over 5 %)' if ev.noisy else ''}")
        for m, why in ev.null_reasons.items():
            click.echo(f"      {axis_word(m)} null: {why}")
    fp = lk.fingerprint
    if fp is not None:
        click.echo(f"  fingerprint ({fp.source}, {fp.taken_at}):")
        click.echo(f"    binary {fp.binary} -> {fp.binary_realpath}, {fp.binary_bytes} bytes, "
                   f"sha256 {(fp.binary_sha256 or 'null')[:16]}; version {fp.version or 'null'}")
        if fp.packages:
            click.echo("    packages " + ", ".join(f"{k} {v}" for k, v in fp.packages.items()))
    _show_recheck(doc)
    if doc.previous is not None:
        click.echo(f"  previous: {doc.previous.candidate} (runbook {doc.previous.runbook}, {doc.previous.locked_at})")


def _show_recheck(doc: Any) -> None:
    """The newest recheck of this lock: when, why, the verdict per context and metric."""
    from benchd.lock.recheck import last_recheck, summary

    last = last_recheck(doc)
    if last is None:
        click.echo("  last recheck: none yet")
        return
    click.echo(f"  last recheck: {last.at} job {last.job} ({last.outcome}; runbook {last.runbook or 'none'})")
    click.echo(f"    cause: {'; '.join(last.cause) or '-'}")
    click.echo(f"    verdict: {summary(last)}" + (f"  [notified: {last.notified}]" if last.notified else ""))
    for ctx, per in last.verdicts.items():
        click.echo(f"    context {ctx}: " + "; ".join(f"{m} {v}" for m, v in per.items()))


@click.command()
@click.option("--file", "file_", type=click.Path(dir_okay=False), default=None,
              help="Lock file (default: <state dir>/locked.toml).")
@click.option("--command", "as_command", is_flag=True, help="Print the command that starts the locked server.")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Port for --command (default: the runtime's usual one, 8080).")
@click.option("--format", "fmt", type=click.Choice(["shell", "llama-swap", "llama-server-preset", "mlx-command"]),
              default=None, help="Print the lock as a shell script, a llama-swap models: entry, llama-server's "
              "router-mode preset (INI) or the MLX server's command.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@state_dir_option
def locked(file_: str | None, as_command: bool, port: int | None, fmt: str | None, as_json: bool,
           state_dir: str | None) -> None:
    """Show the locked candidate, or (--command) the exact command that starts it as benchmarked.

    \b
    Examples:
      benchctl locked --command
      benchctl locked --format llama-swap >> ~/llama-swap.yaml
      benchctl locked --format llama-server-preset > presets.ini
      benchctl locked --format shell > start-server.sh
    """
    import msgspec

    from benchd.lock.lockfile import read_lock, server_argv, server_command_line, server_env

    config = _config(state_dir)
    path = Path(file_) if file_ else config.locked_path
    doc = read_lock(path)
    if fmt is not None:
        from benchd.lock.formats import render

        text = render(fmt, doc.locked, config, port)
        click.echo(json.dumps({"format": fmt, "text": text}, indent=2) if as_json else text, nl=as_json)
        return
    if as_command:
        if as_json:
            click.echo(json.dumps({"argv": server_argv(doc.locked, config, port), "env": server_env(doc.locked, config),
                                   "command": server_command_line(doc.locked, config, port)}, indent=2))
        else:
            click.echo(server_command_line(doc.locked, config, port))
        return
    if as_json:
        click.echo(json.dumps({"path": str(path), **msgspec.to_builtins(doc)}, indent=2))
        return
    _show(doc, path)
