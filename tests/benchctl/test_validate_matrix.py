"""`benchctl validate` prints a candidate matrix's expansion (issue 38): the derived ids with what each
adds, the combinations left out with why, and refuses (exit 2) a matrix the runtime refuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from testlib import benchctl_inproc

BENCHCTL = [sys.executable, "-m", "benchctl"]

SWEEP = """name = "m"
contexts = [64]
gen_tokens = 4
[[candidates]]
id = "tiny"
runtime = "llama-server"
model = "model.gguf"
args = ["-t", "1"]
[candidates.matrix]
"-ub" = ["64", 128]
"-fa" = ["on", "off"]
"-ctv" = ["f16", "q8_0"]
spec = [false, {{ draft_model = "draft.gguf", draft_max = 4 }}]
{extra}
"""


def validate(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return benchctl_inproc("validate", str(path), *args)


def test_validate_prints_the_expansion_and_what_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "model.gguf").write_bytes(b"GGUF")  # the magic: validate checks the kind of file
    (tmp_path / "draft.gguf").write_bytes(b"GGUF")
    f = tmp_path / "m.toml"
    f.write_text(SWEEP.format(extra=""))
    out = validate(f, "--json")
    doc = json.loads(out.stdout)
    (m,) = doc["matrices"]
    assert m["base"] == "tiny" and m["keys"] == ["-ub", "-fa", "-ctv", "spec"] and m["combinations"] == 16
    ids = [c["id"] for c in m["candidates"]]
    assert len(ids) == 12 and ids[0] == "tiny.ub64.fa-on.ctv-f16.nospec"
    assert [c["candidate"] for c in doc["cells"]] == ids  # the plan is of the expanded candidates
    first = m["candidates"][0]
    assert first["args"] == ["-ub", "64", "-fa", "on", "-ctv", "f16"] and first["values"]["spec"] == "false"
    assert {x["id"] for x in m["left_out"]} == {f"tiny.ub{u}.fa-off.ctv-q8_0.{s}" for u in (64, 128)
                                                 for s in ("nospec", "spec-draft-draft-n4")}
    assert all("flash attention" in x["why"] for x in m["left_out"])
    # the draft model's relative path was resolved against the sweep file like any spec's
    assert not any("draft_model" in p and "relative" in p for p in doc["problems"]), doc["problems"]
    text = validate(f)
    assert "matrix tiny: -ub x -fa x -ctv x spec = 16 combinations, 12 candidates, 4 left out" in text.stdout
    assert "tiny.ub128.fa-on.ctv-q8_0.spec-draft-draft-n4" in text.stdout
    assert "+ -ub 128 -fa on -ctv q8_0; spec kind draft, draft_model " + str(tmp_path / "draft.gguf") in text.stdout
    assert "left out: tiny.ub64.fa-off.ctv-q8_0.nospec: a quantized V cache" in text.stdout
    assert "racing on (the default with 12 candidates)" in text.stdout and doc["racing"].startswith("racing on")


def test_validate_refuses_a_reserved_key_and_a_bad_value_naming_the_field(tmp_path: Path) -> None:
    f = tmp_path / "m.toml"
    f.write_text(SWEEP.format(extra='"-c" = ["4096"]\n"-ctk" = ["q8_0", "q9"]'))
    out = validate(f, "--json")
    assert out.returncode == 2
    problems = json.loads(out.stdout)["problems"]
    assert any(": candidates[0] (tiny).matrix.-c: " in p and "use `ctx_size`" in p for p in problems), problems
    assert any(": candidates[0] (tiny).matrix.-ctk[1]: " in p and "'q9' is not a value of -ctk" in p for p in problems)
    assert validate(f).returncode == 2


def test_validate_refuses_past_64_with_the_count(tmp_path: Path) -> None:
    f = tmp_path / "m.toml"
    f.write_text(SWEEP.format(extra='"-b" = ["1", "2", "3", "4", "5"]'))
    out = validate(f)
    assert out.returncode == 2
    assert "its matrix expands to 80 candidates: at most 64" in out.stderr
