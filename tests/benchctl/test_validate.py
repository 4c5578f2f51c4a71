"""Small things a new user hit (issue 18): `validate` lists every problem, not the first only, and a
`[candidates.spec]` with a draft model but no `kind` means a draft (the resolved kind is recorded)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from testlib import benchctl_inproc

from benchd.schemas import Candidate, Spec, Sweep

BENCHCTL = [sys.executable, "-m", "benchctl"]

BAD = """name = "bad sweep!"
contexts = [256, "x"]
gen_tokens = 0
colour = "red"

[[candidates]]
id = "A"
runtime = "llama-server"
model = "/nope.gguf"

[[candidates]]
id = "fine"
runtime = "llama-server"
model = "{missing}"
[candidates.spec]
draft_model = "{missing_draft}"

[[candidates]]
id = "no-kind"
runtime = "llama-server"
model = "/x.gguf"
[candidates.spec]
draft_max = 4
"""


def validate(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return benchctl_inproc("validate", str(path), *args)


def test_validate_lists_every_problem(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(BAD.format(missing=tmp_path / "gone.gguf", missing_draft=tmp_path / "gone-draft.gguf"))
    out = validate(f, "--json")
    assert out.returncode == 2, out.stderr
    problems = json.loads(out.stdout)["problems"]
    expected = [": name: ", ": contexts[1]: ", ": gen_tokens: ", ": colour: unknown field `colour`",
                ": candidates[0] (A).id: ", ": candidates[2] (no-kind).spec.kind: ", ": candidates[1] (fine).model: ",
                ": candidates[1] (fine).spec.draft_model: "]
    for needle in expected:
        assert sum(needle in p for p in problems) == 1, (needle, problems)
    assert all(p.startswith(f"{f}: ") for p in problems)  # every problem names the file, then the field
    text = validate(f)
    assert text.returncode == 2 and "8 problems" in text.stdout
    assert len([ln for ln in text.stderr.splitlines() if ln.startswith("problem: ")]) == 8


def test_a_runtime_check_names_the_candidate_once_at_its_index(tmp_path: Path) -> None:
    """The adapters' checks see one candidate and name it by id; the line names it once, by index and id."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    f = tmp_path / "flags.toml"
    f.write_text(f'''name = "flags"
contexts = [64]
gen_tokens = 8
[[candidates]]
id = "plain"
runtime = "llama-server"
model = "{model}"
[[candidates]]
id = "bound"
runtime = "llama-server"
model = "{model}"
args = ["--temp", "0", "--host=0.0.0.0"]
''')
    problems = json.loads(validate(f, "--json").stdout)["problems"]
    assert f"{f}: candidates[1] (bound).args[2]: llama-server argument '--host' is set by benchd; benchd always " \
        "binds 127.0.0.1" in problems, problems


def test_submit_refuses_with_the_same_list(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(BAD.format(missing=tmp_path / "gone.gguf", missing_draft=tmp_path / "gone-draft.gguf"))
    out = subprocess.run([*BENCHCTL, "submit", str(f)], capture_output=True, text=True, timeout=60,
                         env={"BENCHD_SOCKET": str(tmp_path / "none.sock"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2
    assert len([ln for ln in out.stderr.splitlines() if ln.startswith("problem: ")]) == 8


def test_spec_kind_defaults_to_draft_with_a_draft_model(tmp_path: Path) -> None:
    spec = msgspec.convert({"draft_model": "/d.gguf"}, Spec)
    assert spec.kind == "draft"
    sweep = msgspec.convert({"name": "s", "contexts": [8], "gen_tokens": 1, "candidates": [
        {"id": "c", "runtime": "llama-server", "model": "/m", "spec": {"draft_model": "/d.gguf"}}]}, Sweep)
    stored = msgspec.json.decode(msgspec.json.encode(sweep))  # what the store, runbook and lock record
    assert stored["candidates"][0]["spec"]["kind"] == "draft"
    assert msgspec.convert({"kind": "mtp"}, Spec).kind == "mtp"  # an explicit kind stays
    with pytest.raises(msgspec.ValidationError, match=r"kind: required .* - at `\$.spec`"):
        msgspec.convert({"id": "c", "runtime": "llama-server", "model": "/m", "spec": {"draft_max": 4}},
                        Candidate)


def test_validate_shows_the_resolved_kind(tmp_path: Path) -> None:
    model, draft = tmp_path / "m.gguf", tmp_path / "d.gguf"
    model.write_bytes(b"GGUF")
    draft.write_bytes(b"GGUF")
    exe = tmp_path / "llama-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    f = tmp_path / "s.toml"
    f.write_text(f'name = "s"\ncontexts = [64]\ngen_tokens = 4\n[[candidates]]\nid = "c"\nruntime = "llama-server"\n'
                 f'model = "{model}"\nbinary = "{exe}"\n[candidates.spec]\ndraft_model = "{draft}"\n')
    out = validate(f)
    assert out.returncode == 0, out.stderr
    assert f"c: spec kind draft, draft {draft}" in out.stdout
    # One candidate, one context, one start: counted in the singular ("1 candidate(s)", "1 server starts").
    assert "sweep 's': 1 candidate x 1 context, " in out.stdout and "the default with 1 candidate;" in out.stdout
    assert "1 server start at 10 s;" in out.stdout  # not "at 10 s each" with one start


def test_sessions_and_levels_are_shown_and_a_level_above_the_slots_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    exe = tmp_path / "llama-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    head = (f'name = "s"\ncontexts = [64]\ngen_tokens = 4\nconcurrency = [1, 2, 4]\n[session]\nturns = 3\n'
            f'append_tokens = 32\n[[candidates]]\nid = "c"\nruntime = "llama-server"\nmodel = "{model}"\n'
            f'binary = "{exe}"\n')
    f = tmp_path / "s.toml"
    f.write_text(head)
    out = validate(f)
    assert out.returncode == 0, out.stderr
    assert "one session per cell: 3 turns, 32 tokens appended per turn, 4 generated" in out.stdout
    assert "concurrency 2:" in out.stdout and "concurrency 4:" in out.stdout
    settings = json.loads(validate(f, "--json").stdout)["settings"]
    assert settings["session"] == {"turns": 3, "append_tokens": 32, "gen_tokens": 4}
    assert settings["concurrency"] == [1, 2, 4]
    f.write_text(head + 'args = ["-np", "2"]\n')
    out = validate(f, "--json")
    assert out.returncode == 2, out.stdout
    problems = json.loads(out.stdout)["problems"]
    assert any("concurrency level 4 is above the 2 simultaneous requests" in p and "-np 2" in p for p in problems)
    assert not any("concurrency level 2 " in p for p in problems)


def test_validate_shows_the_measured_pace_of_an_earlier_sweep_of_the_same_candidates(tmp_path: Path) -> None:
    """Beside the assumed estimate, the newest succeeded runbook whose sweep has every candidate as the file
    has it: its rows and time, scaled by rows; none when a candidate differs (here its args)."""
    from runbook_factory import CONTEXTS, fill_job, setup_state

    from benchctl.commands.jobs import check_sweep_matrices
    from benchd.results import runbook
    from benchd.results.pace import previous_pace
    from benchd.store import Store

    config, store, sweep, models = setup_state(tmp_path)
    f = tmp_path / "again.toml"
    f.write_text(f'name = "again"\ncontexts = {CONTEXTS}\ngen_tokens = 32\nprobes = 3\n\n[[candidates]]\n'
                 f'id = "mlx-lm"\nruntime = "mlx_lm.server"\nmodel = "{models["mlx"]}"\n')
    mine = check_sweep_matrices(str(f))[0]
    assert mine is not None
    ran = msgspec.structs.replace(sweep, candidates=mine.candidates)
    rb = runbook.load_runbook(runbook.write_runbook(config, store, fill_job(store, ran), charts=False), config)
    store.close()
    rb_text = (config.runbooks_dir / f"{rb.id}.json").read_text()
    pace = previous_pace(mine, config)
    assert pace is not None and pace.runbook == rb.id and pace.rows == len(rb.rows) > 0
    assert pace.seconds > 0 and pace.scaled(2 * pace.rows) == 2 * pace.seconds
    assert "contexts" not in pace.differs and "cooldown" in pace.differs  # the file's default cooldown, not fixed
    for bad, text in (("2026-12-01-20261201-000000-0000000001", "{not json"),
                      ("2026-12-01-20261201-000000-0000000002", rb_text.replace(rb.job.started_at or "", "noon"))):
        (config.runbooks_dir / f"{bad}.json").write_text(text)  # newer, unreadable: passed over, not a crash
    out = validate(f, "--json", "--state-dir", str(config.state_dir))
    got = json.loads(out.stdout)["measured_pace"]
    assert got["runbook"] == rb.id and got["rows"] == len(rb.rows)
    assert "scaled by rows, not a measurement of this sweep" in got["text"]
    other = tmp_path / "other.toml"
    other.write_text(f.read_text() + 'args = ["-t", "1"]\n')
    doc = json.loads(validate(other, "--json", "--state-dir", str(config.state_dir)).stdout)
    assert doc["measured_pace"] is None
    # Other args, the same model: the estimate's rates are that model's slowest cell medians there, said so.
    cells = [c for c in rb.cells if c.candidate == "mlx-lm" and c.gen_tps.median]
    assert doc["assumptions"]["gen_tps"] == min(c.gen_tps.median for c in cells)
    assert doc["assumptions"]["prompt_tps"] == 200.0  # mlx_lm.server reports no prompt timing: still assumed
    assert f"measured (decode): the slowest of these models in runbook {rb.id}" in doc["assumptions"]["measured"]
    # A second model measured in another, newer runbook: each model's rates come from the runbook that ran it.
    plain = next(c for c in sweep.candidates if c.id == "gguf-plain")
    store = Store(config.db_path)
    rb2 = runbook.load_runbook(runbook.write_runbook(config, store, fill_job(
        store, msgspec.structs.replace(sweep, candidates=[plain]), job_id="20261130-030000-beef",
        started_at="2026-11-30T03:00:00.000Z", gen_scale=0.5), charts=False), config)
    store.close()
    both = tmp_path / "both.toml"
    both.write_text(other.read_text() + f'\n[[candidates]]\nid = "g"\nruntime = "llama-server"\n'
                    f'model = "{plain.model}"\nbinary = "{plain.binary}"\n')
    two = json.loads(validate(both, "--json", "--state-dir", str(config.state_dir)).stdout)["assumptions"]
    slowest = min(c.gen_tps.median or 0.0 for c in [*cells, *rb2.cells] if c.gen_tps.median)
    assert two["gen_tps"] == slowest and slowest in {c.gen_tps.median for c in rb2.cells}  # the slower model's
    assert f"the slowest of these models in runbooks {rb2.id}, {rb.id}" in two["measured"]
    flags = json.loads(validate(other, "--json", "--gen-tps", "7", "--state-dir", str(config.state_dir)).stdout)
    assert flags["assumptions"]["gen_tps"] == 7 and flags["assumptions"]["measured"] is None
    text = validate(other, "--state-dir", str(tmp_path / "empty")).stdout
    assert "assuming 20 tok/s decode, 200 tok/s prompt" in text and "assumptions, not measurements" in text


def test_the_eval_estimate_uses_the_seconds_a_task_an_earlier_runbook_measured(tmp_path: Path) -> None:
    """A suite every model of the file ran before: its tasks are estimated from the slowest model's median
    seconds a task there (to a budget-long answer at the decode rate), said so; a rate flag is a what-if,
    so the measured seconds are then left out; a suite not run before stays assumed."""
    from runbook_factory import fill_job, setup_state

    from benchd.results import runbook

    config, store, sweep, models = setup_state(tmp_path)
    rb_id = runbook.write_runbook(config, store, fill_job(store, sweep), charts=False)
    store.close()
    path = config.runbooks_dir / f"{rb_id}.json"
    doc = json.loads(path.read_text())
    latency = {"gguf-spec": 2.0, "gguf-plain": 3.0, "mlx-lm": 5.0}
    doc["eval_summary"] = [{"candidate": c, "tier": "code", "passed": 1, "total": 2, "pass_rate": 0.5,
                            "latency_s_median": s} for c, s in latency.items()]  # an older runbook's fields
    doc["eval_summary"][0]["task_s_median"] = 7.0  # requests and sandbox: beats the request seconds
    path.write_text(json.dumps(doc))
    f = tmp_path / "evals.toml"
    f.write_text(f'name = "e"\ncontexts = [256]\ngen_tokens = 8\nevals = ["code", "tools"]\n\n'
                 f'[eval_limit]\ncode = 4\ntools = 4\n\n'
                 f'[[candidates]]\nid = "g"\nruntime = "llama-server"\nmodel = "{models["gguf"]}"\n'
                 f'binary = "{sweep.candidates[0].binary}"\n\n'
                 f'[[candidates]]\nid = "m"\nruntime = "mlx_lm.server"\nmodel = "{models["mlx"]}"\n')
    got = json.loads(validate(f, "--json", "--state-dir", str(config.state_dir)).stdout)
    code, tools = got["evals"]
    assert code["task_s_measured"] == 7.0 and tools["task_s_measured"] is None  # the slowest model's; tools never ran
    assert code["estimate_s"]["low"] == 2 * 4 * 7  # two candidates, four tasks, seven seconds a task
    assert "code seconds a task" in got["assumptions"]["measured"]
    what_if = json.loads(validate(f, "--json", "--gen-tps", "50", "--state-dir", str(config.state_dir)).stdout)
    assert what_if["evals"][0]["task_s_measured"] is None and "seconds a task" not in (
        what_if["assumptions"]["measured"] or "")
