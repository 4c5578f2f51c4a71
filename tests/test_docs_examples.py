"""Every TOML example in docs/ is what it shows: valid TOML, and a sweep example (one with candidates)
decodes as a sweep, schema and all, its `~` paths resolved as benchctl resolves them; a config.toml
example is read by the daemon's settings reader without falling back to the defaults."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import msgspec
import pytest

from benchctl.sweepfile import resolve_paths, schema_problems
from benchd.config_toml import load_settings
from benchd.schemas import Sweep

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = [(p, i, m.group(1)) for p in sorted((ROOT / "docs").glob("*.md"))
            for i, m in enumerate(re.finditer(r"```toml\n(.*?)```", p.read_text(), re.S))]


def test_the_docs_have_toml_examples() -> None:
    assert {p.name for p, _, _ in EXAMPLES} >= {"sweep-file.md", "locking.md"}


@pytest.mark.parametrize(("page", "index", "text"), EXAMPLES, ids=[f"{p.name}#{i}" for p, i, _ in EXAMPLES])
def test_every_toml_example_is_valid(page: Path, index: int, text: str, tmp_path: Path) -> None:
    data = tomllib.loads(text)  # a TOMLDecodeError names the line: the example itself is wrong
    if "candidates" in data:
        problems, _ = schema_problems(data)
        assert problems == [], (page.name, index, problems)
        sweep = msgspec.convert(resolve_paths(data, tmp_path, str(page)), Sweep)
        assert all(c.model.startswith("/") for c in sweep.candidates if c.model)  # `~` expanded
    else:
        f = tmp_path / "config.toml"
        f.write_text(text)
        _settings, error = load_settings(f)
        assert error is None, (page.name, index, error)
