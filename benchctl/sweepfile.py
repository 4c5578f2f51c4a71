"""Load a sweep file (TOML) into a `Sweep`, with its paths made absolute.

Reasons and facts: docs/sweep-file.md#reading-a-sweep-file.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from benchd.errors import BenchdError, from_validation, split_rule
from benchd.schemas import Candidate, Sweep

PATH_FIELDS = ("model", "binary", "mmproj")


def resolve_path(value: Any, base: Path, field: str, source: str = "") -> Any:
    """One path field made absolute: `~` / `~user` expanded, a relative path joined to `base`.

    A value that is not a non-empty string without NUL comes back as it is (the schema and the sweep
    check report it with its field); an expansion or OS error (`~nobody`, no home directory) is a
    BenchdError naming the field, never a traceback."""
    if not isinstance(value, str) or not value or "\x00" in value:
        return value
    try:
        p = Path(value).expanduser()
        if not p.is_absolute():
            p = base / p
        return os.path.normpath(p)
    except (RuntimeError, OSError, ValueError, KeyError) as exc:
        head = value.split("/", 1)[0]
        why = f"cannot expand {head!r} (no such user, or no home directory)" if head.startswith("~") else str(exc)
        prefix = f"{source}: " if source else ""
        raise BenchdError("bad_path", f"{prefix}{field.removeprefix('$.')} {value!r}: {why}", field) from exc


#: Runtimes whose model may be a Hugging Face id, resolved in the local cache (`benchctl.hfcache`).
HF_RUNTIMES = ("mlx_lm.server", "mlx_vlm.server")


def _model_or_path(cand: dict[str, Any], name: str, base: Path, field: str, source: str) -> Any:
    """An MLX candidate's model that reads as a Hugging Face id and is no file beside the sweep: its
    cached snapshot folder; anything else through `resolve_path`."""
    from benchctl import hfcache

    value = cand[name]
    if (name == "model" and cand.get("runtime") in HF_RUNTIMES and isinstance(value, str)
            and hfcache.looks_like_id(value) and not (base / value).exists()):
        return hfcache.resolve_id(value, field, source)
    return resolve_path(value, base, field, source)


def resolve_paths(data: dict[str, Any], base: Path, source: str = "") -> dict[str, Any]:
    """Rewrite model/binary/mmproj/spec.draft_model of every candidate in a raw sweep dict (in place), and
    the draft_model of each `spec` table of its matrix, and `[kld] corpus`."""
    kld = data.get("kld")
    if isinstance(kld, dict) and "corpus" in kld:
        kld["corpus"] = resolve_path(kld["corpus"], base, "$.kld.corpus", source)
    cands = data.get("candidates")
    if not isinstance(cands, list):
        return data
    for i, cand in enumerate(cands):
        if not isinstance(cand, dict):
            continue
        for name in PATH_FIELDS:
            if name in cand:
                cand[name] = _model_or_path(cand, name, base, f"$.candidates[{i}].{name}", source)
        matrix = cand.get("matrix")
        specs = [("spec", cand.get("spec"))]
        if isinstance(matrix, dict) and isinstance(matrix.get("spec"), list):
            specs += [(f"matrix.spec[{j}]", x) for j, x in enumerate(matrix["spec"])]
        for where, spec in specs:
            if isinstance(spec, dict) and "draft_model" in spec:
                spec["draft_model"] = resolve_path(spec["draft_model"], base, f"$.candidates[{i}].{where}.draft_model",
                                                   source)
    return data


def _sweep_path(path: Path | str) -> Path:
    """The sweep file's own path, `~` expanded through the same resolver (field `sweep`); a relative
    path stays relative (messages name the file as the user typed it)."""
    text = str(path)
    return Path(resolve_path(text, Path.cwd(), "sweep")) if text.startswith("~") else Path(text)


def read_sweep_dict(path: Path | str) -> dict[str, Any]:
    """The sweep file as a plain dict, paths resolved (what `submit` sends as JSON)."""
    p = _sweep_path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError as exc:
        raise BenchdError("not_found", f"{p}: no such file", "sweep") from exc
    except OSError as exc:
        raise BenchdError("unreadable", f"{p}: {exc.strerror or exc}", "sweep") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BenchdError("malformed", f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})", None) from exc
    except tomllib.TOMLDecodeError as exc:
        raise BenchdError("malformed", f"{p}: not valid TOML: {exc}", None) from exc
    except RecursionError as exc:  # tomllib recurses per nesting level (found by the fault suite's fuzzer)
        raise BenchdError("malformed", f"{p}: arrays or tables nested too deeply", None) from exc
    return resolve_paths(data, p.absolute().parent, str(p))


def load_sweep(path: Path | str) -> Sweep:
    """Read, resolve and validate a sweep file; BenchdError naming file, field and reason on failure."""
    data = read_sweep_dict(path)
    try:
        return msgspec.convert(data, Sweep)
    except msgspec.ValidationError as exc:
        raise from_validation(exc, str(_sweep_path(path))) from exc
    except RecursionError as exc:
        raise BenchdError("malformed", f"{_sweep_path(path)}: values nested too deeply", None) from exc


#: The smallest valid candidate and sweep: each field is checked on its own by putting it into these.
_CANDIDATE_STUB: dict[str, Any] = {"id": "stub", "runtime": "llama-server", "model": "/stub"}
_STUB: dict[str, Any] = {"name": "stub", "contexts": [1], "gen_tokens": 1, "candidates": [_CANDIDATE_STUB]}


def _problem(exc: msgspec.ValidationError, prefix: str = "$", data: Any = None) -> str:
    """msgspec's message with its `$.path` rebased under `prefix` (a candidate checked on its own), in
    words a person can act on (`benchctl.problemtext.explain`: the bad value, allowed values, did you mean)."""
    from benchctl.problemtext import bad_keys, explain, field_name, resolve_keys

    text = str(exc)
    msg, _, path = text.rpartition(" - at `")
    if (key := re.fullmatch(r"key` in `(\$[^`]*)`", path)) is not None:  # a dict's key broke the schema
        where = f"{prefix}{key.group(1)[1:]}"
        keys = ", ".join(repr(k) for k in bad_keys(where, Sweep, data))
        return f"{field_name(where, data)}: {f'key {keys}' if keys else 'a key'}: {msg}"
    where = prefix if not msg else resolve_keys(f"{prefix}{path.rstrip('`')[1:]}", Sweep, data)
    if msg:
        where, msg = split_rule(where, msg)
    else:  # a rule of the struct checked at `prefix` (the sweep, a candidate): no path of its own
        where, text = split_rule(where, text)
    unknown = re.match(r"Object contains unknown field `([^`]*)`", msg or text)
    field = field_name(f"{where}.{unknown.group(1)}" if unknown else where, data)
    return f"{field}: {explain(msg or text, where, Sweep, data)}"


def schema_problems(data: dict[str, Any]) -> tuple[list[str], list[tuple[int, Candidate]]]:
    """Every schema problem in a sweep dict, field by field, and the candidates that are valid (with
    their index in the file).

    msgspec stops at the first error of a document; a person fixing a file wants all of them at once.
    So each top-level field is checked alone (inside a minimal valid sweep), and each field of an invalid
    candidate alone (inside a minimal valid candidate), and a bad list's items alone (`_item_problems`).
    """
    problems: list[str] = []
    for key in ("name", "contexts", "gen_tokens", "candidates"):
        if key not in data:
            problems.append(f"{key}: missing (a required field)")
    for key, value in data.items():
        if key == "candidates" and isinstance(value, list):
            continue
        try:
            msgspec.convert({**_STUB, key: value}, Sweep)
        except msgspec.ValidationError as exc:
            problems += _item_problems(key, value, data) or [_problem(exc, data=data)]
    valid: list[tuple[int, Candidate]] = []
    raw_candidates = data.get("candidates")
    for i, raw in enumerate(raw_candidates if isinstance(raw_candidates, list) else []):
        try:
            valid.append((i, msgspec.convert(raw, Candidate)))
        except msgspec.ValidationError as exc:
            problems += _candidate_problems(exc, raw, f"$.candidates[{i}]", data)
    ids = [c.id for _, c in valid]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        problems.append(f"candidates: ids must be unique; repeated: {', '.join(dup)}")
    return problems, valid


def _item_problems(key: str, value: Any, data: dict[str, Any]) -> list[str]:
    """A list field's bad items, each checked alone (`contexts = [256, -5, 1e9]` has two); [] when no
    item is bad alone (the list as a whole is: its length, order or repeats)."""
    found: list[str] = []
    known = {f.encode_name for f in msgspec.structs.fields(Sweep)}
    for i, item in enumerate(value if isinstance(value, list) and key in known else []):
        try:
            msgspec.convert({**_STUB, key: [item]}, Sweep)
        except msgspec.ValidationError as exc:
            at = str(exc).replace(f"`$.{key}[0]", f"`$.{key}[{i}]", 1)
            found.append(_problem(msgspec.ValidationError(at), data=data))
    return found


def _candidate_problems(whole: msgspec.ValidationError, raw: Any, prefix: str, data: dict[str, Any]) -> list[str]:
    """An invalid candidate's problems: its missing fields, each field checked alone; else the whole's first."""
    from benchctl.problemtext import field_name

    if not isinstance(raw, dict):
        return [_problem(whole, prefix, data)]
    found = [f"{field_name(f'{prefix}.{f.encode_name}', data)}: missing (a required field)"
             for f in msgspec.structs.fields(Candidate) if f.required and f.encode_name not in raw]
    for key, value in raw.items():
        try:
            msgspec.convert({**_CANDIDATE_STUB, key: value}, Candidate)
        except msgspec.ValidationError as exc:
            found.append(_problem(exc, prefix, data))
    return list(dict.fromkeys(found)) or [_problem(whole, prefix, data)]


def sweep_to_dict(sweep: Sweep) -> dict[str, Any]:
    return msgspec.to_builtins(sweep)  # type: ignore[no-any-return]
