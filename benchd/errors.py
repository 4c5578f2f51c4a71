"""`BenchdError(code, message, field)`: everything a user can get wrong; the API's error body and
benchctl's exit code 2. Only `__main__` modules turn it into an exit."""

from __future__ import annotations

import re

import msgspec

#: A struct's own rule (`__post_init__`) names its field first, relative to the struct: `contexts: must not repeat`.
_RULE = re.compile(r"([a-z_]+): (.+)", re.S)


class BenchdError(Exception):
    """A problem the caller can fix: `code` is a stable slug, `field` the JSON path or file field."""

    def __init__(self, code: str, message: str, field: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.status = status

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        return f"{self.message}{where}"


class NotFound(BenchdError):
    def __init__(self, what: str, ident: str) -> None:
        super().__init__("not_found", f"no {what} with id {ident!r}", None, status=404)


def split_rule(path: str, message: str) -> tuple[str, str]:
    """A struct rule's field path and reason (`contexts: must not repeat` at `$.sweep`: `$.sweep.contexts`,
    `must not repeat`); any other message at its path as it is."""
    rule = _RULE.fullmatch(message)
    return (f"{path}.{rule.group(1)}", rule.group(2)) if rule else (path, message)


def field_of(exc: msgspec.ValidationError) -> str | None:
    """The `$.path` msgspec ends its messages with (`… - at `$.contexts[0]``), down to a struct rule's field."""
    message, marker, path = str(exc).rpartition(" - at `")
    return split_rule(path.rstrip("`"), message)[0] if marker else None


def from_validation(exc: msgspec.ValidationError | msgspec.DecodeError, source: str | None = None) -> BenchdError:
    """A msgspec decode/validation failure as a BenchdError naming the field (and the file, if any)."""
    field = field_of(exc) if isinstance(exc, msgspec.ValidationError) else None
    text = str(exc)
    if " - at `" in text:
        text = text.rsplit(" - at `", 1)[0]
    prefix = f"{source}: " if source else ""
    code = "invalid" if isinstance(exc, msgspec.ValidationError) else "malformed"
    return BenchdError(code, f"{prefix}{text}", field)
