"""A schema problem in words a person can act on: msgspec's message at a `$.path`, with the bad value
(not only the rule it broke), the allowed values of an enum, and "did you mean" for an unknown field.

The schema is read from the msgspec types themselves (`msgspec.inspect`), so a new field or enum
value needs nothing here.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Annotated, Any

import msgspec
import msgspec.inspect as mi

_SEGMENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[['\"]?([^\]'\"]*)['\"]?\]")


def _segments(path: str) -> list[str | int]:
    """`$.candidates[0].spec` -> ["candidates", 0, "spec"]."""
    out: list[str | int] = []
    for name, index, key in _SEGMENT.findall(path[1:] if path.startswith("$") else path):
        out.append(name or (int(index) if index else key))
    return out


def _structs(t: Any) -> list[mi.StructType]:
    """The struct types a type can be (through unions and Optional)."""
    if isinstance(t, mi.StructType):
        return [t]
    if isinstance(t, mi.UnionType):
        return [s for x in t.types for s in _structs(x)]
    return []


def _step(t: Any, seg: str | int) -> Any:
    """The type one path segment below `t` (None when the schema does not say)."""
    if isinstance(t, mi.UnionType):
        for x in t.types:
            got = _step(x, seg)
            if got is not None:
                return got
        return None
    if isinstance(seg, int) and isinstance(t, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
        return t.item_type
    if isinstance(t, mi.DictType):
        return t.value_type
    for s in _structs(t):
        for f in s.fields:
            if f.encode_name == seg:
                return f.type
    return None


def type_at(root: type, path: str) -> Any:
    """The msgspec type info at `path` under `root` (None when the path leaves the schema)."""
    t: Any = mi.type_info(root)
    for seg in _segments(path):
        t = _step(t, seg)
        if t is None:
            return None
    return t


def value_at(data: Any, path: str) -> tuple[bool, Any]:
    """(found, the value at `path` in the decoded document)."""
    for seg in _segments(path):
        if isinstance(seg, int) and isinstance(data, list) and 0 <= seg < len(data):
            data = data[seg]
        elif isinstance(seg, str) and isinstance(data, dict) and seg in data:
            data = data[seg]
        else:
            return False, None
    return True, data


def _plain(t: Any) -> Any:
    """`t` without Annotated and None: the type the value has when it is given."""
    while typing.get_origin(t) is Annotated:
        t = typing.get_args(t)[0]
    if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union:
        given = [x for x in typing.get_args(t) if x is not type(None)]
        return _plain(given[0]) if len(given) == 1 else t
    return t


def _py_type_at(root: Any, path: str) -> Any:
    """The annotated Python type at `path` under `root` (None when the walk leaves structs, lists and dicts)."""
    t: Any = root
    for seg in _segments(path):
        t = _plain(t)
        if isinstance(t, type) and issubclass(t, msgspec.Struct) and isinstance(seg, str):
            t = typing.get_type_hints(t, include_extras=True).get(seg)
        elif typing.get_origin(t) is list and isinstance(seg, int):
            t = typing.get_args(t)[0]
        elif typing.get_origin(t) is dict:
            t = typing.get_args(t)[1]
        else:
            return None
        if t is None:
            return None
    return t


def _dict_at(path: str, root: type, data: Any) -> tuple[dict[Any, Any], Any, Any] | None:
    """(the dict at `path` in `data`, its key type, its value type), or None where either side says no dict."""
    found, d = value_at(data, path)
    t = _plain(_py_type_at(root, path))
    if not found or not isinstance(d, dict) or typing.get_origin(t) is not dict:
        return None
    key_t, value_t = typing.get_args(t)
    return d, key_t, value_t


def _refused(values: Any, t: Any) -> list[Any]:
    """The `values` msgspec will not convert to `t`."""
    out = []
    for v in values:
        try:
            msgspec.convert(v, t)
        except msgspec.ValidationError:
            out.append(v)
    return out


def resolve_keys(path: str, root: type, data: Any) -> str:
    """`path` with msgspec's `[...]` (some value of a dict) replaced by the key whose value breaks the
    schema, found by converting each value of that dict in `data` alone; unchanged unless exactly one does."""
    head, sep, tail = path.partition("[...]")
    at = _dict_at(head, root, data) if sep else None
    if at is None:
        return path
    d, _, value_t = at
    bad = [k for k in d if _refused([d[k]], value_t)]
    if len(bad) != 1:
        return path
    step = f".{bad[0]}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(bad[0])) else f"[{str(bad[0])!r}]"
    return resolve_keys(head + step + tail, root, data)


def bad_keys(path: str, root: type, data: Any) -> list[str]:
    """The keys of the dict at `path` in `data` that its schema refuses (msgspec's "at `key` in `$.path`")."""
    at = _dict_at(path, root, data)
    return [] if at is None else [str(k) for k in _refused(at[0], at[1])]


def field_name(path: str, data: Any = None) -> str:
    """The one way benchctl names a field in a problem: the API's `$.`-path (`BenchdError.field`) without
    its `$.`, with a candidate's id beside its index when the document has it (`contexts[1]`,
    `candidates[1] (fine).spec.draft_model`, `candidates[0] (qwen).matrix.-ctk[1]`); the document itself
    is `(top level)`."""
    rest = path.removeprefix("$").removeprefix(".")
    m = re.match(r"candidates\[(\d+)\]", rest)
    cands = data.get("candidates") if isinstance(data, dict) else None
    if m and isinstance(cands, list) and int(m.group(1)) < len(cands):
        cand = cands[int(m.group(1))]
        if isinstance(cand, dict) and isinstance(cand.get("id"), str):
            rest = f"{rest[:m.end()]} ({cand['id']}){rest[m.end():]}"
    return rest or "(top level)"


def _literals(t: Any) -> list[Any]:
    if isinstance(t, mi.LiteralType):
        return list(t.values)
    if isinstance(t, mi.UnionType):
        return [v for x in t.types for v in _literals(x)]
    return []


def explain(message: str, path: str, root: type, data: Any) -> str:
    """msgspec's `message` about `path` (under `root`, in the document `data`) with what a person needs:
    the allowed values of an enum, "did you mean" and the fields allowed for an unknown field, the bad
    value beside a rule it broke."""
    t = type_at(root, path)
    unknown = re.match(r"Object contains unknown field `([^`]*)`", message)
    if unknown:
        name = unknown.group(1)
        fields = sorted(f.encode_name for s in _structs(t) for f in s.fields)
        close = difflib.get_close_matches(name, fields, n=1, cutoff=0.6)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        return f"unknown field `{name}`{hint} (allowed: {', '.join(fields)})" if fields else message
    found, value = value_at(data, path)
    if message.startswith("Invalid enum value"):
        allowed = _literals(t)
        if allowed:
            close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            return f"{value!r} is not allowed{hint} (allowed: {', '.join(repr(a) for a in allowed)})"
        return message
    if found and not isinstance(value, dict | list):
        rule = message.split(", got `")[0]
        return rule if ", got " in rule else f"{rule}, got {value!r}"
    return message
