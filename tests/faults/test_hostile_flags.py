"""Candidate args cannot unbind loopback (issue 36): a reserved server flag is refused in any spelling
the runtime's parser accepts (`--flag=value`; on the MLX servers, whose argparse takes a unique prefix of
a long option, `--hos`, `--mod`), benchd's own flags come last on the argv (the parser's last one wins),
and after a start every listening socket of the server is checked to be loopback only (else it is stopped
and the start fails with the reason, which its cells carry)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest

from benchd.config import Config
from benchd.schemas import Candidate
from benchd.servers import procgroup, supervisor
from benchd.servers.runtimes import get_adapter
from benchd.servers.supervisor import ServerStartError, Supervisor

RUNTIMES = ("llama-server", "mlx_lm.server", "mlx_vlm.server")


def cand(runtime: str, **kw: Any) -> Candidate:
    return msgspec.convert({"id": "c", "runtime": runtime, "model": "/models/m", **kw}, Candidate)


def refused(runtime: str, args: list[str]) -> list[tuple[str, str | None]]:
    return [(e.code, e.field) for e in get_adapter(runtime).validate(cand(runtime, args=args))
            if e.code == "reserved_arg"]


@pytest.mark.parametrize("runtime", ["mlx_lm.server", "mlx_vlm.server"])
@pytest.mark.parametrize("arg", ["--hos", "--hos=0.0.0.0", "--host=0.0.0.0", "--mod", "--mode", "--po", "--port=1",
                                 "--draft-m", "--"])
def test_mlx_reserved_flags_are_refused_in_any_spelling(runtime: str, arg: str) -> None:
    assert refused(runtime, ["--temp", "0", arg, "x"]) == [("reserved_arg", "$.candidates[c].args[2]")]


def test_the_message_says_which_flag_an_abbreviation_is() -> None:
    (err,) = get_adapter("mlx_lm.server").validate(cand("mlx_lm.server", args=["--hos", "0.0.0.0"]))
    assert "'--host'" in err.message and "'--hos'" in err.message and "127.0.0.1" in err.message


@pytest.mark.parametrize("arg", ["--host=0.0.0.0", "--port=8080", "-m=/other", "--model=/other", "-c=10"])
def test_llama_reserved_flags_with_a_value_attached_are_refused(arg: str) -> None:
    assert refused("llama-server", [arg]) == [("reserved_arg", "$.candidates[c].args[0]")]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_benchds_own_flags_come_after_the_candidates_args(runtime: str) -> None:
    args = ["--alpha", "1", "--beta"]
    argv = get_adapter(runtime).argv(cand(runtime, args=args), command=["srv"], port=9, ctx_size=None)
    assert argv[1:4] == args
    for flag in ("--host", "--port"):
        assert argv.index(flag) > 3 and argv.count(flag) == 1
    assert argv[argv.index("--host") + 1] == "127.0.0.1"


def test_non_loopback_listeners_are_named() -> None:
    addrs = [("127.0.0.1", 1), ("127.3.4.5", 2), ("::1", 3), ("::ffff:127.0.0.1", 4), ("0.0.0.0", 5), ("::", 6),
             ("192.168.1.9", 7), ("fe80::1%eth0", 8)]
    assert procgroup.non_loopback(addrs) == ["0.0.0.0:5", "192.168.1.9:7", "[::]:6", "[fe80::1%eth0]:8"]


def test_listening_addresses_reads_the_process_sockets() -> None:
    """This test process listens on a loopback port: psutil's view of it is what the check reads."""
    import os
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert ("127.0.0.1", port) in procgroup.listening_addresses(os.getpid())
        assert procgroup.non_loopback([a for a in procgroup.listening_addresses(os.getpid()) if a[1] == port]) == []


# ------------------------------------------------------------------------------------------ real servers


@pytest.mark.real
async def test_a_server_listening_beyond_loopback_is_stopped(tmp_path: Path, cache_dir: Path, tiny_models,
                                                            llama_server_bin: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A real llama-server start whose listeners, as the check reads them, include 0.0.0.0: the start fails
    with `not_loopback` naming the address, and the server is gone. The wide listener is injected into
    what the check reads (`listening_addresses`): the project's rule forbids binding a non-loopback
    address, even in a test, and benchd's args give a real server no way to do it."""
    real = procgroup.listening_addresses
    checked: list[int] = []

    def with_a_wide_one(pid: int) -> list[tuple[str, int]]:
        checked.append(pid)
        return [*real(pid), ("0.0.0.0", 9)]

    monkeypatch.setattr(supervisor, "listening_addresses", with_a_wide_one)
    sup = Supervisor(Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir), grace_s=3.0)
    c = msgspec.convert({"id": "wide", "runtime": "llama-server", "model": str(tiny_models.target),
                         "binary": str(llama_server_bin)}, Candidate)
    try:
        with pytest.raises(ServerStartError) as info:
            await sup.start("job-wide", c, 512)
    finally:
        await sup.stop_all()
    assert info.value.reason == "not_loopback"
    assert "0.0.0.0:9" in str(info.value) and "stopped" in str(info.value)
    assert checked, "the check never ran"
    for pid in checked:  # the server the check read is gone (other helpers' servers run beside it)
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.real
def test_llama_server_takes_no_abbreviation(llama_server_bin: Path) -> None:
    """Why llama-server's reserved flags are matched exactly: its parser refuses a prefix of a flag."""
    out = subprocess.run([str(llama_server_bin), "--hos", "0.0.0.0"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "--hos" in out.stdout + out.stderr


def _long_options(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", help_text))


@pytest.mark.real
@pytest.mark.parametrize("runtime", ["mlx_lm.server", "mlx_vlm.server"])
def test_every_spelling_argparse_takes_for_a_reserved_flag_is_refused(runtime: str, mlx_argv, mlx_env) -> None:  # type: ignore[no-untyped-def]
    """Against the pinned server's own option list (`--help`): every prefix argparse resolves to a
    reserved flag is refused, and no option of the server that is not reserved is."""
    out = subprocess.run([*mlx_argv[runtime], "--help"], capture_output=True, text=True, timeout=300, env=mlx_env)
    assert out.returncode == 0, out.stderr[-2000:]
    options = _long_options(out.stdout)
    adapter = get_adapter(runtime)
    reserved = {f for f in adapter.reserved_args if f.startswith("--")}
    assert reserved <= options, reserved - options  # every reserved flag is one the server has
    for flag in sorted(reserved):
        for n in range(3, len(flag) + 1):
            prefix = flag[:n]
            takes = {o for o in options if o.startswith(prefix)}
            if prefix == flag or takes == {flag}:  # argparse resolves it to the reserved flag
                assert refused(runtime, [prefix, "x"]), (flag, prefix)
    wrongly = sorted(o for o in options - reserved - {"--help"} if refused(runtime, [o, "x"]))
    assert not wrongly, f"options of {runtime} refused though not reserved: {wrongly}"
