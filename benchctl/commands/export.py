"""`benchctl export RUNBOOK --format llama-bench-md|jsonl|csv`: offline, reads the runbook file."""

from __future__ import annotations

import click

from benchctl.commands.common import state_dir_option
from benchctl.commands.report import _config


@click.command()
@click.argument("runbook_ref", metavar="[RUNBOOK]", required=False)
@click.option("--format", "fmt", type=click.Choice(["llama-bench-md", "jsonl", "csv"]), required=True,
              help="llama-bench-md: llama-bench's table; jsonl: one object per probe row; csv: every row.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write to this file instead of stdout.")
@state_dir_option
def export(runbook_ref: str | None, fmt: str, output: str | None, state_dir: str | None) -> None:
    """Export a runbook in a format people share: llama-bench's Markdown table, JSON lines with
    llama-bench's field names, or CSV. Each carries the machine, runtime build and benchd version;
    nulls stay null (with their reasons), failed rows are kept.

    \b
    Examples:
      benchctl export --format llama-bench-md          # the newest runbook
      benchctl export 2026-11-30-<job> --format csv -o rows.csv
    """
    from benchd.results.export import FORMATS
    from benchd.results.runbook import load_runbook

    text = FORMATS[fmt](load_runbook(runbook_ref, _config(state_dir)))
    if output is None:
        click.echo(text, nl=False)
    else:
        from pathlib import Path

        Path(output).write_text(text, encoding="utf-8")
        click.echo(output)
