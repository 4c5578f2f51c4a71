"""`benchctl report` and `benchctl compare`: offline, they read runbook files (no daemon needed).

RUNBOOK is a runbook id (`2026-11-30-<job>`), a job id, or a path; without one, the newest runbook
of the state dir. Errors in the input (no such runbook, unsupported schema version) exit 2.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from benchctl.commands.common import state_dir_option

if TYPE_CHECKING:
    from benchd.results.compare import BuildComparison


def _config(state_dir: str | None) -> Any:
    from benchd.config import Config

    return Config.resolve(state_dir=state_dir)


@click.command()
@click.argument("runbook_ref", metavar="[RUNBOOK]", required=False)
@click.option("--format", "fmt", type=click.Choice(["table", "md", "json", "csv"]), default="table",
              show_default=True, help="Output format (table: rich on a terminal, plain otherwise).")
@click.option("--pareto", is_flag=True, help="Add the Pareto view (frontier and who dominates whom, per context).")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--html", "as_html", is_flag=True,
              help="(Re)write the self-contained page <runbook-id>.html beside the JSON and print its path.")
@click.option("--open", "open_page", is_flag=True, help="With --html: open the page in the default browser.")
@click.option("--priority", type=click.Choice(["first-token", "generation", "memory", "context", "tools", "code",
                                               "vision", "energy", "kld"]), default=None,
              help="Answer one priority: the axis that answers it and why, the candidates in order with their "
              "verdicts, what the leader costs elsewhere (no pick).")
@state_dir_option
def report(runbook_ref: str | None, fmt: str, pareto: bool, as_json: bool, as_html: bool, open_page: bool,
           priority: str | None, state_dir: str | None) -> None:
    """Per candidate × context: medians with spread, noisy cells marked, nulls with their reason.

    \b
    Examples:
      benchctl report                       # the newest runbook
      benchctl report 20261130-021500-ab12 --pareto
      benchctl report run.json --format csv > cells.csv
      benchctl report --html --open         # the page: Pareto per context, probe series, lock commands
      benchctl report --priority generation # which candidate leads on it, at what cost elsewhere
    """
    from benchd.results import report as rep
    from benchd.results.runbook import load_runbook, resolve_runbook_path

    config = _config(state_dir)
    rb = load_runbook(runbook_ref, config)
    if priority is not None:
        from benchd.results.priority import priority_lines

        lines = priority_lines(rb, priority)
        click.echo(json.dumps({"runbook": rb.id, "priority": priority, "lines": lines}, indent=2) if as_json
                   else "\n".join(lines))
        return
    if as_html or open_page:
        from benchd.results.html import write_page

        path = write_page(rb, resolve_runbook_path(runbook_ref, config).parent, config.cache_dir)
        _announce_page(path, open_page)
        return
    if as_json or fmt == "json":
        doc = rep.report_json(rb, pareto=pareto)
        doc["path"] = str(resolve_runbook_path(runbook_ref, config))
        click.echo(json.dumps(doc, indent=2))
    elif fmt == "md":
        click.echo(rep.render_markdown(rb), nl=False)
    elif fmt == "csv":
        click.echo(rep.render_csv(rb), nl=False)
    elif sys.stdout.isatty():
        rep.print_rich(rb, pareto=pareto)
    else:
        click.echo(rep.render_text(rb, pareto=pareto), nl=False)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@state_dir_option
def runbooks(as_json: bool, state_dir: str | None) -> None:
    """List the runbooks of the state dir, newest first (offline: no daemon needed).

    Any unique start of an id (or of its job id) names a runbook in `report`, `compare` and `lock`.

    \b
    Examples:
      benchctl runbooks
      benchctl report 2026-11-30-2026   # the one runbook whose id starts so
    """
    from benchd.results.runbook import list_runbooks

    config = _config(state_dir)
    found = list_runbooks(config)
    if as_json:
        click.echo(json.dumps({"runbooks_dir": str(config.runbooks_dir), "runbooks": found}, indent=2))
        return
    if not found:
        click.echo(f"no runbooks in {config.runbooks_dir} (a runbook is written when a job ends)")
        return
    # ids and paths are never cut: the id is what the next command takes; the other columns follow it
    width = max(len(str(e["id"])) for e in found)
    click.echo(f"{'id':<{width}}  outcome    finished              sweep")
    for e in found:
        if "error" in e:
            click.echo(f"{e['id']:<{width}}  {e['error']}")
            continue
        click.echo(f"{e['id']:<{width}}  {e.get('outcome') or '-':<9}  {e.get('finished_at') or '-':<20}  "
                   f"{e.get('name') or '-'}")
    click.echo(f"\n{len(found)} runbook{'s' if len(found) != 1 else ''} in {config.runbooks_dir}")


def _announce_page(path: Any, open_page: bool) -> None:
    """Print the page's path (the thing to open); say plainly when it has tables only."""
    from benchd.results.html import MISSING, available

    click.echo(str(path))
    if not available():
        click.echo(f"note: {MISSING}", err=True)
    if open_page:
        import webbrowser

        if not webbrowser.open(path.resolve().as_uri()):
            click.echo("no browser could be started here: open the file above yourself", err=True)


@click.command()
@click.argument("a_ref", metavar="RUNBOOK_A")
@click.argument("b_ref", metavar="RUNBOOK_B")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--html", "as_html", is_flag=True,
              help="Write the comparison as a self-contained page beside runbook B and print its path.")
@click.option("--open", "open_page", is_flag=True, help="With --html: open the page in the default browser.")
@state_dir_option
def compare(a_ref: str, b_ref: str, as_json: bool, as_html: bool, open_page: bool, state_dir: str | None) -> None:
    """Same candidate/context cells of two runbooks side by side: ratio B/A and the one comparison's verdict.

    Per metric: different (the CI of B/A lies outside ±the axis's margin, from runbook A's `margins` or
    the axis table, and the exact rank test agrees), tied (the CI lies inside it) or unresolved (with
    about how many more probes would tell), at α = 0.05 (the stop rule's α when a sweep stopped at
    planned looks). Differences in machine, grid, prompt hashes or cooldown policy are printed as
    warnings first.
    """
    import msgspec

    from benchd.results.compare import compare_runbooks
    from benchd.results.report import COMPARE_HEADER, compare_rows, plain_table
    from benchd.results.runbook import load_runbook, resolve_runbook_path
    from benchd.results.text import margin_words

    config = _config(state_dir)
    cmp = compare_runbooks(load_runbook(a_ref, config), load_runbook(b_ref, config))
    if as_html or open_page:
        from benchd.results.html import write_compare_page

        _announce_page(write_compare_page(cmp, resolve_runbook_path(b_ref, config).parent, config.cache_dir), open_page)
        return
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins(cmp), indent=2))
        return
    for w in cmp.warnings:
        click.echo(f"warning: {w}")
    click.echo(f"A = {cmp.a}\nB = {cmp.b}")
    _print_builds(cmp.builds)
    click.echo(f"test: {cmp.test}; α = {cmp.alpha:g} per metric, {margin_words(cmp.margin_pct, cmp.margins)}")
    notes: list[str] = []
    click.echo(plain_table(COMPARE_HEADER, compare_rows(cmp, notes)))
    for k, why in enumerate(notes, 1):
        click.echo(f"[{k}] {why}")
    if cmp.only_in_a or cmp.only_in_b:
        click.echo(f"only in A: {', '.join(cmp.only_in_a) or '-'}; only in B: {', '.join(cmp.only_in_b) or '-'}")
    for r in cmp.ready:
        click.echo(f"time to ready, {r.candidate} ({r.cache} starts, {r.verdict.n_a} vs {r.verdict.n_b}): {r.verdict.text}")
    for ev in cmp.evals:
        click.echo(f"{ev.candidate} {ev.axis} ({ev.suite}: {ev.n_a} tasks in A, {ev.n_b} in B, {ev.shared} shared): "
                   f"{ev.verdict.text}")
    for im in cmp.images:
        tokens = (f"; image tokens A {im.image_tokens_a:g}, B {im.image_tokens_b:g}"
                  if im.image_tokens_a is not None and im.image_tokens_b is not None else "")
        click.echo(f"TTFT with {im.resolution} images, {im.candidate} ({im.verdict.n_a} vs {im.verdict.n_b} "
                   f"probes): {im.verdict.text}{tokens}")
    for ag in cmp.agentic:
        click.echo(f"{ag.axis}, {ag.candidate} ctx {ag.context} ({ag.verdict.n_a} vs {ag.verdict.n_b}): {ag.verdict.text}")
    for kc in cmp.kld:
        click.echo(f"KL divergence, {kc.candidate} ctx {kc.context} " + (
            f"({kc.verdict.n_a} vs {kc.verdict.n_b} chunks): {kc.verdict.text}" if kc.verdict else f"not compared: {kc.reason}"))


#: What `compare` says of a build that did not change (beside its version).
_SAME_BUILD = ("binary sha256", "model sha256", "draft model sha256", "args")


def _print_builds(builds: list[BuildComparison]) -> None:
    """Per candidate, one line when its build is the same in A and B; else both fingerprints side by side,
    the changed fields marked (`--json` has every field)."""
    from benchd.servers.fingerprint import side_by_side

    for bc in builds:
        rows = side_by_side(bc.a, bc.b)
        if bc.a is not None and bc.b is not None and not any(r[3] for r in rows):
            shown = {label: va for label, va, _vb, _d in rows if va != "-"}
            said = [shown.get("version", "")] + [f"{k} {shown[k]}" for k in _SAME_BUILD if k in shown]
            click.echo(f"{bc.candidate}: the same build in A and B ({', '.join(x for x in said if x) or 'nothing recorded'})")
            continue
        click.echo(f"{bc.candidate}: changed between A and B: {', '.join(bc.changed) or 'nothing'}")
        wl = max(len(r[0]) for r in rows)
        wa = max(len(r[1]) for r in rows)
        for label, va, vb, differs in rows:
            click.echo(f"  {'*' if differs else ' '} {label:<{wl}}  A {va:<{wa}}  B {vb}")
