"""Valid-but-hostile paths in a sweep file (issue 36): every path field goes through one resolver
(`benchctl.sweepfile.resolve_path`), so a `~name` for no such user, or any other expansion error, is a
BenchdError naming the file and the field (benchctl exits 2), never a traceback; `~` is expanded in every
path field, `mmproj` included. The fuzz failures' concrete inputs are kept here as explicit cases."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchctl.sweepfile import load_sweep, resolve_path
from benchd.errors import BenchdError

HEAD = 'name = "hostile"\ncontexts = [128]\ngen_tokens = 4\n'
NO_USER = "~benchd-no-such-user-36"


def _write(tmp_path: Path, cand: str) -> Path:
    f = tmp_path / "sweep.toml"
    f.write_text(HEAD + '[[candidates]]\nid = "a"\nruntime = "llama-server"\n' + cand)
    return f


@pytest.mark.parametrize(("line", "field"), [
    ('model = "~0"\n', "$.candidates[0].model"),  # found by the sweep-file fuzzer, seed 1400860991
    (f'model = "{NO_USER}/m.gguf"\n', "$.candidates[0].model"),
    (f'model = "/m.gguf"\nbinary = "{NO_USER}/llama-server"\n', "$.candidates[0].binary"),
    (f'model = "/m.gguf"\nmmproj = "{NO_USER}/p.gguf"\n', "$.candidates[0].mmproj"),
    (f'model = "/m.gguf"\nspec = {{ draft_model = "{NO_USER}/d.gguf" }}\n', "$.candidates[0].spec.draft_model"),
], ids=["fuzz-seed1400860991", "model", "binary", "mmproj", "draft_model"])
def test_unknown_user_in_a_path_names_the_field(tmp_path: Path, line: str, field: str) -> None:
    f = _write(tmp_path, line)
    with pytest.raises(BenchdError) as info:
        load_sweep(f)
    err = info.value
    assert (err.code, err.field) == ("bad_path", field)
    assert str(f) in err.message and "cannot expand" in err.message, err.message
    out = subprocess.run([sys.executable, "-m", "benchctl", "validate", str(f)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and field.removeprefix("$.") in out.stderr, out.stderr


def test_tilde_is_expanded_in_every_path_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    f = _write(tmp_path, 'model = "~/m.gguf"\nbinary = "~/bin/llama-server"\nmmproj = "~/p.gguf"\n'
                         'spec = { draft_model = "~/d.gguf" }\n')
    c = load_sweep(f).candidates[0]
    home = tmp_path / "home"
    assert (c.model, c.binary, c.mmproj) == (str(home / "m.gguf"), str(home / "bin/llama-server"), str(home / "p.gguf"))
    assert c.spec is not None and c.spec.draft_model == str(home / "d.gguf")


def test_relative_mmproj_is_resolved_against_the_file(tmp_path: Path) -> None:
    c = load_sweep(_write(tmp_path, 'model = "m.gguf"\nmmproj = "sub/../p.gguf"\n')).candidates[0]
    assert (c.model, c.mmproj) == (str(tmp_path / "m.gguf"), str(tmp_path / "p.gguf"))


def test_the_sweep_files_own_path_goes_through_the_resolver() -> None:
    with pytest.raises(BenchdError) as info:
        load_sweep(f"{NO_USER}/sweep.toml")
    assert (info.value.code, info.value.field) == ("bad_path", "sweep")


def test_resolver_leaves_bad_types_to_the_schema(tmp_path: Path) -> None:
    """Wrong types, empty strings and NUL bytes come back unchanged: the schema and the sweep check name them."""
    for value in (None, 3, "", "/a\x00b", ["x"]):
        assert resolve_path(value, tmp_path, "$.candidates[0].model") == value


def test_the_daemon_refuses_a_relative_or_nul_mmproj() -> None:
    """The daemon's own rule (sweepcheck.path_problems) covers mmproj like the other path fields."""
    from benchd.engine.sweepcheck import path_problems
    from benchd.schemas import Candidate

    for value, code in (("~/p.gguf", "relative_path"), ("p.gguf", "relative_path"), ("/p\x00.gguf", "invalid")):
        cand = Candidate(id="a", runtime="llama-server", model="/m.gguf", mmproj=value)
        assert [(p.code, p.field) for p in path_problems(0, cand)] == [(code, "$.candidates[0].mmproj")]
