"""The fingerprint of what a benchmarked candidate's speed depends on, and `changes(old, new)`: what differs,
in words a person reads. Reasons and facts: docs/locking.md#the-fingerprint-read-from-files."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchd.config import Config
from benchd.errors import BenchdError
from benchd.schemas import Candidate, ExternalServer, Fingerprint, Runbook
from benchd.sensors.facts import hash_file, hash_model
from benchd.servers.runtimes.environment import redact
from benchd.store import utcnow

if TYPE_CHECKING:
    from benchd.servers.runtimes.base import RuntimeAdapter

#: Fingerprint fields compared by `changes`, in the order a reader wants them, with their labels.
COMPARED: tuple[tuple[str, str], ...] = (
    ("binary", "binary path"), ("binary_realpath", "binary real path"), ("binary_sha256", "binary sha256"),
    ("version", "version"), ("packages", "packages"), ("model_path", "model path"),
    ("model_sha256", "model sha256"), ("draft_model_sha256", "draft model sha256"), ("args", "args"),
    ("env", "env"),
)
#: Which kind of change each field is (what `compare` and the notification call out).
KIND = {"binary": "binary", "binary_realpath": "binary", "binary_sha256": "binary", "version": "version",
        "packages": "version", "model_path": "model", "model_sha256": "model", "draft_model_sha256": "model",
        "args": "args", "env": "args"}


def hash_cache(config: Config) -> Path:
    """One cache of sha256s (models and binaries) per cache dir, keyed by path, size and mtime."""
    return config.cache_dir / "model-hashes.json"


def executable_of(binary: str | None) -> str | None:
    """The executable in a recorded `binary` (rows record the command joined: `python -m mlx_lm.server`)."""
    if not binary or os.path.exists(binary):
        return binary
    try:
        parts = shlex.split(binary)
    except ValueError:
        return binary
    return parts[0] if parts else binary


def take_fingerprint(cand: Candidate, config: Config, source: str) -> Fingerprint:
    """Read the candidate's fingerprint now (may run `--version`: call off the event loop)."""
    from benchd.servers.runtimes import get_adapter

    if cand.external:
        return _external_fingerprint(cand, source)
    nulls: dict[str, str] = {}
    fields = _runtime_facts(get_adapter(cand.runtime), cand, config, nulls)
    model = hash_model(cand.model, hash_cache(config))
    fields.update(model_path=cand.model, model_bytes=model.bytes, model_sha256=model.sha256)
    if model.sha256 is None:
        nulls["model_sha256"] = model.null_reasons.get("sha256", "not hashed")
    if cand.spec is not None and cand.spec.draft_model:
        draft = hash_model(cand.spec.draft_model, hash_cache(config))
        fields["draft_model_sha256"] = draft.sha256
        if draft.sha256 is None:
            nulls["draft_model_sha256"] = draft.null_reasons.get("sha256", "not hashed")
    return Fingerprint(taken_at=utcnow(), source=source, runtime=cand.runtime, args=list(cand.args),
                       env=redact(cand.env), null_reasons=nulls, **fields)


def _runtime_facts(adapter: RuntimeAdapter, cand: Candidate, config: Config, nulls: dict[str, str]) -> dict[str, Any]:
    """The binary's and runtime's fingerprint fields; why one is null goes in `nulls`."""
    try:
        command, _how = adapter.launcher.command(cand, config.cache_dir)
    except BenchdError as exc:
        for f in ("binary_sha256", "version"):
            nulls[f] = f"the runtime does not resolve: {exc.message}"
        return {"binary": cand.binary}
    if not command:
        return {}
    fields = _binary_facts(Path(command[0]), config, nulls)
    version = adapter.launcher.installed_version(command)
    fields["version"] = version
    fields["version_source"] = f"{adapter.name} offline ({'--version' if cand.runtime == 'llama-server' else 'venv metadata'})"
    if version is None:
        nulls["version"] = "the runtime did not tell its version offline"
    fields["packages"] = adapter.launcher.installed_packages(command)
    return fields


def _external_fingerprint(cand: Candidate, source: str) -> Fingerprint:
    """A server benchd does not start has no files benchd can read: its fingerprint is what answers at
    its URL (`binary` = the detected kind and URL), the version it reports and the model id requests
    name (`model_path`). Asks the server once (one detection, no model load): call off the event loop.
    A server not answering leaves them unread, which `changes` does not count as a change."""
    import asyncio

    from benchd.servers.runtimes.openai import base_url, detect

    try:
        found = asyncio.run(detect(cand))
    except Exception as exc:
        why = f"the external server at {cand.url} did not answer: {type(exc).__name__}"
        return external_fingerprint(cand, None, f"{source}; asked {base_url(cand.url or '')}", why)
    return external_fingerprint(cand, found, f"{source}; asked {base_url(cand.url or '')}")


def external_fingerprint(cand: Candidate, found: ExternalServer | None, source: str,
                         why: str = "the server was never detected") -> Fingerprint:
    """An external candidate's fingerprint from a detection (`why` says why there is none)."""
    nulls: dict[str, str] = {name: "an external server: benchd reads none of its files"
                             for name in ("binary_sha256", "model_sha256")}
    if found is None:
        nulls["binary"] = nulls["version"] = why
    elif found.version is None:
        nulls["version"] = found.null_reasons.get("version", "the server reports no version")
    return Fingerprint(taken_at=utcnow(), source=source, runtime=cand.runtime,
                       binary=f"{found.kind} at {found.url}" if found else None, version=found.version if found else None,
                       version_source="detected at the candidate's url", model_path=cand.request_model,
                       null_reasons=nulls)


def _binary_facts(path: Path, config: Config, nulls: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"binary": str(path)}
    try:
        real = path.resolve(strict=True)
        st = real.stat()
    except OSError as exc:
        nulls["binary_sha256"] = f"cannot read {path}: {exc.strerror or exc}"
        return out
    out.update(binary_realpath=str(real), binary_bytes=st.st_size, binary_mtime_ns=st.st_mtime_ns)
    try:
        out["binary_sha256"] = hash_file(real, hash_cache(config))
    except OSError as exc:
        nulls["binary_sha256"] = f"cannot read {real}: {exc.strerror or exc}"
    return out


def runbook_fingerprint(rb: Runbook, candidate: str) -> Fingerprint | None:
    """A candidate's fingerprint in a runbook; for a runbook older than fingerprints, the partial one
    its provenance allows (binary, server version, model sha256, args)."""
    prov = next((p for p in rb.provenance.candidates if p.candidate == candidate), None)
    if prov is None:
        return None
    if prov.fingerprint is not None:
        return prov.fingerprint
    cand = next((c for c in rb.sweep.candidates if c.id == candidate), None)
    return Fingerprint(taken_at=rb.provenance.collected_at, source="the runbook's provenance (no fingerprint)",
                       runtime=prov.runtime, binary=executable_of(prov.binary), version=prov.server_version,
                       model_path=prov.model.path, model_bytes=prov.model.bytes, model_sha256=prov.model.sha256,
                       draft_model_sha256=getattr(prov.draft_model, "sha256", None),
                       args=list(cand.args if cand else []), env=redact(cand.env if cand else {}),
                       null_reasons={f: "the runbook predates fingerprints" for f in
                                     ("binary_realpath", "binary_sha256", "packages")})


def _show(field: str, value: object) -> str:
    if value in (None, {}, []):
        return "-"
    if field.endswith("sha256"):
        return str(value)[:12]
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" if field == "packages" else f"{k}={v}" for k, v in sorted(value.items()))
    if isinstance(value, list):
        return shlex.join(str(v) for v in value)
    return str(value)


def _differences(old: Fingerprint, new: Fingerprint) -> list[tuple[str, str]]:
    out = []
    for field, label in COMPARED:
        a, b = getattr(old, field), getattr(new, field)
        if field == "env":  # a lock written before secrets were redacted holds the value: compare redacted
            a, b = redact(a), redact(b)
        if a == b:
            continue
        if field not in ("args", "env") and a in (None, {}):
            continue  # the old side could not read it: no evidence of a change
        if field not in ("args", "env") and b in (None, {}):
            if new.runtime == "openai":
                continue  # an external server that does not answer now: no evidence either way
            out.append((field, f"{label}: {_show(field, a)} -> unreadable ({new.null_reasons.get(field, 'not read')})"))
            continue
        out.append((field, f"{label}: {_show(field, a)} -> {_show(field, b)}"))
    return out


def changes(old: Fingerprint, new: Fingerprint) -> list[str]:
    """What differs, one line per field ("version: llama.cpp b1-0c1e570 -> llama.cpp b2-…")."""
    return [line for _field, line in _differences(old, new)]


def changed_kinds(old: Fingerprint, new: Fingerprint) -> list[str]:
    """Which of binary / version / model / args changed (for headers and notifications)."""
    return sorted({KIND[field] for field, _line in _differences(old, new)})


def side_by_side(a: Fingerprint | None, b: Fingerprint | None) -> list[tuple[str, str, str, bool]]:
    """(label, A, B, differs) per compared field, for `compare`'s header."""
    rows = []
    for field, label in COMPARED:
        va = getattr(a, field) if a is not None else None
        vb = getattr(b, field) if b is not None else None
        rows.append((label, _show(field, va), _show(field, vb), va != vb))
    return rows
