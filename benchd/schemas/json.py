"""A JSON document as Python holds it once decoded (`json.loads`, `msgspec.json.decode` without a type):
`JSONValue` is any value, `JSONObject` an object. Request bodies benchd builds and answers it walks are
typed with them instead of `Any`, so a reader sees the shape and mypy checks what is put in.
"""

from __future__ import annotations

from typing import TypeAlias

JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
JSONObject: TypeAlias = "dict[str, JSONValue]"
