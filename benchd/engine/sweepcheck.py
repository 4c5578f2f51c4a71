"""The one sweep check: what `benchctl validate`, the API's submit and the engine ask of a sweep's
candidates beyond its schema, each problem a `BenchdError` whose field is a `$.candidates[i]...` path.
"""
from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

import msgspec

from benchd.config import is_loopback_host
from benchd.engine.matrix import Expanded as Expanded  # re-exported: the one expansion, with the checks
from benchd.engine.matrix import expand as expand
from benchd.engine.modelcheck import model_problems
from benchd.errors import BenchdError
from benchd.files import kind_of
from benchd.schemas import EXTERNAL_RUNTIME, Candidate, Sweep

#: Fields only an external candidate has, and fields only a candidate benchd starts has (with why).
_EXTERNAL_ONLY = ("url", "pid", "process", "api_key_env")
_STARTED_ONLY = {
    "model": "the server at `url` already loaded its model; name it in `request_model`",
    "args": "benchd does not start the server, so it passes no arguments",
    "binary": "benchd does not start the server",
    "env": "benchd does not start the server, so it sets no environment",
    "spec": "the server's speculative decoding is as it was started",
    "ctx_size": "the server's context is as it was started (benchd reads it where the server reports it)",
    "mmproj": "the server's projector is as it was started",
    "vision": "image probes need the model's image limits, which benchd reads from files it does not have",
}


def external_problems(cand: Candidate) -> list[BenchdError]:
    """The static checks of external candidates (and that the others set none of their fields)."""
    where = f"$.candidates[{cand.id}]"
    if not cand.external:
        return _started_problems(cand, where)
    defaults = Candidate(id=cand.id, runtime=cand.runtime)
    out = [BenchdError("not_for_external", f"candidate {cand.id!r}: `{name}` does not apply to runtime = "
                       f"\"{EXTERNAL_RUNTIME}\": {why}", f"{where}.{name}")
           for name, why in _STARTED_ONLY.items() if getattr(cand, name) != getattr(defaults, name)]
    url = _url_problems(cand, where)
    out += url
    if any(e.code == "credentials_in_url" for e in url):  # nothing more is said of such a candidate
        return out
    if not cand.request_model:
        out.append(BenchdError("missing_request_model", f"candidate {cand.id!r}: runtime = \"{EXTERNAL_RUNTIME}\" "
                               "needs `request_model` (the model id its requests name)", f"{where}.request_model"))
    return out


def _started_problems(cand: Candidate, where: str) -> list[BenchdError]:
    out = [BenchdError("external_only", f"candidate {cand.id!r}: `{name}` is for runtime = \"{EXTERNAL_RUNTIME}\" "
                       "(a server benchd does not start)", f"{where}.{name}")
           for name in _EXTERNAL_ONLY if getattr(cand, name) is not None]
    if not cand.model:
        out.append(BenchdError("missing_model", f"candidate {cand.id!r}: `model` is required for {cand.runtime}",
                               f"{where}.model"))
    return out


def _url_problems(cand: Candidate, where: str) -> list[BenchdError]:
    if cand.url is None:
        return [BenchdError("missing_url", f"candidate {cand.id!r}: runtime = \"{EXTERNAL_RUNTIME}\" needs `url` "
                            "(the server's base URL, e.g. http://127.0.0.1:8080)", f"{where}.url")]
    parts = urlsplit(cand.url)
    if "@" in parts.netloc:  # user:password@host: never stored, never echoed
        return [BenchdError("credentials_in_url", f"candidate {cand.id!r}: url has credentials in it "
                            "(user:password@): benchd records the url in every runbook; give the key's "
                            "variable name in `api_key_env` instead", f"{where}.url")]
    out = []
    if parts.query or parts.fragment or "\x00" in cand.url:
        out.append(BenchdError("bad_url", f"candidate {cand.id!r}: url {cand.url!r} must be the server's base "
                               "URL: no query, fragment or NUL byte (benchd appends the endpoints' paths)",
                               f"{where}.url"))
    try:
        host = parts.hostname or ""
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError as exc:
        host = ""
        out.append(BenchdError("bad_url", f"candidate {cand.id!r}: url {cand.url!r}: {exc}", f"{where}.url"))
    if parts.scheme != "http":
        out.append(BenchdError("bad_url", f"candidate {cand.id!r}: url {cand.url!r} must be http:// (a server on "
                               "this machine)", f"{where}.url"))
    elif not is_loopback_host(host):
        out.append(BenchdError("not_loopback", f"candidate {cand.id!r}: url {cand.url!r} is not a loopback address "
                               "(127.0.0.0/8, ::1, localhost): benchd measures the machine it runs on",
                               f"{where}.url"))
    return out


def _port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or 80


def resolve_process(cand: Candidate) -> tuple[int | None, BenchdError | None]:
    """The one pid named the candidate's `process` (with a `pid`, that pid must be one of them)."""
    import psutil

    found = set()
    for p in psutil.process_iter(["pid", "name", "exe"]):
        exe = os.path.basename(p.info.get("exe") or "")
        if cand.process in (p.info.get("name"), exe):
            found.add(p.info["pid"])
    where = f"$.candidates[{cand.id}].process"
    if cand.pid is not None:
        if cand.pid in found:
            return cand.pid, None
        return None, BenchdError("pid_not_process", f"candidate {cand.id!r}: pid {cand.pid} is not a process named "
                                 f"{cand.process!r}", where)
    if not found:
        return None, BenchdError("no_process", f"candidate {cand.id!r}: no process is named {cand.process!r}", where)
    if len(found) > 1:
        return None, BenchdError("ambiguous_process", f"candidate {cand.id!r}: {len(found)} processes are named "
                                 f"{cand.process!r} (pids {', '.join(map(str, sorted(found)))}); give `pid`", where)
    return found.pop(), None


def live_problems(i: int, cand: Candidate) -> list[BenchdError]:
    """An external candidate here, now: its `api_key_env` set, its URL answering, its `pid` listening."""
    from benchd.servers.procgroup import listens_on
    from benchd.servers.runtimes.openai import detect

    if not cand.external or cand.url is None or external_problems(cand):
        return []
    where = f"$.candidates[{i}]"
    out = []
    if cand.api_key_env is not None and not os.environ.get(cand.api_key_env):
        out.append(BenchdError("api_key_unset", f"candidate {cand.id!r}: api_key_env names {cand.api_key_env}, which "
                               "is not set in benchd's environment", f"{where}.api_key_env"))
    try:
        asyncio.run(detect(cand))  # called off any event loop (benchctl; the daemon's worker thread)
    except BenchdError as exc:  # the API key withheld: the listener is not the server's owner
        out.append(BenchdError(exc.code, exc.message, f"{where}.api_key_env"))
        return out
    except Exception as exc:
        out.append(BenchdError("url_not_answering", f"candidate {cand.id!r}: nothing OpenAI-compatible answers at "
                               f"{cand.url}: {type(exc).__name__}: {exc}", f"{where}.url"))
        return out
    if cand.pid is not None and not listens_on(cand.pid, _port(cand.url)):
        out.append(BenchdError("pid_not_server", f"candidate {cand.id!r}: pid {cand.pid} does not listen on port "
                               f"{_port(cand.url)} of {cand.url}: it is not the server", f"{where}.pid"))
    return out


def resolve_external(sweep: Sweep) -> tuple[Sweep, list[BenchdError]]:
    """The sweep with each external `process` resolved to its `pid`, and `live_problems` (blocking)."""
    cands, problems = list(sweep.candidates), []
    for i, cand in enumerate(cands):
        if not cand.external:
            continue
        if cand.process is not None and not external_problems(cand):
            pid, err = resolve_process(cand)
            if err is not None:
                problems.append(BenchdError(err.code, err.message, f"$.candidates[{i}].process"))
                continue
            cands[i] = cand = msgspec.structs.replace(cand, pid=pid)
        problems += live_problems(i, cand)
    return msgspec.structs.replace(sweep, candidates=cands), problems


def adapter_problems(cand: Candidate, sweep: Sweep | None) -> list[BenchdError]:
    """The external checks, then the adapter's of the candidate and of the sweep's settings."""
    from benchd.servers.runtimes import get_adapter

    adapter = get_adapter(cand.runtime)
    problems = external_problems(cand) + list(adapter.checks.validate(cand) or [])
    if sweep is not None:
        problems += adapter.images.validate_vision(cand, sweep.vision) + adapter.parallel.validate_levels(cand, sweep.concurrency)
    return problems


def _paths(cand: Candidate) -> list[tuple[str, str | None]]:
    return [("model", cand.model), ("binary", cand.binary), ("mmproj", cand.mmproj),
            ("spec.draft_model", cand.spec.draft_model if cand.spec else None)]


def path_problems(i: int, cand: Candidate) -> list[BenchdError]:
    out = []
    for name, value in _paths(cand):
        if not value:
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


def input_problems(i: int, cand: Candidate) -> list[BenchdError]:
    """A NUL byte in `args` or `env`; a path naming a FIFO, device, socket, or a directory for a file (a stat)."""
    where = f"$.candidates[{i}]"
    out = [BenchdError("invalid", f"candidate {cand.id!r}: args[{j}] contains a NUL byte (no process argument "
                       "can hold one)", f"{where}.args[{j}]") for j, a in enumerate(cand.args) if "\x00" in a]
    out += [BenchdError("invalid", f"candidate {cand.id!r}: env {k} contains a NUL byte (no environment "
                        "variable can hold one)", f"{where}.env.{k}") for k, v in cand.env.items() if "\x00" in v]
    for name, value in _paths(cand):
        why = _special_file(cand, name, value) if value and "\x00" not in value else None  # else path_problems'
        if why is not None:
            out.append(BenchdError("special_file", f"candidate {cand.id!r}: {name} {why}", f"{where}.{name}"))
    return out


def _special_file(cand: Candidate, name: str, value: str) -> str | None:
    """Why the path field `name` names what benchd must not read there (None: it may)."""
    from benchd.engine.modelcheck import GGUF_RUNTIMES, kind_problem

    kind = kind_of(value)
    wants_file = name in ("binary", "mmproj") or cand.runtime in GGUF_RUNTIMES
    if kind in ("file", None) or (kind == "directory" and not wants_file):
        return None
    want = "a regular file" if wants_file else "a model directory or file"
    why = f"{value} is a {kind}; benchd needs {want} there (it never reads a FIFO, device or socket)"
    if name == "model" and kind == "directory":
        why = (kind_problem(cand) or (name, why))[1]  # the model check's words: which runtime loads a folder
    return why


def local_problems(candidates: Iterable[tuple[int, Candidate]], cache_dir: Path, sweep: Sweep | None) -> list[str]:
    """`benchctl validate`'s check here: one line a problem, `candidates[i] (id).field: why`."""

    out = [line for i, cand in candidates for line in _candidate_lines(i, cand, cache_dir, sweep)]
    out += [f"{e.field[2:] if e.field else 'evals'}: {e.message}" for e in eval_data_problems(sweep, cache_dir)]
    if sweep is not None:
        from benchd.engine import kld

        out += [f"{(e.field or '$.kld')[2:]}: {e.message}" for e in kld.local_problems(sweep, cache_dir)]
    return out


def _candidate_lines(i: int, cand: Candidate, cache_dir: Path, sweep: Sweep | None) -> list[str]:
    where = f"candidates[{i}] ({cand.id})"
    unsafe = input_problems(i, cand)
    if unsafe:  # nothing of this candidate is read until these are fixed
        return [_line(where, i, cand, e) for e in unsafe]
    adapter = [_line(where, i, cand, e) for e in adapter_problems(cand, sweep)]
    if cand.external:
        _, live = resolve_external(Sweep(name="x", contexts=[1], gen_tokens=1, candidates=[cand]))
        return adapter + [_line(where, 0, cand, e) for e in live]
    return (_missing_files(where, cand) + adapter + [f"{where}.{name}: {why}" for name, why in model_problems(cand, sweep)]
            + _resolved_binary(where, cand, cache_dir))


def indexed(i: int, cand: Candidate, problem: BenchdError) -> BenchdError:
    """A candidate's problem named by its index (`$.candidates[0]…`, as the body), not id; a field outside stays."""
    field = problem.field or f"$.candidates[{i}]"
    by_id = f"$.candidates[{cand.id}]"
    if field.startswith(by_id):
        field = f"$.candidates[{i}]{field[len(by_id):]}"
    return BenchdError(problem.code, problem.message, field, problem.status)


def _line(where: str, i: int, cand: Candidate, problem: BenchdError) -> str:
    """`candidates[0] (qwen).args[2]: why`, the message's `candidate 'qwen': ` left out: validate's line."""
    field = indexed(i, cand, problem).field or ""
    message = problem.message.removeprefix(f"candidate {cand.id!r}: ")
    if not field.startswith("$.candidates["):
        return f"{where}: {message} (field {field[2:]})"
    return f"{where}{field.partition(']')[2]}: {message}"


def _missing_files(where: str, cand: Candidate) -> list[str]:
    out = []
    if cand.model and not os.path.exists(cand.model):
        out.append(f"{where}.model: {cand.model} does not exist")
    if cand.spec is not None and cand.spec.draft_model and not os.path.exists(cand.spec.draft_model):
        out.append(f"{where}.spec.draft_model: {cand.spec.draft_model} does not exist")
    if cand.binary is not None and not (os.path.isfile(cand.binary) and os.access(cand.binary, os.X_OK)):
        out.append(f"{where}.binary: {cand.binary} is not an executable file")
    return out


def _resolved_binary(where: str, cand: Candidate, cache_dir: Path) -> list[str]:
    """The executable the adapter would resolve for a candidate without `binary`, missing."""
    from benchd.servers.runtimes import get_adapter

    if cand.binary is not None:
        return []
    try:
        exe = _first_str(get_adapter(cand.runtime).launcher.command(cand, cache_dir))
    except BenchdError as exc:
        return [f"{where}.binary: {exc}"]
    if exe and os.sep in exe and not os.path.exists(exe):
        return [f"{where}.binary: {exe} does not exist"]
    return []


def submit_problems(sweep: Sweep, cache_dir: Path | None = None) -> list[BenchdError]:
    """What the daemon refuses at submit: paths, adapters' checks, then eval data not fetched."""
    out = [p for i, cand in enumerate(sweep.candidates) for p in path_problems(i, cand) + input_problems(i, cand)]
    unsafe = {i for i, cand in enumerate(sweep.candidates) if input_problems(i, cand)}
    for i, cand in enumerate(sweep.candidates):
        if i in unsafe:
            continue  # its files are never read (a FIFO would block the read)
        out += [indexed(i, cand, p) for p in adapter_problems(cand, sweep)]
    out += margin_problems(sweep)
    if cache_dir is not None:
        out += eval_data_problems(sweep, cache_dir)
    from benchd.engine import kld

    return out + kld.static_problems(sweep)


def margin_problems(sweep: Sweep) -> list[BenchdError]:
    """`margins` names only axes of the axis table (a parallel level or image axis by its full name)."""
    from benchd.stats.axes import AXES, IMAGE_AXIS_PREFIX, LEVEL_AXIS_PREFIX

    return [BenchdError("unknown_axis", f"margins: no axis {name!r} (axes: {', '.join(AXES)})", f"$.margins.{name}")
            for name in sweep.margins
            if name not in AXES and not name.startswith((LEVEL_AXIS_PREFIX, IMAGE_AXIS_PREFIX))]


def eval_data_problems(sweep: Sweep | None, cache_dir: Path) -> list[BenchdError]:
    """`sandbox_problems`, and the public eval suites whose package is not in the cache (`$.evals`)."""
    from benchd.engine import suites

    if sweep is None:
        return []
    out = sandbox_problems(sweep)
    if not sweep.evals:
        return out
    try:
        suites.require(list(sweep.evals), cache_dir)
    except BenchdError as exc:
        return [*out, BenchdError(exc.code, exc.message, "$.evals", exc.status)]
    return out


def sandbox_problems(sweep: Sweep) -> list[BenchdError]:
    """`sandbox_unavailable` when the sweep runs model-written code and no eval sandbox works here."""
    from benchd.servers import sandbox

    runs_code = sweep.eval_tier == "standard" or "code" in sweep.evals
    if not runs_code or sweep.eval_sandbox == "none":
        return []
    box = sandbox.detect()
    if box.isolated:
        return []
    return [BenchdError("sandbox_unavailable", f"code evals run model-written code and {box.detail}: install "
                        "bubblewrap (Debian: apt-get install bubblewrap), or set eval_sandbox = \"none\" to run "
                        "them with rlimits only", "$.eval_sandbox")]


def _first_str(value: object) -> str | None:
    """The executable of an adapter's command (a list, or a (list, how) pair)."""
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    return value if isinstance(value, str) else None
