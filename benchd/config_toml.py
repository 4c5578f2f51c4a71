"""The user's settings file, `<state>/config.toml` (its `[recheck]` table). A bad or unreadable file never
stops the daemon: `load_settings` returns the defaults and one line saying why; a missing file is no error."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import msgspec

from benchd.errors import from_validation
from benchd.schemas import CLOCK_TIME_PATTERN, SettingsFile

SETTINGS_FILE_NAME = "config.toml"


def settings_path(state_dir: Path) -> Path:
    return state_dir / SETTINGS_FILE_NAME


def _bad_recheck_at(data: dict[str, object], path: Path) -> str | None:
    recheck = data.get("recheck")
    at = recheck.get("at") if isinstance(recheck, dict) else None
    if at is None or (isinstance(at, str) and re.fullmatch(CLOCK_TIME_PATTERN, at)):
        return None
    return (f"{path}: recheck.at {at!r} is not a time of day: expected \"HH:MM\" "
            "(24-hour, local time) or \"\" (as soon as the conditions hold); using the defaults")


def load_settings(path: Path) -> tuple[SettingsFile, str | None]:
    """(settings, error): the file's settings, or the defaults plus why the file was not used."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return SettingsFile(), None
    except OSError as exc:
        return SettingsFile(), f"{path}: cannot read ({exc.strerror or exc}); using the defaults"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return SettingsFile(), f"{path}: not valid TOML ({exc}); using the defaults"
    bad_at = _bad_recheck_at(data, path)
    if bad_at is not None:
        return SettingsFile(), bad_at
    try:
        return msgspec.convert(data, SettingsFile), None
    except msgspec.ValidationError as exc:
        err = from_validation(exc, str(path))
        where = f" (field {err.field.removeprefix('$.')})" if err.field else ""
        return SettingsFile(), f"{err.message}{where}; using the defaults"
