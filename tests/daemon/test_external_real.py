"""External candidates (`runtime = "openai"`) through a real daemon: a llama-server and an mlx_lm.server the
test starts itself (benchd's own arguments), measured beside the same model as an owned candidate; bad
input refused at validate and submit (exit 2, the field named); the server killed mid-sweep."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testlib import wait_until

from benchd.stats.comparison import compare_axis

COOL = '[cooldown]\npolicy = "fixed"\nseconds = 0\nmax_seconds = 0\n[sustained]\ntokens = 0\n'


def _pid_on(port: int) -> int:
    """The pid listening on `port` (the server the test spawned)."""
    import psutil

    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            return int(c.pid)
    raise AssertionError(f"nothing listens on {port}")


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@pytest.fixture
def llama_external(server_factory: Any, tiny_models: Any) -> Iterator[str]:
    """A llama-server started as benchd starts one (`-np 1 --metrics`), with 512 tokens of context."""
    with server_factory.llama(tiny_models.target, ["-np", "1", "--metrics"], ctx=512) as url:
        yield url


def _runbook(d: Any, job: str) -> dict[str, Any]:
    rid = wait_until(lambda: d.client().job(job)["runbook_id"], timeout=120, interval=0.2, what="the runbook")
    return d.client().request("GET", f"/v1/runbooks/{rid}")  # type: ignore[no-any-return]


def _gen(rows: list[dict[str, Any]], cand: str, ctx: int) -> list[float]:
    return [r["gen_tps"] for r in rows if r["candidate"] == cand and r["context"] == ctx and r["kind"] == "probe"
            and r["status"] == "ok" and r["gen_tps"] is not None]


def _rows(d: Any, job: str) -> list[dict[str, Any]]:
    """The job's rows so far, from its `probe_finished` events."""
    out = []
    for line in d.client().events(job):
        ev = json.loads(line)
        if ev.get("type") == "probe_finished":
            out.append(ev["payload"]["row"])
    return out


@pytest.mark.slow
def test_llama_server_external_beside_owned(run_daemon: Any, llama_external: str, tiny_models: Any,
                                            llama_server_bin: Path, tmp_path: Path) -> None:
    d = run_daemon()
    pid = _pid_on(_port(llama_external))
    f = tmp_path / "sweep.toml"
    f.write_text(
        f'name = "ext"\ncontexts = [64, 1024]\ngen_tokens = 16\nprobes = 6\nwarmup = 1\neval_tier = "smoke"\n{COOL}'
        '[session]\nturns = 2\nappend_tokens = 32\ngen_tokens = 8\n'
        f'[[candidates]]\nid = "own"\nruntime = "llama-server"\nmodel = "{tiny_models.target}"\nbinary = "{llama_server_bin}"\n'
        f'[[candidates]]\nid = "ext"\nruntime = "openai"\nurl = "{llama_external}"\nrequest_model = "tiny"\npid = {pid}\n'
        f'[[candidates]]\nid = "ext-nopid"\nruntime = "openai"\nurl = "{llama_external}/v1"\nrequest_model = "tiny"\n')
    shown = d.benchctl("validate", str(f))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "ext: external llama-server llama.cpp" in shown.stdout and f"memory from pid {pid}" in shown.stdout
    assert "ext-nopid: no pid / process: its memory is not sampled" in shown.stdout
    assert "contexts 1024 will fail: over the 512 tokens a slot holds" in shown.stdout
    out = d.benchctl("submit", str(f), "--follow", "--json", timeout=900)
    assert out.returncode == 0, out.stderr
    job = out.stdout.splitlines()[0]
    rb = _runbook(d, job)
    rows = _rows(d, job)
    ext = [r for r in rows if r["candidate"] == "ext" and r["context"] == 64 and r["status"] == "ok"]
    assert ext, [r["error"] for r in rows if r["candidate"] == "ext"]
    for r in ext:
        assert r["sources"]["gen_tps"] == "server:timings" and r["sources"]["prompt_tps"] == "server:timings"
        assert r["mem_peak_bytes"] and r["mem_source"], r["null_reasons"]
        assert "server_args" in r["null_reasons"] and r["server_version"].startswith("llama.cpp")
        assert r["ctx_size"] == 512 and r["sources"]["ctx_size"].startswith("external:")
        # probes ask the detected llama-server for no prompt cache, as an owned one: nothing is reused
        if r["kind"] == "probe":
            assert r["cached_tokens"] == 0 and "cached_tokens_allowed" not in r["sources"], r["sources"]
    nopid = [r for r in rows if r["candidate"] == "ext-nopid" and r["context"] == 64 and r["status"] == "ok"]
    assert nopid and all(r["mem_peak_bytes"] is None and "pid" in r["null_reasons"]["mem_peak_bytes"] for r in nopid)
    # 1024 + 16 + 64 tokens do not fit the external server's 512-token slot: refused with the reason.
    big = [r for r in rows if r["candidate"].startswith("ext") and r["context"] == 1024 and r["kind"] == "probe"]
    assert big and all(r["status"] == "failed" and "512 tokens per slot" in r["error"] for r in big)
    assert _gen(rows, "own", 1024), "the owned candidate serves the larger context"
    prov = {p["candidate"]: p for p in rb["provenance"]["candidates"]}
    found = prov["ext"]["external"]
    assert found["kind"] == "llama-server" and found["slot_ctx"] == 512 and found["total_slots"] == 1
    assert found["pid"] == pid and not found["started_by_benchd"] and found["sources"]["slot_ctx"]
    assert prov["ext-nopid"]["external"]["pid"] is None
    deferred = {d["axis"]: d["reason"] for d in rb["deferred"]["automatic"]}
    assert "time to ready" in deferred["external:ext"] and "not sampled" in deferred["external:ext-nopid"]
    # The external rows join the one comparison like owned ones: an interval over both sides' values. How far
    # apart the two servers run is a speed (with a second CI run beside, the external one ran 64x slower).
    v = compare_axis(_gen(rows, "own", 64), _gen(rows, "ext", 64), axis="gen_tps", better="higher")
    assert v.ci_low is not None and v.ci_high is not None and 0 < v.ci_low <= v.ratio <= v.ci_high, v.text
    turns = [r for r in rows if r["candidate"] == "ext" and r["kind"] == "session"]
    assert [r["status"] for r in turns if r["context"] == 64] == ["ok", "ok"], [r["error"] for r in turns]
    assert all("one slot holds 512" in r["error"] for r in turns if r["context"] == 1024)
    # the eval tier ran on the external server like on the owned one: every task answered by the server
    from benchd.engine.evals import SMOKE

    for cid in ("own", "ext"):
        done = [e for e in rb["evals"] if e["candidate"] == cid and e["tier"] == "smoke"]
        assert sorted(e["task"] for e in done) == sorted(t.id for t in SMOKE), done
        assert not [e for e in done if (e["detail"] or "").startswith(("HTTP", "request failed", "no answer"))], done
    sd = ("--state-dir", str(d.state_dir))
    md = d.benchctl("export", rb["id"], "--format", "llama-bench-md", *sd).stdout
    assert "| tiny [ext] " in md and "build: null" not in md, md  # an external llama-server is a llama.cpp build
    locked = d.benchctl("lock", "--candidate", "ext", "--runbook", rb["id"], "--force", *sd)
    assert locked.returncode == 0, locked.stderr
    shown = d.benchctl("locked", *sd).stdout
    assert f"{llama_external}: benchd does not start it; detected llama-server llama.cpp" in shown
    fp = json.loads(d.benchctl("locked", "--json", *sd).stdout)["locked"]["fingerprint"]
    assert fp["binary"].startswith("llama-server at") and fp["version"].startswith("llama.cpp"), fp
    assert fp["model_path"] == "tiny" and fp["source"].startswith("detected at the first attach")
    cmd = d.benchctl("locked", "--command", *sd).stdout
    assert cmd.startswith("# benchd does not start this server: llama-server at") and "GET /props" in cmd


@pytest.mark.slow
def test_mlx_lm_server_external_beside_owned(run_daemon: Any, server_factory: Any, tiny_models: Any,
                                             tmp_path: Path) -> None:
    """A user's mlx_lm.server keeps its default prompt cache (10): the template's shared header is
    cached on every probe, within the allowance."""
    d = run_daemon()
    with server_factory.mlx("mlx_lm.server", tiny_models.mlx_dir) as url:
        pid = _pid_on(_port(url))
        f = tmp_path / "sweep.toml"
        f.write_text(
            f'name = "ext-mlx"\ncontexts = [64]\ngen_tokens = 128\nprobes = 6\nwarmup = 1\n{COOL}'
            f'[[candidates]]\nid = "own"\nruntime = "mlx_lm.server"\nmodel = "{tiny_models.mlx_dir}"\n'
            f'[[candidates]]\nid = "ext"\nruntime = "openai"\nurl = "{url}"\nrequest_model = "default_model"\npid = {pid}\n')
        out = d.benchctl("submit", str(f), "--follow", "--json", timeout=900)
        assert out.returncode == 0, out.stderr
        job = out.stdout.splitlines()[0]
        rb = _runbook(d, job)
    rows = _rows(d, job)
    ext = [r for r in rows if r["candidate"] == "ext" and r["status"] == "ok"]
    assert ext, [r["error"] for r in rows if r["candidate"] == "ext"]
    # mlx_lm.server sends no timings: the rate is the client's stream window, null with its reason when
    # a starved client read the whole answer at once.
    assert all(r["sources"]["gen_tps"].startswith("client:") if r["gen_tps"] is not None
               else r["null_reasons"]["gen_tps"] for r in ext)
    assert all(r["mem_peak_bytes"] for r in ext) and len(_gen(rows, "ext", 64)) >= 2, json.dumps(ext[0])
    found = next(p for p in rb["provenance"]["candidates"] if p["candidate"] == "ext")["external"]
    assert found["kind"] == "mlx_lm.server" and found["null_reasons"]["version"]
    # The external rows join the one comparison like owned ones: an interval over both sides' values. How far
    # apart the two servers run is a speed (with a second CI run beside, the external one ran 64x slower).
    v = compare_axis(_gen(rows, "own", 64), _gen(rows, "ext", 64), axis="gen_tps", better="higher")
    assert v.ci_low is not None and v.ci_high is not None and 0 < v.ci_low <= v.ratio <= v.ci_high, v.text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_bad_external_input_names_the_field(run_daemon: Any, llama_external: str, tmp_path: Path) -> None:
    d = run_daemon()
    cases = {
        "url": 'url = "http://192.0.2.1:8080"\nrequest_model = "m"\n',
        "url ": f'url = "http://127.0.0.1:{_free_port()}"\nrequest_model = "m"\n',
        "pid": f'url = "{llama_external}"\nrequest_model = "m"\npid = {d.proc.pid}\n',
        "process": f'url = "{llama_external}"\nrequest_model = "m"\nprocess = "no-such-process-benchd"\n',
        "args": f'url = "{llama_external}"\nrequest_model = "m"\nargs = ["-t", "2"]\n',
        "request_model": f'url = "{llama_external}"\n',
    }
    for field, body in cases.items():
        f = tmp_path / f"bad-{field.strip()}-{len(field)}.toml"
        f.write_text(f'name = "bad"\ncontexts = [64]\ngen_tokens = 8\n[[candidates]]\nid = "ext"\nruntime = "openai"\n{body}')
        for cmd in ("validate", "submit"):
            out = d.benchctl(cmd, str(f))
            assert out.returncode == 2, (field, cmd, out.stdout, out.stderr)
            assert field.strip() in out.stderr, (field, cmd, out.stderr)
    assert "not a loopback address" in d.benchctl("validate", str(tmp_path / "bad-url-3.toml")).stderr
    assert d.client().request("GET", "/v1/health")["pid"]  # the daemon stays up


@pytest.mark.slow
def test_server_killed_mid_sweep(run_daemon: Any, server_factory: Any, tiny_models: Any, llama_server_bin: Path,
                                 tmp_path: Path) -> None:
    """The external server dies after its first recorded probe: its later cells are failed rows saying
    why, and the job goes on to the owned candidate."""
    d = run_daemon()
    with server_factory.llama(tiny_models.target, ["-np", "1", "--metrics"], ctx=512) as url:
        pid = _pid_on(_port(url))
        f = tmp_path / "sweep.toml"
        f.write_text(
            f'name = "gone"\ncontexts = [64]\ngen_tokens = 64\nprobes = 20\nwarmup = 0\norder = "sequential"\n{COOL}'
            f'[[candidates]]\nid = "ext"\nruntime = "openai"\nurl = "{url}"\nrequest_model = "tiny"\npid = {pid}\n'
            f'[[candidates]]\nid = "own"\nruntime = "llama-server"\nmodel = "{tiny_models.target}"\n'
            f'binary = "{llama_server_bin}"\n')
        job = d.client().submit(_sweep_json(d, f))["id"]
        wait_until(lambda: any(r["candidate"] == "ext" for r in _rows(d, job)), timeout=300, interval=0.1,
                   what="the external candidate's first row")
        os.killpg(pid, signal.SIGKILL)
        rb = _runbook(d, job)
    rows = _rows(d, job)
    failed = [r for r in rows if r["candidate"] == "ext" and r["status"] == "failed"]
    assert failed and all(r["error"] for r in failed)
    assert any("does not answer" in r["error"] or "crashed" in r["error"] or "gone" in r["error"] for r in failed), \
        [r["error"] for r in failed]
    assert _gen(rows, "own", 64), "the job went on to the next candidate"
    assert {r["candidate"] for r in rb["rows"]} == {"ext", "own"}


def _sweep_json(d: Any, f: Path) -> dict[str, Any]:
    from benchctl.sweepfile import read_sweep_dict

    return read_sweep_dict(str(f))  # type: ignore[no-any-return]


def test_process_name_resolves_once_at_submit(run_daemon: Any, server_factory: Any, tiny_models: Any,
                                              llama_server_bin: Path, tmp_path: Path) -> None:
    """`process` names a process (its comm: the name it was started under, here a symlink's); one match
    becomes the job's `pid`, two are refused naming the field. The names carry a token of this run, since
    the lookup spans the whole machine (another test run's copy would make two)."""
    tag = secrets.token_hex(3)
    one, two_name, none = f"bdx1-{tag}", f"bdx2-{tag}", f"bdx0-{tag}"
    d = run_daemon()
    (tmp_path / one).symlink_to(llama_server_bin)
    port = _free_port()
    argv = [str(tmp_path / one), "-m", str(tiny_models.target), "--host", "127.0.0.1", "--port", str(port),
            "-c", "512", "-np", "1"]
    with server_factory.run(one, argv, f"http://127.0.0.1:{port}", None, 60.0) as url:
        f = tmp_path / "one.toml"
        f.write_text(f'name = "proc"\ncontexts = [32]\ngen_tokens = 4\nprobes = 1\nwarmup = 0\n{COOL}'
                     f'[[candidates]]\nid = "ext"\nruntime = "openai"\nurl = "{url}"\nrequest_model = "tiny"\n'
                     f'process = "{one}"\n')
        out = d.benchctl("submit", str(f), "--follow", "--json", timeout=300)
        assert out.returncode == 0, [r["error"] for r in _rows(d, out.stdout.splitlines()[0])]
        job = d.client().job(out.stdout.splitlines()[0])
        (cand,) = job["sweep"]["candidates"]
        assert cand["process"] == one and cand["pid"] == _pid_on(port)
    two = []
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / two_name).symlink_to(llama_server_bin)
        p = _free_port()
        argv = [str(tmp_path / sub / two_name), "-m", str(tiny_models.target), "--host", "127.0.0.1", "--port", str(p),
                "-c", "256", "-np", "1"]
        two.append(server_factory.run(two_name, argv, f"http://127.0.0.1:{p}", None, 60.0))
    with two[0] as url, two[1]:
        for name, words in ((two_name, f"2 processes are named '{two_name}'"), (none, "no process is named")):
            f = tmp_path / f"{name}.toml"
            f.write_text(f'name = "proc"\ncontexts = [32]\ngen_tokens = 4\n[[candidates]]\nid = "ext"\n'
                         f'runtime = "openai"\nurl = "{url}"\nrequest_model = "tiny"\nprocess = "{name}"\n')
            for cmd in ("validate", "submit"):
                out = d.benchctl(cmd, str(f))
                assert out.returncode == 2 and "process" in out.stderr and words in out.stderr, (cmd, out.stderr)
