"""The human lock: the user, not the tool, picks a candidate; this writes that choice down.

`lock_candidate` turns one candidate of a runbook into a reviewable TOML file (default
`<state>/locked.toml`) holding exactly what was benchmarked (runtime, model + sha256, binary + version,
args, context size, spec, sampling) and the medians it was chosen on. It refuses an unknown candidate
or one without a successful row, and a candidate the Pareto view shows dominated is locked only with
`force=True` (the human decides, knowingly; the file then records who dominated it). The write is
atomic (temp file + rename) and the lock it replaces moves to `[previous]`, so a diff shows the change.

The TOML is written by a small emitter for this fixed shape (stdlib has a reader, `tomllib`, but no
writer); `read_lock` parses it back with tomllib and msgspec.

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
    Runbook,
    Sampling,
    Spec,
)
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
    #: An external candidate (`runtime = "openai"`): the URL it was measured at, the NAME of its API-key
    #: variable (never the key), and the server as detected then. benchd does not start it
    #: (`started_by_benchd = false`); `model_path` is then the model id its requests name.
    url: str | None = None
    api_key_env: str | None = None
    external: ExternalServer | None = None
    started_by_benchd: bool = True


class LockFile(Struct, kw_only=True, omit_defaults=True):
    locked: Locked
    previous: Locked | None = None
    rechecks: list[RecheckEntry] = []


# ------------------------------------------------------------------------------------- TOML emitter

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(k: str) -> str:
    """Bare when TOML allows it; quoted otherwise and for numbers (`evidence."2048"` reads as a label)."""
    return k if _BARE_KEY.fullmatch(k) and not k.isdigit() else _str(k)


def _str(s: str) -> str:
    # JSON string escapes (\" \\ \n \t \uXXXX) are all valid TOML basic-string escapes; DEL is not
    # allowed raw in TOML, so it is escaped too.
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _scalar(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to the lock TOML")


def _is_tables(v: object) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def dumps_toml(doc: dict[str, Any], header: str = "") -> str:
    """TOML for nested dicts of str/int/float/bool/lists of those; a non-empty list of dicts is an
    array of tables (`[[name]]`). None values are left out."""
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


# ------------------------------------------------------------------------------------------- build


def _evidence(rb: Runbook, candidate: str) -> dict[str, LockEvidence]:
    out: dict[str, LockEvidence] = {}
    for cell in rb.cells:
        if cell.candidate != candidate:
            continue
        point = None
        front = True
        for p in rb.pareto:
            if p.context == cell.context:
                point = next((pt for pt in p.points if pt.candidate == candidate), None)
                front = candidate in p.frontier
        values = point.values if point else {}
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
        out[str(cell.context)] = LockEvidence(n_ok=cell.n_ok, n_failed=cell.n_failed, noisy=cell.noisy,
                                              frontier=front, null_reasons=nulls, **fields)
    return out


def dominated_by(rb: Runbook, candidate: str) -> dict[str, list[str]]:
    """Per context: 'X (better on a, b)' for every candidate that dominates `candidate` there."""
    return {str(p.context): [f"{d.by} (better on {', '.join(d.better_on)})" for d in p.dominated[candidate]]
            for p in rb.pareto if candidate in p.dominated}


def build_lock(rb: Runbook, candidate_id: str, note: str = "", force: bool = False,
               config: Config | None = None) -> Locked:
    """The [locked] table for one candidate of a runbook; raises BenchdError when the lock is refused.

    The fingerprint is the runbook's (read when it was written); a runbook older than fingerprints gets
    one read now, when `config` is given (its `source` says so)."""
    cand = next((c for c in rb.sweep.candidates if c.id == candidate_id), None)
    if cand is None:
        known = ", ".join(c.id for c in rb.sweep.candidates)
        raise BenchdError("unknown_candidate", f"no candidate {candidate_id!r} in runbook {rb.id} (it has: {known})",
                          "candidate")
    ok = [r for r in rb.rows if r.candidate == candidate_id and r.kind == "probe" and r.status == "ok"]
    if not ok:
        raise BenchdError("no_successful_rows", f"candidate {candidate_id!r} has no successful probe rows in runbook "
                          f"{rb.id}: nothing measured to lock on", "candidate")
    doms = dominated_by(rb, candidate_id)
    if doms and not force:
        detail = "; ".join(f"at context {ctx}: {', '.join(who)}" for ctx, who in doms.items())
        raise BenchdError("dominated", f"candidate {candidate_id!r} is dominated ({detail}). "
                          "Lock it anyway with --force if that is your informed choice.", "candidate")
    prov = next((p for p in rb.provenance.candidates if p.candidate == candidate_id), None)
    ctx_size: int | None
    if cand.ctx_size is not None:
        ctx_size, ctx_src = cand.ctx_size, "pinned in the sweep (ctx_size)"
    else:
        sizes = [r.ctx_size for r in ok if r.ctx_size is not None]
        ctx_size = max(sizes) if sizes else None
        ctx_src = ("largest server context size of the benchmarked cells" if sizes
                   else "the server sized its own context (not recorded in the rows)")
    if cand.external:
        ctx_size = prov.external.slot_ctx if prov is not None and prov.external is not None else None
        ctx_src = ("the external server's context per slot, as detected" if ctx_size is not None
                   else "the external server reported no context size")
    return Locked(
        url=cand.url, api_key_env=cand.api_key_env, external=prov.external if prov is not None else None,
        started_by_benchd=not cand.external,
        schema_version=LOCK_SCHEMA_VERSION, candidate=cand.id, runtime=cand.runtime,
        model_path=cand.request_model or "" if cand.external else cand.model,
        model_bytes=prov.model.bytes if prov else None, model_sha256=prov.model.sha256 if prov else None,
        request_model=cand.request_model, binary=(prov.binary if prov else None) or cand.binary,
        binary_version=prov.server_version if prov else None, args=list(cand.args), env=dict(cand.env),
        ctx_size=ctx_size, ctx_size_source=ctx_src, spec=cand.spec, sampling=rb.sweep.sampling,
        runbook=rb.id, locked_at=utcnow(), note=note, forced=bool(doms) and force, dominated_by=doms,
        evidence=_evidence(rb, candidate_id), fingerprint=_fingerprint(prov, cand, config),
    )


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
    """Atomically write `locked`, moving an existing lock (if readable) to [previous]; the [[rechecks]]
    history is kept (each entry names the lock it checked)."""
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
    """Append one [[rechecks]] table to the lock file, leaving every byte before it as it was: benchd
    never rewrites the human's [locked] block. Refuses (BenchdError) when the result would not read back
    with the same [locked]."""
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


# --------------------------------------------------------------------------------------- command


def baseline_from_lock(locked: Locked) -> Fingerprint:
    """A partial fingerprint from what a lock without one recorded (lock schema 1): binary path,
    version string (from the server's `/props` or venv metadata) and model sha256."""
    from benchd.servers.fingerprint import executable_of

    nulls = {f: "the lock predates fingerprints (lock schema_version 1)" for f in
             ("binary_realpath", "binary_sha256", "packages")}
    return Fingerprint(taken_at=locked.locked_at, source="the lock's own fields (no [locked.fingerprint])",
                       runtime=locked.runtime, binary=executable_of(locked.binary), version=locked.binary_version,
                       model_path=locked.model_path, model_bytes=locked.model_bytes,
                       model_sha256=locked.model_sha256, args=list(locked.args), env=dict(locked.env),
                       null_reasons=nulls)


def locked_candidate(locked: Locked, *, supply: bool = False) -> Candidate:
    """The Candidate the lock describes (what the runtime adapter builds a command from). Its secret
    env values are recorded `<redacted>`; `supply` takes each from benchd's environment (a start that
    runs: the recheck), else they stay `<redacted>` (a fingerprint, a printed command)."""
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
    """What `locked --command` prints for an external server: benchd does not start it, and how it was
    detected (kind, version, the requests that told)."""
    found = locked.external
    if found is None:
        return (f"# benchd does not start this server: an external server at {locked.url}, requests name "
                f"model {locked.request_model!r}; it was never detected (no server_ready event)")
    lines = [f"# benchd does not start this server: {found.kind} at {found.url}, "
             f"version {found.version or 'unknown (' + found.null_reasons.get('version', 'not reported') + ')'}",
             f"# requests name model {locked.request_model!r}; detected by: {'; '.join(found.detected_by)}"]
    if found.slot_ctx is not None:
        lines.append(f"# context per slot {found.slot_ctx}" + (f", {found.total_slots} slot(s)" if found.total_slots else ""))
    return "\n".join(lines)


def server_argv(locked: Locked, config: Config, port: int | None = None) -> list[str]:
    """The exact argv that starts the locked server as benchmarked, via the runtime adapter (none for
    an external server: benchd does not start it)."""
    from benchd.servers.runtimes import get_adapter

    if not locked.started_by_benchd:
        return []
    adapter = get_adapter(locked.runtime)
    cand = locked_candidate(locked)
    command, _found_via = adapter.launcher.command(cand, config.cache_dir)
    return adapter.launcher.argv(cand, command=command, port=port or DEFAULT_PORTS.get(locked.runtime, 8080),
                        ctx_size=locked.ctx_size)


def server_env(locked: Locked, config: Config) -> dict[str, str]:
    """The variables the server runs with beyond this shell's: the candidate's `env` plus what the
    runtime adapter sets (e.g. the MLX servers' offline HF cache), exactly as the daemon starts it."""
    from benchd.servers.runtimes import get_adapter

    if not locked.started_by_benchd:
        return {}
    full = get_adapter(locked.runtime).launcher.env(locked_candidate(locked), config)
    return {k: v for k, v in sorted(full.items()) if os.environ.get(k) != v}


def server_command_line(locked: Locked, config: Config, port: int | None = None) -> str:
    """`server_argv` as one shell line, with the extra environment (`server_env`) in front and the
    runtime knobs this shell exports unset (`env -u`), as the daemon removes them before a start. For
    an external server: how it was detected instead (benchd does not start it)."""
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
