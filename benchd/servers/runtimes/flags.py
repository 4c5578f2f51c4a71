"""The values a runtime's pinned build takes for some flags, and the check of a candidate's args against
them; a candidate with its own `binary` is not checked."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from benchd.errors import BenchdError
from benchd.schemas import Candidate


@dataclass(frozen=True)
class FlagValues:
    """What one flag takes: one of `choices`, else (choices None) an integer of at least `minimum`;
    `source` is where in the pinned sources that was read."""

    choices: tuple[str, ...] | None
    source: str
    minimum: int | None = None


def flag_values(args: Sequence[str], names: Collection[str]) -> list[tuple[str, str]]:
    """Each of `names` in `args` with its value, in order (`--flag V` or `--flag=V`); a flag last without a
    value is left out."""
    out = []
    for i, arg in enumerate(args):
        name, eq, inline = arg.partition("=")
        if name in names and (eq or i + 1 < len(args)):
            out.append((name, inline if eq else args[i + 1]))
    return out


def aliases(names: tuple[str, ...], values: FlagValues) -> dict[str, FlagValues]:
    """The same values under every spelling of a flag."""
    return dict.fromkeys(names, values)


def value_problem(table: Mapping[str, FlagValues], flag: str, value: str | int | bool) -> str | None:
    """Why `flag value` is refused by the table (None: fine, or a flag the table does not know)."""
    known = table.get(flag)
    if known is None:
        return None
    if value is False:
        return None  # (a matrix's false: the flag left out)
    if isinstance(value, bool):
        return f"{flag} takes a value; true is for a switch (a flag without a value), false leaves it out"
    text = str(value)
    if known.choices is not None:
        if text in known.choices:
            return None
        return f"{text!r} is not a value of {flag}: {', '.join(known.choices)} ({known.source})"
    if not re.fullmatch(r"-?[0-9]{1,9}", text):
        return f"{flag} takes an integer, not {text!r} ({known.source})"
    if known.minimum is not None and int(text) < known.minimum:
        return f"{flag} takes an integer >= {known.minimum}, not {text} ({known.source})"
    return None


def args_problems(table: Mapping[str, FlagValues], candidate: Candidate) -> list[BenchdError]:
    """Each known flag of the candidate's args whose value the table refuses (`--flag V` or `--flag=V`)."""
    out = []
    args = candidate.args
    for i, arg in enumerate(args):
        flag, eq, inline = arg.partition("=")
        if flag not in table:
            continue
        if not eq and i + 1 >= len(args):
            why: str | None = f"{flag} needs a value"
        else:
            why = value_problem(table, flag, inline if eq else args[i + 1])
        if why is not None:
            out.append(BenchdError("bad_arg_value", f"candidate {candidate.id!r}: {why}",
                                   f"$.candidates[{candidate.id}].args[{i}]"))
    return out
