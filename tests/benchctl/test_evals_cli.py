"""The eval-suite sweep fields at the command line: `validate` shows them; an unknown suite, a limit
below 1 and missing suite data exit 2 naming the field or the fetch command; `benchctl evals list`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from testlib import benchctl_inproc

SWEEP = """name = "evals"
contexts = [256]
gen_tokens = 8
{extra}

[[candidates]]
id = "a"
runtime = "llama-server"
model = "{model}"
"""


def _run(tmp_path: Path, extra: str, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    f = tmp_path / "s.toml"
    f.write_text(SWEEP.format(extra=extra, model=model))
    return benchctl_inproc(*args, str(f), env={"BENCHD_CACHE_DIR": str(cache)})


def test_validate_shows_the_suites(tmp_path: Path, eval_suites: Path) -> None:
    out = _run(tmp_path, 'evals = ["code", "tools"]\neval_limit = { tools = 12 }\neval_budget_s = 300', eval_suites,
               "validate", "--json")
    doc = json.loads(out.stdout)
    assert doc["settings"]["evals"] == ["code", "tools"]
    assert doc["settings"]["eval_limit"] == {"code": 40, "tools": 12} and doc["settings"]["eval_budget_s"] == 300
    assert [e["tasks_per_candidate"] for e in doc["evals"]] == [40, 12]
    assert not any("evals" in p for p in doc["problems"])
    text = _run(tmp_path, 'evals = ["tools"]', eval_suites, "validate")
    assert "eval suites per candidate: tools 60 tasks" in text.stdout


def test_bad_input_exits_2_naming_the_field(tmp_path: Path, eval_suites: Path) -> None:
    for extra, needle in (('evals = ["nope"]', "evals"), ("eval_limit = { code = 0 }", "eval_limit.code"),
                          ('eval_limit = { maths = 3 }', "maths"), ('evals = ["code", "code"]', "repeat"),
                          ("eval_budget_s = 0", "eval_budget_s")):
        out = _run(tmp_path, extra, eval_suites, "validate")
        assert out.returncode == 2, (extra, out.stdout, out.stderr)
        assert needle in out.stdout + out.stderr, (extra, out.stdout, out.stderr)


def test_missing_data_names_the_fetch_command(tmp_path: Path) -> None:
    empty = tmp_path / "cache"
    empty.mkdir()
    for cmd in ("validate", "submit"):
        out = _run(tmp_path, 'evals = ["code"]', empty, cmd)
        assert out.returncode == 2, (cmd, out.stdout, out.stderr)
        assert "benchctl evals fetch" in out.stdout + out.stderr, (cmd, out.stdout, out.stderr)
    listed = benchctl_inproc("evals", "list", "--cache-dir", str(empty), "--json")
    assert [r["cached"] for r in json.loads(listed.stdout)] == [False, False]
    unknown = benchctl_inproc("evals", "fetch", "nope", "--cache-dir", str(empty))
    assert unknown.returncode == 2 and "unknown eval suite" in unknown.stderr
