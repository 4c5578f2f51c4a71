"""Valid-looking input that names what no process can take or no reader should open (issue 36): a NUL
byte in `args` or an `env` value, and a path field naming a FIFO, a device or a directory where a file
is expected. Each is refused at validate (benchctl exits 2 naming the field) and at submit (a 400 naming
the field), and no FIFO is ever opened: the daemon answers at once and stays up. The readers of model
files (GGUF headers, a model dir's JSON, the content hash) refuse anything but a regular file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from benchctl.client import ApiError
from benchd.engine.sweepcheck import input_problems, submit_problems
from benchd.files import kind_of, open_regular, read_regular
from benchd.schemas import Candidate, Sweep
from benchd.sensors.facts import hash_model
from benchd.servers.runtimes.vision import gguf_metadata, mlx_dir_facts

#: A FIFO open()ed for reading blocks until a writer comes: every check here must return well before.
HANG_GUARD_S = 30.0


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.gguf"
    os.mkfifo(path)
    return path


def _sweep(**cand: Any) -> dict[str, Any]:
    c = {"id": "a", "runtime": "llama-server", "model": "/nonexistent/m.gguf", **cand}
    return {"name": "hostile", "contexts": [128], "gen_tokens": 4, "candidates": [c]}


def _problems(**cand: Any) -> list[tuple[str, str | None]]:
    sweep = msgspec.convert(_sweep(**cand), Sweep)
    return [(p.code, p.field) for p in submit_problems(sweep)]


def test_nul_bytes_in_args_and_env_are_refused_naming_the_field() -> None:
    assert ("invalid", "$.candidates[0].args[1]") in _problems(args=["-fa", "o\x00n"])
    assert ("invalid", "$.candidates[0].env.X") in _problems(env={"X": "a\x00b"})


@pytest.mark.parametrize("field", ["model", "mmproj", "binary", "draft_model"])
def test_a_fifo_in_a_path_field_is_refused_without_opening_it(fifo: Path, field: str) -> None:
    cand: dict[str, Any] = {"spec": {"draft_model": str(fifo)}} if field == "draft_model" else {field: str(fifo)}
    if field == "mmproj":
        cand["vision"] = True  # the vision check would read its header: it must not
    started = time.monotonic()
    got = _problems(**cand)
    assert time.monotonic() - started < HANG_GUARD_S
    name = "spec.draft_model" if field == "draft_model" else field
    assert ("special_file", f"$.candidates[0].{name}") in got, got


def test_a_device_and_a_directory_where_a_file_is_expected(tmp_path: Path) -> None:
    assert ("special_file", "$.candidates[0].model") in _problems(model="/dev/null")
    assert ("special_file", "$.candidates[0].mmproj") in _problems(mmproj=str(tmp_path))
    assert ("special_file", "$.candidates[0].binary") in _problems(binary=str(tmp_path))
    assert ("special_file", "$.candidates[0].model") in _problems(model=str(tmp_path))  # llama-server: one GGUF file
    mlx = msgspec.convert({"id": "m", "runtime": "mlx_lm.server", "model": str(tmp_path)}, Candidate)
    assert input_problems(0, mlx) == []  # an MLX model is a directory


def test_the_file_readers_refuse_what_is_not_a_regular_file(fifo: Path, tmp_path: Path) -> None:
    assert kind_of(str(fifo)) == "FIFO (named pipe)" and kind_of("/dev/null") == "character device"
    for path in (str(fifo), "/dev/zero", str(tmp_path)):
        with pytest.raises(OSError, match="not a regular file"):
            open_regular(path)
        with pytest.raises(OSError):
            gguf_metadata(path)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 1025)
    with pytest.raises(OSError, match="larger than 1024 bytes"):
        read_regular(str(big), 1024)
    info = hash_model(str(fifo))
    assert info.sha256 is None and "FIFO" in info.null_reasons["sha256"]
    model_dir = tmp_path / "mlx"
    model_dir.mkdir()
    os.mkfifo(model_dir / "config.json")
    facts = mlx_dir_facts(str(model_dir))
    assert not facts.ok and "config.json" in facts.reason


def test_benchctl_validate_names_a_fifo_and_exits_2(tmp_path: Path, fifo: Path) -> None:
    f = tmp_path / "sweep.toml"
    f.write_text('name = "h"\ncontexts = [128]\ngen_tokens = 4\n[[candidates]]\nid = "a"\nruntime = "llama-server"\n'
                 f'model = "{fifo}"\nargs = ["x\\u0000y"]\n')
    out = subprocess.run([sys.executable, "-m", "benchctl", "validate", str(f)], capture_output=True, text=True,
                         timeout=HANG_GUARD_S * 4)
    assert out.returncode == 2, out.stderr
    assert "candidates[0] (a).model" in out.stderr and "FIFO" in out.stderr, out.stderr
    assert "candidates[0] (a).args[0]" in out.stderr and "NUL" in out.stderr, out.stderr


def test_the_daemon_refuses_them_at_submit_and_stays_up(run_daemon, fifo: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    c = d.client(timeout=HANG_GUARD_S)
    cases = [({"mmproj": str(fifo), "vision": True}, "$.sweep.candidates[0].mmproj", "special_file"),
             ({"model": str(fifo)}, "$.sweep.candidates[0].model", "special_file"),
             ({"model": "/dev/zero"}, "$.sweep.candidates[0].model", "special_file"),
             ({"args": ["\x00"]}, "$.sweep.candidates[0].args[0]", "invalid"),
             ({"env": {"A": "\x00"}}, "$.sweep.candidates[0].env.A", "invalid")]
    doc = _sweep()
    doc["vision"] = {"images": 1, "resolutions": [[64, 64]]}
    for cand, field, code in cases:
        body = json.loads(json.dumps(doc))
        body["candidates"][0].update(cand)
        with pytest.raises(ApiError) as info:
            c.submit(body)
        assert (info.value.status, info.value.code, info.value.field) == (400, code, field), info.value
    assert c.health()["pid"] == d.pid and c.jobs()["jobs"] == []


def test_the_image_token_count_encodes_its_body_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """llama-server's token count of an image request (megabytes of base64) is encoded in a worker thread,
    never on the loop's; the count is read from the answer. A loopback aiohttp app stands in for
    `/v1/chat/completions/input_tokens` (the encoding thread is what is checked, not the server)."""
    import asyncio
    import threading

    from aiohttp import web

    from benchd.servers.runtimes import llama_server

    threads: list[threading.Thread] = []
    real = llama_server._encode_messages

    def spy(body: Any) -> bytes:
        threads.append(threading.current_thread())
        return real(body)

    monkeypatch.setattr(llama_server, "_encode_messages", spy)
    image = "data:image/png;base64," + "A" * (4 << 20)
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]}]}

    async def main() -> tuple[int | None, threading.Thread, int]:
        got: list[int] = []

        async def count(request: web.Request) -> web.Response:
            got.append(len(json.loads(await request.read())["messages"][0]["content"][0]["image_url"]["url"]))
            return web.json_response({"input_tokens": 321})

        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/chat/completions/input_tokens", count)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            n = await llama_server.LlamaServerAdapter().requests.count_request_tokens(f"http://127.0.0.1:{port}", body)
        finally:
            await runner.cleanup()
        return n, threading.current_thread(), got[0]

    n, loop_thread, received = asyncio.run(main())
    assert n == 321 and received == len(image)
    assert threads and all(t is not loop_thread for t in threads), threads
