"""What every area of the platform report gets: a scratch folder and this install's dirs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Context:
    tmp: Path  # scratch folder, removed after the report
    state_dir: Path
    cache_dir: Path
    socket: Path

