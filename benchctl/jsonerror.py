"""An error where the command line asked for JSON (`--json`): one JSON object on stdout, the daemon's
error body plus the exit code benchctl returns. Shared by the commands and `benchctl.__main__`."""

from __future__ import annotations

import json
import sys


def json_requested() -> bool:
    """The command line asks for JSON (`--json`): its errors are then a JSON object too."""
    return "--json" in sys.argv[1:]


def error_json(message: str, exit_code: int, code: str | None = None, field: str | None = None) -> str:
    """`{"error": {"code", "message", "field", "exit_code"}}`."""
    return json.dumps({"error": {"code": code, "message": message, "field": field, "exit_code": exit_code}})
