"""Views of a written runbook (charts, the page), rendered in a worker process so the daemon's loop
never pays for them. Reasons and facts: docs/architecture.md#rendering-the-views."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from benchd.lifeline import die_with_daemon
from benchd.results.views import RENDERERS, available, render_views

#: A render that takes longer is killed: the runbook itself is already written, only its views are lost.
RENDER_TIMEOUT_S = 120.0


@dataclass
class RenderOutcome:
    """What the worker did, as the daemon saw it."""

    written: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # view (or "worker") -> why

    def problem(self) -> str | None:
        return "; ".join(f"{k}: {v}" for k, v in self.errors.items()) or None


async def render_off_loop(path: Path, names: list[str] | None = None, *, cache_dir: Path | None = None,
                          timeout_s: float = RENDER_TIMEOUT_S) -> RenderOutcome:
    """Render the runbook's views in a worker process without blocking the loop; cancelled or past
    `timeout_s`, the worker is killed. Nothing is spawned when no view can render here."""
    wanted = available(names)
    skipped = {n: str(RENDERERS[n].missing()) for n in (names or list(RENDERERS)) if n not in wanted}
    if not wanted:
        return RenderOutcome(skipped=skipped)
    argv = [sys.executable, "-m", "benchd.results.render", str(path), *(a for n in wanted for a in ("--only", n)),
            *(["--cache-dir", str(cache_dir)] if cache_dir else [])]
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env={**os.environ, "MPLBACKEND": "Agg"},
                                                preexec_fn=die_with_daemon(),
                                                cwd=path.parent)  # `-m` puts the cwd first on sys.path
    try:
        async with asyncio.timeout(timeout_s):
            stdout, stderr = await proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait())
        raise
    try:
        doc = json.loads(stdout)  # exit 1 with a document: some view failed, the document says which
    except ValueError:
        tail = stderr.decode(errors="replace").strip().splitlines()[-3:]
        return RenderOutcome(skipped=skipped, errors={"worker": f"exit {proc.returncode}: {' | '.join(tail)}"})
    return RenderOutcome(written=doc["written"], skipped={**skipped, **doc["skipped"]}, errors=doc["errors"])


def main(argv: list[str] | None = None) -> int:
    """`python -m benchd.results.render RUNBOOK.json [--only NAME]...`: prints {written, skipped, errors};
    exit 1 when a view failed."""
    p = argparse.ArgumentParser(prog="python -m benchd.results.render", description=main.__doc__)
    p.add_argument("runbook", type=Path)
    p.add_argument("--only", action="append", choices=sorted(RENDERERS), help="render only this view (repeatable)")
    p.add_argument("--cache-dir", type=Path, default=None, help="benchd's cache (the page's charting runtime)")
    a = p.parse_args(argv)
    from benchd.results.runbook import decode_runbook

    rb = decode_runbook(a.runbook.read_bytes(), str(a.runbook))
    out = render_views(rb, a.runbook.parent, a.only, cache_dir=a.cache_dir, collect_errors=True)
    print(json.dumps(out))
    return 1 if out["errors"] else 0


if __name__ == "__main__":  # the worker process's own entry point
    raise SystemExit(main())
