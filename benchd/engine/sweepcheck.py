"""The one sweep check: what `benchctl validate`, the API's submit and the engine ask of a sweep's
candidates beyond its schema (msgspec decodes that).

- `adapter_problems`: the runtime adapter's own checks (reserved args, spec kinds, context size, vision,
  concurrency levels against its slots).
- `path_problems`: the daemon's rule for paths — model, draft model and binary absolute, no NUL byte
  (the daemon has no working directory worth trusting; benchctl resolves paths against the sweep file).
- `local_problems`: what exists on this machine — model and draft model files, an executable binary,
  the executable the adapter would resolve. benchctl lists these as problems; the daemon records
  missing models at submit and fails the cells at server start, since a file can come and go.

Each problem is a `BenchdError` whose field is a `$.candidates[i]...` path.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchd.errors import BenchdError
from benchd.schemas import Candidate, Sweep


def adapter_problems(cand: Candidate, sweep: Sweep | None) -> list[BenchdError]:
    """The adapter's checks of the candidate, and of the sweep's settings it must serve (vision,
    concurrency levels) when the sweep decoded."""
    from benchd.servers.runtimes import get_adapter

    adapter = get_adapter(cand.runtime)
    problems = list(adapter.validate(cand) or [])
    if sweep is not None:
        problems += adapter.validate_vision(cand, sweep.vision) + adapter.validate_levels(cand, sweep.concurrency)
    return problems


def _paths(cand: Candidate) -> list[tuple[str, str | None]]:
    return [("model", cand.model), ("binary", cand.binary),
            ("spec.draft_model", cand.spec.draft_model if cand.spec else None)]


def path_problems(i: int, cand: Candidate) -> list[BenchdError]:
    out = []
    for name, value in _paths(cand):
        if value is None:
            continue
        if "\x00" in value:
            out.append(BenchdError("invalid", f"{name} contains a NUL byte", f"$.candidates[{i}].{name}"))
        elif not os.path.isabs(value):
            out.append(BenchdError(
                "relative_path",
                f"candidate {cand.id!r}: {name} {value!r} is relative; the daemon needs absolute paths"
                " (benchctl resolves them against the sweep file's folder)",
                f"$.candidates[{i}].{name}"))
    return out


def local_problems(candidates: Iterable[tuple[int, Candidate]], cache_dir: Path, sweep: Sweep | None) -> list[str]:
    """`benchctl validate`'s check of each candidate that decoded, on this machine: one line a
    problem, `candidates[i] (id).field: why`, in the order a reader fixes them."""
    from benchd.servers.runtimes import get_adapter

    out: list[str] = []
    for i, cand in candidates:
        where = f"candidates[{i}] ({cand.id})"
        if not os.path.exists(cand.model):
            out.append(f"{where}.model: {cand.model} does not exist")
        if cand.spec is not None and cand.spec.draft_model and not os.path.exists(cand.spec.draft_model):
            out.append(f"{where}.spec.draft_model: {cand.spec.draft_model} does not exist")
        if cand.binary is not None and not (os.path.isfile(cand.binary) and os.access(cand.binary, os.X_OK)):
            out.append(f"{where}.binary: {cand.binary} is not an executable file")
        out += [f"{where}: {e}" for e in adapter_problems(cand, sweep)]
        if cand.binary is None:
            try:
                exe = _first_str(get_adapter(cand.runtime).command(cand, cache_dir))
                if exe and os.sep in exe and not os.path.exists(exe):
                    out.append(f"{where}.binary: {exe} does not exist")
            except BenchdError as exc:
                out.append(f"{where}.binary: {exc}")
    out += [f"{e.field[2:] if e.field else 'evals'}: {e.message}" for e in eval_data_problems(sweep, cache_dir)]
    return out


def submit_problems(sweep: Sweep, cache_dir: Path | None = None) -> list[BenchdError]:
    """What the daemon refuses at submit: every candidate's paths first, then the adapters' checks,
    then (given the cache dir) public eval suites whose data is not fetched."""
    out = [p for i, cand in enumerate(sweep.candidates) for p in path_problems(i, cand)]
    for i, cand in enumerate(sweep.candidates):
        out += [p if p.field else BenchdError(p.code, p.message, f"$.candidates[{i}]", p.status)
                for p in adapter_problems(cand, sweep)]
    if cache_dir is not None:
        out += eval_data_problems(sweep, cache_dir)
    return out


def eval_data_problems(sweep: Sweep | None, cache_dir: Path) -> list[BenchdError]:
    """The sweep's public eval suites (`evals`) whose package is not in the cache: one problem (field
    `$.evals`) naming the command that fetches them."""
    from benchd.engine import suites

    if sweep is None or not sweep.evals:
        return []
    try:
        suites.require(list(sweep.evals), cache_dir)
    except BenchdError as exc:
        return [BenchdError(exc.code, exc.message, "$.evals", exc.status)]
    return []


def _first_str(value: Any) -> str | None:
    """The executable of an adapter's command (a list, or a (list, how) pair)."""
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    return value if isinstance(value, str) else None
