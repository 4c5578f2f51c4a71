"""Candidate args cannot unbind loopback (issue 36): a reserved server flag is refused in any spelling
the runtime's parser accepts (`--flag=value`; on the MLX servers, whose argparse takes a unique prefix of
a long option, `--hos`, `--mod`), benchd's own flags come last on the argv (the parser's last one wins),
and after a start every listening socket (test_hostile_flags_real.py) of the server is checked to be loopback only (else it is stopped
and the start fails with the reason, which its cells carry)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from benchd.schemas import Candidate
from benchd.servers import procgroup
from benchd.servers.runtimes import get_adapter

RUNTIMES = ("llama-server", "mlx_lm.server", "mlx_vlm.server")


def cand(runtime: str, **kw: Any) -> Candidate:
    return msgspec.convert({"id": "c", "runtime": runtime, "model": "/models/m", **kw}, Candidate)


def refused(runtime: str, args: list[str]) -> list[tuple[str, str | None]]:
    return [(e.code, e.field) for e in get_adapter(runtime).checks.validate(cand(runtime, args=args))
            if e.code == "reserved_arg"]


@pytest.mark.parametrize("runtime", ["mlx_lm.server", "mlx_vlm.server"])
@pytest.mark.parametrize("arg", ["--hos", "--hos=0.0.0.0", "--host=0.0.0.0", "--mod", "--mode", "--po", "--port=1",
                                 "--draft-m", "--"])
def test_mlx_reserved_flags_are_refused_in_any_spelling(runtime: str, arg: str) -> None:
    assert refused(runtime, ["--temp", "0", arg, "x"]) == [("reserved_arg", "$.candidates[c].args[2]")]


def test_the_message_says_which_flag_an_abbreviation_is() -> None:
    (err,) = get_adapter("mlx_lm.server").checks.validate(cand("mlx_lm.server", args=["--hos", "0.0.0.0"]))
    assert "'--host'" in err.message and "'--hos'" in err.message and "127.0.0.1" in err.message


@pytest.mark.parametrize("arg", ["--host=0.0.0.0", "--port=8080", "-m=/other", "--model=/other", "-c=10"])
def test_llama_reserved_flags_with_a_value_attached_are_refused(arg: str) -> None:
    assert refused("llama-server", [arg]) == [("reserved_arg", "$.candidates[c].args[0]")]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_benchds_own_flags_come_after_the_candidates_args(runtime: str) -> None:
    args = ["--alpha", "1", "--beta"]
    argv = get_adapter(runtime).launcher.argv(cand(runtime, args=args), command=["srv"], port=9, ctx_size=None)
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
