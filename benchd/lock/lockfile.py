"""The human lock: `<state>/locked.toml`, the candidate a person chose exactly as benchmarked, with the
medians it was chosen on; built from a runbook, read, written atomically, rechecks appended.
Reasons: docs/locking.md#the-lock-file-the-timer-and-the-notifier.

Lock schema_version history (newest last; never edit an entry):
  1 (2026-11-30) first version: [locked] + [locked.spec] + [locked.sampling] + [locked.evidence."<ctx>"],
    optional [previous] (the replaced lock, same shape, its own [previous] dropped).
  2 (2026-11-30) [locked.fingerprint] (binary, version, packages, model sha256: what the evidence depends
    on), optional `recheck_contexts` (a subset of the evidence contexts to recheck; a person sets it), and
    the top-level [[rechecks]] history that benchd appends (also to version-1 files) without rewriting
    [locked]. A re-lock keeps the history.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

from benchd.atomic import atomic_write
from benchd.config import Config
from benchd.errors import BenchdError
from benchd.results.runbook import load_runbook
from benchd.schemas import (
    Candidate,
    CandidateProvenance,
    ExternalServer,
    Fingerprint,
    RecheckEntry,
    Row,
    Runbook,
    Sampling,
    Spec,
)
from benchd.stats.notation import plural
from benchd.store import utcnow

LOCK_SCHEMA_VERSION = 2
SUPPORTED_LOCK_VERSIONS: tuple[int, ...] = (1, 2)
#: The port `locked --command` uses when none is given (llama-server's and mlx_lm.server's default).
DEFAULT_PORTS: dict[str, int] = {"llama-server": 8080, "mlx_lm.server": 8080, "mlx_vlm.server": 8080}


class LockEvidence(Struct, kw_only=True, omit_defaults=True):
    """The cell medians (and per-candidate eval/sustain figures) the choice was made on, per context."""

    n_ok: int = 0
    n_failed: int = 0
    gen_tps: float | None = None
    prompt_tps: float | None = None
    ttft_ms: float | None = None
    mem_peak_bytes: float | None = None
    eval_pass_rate: float | None = None
    sustain_ratio: float | None = None
    #: The Pareto view's other axes at this context (public suites, time to ready, KLD, energy, ...), by name.
    axes: dict[str, float] = {}
    noisy: bool = False
    frontier: bool = True
    null_reasons: dict[str, str] = {}


class Locked(Struct, kw_only=True, omit_defaults=True):
    """The [locked] table, in the order a reviewer reads it (kw_only lets required fields come late)."""

    schema_version: int
    candidate: str
    runtime: str
    model_path: str
    model_bytes: int | None = None
    model_sha256: str | None = None
    request_model: str | None = None
    binary: str | None = None
    binary_version: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    ctx_size: int | None = None
    ctx_size_source: str | None = None
    spec: Spec | None = None
    sampling: Sampling = Sampling()
    runbook: str
    locked_at: str
    note: str = ""
    forced: bool = False
    dominated_by: dict[str, list[str]] = {}
    evidence: dict[str, LockEvidence] = {}
    recheck_contexts: list[int] = []
    fingerprint: Fingerprint | None = None
    #: An external candidate (docs/locking.md#external-servers); the key's variable NAME, never the key.
    url: str | None = None
    api_key_env: str | None = None
    external: ExternalServer | None = None
    started_by_benchd: bool = True


class LockFile(Struct, kw_only=True, omit_defaults=True):
    locked: Locked
    previous: Locked | None = None
    rechecks: list[RecheckEntry] = []


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(k: str) -> str:
    """Bare when TOML allows it; quoted otherwise and for numbers (`evidence."2048"` reads as a label)."""
    return k if _BARE_KEY.fullmatch(k) and not k.isdigit() else _str(k)


def _str(s: str) -> str:
    # JSON's string escapes are valid TOML; raw DEL is not, so it is escaped too.
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _float(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


#: TOML writers by Python type, bool before int (a bool is an int).
_SCALARS: tuple[tuple[type, Callable[[Any], str]], ...] = (
    (bool, lambda v: "true" if v else "false"),
    (int, str),
    (float, _float),
    (str, lambda v: _str(v)),
    (list, lambda v: "[" + ", ".join(_scalar(x) for x in v) + "]"),
)


def _scalar(v: object) -> str:
    write = next((w for t, w in _SCALARS if isinstance(v, t)), None)
    if write is None:
        raise TypeError(f"cannot write {type(v).__name__} to the lock TOML")
    return write(v)


def _is_tables(v: object) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def dumps_toml(doc: dict[str, Any], header: str = "") -> str:
    """TOML for nested dicts of scalars and lists; a list of dicts is `[[name]]`; None is left out."""
    out: list[str] = [header] if header else []

    def table(path: list[str], d: dict[str, Any], array: bool = False) -> None:
        scalars = [(k, v) for k, v in d.items() if v is not None and not isinstance(v, dict) and not _is_tables(v)]
        subs = [(k, v) for k, v in d.items() if isinstance(v, dict) or _is_tables(v)]
        name = ".".join(_key(p) for p in path)
        if array:
            out.append(("\n" if out else "") + f"[[{name}]]")
        elif path and (scalars or not subs):
            out.append(("\n" if out else "") + f"[{name}]")
        out.extend(f"{_key(k)} = {_scalar(v)}" for k, v in scalars)
        for k, v in subs:
            if isinstance(v, dict):
                table([*path, k], v)
            else:
                for item in v:
                    table([*path, k], item, array=True)

    table([], doc)
    return "\n".join(out) + "\n"


def _pareto_place(rb: Runbook, candidate: str, context: int) -> tuple[dict[str, Any], bool]:
    point = None
    front = True
    for p in rb.pareto:
        if p.context == context:
            point = next((pt for pt in p.points if pt.candidate == candidate), None)
            front = candidate in p.frontier
    return (point.values if point else {}), front


def _evidence(rb: Runbook, candidate: str) -> dict[str, LockEvidence]:
    out: dict[str, LockEvidence] = {}
    for cell in (c for c in rb.cells if c.candidate == candidate):
        values, front = _pareto_place(rb, candidate, cell.context)
        nulls: dict[str, str] = {}
        fields: dict[str, Any] = {}
        for m in ("gen_tps", "prompt_tps", "ttft_ms", "mem_peak_bytes"):
            ms = getattr(cell, m)
            fields[m] = ms.median
            if ms.median is None:
                nulls[m] = ms.null_reasons.get("value", "no value")
        for m, why in (("eval_pass_rate", "no eval results"), ("sustain_ratio", "no successful sustained run")):
            fields[m] = values.get(m)
            if fields[m] is None:
                nulls[m] = why
        axes = {k: v for k, v in values.items() if k not in fields and v is not None}
        nulls |= {k: "no value in the Pareto view (the runbook's deferred axes say why)"
                  for k, v in values.items() if k not in fields and v is None}
        out[str(cell.context)] = LockEvidence(n_ok=cell.n_ok, n_failed=cell.n_failed, noisy=cell.noisy,
                                              frontier=front, null_reasons=nulls, axes=axes, **fields)
    return out


def dominated_by(rb: Runbook, candidate: str) -> dict[str, list[str]]:
    """Per context: 'X (better on a, b)' for every candidate that dominates `candidate` there, in the
    Pareto view or at the race's look that dropped it (the view then excludes it)."""
    out = {str(p.context): [f"{d.by} (better on {', '.join(d.better_on)})" for d in p.dominated[candidate]]
           for p in rb.pareto if candidate in p.dominated}
    for drop in (d for d in rb.race if d.candidate == candidate):
        out.setdefault(str(drop.context), []).extend(
            f"{by} (better on {', '.join(axes)}; the race, after round {drop.round})"
            for by, axes in sorted(drop.better_on.items()))
    return out


def build_lock(rb: Runbook, candidate_id: str, note: str = "", force: bool = False,
               config: Config | None = None) -> Locked:
    """The [locked] table for one candidate of a runbook; raises BenchdError when the lock is refused.
    The fingerprint is the runbook's, else one read now when `config` is given."""
    cand, ok = _measured(rb, candidate_id)
    doms = _dominance(rb, candidate_id, force)
    prov = next((p for p in rb.provenance.candidates if p.candidate == candidate_id), None)
    ctx_size, ctx_src = _ctx_size(cand, ok, prov)
    return Locked(
        url=cand.url, api_key_env=cand.api_key_env, started_by_benchd=not cand.external,
        schema_version=LOCK_SCHEMA_VERSION, candidate=cand.id, runtime=cand.runtime,
        model_path=cand.request_model or "" if cand.external else cand.model,
        request_model=cand.request_model, args=list(cand.args), env=dict(cand.env),
        ctx_size=ctx_size, ctx_size_source=ctx_src, spec=cand.spec, sampling=rb.sweep.sampling,
        runbook=rb.id, locked_at=utcnow(), note=note, forced=bool(doms) and force, dominated_by=doms,
        evidence=_evidence(rb, candidate_id), fingerprint=_fingerprint(prov, cand, config),
        **_provenance_fields(prov, cand),
    )


def _measured(rb: Runbook, candidate_id: str) -> tuple[Candidate, list[Row]]:
    """(the candidate, its successful probe rows); raises BenchdError without either."""
    cand = next((c for c in rb.sweep.candidates if c.id == candidate_id), None)
    if cand is None:
        known = ", ".join(c.id for c in rb.sweep.candidates)
        raise BenchdError("unknown_candidate", f"no candidate {candidate_id!r} in runbook {rb.id} (it has: {known})",
                          "candidate")
    ok = [r for r in rb.rows if r.candidate == candidate_id and r.kind == "probe" and r.status == "ok"]
    if not ok:
        raise BenchdError("no_successful_rows", f"candidate {candidate_id!r} has no successful probe rows in runbook "
                          f"{rb.id}: nothing measured to lock on", "candidate")
    return cand, ok


def _dominance(rb: Runbook, candidate_id: str, force: bool) -> dict[str, list[str]]:
    """Who dominates the candidate per context; raises BenchdError when it is dominated without `force`."""
    doms = dominated_by(rb, candidate_id)
    if doms and not force:
        detail = "; ".join(f"at context {ctx}: {', '.join(who)}" for ctx, who in doms.items())
        raise BenchdError("dominated", f"candidate {candidate_id!r} is dominated ({detail}). "
                          "Lock it anyway with --force if that is your informed choice.", "candidate")
    return doms


def _provenance_fields(prov: CandidateProvenance | None, cand: Candidate) -> dict[str, Any]:
    if prov is None:
        return {"external": None, "model_bytes": None, "model_sha256": None, "binary": cand.binary,
                "binary_version": None}
    return {"external": prov.external, "model_bytes": prov.model.bytes, "model_sha256": prov.model.sha256,
            "binary": prov.binary or cand.binary, "binary_version": prov.server_version}


def _ctx_size(cand: Candidate, ok: list[Row], prov: CandidateProvenance | None) -> tuple[int | None, str]:
    if cand.external:
        size = prov.external.slot_ctx if prov is not None and prov.external is not None else None
        return size, ("the external server's context per slot, as detected" if size is not None
                      else "the external server reported no context size")
    if cand.ctx_size is not None:
        return cand.ctx_size, "pinned in the sweep (ctx_size)"
    sizes = [r.ctx_size for r in ok if r.ctx_size is not None]
    if sizes:
        return max(sizes), "largest server context size of the benchmarked cells"
    return None, "the server sized its own context (not recorded in the rows)"


def _fingerprint(prov: CandidateProvenance | None, cand: Candidate, config: Config | None) -> Fingerprint | None:
    if prov is not None and prov.fingerprint is not None:
        return prov.fingerprint
    if config is None:
        return None
    from benchd.servers.fingerprint import executable_of, take_fingerprint

    binary = executable_of(prov.binary if prov else None) or cand.binary
    return take_fingerprint(msgspec.structs.replace(cand, binary=binary), config,
                            "read from files when locked (the runbook has no fingerprint)")


_HEADER = (
    "# benchd lock: the candidate a person chose, exactly as benchmarked. Written by `benchctl lock`;\n"
    "# review changes in a diff ([previous] holds the lock this one replaced).\n"
    f"# Lock schema_version {LOCK_SCHEMA_VERSION}: see benchd/lock/lockfile.py for the change history."
)


def encode_lock(lock: LockFile) -> str:
    return dumps_toml(msgspec.to_builtins(lock), header=_HEADER)


def read_lock(path: Path) -> LockFile:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise BenchdError("no_lock", f"no lock file at {path} (create one with `benchctl lock --candidate ID`)") from None
    except tomllib.TOMLDecodeError as exc:
        raise BenchdError("invalid_lock", f"{path}: not valid TOML ({exc})") from exc
    version = data.get("locked", {}).get("schema_version") if isinstance(data.get("locked"), dict) else None
    if version not in SUPPORTED_LOCK_VERSIONS:
        raise BenchdError("unsupported_lock_version", f"{path}: lock schema_version {version!r} is not supported "
                          f"(this benchd reads {', '.join(map(str, SUPPORTED_LOCK_VERSIONS))})",
                          "locked.schema_version")
    try:
        return msgspec.convert(data, LockFile)
    except msgspec.ValidationError as exc:
        from benchd.errors import from_validation

        raise from_validation(exc, str(path)) from exc


def write_lock(path: Path, locked: Locked) -> LockFile:
    """Atomically write `locked`, the lock it replaces in [previous], the [[rechecks]] kept."""
    previous = None
    rechecks: list[RecheckEntry] = []
    if path.exists():
        try:
            old = read_lock(path)
        except BenchdError as exc:
            raise BenchdError("invalid_lock", f"will not replace {path}: {exc.message} (move it away first)") from exc
        previous, rechecks = old.locked, old.rechecks
    doc = LockFile(locked=locked, previous=previous, rechecks=rechecks)
    text = encode_lock(doc)
    msgspec.convert(tomllib.loads(text), LockFile)  # never write what we could not read back
    atomic_write(path, text)
    return doc


def append_recheck(path: Path, entry: RecheckEntry) -> LockFile:
    """Append one [[rechecks]] table, every byte before it unchanged, or raise BenchdError."""
    text = path.read_text()
    before = read_lock(path)
    added = dumps_toml({"rechecks": [msgspec.to_builtins(entry)]})
    new_text = text.rstrip("\n") + "\n\n" + added
    after = msgspec.convert(tomllib.loads(new_text), LockFile)
    if after.locked != before.locked or after.previous != before.previous:
        raise BenchdError("invalid_lock", f"{path}: appending the recheck would change [locked]; not written")
    atomic_write(path, new_text)
    return after


def lock_candidate(config: Config, candidate_id: str, runbook_ref: str | None = None, note: str = "",
                   out: Path | None = None, force: bool = False) -> tuple[Path, LockFile]:
    rb = load_runbook(runbook_ref, config)
    locked = build_lock(rb, candidate_id, note=note, force=force, config=config)
    path = out or config.locked_path
    return path, write_lock(path, locked)


def baseline_from_lock(locked: Locked) -> Fingerprint:
    """A partial fingerprint from a lock without one (schema 1): binary, version, model sha256."""
    from benchd.servers.fingerprint import executable_of

    nulls = {f: "the lock predates fingerprints (lock schema_version 1)" for f in
             ("binary_realpath", "binary_sha256", "packages")}
    return Fingerprint(taken_at=locked.locked_at, source="the lock's own fields (no [locked.fingerprint])",
                       runtime=locked.runtime, binary=executable_of(locked.binary), version=locked.binary_version,
                       model_path=locked.model_path, model_bytes=locked.model_bytes,
                       model_sha256=locked.model_sha256, args=list(locked.args), env=dict(locked.env),
                       null_reasons=nulls)


def locked_candidate(locked: Locked, *, supply: bool = False) -> Candidate:
    """The Candidate the lock describes; `supply` fills `<redacted>` env values from benchd's."""
    from benchd.servers.fingerprint import executable_of
    from benchd.servers.runtimes.environment import supplied

    if not locked.started_by_benchd:
        return Candidate(id=locked.candidate, runtime=locked.runtime,  # type: ignore[arg-type]
                         url=locked.url, request_model=locked.request_model, api_key_env=locked.api_key_env)
    return Candidate(id=locked.candidate, runtime=locked.runtime, model=locked.model_path,  # type: ignore[arg-type]
                     request_model=locked.request_model, args=list(locked.args), binary=executable_of(locked.binary),
                     env=supplied(locked.env, where="locked.env") if supply else dict(locked.env),
                     ctx_size=locked.ctx_size, spec=locked.spec)


def external_description(locked: Locked) -> str:
    """What `locked --command` prints for an external server: how it was detected."""
    found = locked.external
    if found is None:
        return (f"# benchd does not start this server: an external server at {locked.url}, requests name "
                f"model {locked.request_model!r}; it was never detected (no server_ready event)")
    lines = [f"# benchd does not start this server: {found.kind} at {found.url}, "
             f"version {found.version or 'unknown (' + found.null_reasons.get('version', 'not reported') + ')'}",
             f"# requests name model {locked.request_model!r}; detected by: {'; '.join(found.detected_by)}"]
    if found.slot_ctx is not None:
        lines.append(f"# context per slot {found.slot_ctx}" + (f", {plural(found.total_slots, 'slot')}" if found.total_slots else ""))
    return "\n".join(lines)


def server_argv(locked: Locked, config: Config, port: int | None = None) -> list[str]:
    """The argv that starts the locked server as benchmarked ([] for an external server)."""
    from benchd.servers.runtimes import get_adapter

    if not locked.started_by_benchd:
        return []
    adapter = get_adapter(locked.runtime)
    cand = locked_candidate(locked)
    command, _found_via = adapter.launcher.command(cand, config.cache_dir)
    return adapter.launcher.argv(cand, command=command, port=port or DEFAULT_PORTS.get(locked.runtime, 8080),
                        ctx_size=locked.ctx_size)


def server_env(locked: Locked, config: Config) -> dict[str, str]:
    """The variables the server runs with beyond this shell's, as the daemon starts it."""
    from benchd.servers.runtimes import get_adapter

    if not locked.started_by_benchd:
        return {}
    full = get_adapter(locked.runtime).launcher.env(locked_candidate(locked), config)
    return {k: v for k, v in sorted(full.items()) if os.environ.get(k) != v}


def server_command_line(locked: Locked, config: Config, port: int | None = None) -> str:
    """`server_argv` as one shell line behind `env` (`server_env` set, the knobs the daemon removes
    unset); for an external server, `external_description`."""
    from benchd.servers.runtimes import get_adapter

    if not locked.started_by_benchd:
        return external_description(locked)
    from benchd.servers.runtimes.environment import REDACTED

    removed = get_adapter(locked.runtime).launcher.server_env(locked_candidate(locked), config).removed
    env = " ".join([*(f"-u {k}" for k in removed),  # a secret's value comes from this shell: NAME="$NAME"
                    *(f'{k}="${k}"' if v == REDACTED else f"{k}={shlex.quote(v)}"
                      for k, v in server_env(locked, config).items())])
    line = shlex.join(server_argv(locked, config, port))
    return f"env {env} {line}" if env else line
