"""Provenance for a runbook: the machine facts plus what the job recorded, one `collect_*` per area.
Every value is a fact read from the OS or a file, never a guess: else None with `null_reasons[field]`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import msgspec

from benchd.config import Config
from benchd.schemas import (
    CandidateProvenance,
    CpuAffinity,
    EnergyInfo,
    Event,
    ExternalServer,
    ModelInfo,
    PromptsInfo,
    Row,
    SleepInfo,
    Sweep,
)
from benchd.sensors.facts import (
    hash_model,
)
from benchd.servers.fingerprint import executable_of, external_fingerprint, take_fingerprint
from benchd.servers.runtimes.vision import gguf_metadata
from benchd.stats.notation import plural


def collect_sleep(events: Sequence[Event]) -> SleepInfo:
    """`sleep_prevented` of every job_started/job_resumed: true only if every run segment held it."""
    seen = [e.payload for e in events if e.type in ("job_started", "job_resumed") and "sleep_prevented" in e.payload]
    if not seen:
        return SleepInfo(reasons=["the job recorded no sleep-prevention state"])
    return SleepInfo(
        prevented=all(bool(p["sleep_prevented"]) for p in seen),
        methods=sorted({str(p["sleep_method"]) for p in seen if p.get("sleep_method")}),
        reasons=sorted({str(p["sleep_reason"]) for p in seen if p.get("sleep_reason")}),
        source="event:job_started/job_resumed",
    )


def collect_energy(events: Sequence[Event]) -> EnergyInfo:
    """The energy counter the job read, from its `server_ready` events (the engine opens one per start)."""
    seen = [e.payload["energy"] for e in events if e.type == "server_ready" and isinstance(e.payload.get("energy"), dict)]
    if not seen:
        return EnergyInfo(reason="the job recorded no energy source (no server became ready, or the job ran "
                                 "before benchd measured energy)")
    first = seen[0]
    sources = sorted({str(s.get("source")) for s in seen})
    note = f" (sources differ between server starts: {', '.join(sources)})" if len(sources) > 1 else ""
    return EnergyInfo(source=first.get("source"), available=bool(first.get("available")), reason=first.get("reason"),
                      granularity=first.get("granularity"), scope=first.get("scope"),
                      recorded_by=f"event:server_ready, {plural(len(seen), 'server start')}{note}")


def server_info(cand: str, rows: Sequence[Row], events: Sequence[Event]) -> tuple[str | None, str | None, str | None]:
    """(binary, server_version, where the version came from): the rows first, then `server_ready` events."""
    binary, version = _row_field(rows, cand, "binary"), _row_field(rows, cand, "server_version")
    ready = [ev.payload for ev in _ready_events(cand, events)]
    for p in ready:
        binary = binary or p.get("binary")
    if version is not None:
        return binary, version, "rows"
    got = next((v for p in ready if (v := p.get("server_version") or p.get("version")) is not None), None)
    return (binary, None, None) if got is None else (binary, str(got), "event:server_ready")


def _ready_events(cand: str, events: Sequence[Event]) -> list[Event]:
    return [ev for ev in events if ev.type == "server_ready" and ev.payload.get("candidate") == cand]


def _row_field(rows: Sequence[Row], cand: str, field: str) -> str | None:
    return next((v for r in rows if r.candidate == cand and (v := getattr(r, field))), None)


def server_env(cand: str, events: Sequence[Event]) -> tuple[dict[str, str] | None, list[str]]:
    """(variables passed to the candidate's servers, inherited knobs removed), from the last
    `server_ready` event (secret-looking values already redacted)."""
    env: dict[str, str] | None = None
    removed: set[str] = set()
    for p in (ev.payload for ev in _ready_events(cand, events)):
        if isinstance(p.get("env"), dict):
            env = {str(k): str(v) for k, v in p["env"].items()}
            removed.update(str(x) for x in p.get("env_removed") or ())
    return env, sorted(removed)


def collect_prompts(events: Sequence[Event]) -> PromptsInfo:
    """The prompt corpus hash as the job recorded it, else computed now (`source` says so)."""
    for ev in events:
        p = ev.payload
        prompts = p.get("prompts") if isinstance(p.get("prompts"), dict) else p
        if isinstance(prompts, dict) and prompts.get("corpus_sha256"):
            return PromptsInfo(corpus_sha256=str(prompts["corpus_sha256"]),
                               template_sha256=prompts.get("template_sha256"), source=f"event:{ev.type}",
                               corpus=prompts.get("corpus") or {})
    try:
        from benchd.engine.prompts import prompt_provenance

        got = prompt_provenance()
    except Exception as exc:  # a missing stdlib file must not cost the whole runbook
        reason = f"the job recorded no prompt hash and computing it failed: {exc}"
        return PromptsInfo(null_reasons={"corpus_sha256": reason, "template_sha256": reason})
    return PromptsInfo(corpus_sha256=got["corpus_sha256"], template_sha256=got["template_sha256"],
                       source="benchd.engine.prompts.prompt_provenance (computed when the runbook was written)",
                       corpus=got.get("corpus") or {})


def collect_candidates(config: Config, sweep: Sweep, rows: Sequence[Row], events: Sequence[Event]) -> list[CandidateProvenance]:
    cache = config.cache_dir / "model-hashes.json"
    out = []
    for c in sweep.candidates:
        binary, version, source = server_info(c.id, rows, events)
        nulls: dict[str, str] = {}
        if version is None:
            nulls["server_version"] = "no row or server_ready event of this candidate carries a version"
        if binary is None:
            binary = c.binary
            if binary is None:
                nulls["binary"] = "no row or event names the binary, and the sweep sets none"
        draft = c.spec.draft_model if c.spec else None
        env, removed = server_env(c.id, events)
        if env is None:
            nulls["server_env"] = "no server_ready event of this candidate records its environment"
        pinned = collect_affinity(c.id, events)
        if pinned is None:
            nulls["affinity"] = "no server_ready event of this candidate records its cores (never started, or older benchd)"
        ran = msgspec.structs.replace(c, binary=executable_of(binary)) if binary else c
        external = external_server(c.id, events) if c.external else None
        try:
            fingerprint = (external_fingerprint(c, external, "detected at the first attach (server_ready event)")
                           if c.external else take_fingerprint(ran, config, "read from files when the runbook was written"))
        except OSError as exc:  # an unreadable file must not cost the whole runbook
            fingerprint = None
            nulls["fingerprint"] = f"could not be read: {exc}"
        if c.external:
            nulls.pop("server_env", None)
            nulls["server_env"] = "an external server: benchd does not start it, so its environment is unknown"
            if external is None:
                nulls["external"] = "no server_ready event of this candidate: its server never answered"
        model = (ModelInfo(path=c.request_model or "", kind="external",
                           null_reasons={"bytes": "an external server: benchd reads none of its files",
                                         "sha256": "an external server: benchd reads none of its files"})
                 if c.external else with_license(hash_model(c.model, cache)))
        out.append(CandidateProvenance(
            external=external,
            candidate=c.id, runtime=c.runtime, model=model,
            draft_model=hash_model(draft, cache) if draft else None,
            binary=binary, server_version=version, server_version_source=source, affinity=pinned, null_reasons=nulls,
            server_env=env or {}, env_removed=removed,
            fingerprint=fingerprint,
        ))
    return out


def model_license(path: str) -> tuple[str | None, str]:
    """The licence a model's files declare and where it was read, else None and why."""
    p = Path(path).expanduser()
    if p.is_dir():
        readme = p / "README.md"
        try:
            text = readme.read_text(encoding="utf-8", errors="replace") if readme.is_file() else ""
        except OSError as exc:
            return None, f"README.md could not be read: {exc.strerror}"
        head = text.split("\n---", 1)[0] if text.startswith("---") else ""
        found = re.search(r"^license:\s*(\S.*?)\s*$", head, re.MULTILINE)
        if found:
            return found.group(1).strip("'\""), "model dir README.md front matter `license:`"
        return None, "the model dir's README.md declares no `license:` in its front matter (or there is none)"
    try:
        value = gguf_metadata(str(p)).get("general.license")
    except (OSError, ValueError) as exc:
        return None, f"not a readable GGUF header: {exc}"
    if isinstance(value, str) and value:
        return value, "GGUF general.license"
    return None, "the GGUF declares no general.license"


def with_license(model: ModelInfo) -> ModelInfo:
    if model.kind not in ("file", "dir"):
        return model
    value, source = model_license(model.path)
    if value is None:
        return msgspec.structs.replace(model, null_reasons={**model.null_reasons, "license": source})
    return msgspec.structs.replace(model, license=value, license_source=source)


def external_server(cand: str, events: Sequence[Event]) -> ExternalServer | None:
    """An external candidate's server as its last `server_ready` event recorded its detection."""
    seen = [e.payload["external"] for e in _ready_events(cand, events) if isinstance(e.payload.get("external"), dict)]
    return msgspec.convert(seen[-1], ExternalServer) if seen else None


def collect_affinity(cand: str, events: Sequence[Event]) -> CpuAffinity | None:
    """The cores the candidate's last server and the probe client ran on (`server_ready`'s `affinity`)."""
    got = [e.payload["affinity"] for e in _ready_events(cand, events) if isinstance(e.payload.get("affinity"), dict)]
    return msgspec.convert(got[-1], CpuAffinity) if got else None
