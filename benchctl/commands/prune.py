"""`benchctl prune --older-than 30d`: delete old finished jobs' logs, old runbooks, stale cache dirs.

Safety rules, in the order they are applied:
- Never a runbook the lock refers to: every string in `<state>/locked.toml` (its `[locked]` table and
  its `[previous]` one) that names a runbook id, a model or a binary is protected. A lock that cannot be
  read protects *every* runbook and cache dir (better to keep too much than to delete the evidence).
- Never anything of a job that has not finished (queued, waiting, running, interrupted): its logs, its
  runbook, nor the cache dirs its sweep names.
- Age comes from the store when the job is known (`finished_at`), else from the files' newest mtime.
- Only known kinds of files: `<state>/logs/<job>/`, `<state>/runbooks/<id>.{json,md,pareto.png,pareto.svg}`,
  `<cache>/models/<dir>` (tiny models: regenerated on demand) and `<cache>/runtimes/<dir>` that are not
  the pinned versions, and finished jobs' records in the store (`job:<id>`: job, events, rows, evals).
  The daemon's own log is never touched.

Works without the daemon: it reads files and the SQLite store directly.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
import tomllib
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from benchctl import exitcodes
from benchctl.commands.common import _fail, state_dir_option

UNITS = {"s": 1, "min": 60, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|min|m|h|d|w)\s*$")
RUNBOOK_ID_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}-[a-z0-9-]{8,32}$")
RUNBOOK_SUFFIXES = (".json", ".md", ".pareto.png", ".pareto.svg")
UNFINISHED = ("queued", "waiting", "running", "interrupted")


def parse_duration(text: str) -> float:
    """`30d`, `12h`, `2w`, `90min` (or `90m`), `3600s` → seconds. Raises ValueError."""
    match = DURATION_RE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration like 30d, 12h, 2w, 90min")
    return float(match.group(1)) * UNITS[match.group(2)]


def _age(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:.0f} d" if days >= 1 else f"{seconds / 3600:.1f} h"


@dataclass
class Item:
    kind: str  # job-logs | runbook | model-cache | runtime-cache
    path: str
    bytes: int
    age_s: float
    reason: str


@dataclass
class Kept:
    path: str
    why: str


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _newest_mtime(path: Path) -> float:
    times = [path.stat().st_mtime]
    if path.is_dir():
        times += [p.stat().st_mtime for p in path.rglob("*") if not p.is_symlink()]
    return max(times)


def _strings(doc: Any) -> list[str]:
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        return [s for v in doc.values() for s in _strings(v)]
    if isinstance(doc, list):
        return [s for v in doc for s in _strings(v)]
    return []


def lock_references(locked_path: Path) -> tuple[set[str], list[str], str | None]:
    """(runbook ids, path strings, error) named anywhere in the lock, `[previous]` included."""
    if not locked_path.exists():
        return set(), [], None
    try:
        doc = tomllib.loads(locked_path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return set(), [], f"cannot read {locked_path} ({exc})"
    strings = _strings(doc)
    ids = {s for s in strings if RUNBOOK_ID_RE.fullmatch(s)}
    ids |= {Path(s).stem for s in strings if s.endswith(".json") and RUNBOOK_ID_RE.match(Path(s).stem)}
    return ids, [s for s in strings if "/" in s], None


def _jobs(db_path: Path) -> tuple[dict[str, Any], list[str], str | None]:
    """(job id → Job, path strings named by unfinished jobs' sweeps, error)."""
    if not db_path.exists():
        return {}, [], None
    try:
        import msgspec

        from benchd.schemas import JOB_STATES
        from benchd.store import Store

        store = Store(db_path)
        try:
            jobs = {j.id: j for j in store.jobs_in_states(*JOB_STATES)}
            paths = [s for j in jobs.values() if j.state in UNFINISHED for s in _strings(msgspec.to_builtins(store.get_sweep(j.id)))]
        finally:
            store.close()
    except Exception as exc:  # a store we cannot read must not stop a prune of what mtimes can date
        return {}, [], f"cannot read the job store {db_path} ({type(exc).__name__}: {exc})"
    return jobs, [p for p in paths if "/" in p], None


def _finished_age(job: Any, now: float) -> float | None:
    if job.finished_at is None:
        return None
    try:
        return now - datetime.fromisoformat(job.finished_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _referenced(path: Path, refs: list[str]) -> bool:
    root = str(path.resolve())
    return any(str(Path(r).expanduser().resolve()).startswith(root + "/") or str(Path(r)) == root for r in refs)


def plan_prune(state_dir: Path, cache_dir: Path, older_than_s: float, now: float | None = None) -> tuple[list[Item], list[Kept], list[str]]:
    """What a prune would delete, what it keeps on purpose and why, and warnings. Deletes nothing."""
    now = time.time() if now is None else now
    delete: list[Item] = []
    kept: list[Kept] = []
    warnings: list[str] = []
    locked_ids, lock_paths, lock_err = lock_references(state_dir / "locked.toml")
    if lock_err:
        warnings.append(f"{lock_err}: keeping every runbook and cache dir")
    jobs, pending_paths, store_err = _jobs(state_dir / "benchd.sqlite3")
    if store_err:
        warnings.append(f"{store_err}: ages come from file times")

    def age_of(job_id: str, path: Path) -> tuple[float | None, str]:
        job = jobs.get(job_id)
        if job is not None:
            if job.state in UNFINISHED:
                return None, f"job {job_id} is {job.state}"
            age = _finished_age(job, now)
            if age is not None:
                return age, f"job {job.state} {_age(age)} ago"
        age = now - _newest_mtime(path)
        return age, f"last written {_age(age)} ago"

    logs = state_dir / "logs"
    for job_dir in sorted(p for p in logs.iterdir() if p.is_dir()) if logs.is_dir() else []:
        age, why = age_of(job_dir.name, job_dir)
        if age is None:
            kept.append(Kept(str(job_dir), why))
        elif age > older_than_s:
            delete.append(Item("job-logs", str(job_dir), _size(job_dir), age, why))

    runbooks = state_dir / "runbooks"
    ids = sorted({p.name.split(".")[0] for p in runbooks.iterdir() if RUNBOOK_ID_RE.match(p.name.split(".")[0])}) if runbooks.is_dir() else []
    for rid in ids:
        files = [runbooks / f"{rid}{s}" for s in RUNBOOK_SUFFIXES if (runbooks / f"{rid}{s}").exists()]
        if not files:
            continue  # only unknown kinds of file carry this id: not ours to delete
        if rid in locked_ids or lock_err:
            kept.append(Kept(str(runbooks / f"{rid}.json"), "locked.toml refers to it" if not lock_err else "the lock is unreadable"))
            continue
        age, why = age_of(rid[11:], files[0])
        if age is None:
            kept.append(Kept(str(files[0]), why))
        elif age > older_than_s:
            for f in files:
                delete.append(Item("runbook", str(f), _size(f), age, why))

    for job in sorted(jobs.values(), key=lambda j: j.id):
        if job.state in UNFINISHED:
            continue
        age = _finished_age(job, now)
        if age is None or age <= older_than_s:
            continue
        if lock_err or job.runbook_id in locked_ids or any(rid[11:] == job.id for rid in locked_ids):
            kept.append(Kept(f"job:{job.id}", "locked.toml refers to its runbook" if not lock_err else "the lock is unreadable"))
            continue
        delete.append(Item("job-record", f"job:{job.id}", 0, age, f"job {job.state} {_age(age)} ago (store record)"))

    from benchd.servers import provision

    pinned = {provision.llama_dir(cache_dir).resolve(), provision.mlx_dir(cache_dir).resolve()}
    for kind, root in (("model-cache", cache_dir / "models"), ("runtime-cache", cache_dir / "runtimes")):
        if kind == "runtime-cache" and not pinned:
            continue
        for d in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
            if kind == "runtime-cache" and d.resolve() in pinned:
                continue  # the pinned version: `benchctl runtimes` owns it
            if lock_err:
                kept.append(Kept(str(d), "the lock is unreadable"))
            elif _referenced(d, lock_paths):
                kept.append(Kept(str(d), "locked.toml refers to it"))
            elif _referenced(d, pending_paths):
                kept.append(Kept(str(d), "an unfinished job's sweep uses it"))
            else:
                age = now - _newest_mtime(d)
                if age > older_than_s:
                    what = "regenerated on demand" if kind == "model-cache" else "not the pinned version"
                    delete.append(Item(kind, str(d), _size(d), age, f"last written {_age(age)} ago; {what}"))
    return delete, kept, warnings


@click.command("prune")
@click.option("--older-than", "older_than", required=True, metavar="AGE",
              help="Delete what finished (or was last written) longer ago than AGE: 30d, 12h, 2w, 90min.")
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted.")
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print what was (or would be) deleted and kept as JSON.")
def prune(older_than: str, dry_run: bool, state_dir: str | None, as_json: bool) -> None:
    """Delete old finished jobs' logs, old runbooks and stale cache dirs; say what went.

    Never deletes a runbook locked.toml refers to (its [previous] lock included), nor anything of a
    job that has not finished. Tiny models are regenerated when next needed. Finished jobs' records
    (events, rows) leave the store too, unless the lock refers to their runbook. Works without the daemon.

    \b
    Examples:
      benchctl prune --older-than 30d --dry-run
      benchctl prune --older-than 30d
      benchctl prune --older-than 2w --json
    """
    from benchd.config import Config

    try:
        seconds = parse_duration(older_than)
    except ValueError as exc:
        raise _fail(f"error: --older-than: {exc}", exitcodes.BAD_INPUT) from exc
    config = Config.resolve(state_dir=state_dir)
    delete, kept, warnings = plan_prune(config.state_dir, config.cache_dir, seconds)
    errors: list[str] = []
    if not dry_run:
        records = [i.path.removeprefix("job:") for i in delete if i.kind == "job-record"]
        if records:
            from benchd.store import Store

            try:
                store = Store(config.db_path)
                try:
                    store.delete_jobs(records)
                finally:
                    store.close()
            except Exception as exc:  # reported, and the files are still pruned
                errors.append(f"{config.db_path}: cannot delete job records ({type(exc).__name__}: {exc})")
        for item in delete:
            if item.kind == "job-record":
                continue
            path = Path(item.path)
            try:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                errors.append(f"{path}: {exc.strerror}")
    freed = sum(i.bytes for i in delete)
    if as_json:
        import json

        click.echo(json.dumps({
            "dry_run": dry_run, "older_than_s": seconds, "deleted": [asdict(i) for i in delete],
            "kept": [asdict(k) for k in kept], "freed_bytes": 0 if dry_run else freed,
            "warnings": warnings, "errors": errors,
        }, indent=2))
    else:
        for w in warnings:
            click.echo(click.style("warning: ", fg="yellow") + w, err=True)
        from benchd.stats.notation import fmt_bytes

        verb = "would delete" if dry_run else "deleted"
        for item in delete:
            click.echo(f"{verb} {item.kind:<13} {item.path}  ({fmt_bytes(item.bytes, 1)}; {item.reason})")
        for k in kept:
            click.echo(click.style(f"kept {k.path}: {k.why}", dim=True))
        if not delete:
            click.echo(f"nothing older than {older_than} to delete")
        else:
            click.echo(f"{verb} {len(delete)} item{'s' if len(delete) != 1 else ''}, {fmt_bytes(freed, 1)}")
    for e in errors:
        click.echo(click.style("error: ", fg="red") + e, err=True)
    sys.exit(exitcodes.FAILED if errors else exitcodes.OK)
