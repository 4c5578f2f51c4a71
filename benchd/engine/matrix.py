"""The candidate matrix: a candidate's `[candidates.matrix]` expanded into one candidate per combination
by `expand`, the one expansion. Reasons and facts: docs/sweep-file.md#candidate-matrix.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from benchd.errors import BenchdError
from benchd.schemas import CANDIDATE_ID_PATTERN, Candidate, Deferred, MatrixPoint, Spec, Sweep

if TYPE_CHECKING:
    from benchd.servers.runtimes.base import RuntimeAdapter

#: The most candidates a sweep may hold once every matrix is expanded (the schema's own limit).
MAX_CANDIDATES = 64
#: The most `deferred` lines a sweep holds (the schema's limit).
MAX_DEFERRED = 256
_ID = re.compile(CANDIDATE_ID_PATTERN)

Value = str | int | bool | Spec


@dataclass
class Expansion:
    """One base candidate's matrix: its keys, the ids it expanded into, the combinations left out (id, why)."""

    base: str
    keys: list[str]
    ids: list[str] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)

    @property
    def combinations(self) -> int:
        return len(self.ids) + len(self.left_out)


@dataclass
class Expanded:
    """The expanded sweep (the input when there are problems), the problems, the expansions."""

    sweep: Sweep
    problems: list[BenchdError]
    matrices: list[Expansion]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._]+", "-", text.lower()).strip("-.")


def key_label(key: str) -> str:
    """`-ub` -> `ub`, `--n-cpu-moe` -> `n-cpu-moe`, `ctx_size` -> `ctx`, `spec` -> `spec`."""
    return "ctx" if key == "ctx_size" else _slug(key.lstrip("-"))


def _spec_label(value: Spec) -> str:
    parts = ["spec", value.kind or "draft"]
    if value.draft_model:
        parts.append(_slug(Path(value.draft_model).stem)[:24])
    if value.draft_max is not None:
        parts.append(f"n{value.draft_max}")
    return "-".join(p for p in parts if p)


def id_segment(key: str, value: Value) -> str:
    """The id segment of one key's value: `ub256`, `fa-on`, `mlock` / `no-mlock`, `nospec` /
    `spec-draft-<file>-n8`, `ctx8192`, `tm1` (for `-t -1`)."""
    k = key_label(key)
    if key == "spec":
        return "nospec" if value is False else _spec_label(value) if isinstance(value, Spec) else "spec"
    if isinstance(value, bool):
        return k if value else f"no-{k}"
    text = str(value)
    v = ("m" + _slug(text[1:])) if text.startswith("-") else _slug(text)
    return f"{k}{v}" if v[:1].isdigit() or re.fullmatch(r"-[0-9][0-9.]*", text) else f"{k}-{v}"


def value_text(value: Value) -> str:
    """A matrix value as the record and `validate` show it."""
    if isinstance(value, Spec):
        bits = [f"kind {value.kind}"] + ([f"draft_model {value.draft_model}"] if value.draft_model else []) \
            + ([f"draft_max {value.draft_max}"] if value.draft_max is not None else [])
        return ", ".join(bits)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _flag_of(arg: str) -> str:
    return arg.split("=", 1)[0]


def key_problems(i: int, cand: Candidate) -> list[BenchdError]:
    """Each key and value of one candidate's matrix alone."""
    from benchd.servers.runtimes import get_adapter

    where = f"$.candidates[{i}].matrix"
    who = f"candidate {cand.id!r}"
    refused = _matrix_refused(cand, who, where)
    if refused:
        return refused
    adapter = get_adapter(cand.runtime)
    given = {_flag_of(a) for a in cand.args if a.startswith("-")}
    given |= {k for k, v in (("spec", cand.spec), ("ctx_size", cand.ctx_size)) if v is not None}
    out: list[BenchdError] = []
    for key, values in cand.matrix.items():
        at = f"{where}.{key}"
        whole = _key_refused(adapter, key, values, given)
        if whole is not None:
            out.append(BenchdError(whole[0], f"{who}: {whole[1]}", at))
        else:
            out += [BenchdError("matrix_value", f"{who}: matrix {key!r}: {why}", f"{at}[{j}]")
                    for j, why in _value_problems(adapter, cand, key, values)]
    return out


def _key_refused(adapter: RuntimeAdapter, key: str, values: list[Value], given: set[str]) -> tuple[str, str] | None:
    """(code, why) of a key refused whole: reserved by benchd, without values, or set by the candidate."""
    if key in adapter.reserved_args:
        return "reserved_arg", f"{adapter.name} argument {key!r} is set by benchd; {adapter.reserved_args[key]}"
    if not values:
        return "matrix_value", f"matrix {key!r} has no values; give at least one"
    if key in given:
        return "matrix_conflict", f"{key!r} is set by the candidate itself and by its matrix; keep one"
    return None


def _matrix_refused(cand: Candidate, who: str, where: str) -> list[BenchdError]:
    if cand.external:
        return [BenchdError("matrix_external", f"{who}: a matrix needs a server benchd starts (runtime = "
                            f"\"{cand.runtime}\" is started by someone else)", where)]
    if cand.from_matrix is not None:
        return [BenchdError("matrix_nested", f"{who}: already expanded from {cand.from_matrix.base!r}'s matrix; "
                            "put every key in the base's matrix", where)]
    return []


def _value_problems(adapter: object, cand: Candidate, key: str, values: list[Value]) -> list[tuple[int, str]]:
    out = []
    seen: set[str] = set()
    for j, value in enumerate(values):
        why = _value_problem(adapter, cand, key, value)
        if why is None and value_text(value) in seen:  # "256" and 256 are one value
            why = f"value {value_text(value)!r} is repeated"
        if why is not None:
            out.append((j, why))
        seen.add(value_text(value))
    return out


def _value_problem(adapter: object, cand: Candidate, key: str, value: Value) -> str | None:
    from benchd.servers.runtimes.base import RuntimeAdapter

    assert isinstance(adapter, RuntimeAdapter)
    if key == "spec":
        return None if value is False or isinstance(value, Spec) else "a spec value is a table or false (no spec)"
    if key == "ctx_size":
        if isinstance(value, bool) or not isinstance(value, int) or not 16 <= value <= 16_777_216:
            return f"ctx_size {value_text(value)!r} is not an integer in [16, 16777216]"
        return None
    if isinstance(value, Spec):
        return "a table is a value of `spec` only"
    return adapter.checks.value_problem(cand, key, value)


def _combinations(cand: Candidate) -> list[list[tuple[str, Value]]]:
    keys = list(cand.matrix)
    return [list(zip(keys, combo, strict=True)) for combo in itertools.product(*(cand.matrix[k] for k in keys))]


def point(cand: Candidate, combo: list[tuple[str, Value]]) -> Candidate:
    """The candidate of one combination of `cand`'s matrix."""
    added: list[str] = []
    spec, ctx_size = cand.spec, cand.ctx_size
    for key, value in combo:
        if key == "spec":
            spec = value if isinstance(value, Spec) else None
        elif key == "ctx_size":
            assert isinstance(value, int)
            ctx_size = value
        elif value is True:
            added.append(key)
        elif value is not False:
            added += [key, str(value)]
    ident = ".".join([cand.id, *(id_segment(k, v) for k, v in combo)])
    origin = MatrixPoint(base=cand.id, values={k: value_text(v) for k, v in combo}, args=added)
    return msgspec.structs.replace(cand, id=ident, args=[*cand.args, *added], spec=spec, ctx_size=ctx_size,
                                   matrix={}, from_matrix=origin)


def _id_problem(ident: str) -> str | None:
    if len(ident) > 63:
        return f"derived id {ident!r} has {len(ident)} characters (at most 63): shorten the base id"
    if not _ID.fullmatch(ident) or ".." in ident:
        return f"derived id {ident!r} is not a valid candidate id ({CANDIDATE_ID_PATTERN}, no '..')"
    return None


def expand(sweep: Sweep) -> Expanded:
    """Every candidate's matrix expanded in place; idempotent: a sweep with no matrix left comes back
    unchanged."""
    from benchd.servers.runtimes import get_adapter

    if not any(c.matrix for c in sweep.candidates):
        return Expanded(sweep, [], [])
    problems: list[BenchdError] = []
    matrices: list[Expansion] = []
    out: list[Candidate] = []
    deferred = list(sweep.deferred)
    for i, cand in enumerate(sweep.candidates):
        if not cand.matrix:
            out.append(cand)
            continue
        where = f"$.candidates[{i}].matrix"
        found = _matrix_problems(i, cand, where)
        problems += found
        if found:
            continue
        exp, made, left_out, bad_id = _expand_one(cand, where, get_adapter(cand.runtime))
        out += made
        deferred += left_out
        problems += bad_id
        if not exp.ids and not problems:
            problems.append(BenchdError("matrix_empty", f"candidate {cand.id!r}: the runtime refuses every combination "
                                        f"of its matrix ({exp.left_out[0][1]})", where))
        matrices.append(exp)
    problems += _collisions(out)
    if not problems:
        problems += _too_many_in_sweep(out, matrices)
    if problems:
        return Expanded(sweep, problems, matrices)
    return Expanded(msgspec.structs.replace(sweep, candidates=out, deferred=_capped(deferred)), [], matrices)


def _matrix_problems(i: int, cand: Candidate, where: str) -> list[BenchdError]:
    found = key_problems(i, cand)
    size = math.prod(len(v) for v in cand.matrix.values())
    if not found and size > MAX_CANDIDATES:
        found.append(_too_many(cand.id, size, where))
    return found


def _expand_one(cand: Candidate, where: str,
                adapter: RuntimeAdapter) -> tuple[Expansion, list[Candidate], list[Deferred], list[BenchdError]]:
    """(the expansion, its candidates, its refused combinations, the invalid derived id that stopped it)."""
    exp = Expansion(cand.id, list(cand.matrix))
    made_all: list[Candidate] = []
    deferred: list[Deferred] = []
    for combo in _combinations(cand):
        made = point(cand, combo)
        if (why := _id_problem(made.id)) is not None:
            return exp, made_all, deferred, [BenchdError("matrix_id", f"candidate {cand.id!r}: {why}", where)]
        refused = adapter.checks.combination_problems(made)
        if refused:
            reason = "; ".join(e.message.removeprefix(f"candidate {made.id!r}: ") for e in refused)
            exp.left_out.append((made.id, reason))
            deferred.append(Deferred(axis=f"candidate {made.id}"[:200],
                                     reason=f"left out of {cand.id!r}'s matrix: {reason}"[:2000]))
            continue
        exp.ids.append(made.id)
        made_all.append(made)
    return exp, made_all, deferred, []


def _too_many_in_sweep(out: list[Candidate], matrices: list[Expansion]) -> list[BenchdError]:
    if len(out) <= MAX_CANDIDATES:
        return []
    sizes = ", ".join(f"{m.base}: {len(m.ids)}" for m in matrices)
    return [BenchdError("too_many_candidates", f"the matrices expand to {len(out)} candidates ({sizes}; "
                       f"plus {len(out) - sum(len(m.ids) for m in matrices)} listed): at most "
                       f"{MAX_CANDIDATES}", "$.candidates")]


def _capped(deferred: list[Deferred]) -> list[Deferred]:
    """At most MAX_DEFERRED lines, the schema's limit: a stored sweep must decode again."""
    if len(deferred) <= MAX_DEFERRED:
        return deferred
    more = Deferred(axis="candidates", reason=f"{len(deferred) - MAX_DEFERRED + 1} more matrix combinations "
                    "left out (the first ones are listed)")
    return [*deferred[:MAX_DEFERRED - 1], more]


def _too_many(ident: str, size: int, where: str) -> BenchdError:
    return BenchdError("too_many_candidates", f"candidate {ident!r}: its matrix expands to {size} candidates: at most "
                       f"{MAX_CANDIDATES} in a sweep (drop values, or split it into several sweeps)", where)


def _collisions(cands: list[Candidate]) -> list[BenchdError]:
    seen: dict[str, Candidate] = {}
    out = []
    for c in cands:
        if c.id in seen:
            first = seen[c.id]
            whence = [x.from_matrix.base if x.from_matrix else "listed" for x in (first, c)]
            values = [x.from_matrix.values if x.from_matrix else {} for x in (first, c)]
            out.append(BenchdError("matrix_id_collision", f"candidate id {c.id!r} is derived twice ({whence[0]} "
                                   f"{values[0]}, {whence[1]} {values[1]}): give the values that read alike "
                                   "distinct spellings, or rename a base candidate", "$.candidates"))
        seen.setdefault(c.id, c)
    return out
