"""Candidate args cannot unbind loopback, against the real servers (issue 36; the unit cases are in
test_hostile_flags.py): a start whose listeners are not loopback only is stopped with the reason,
llama-server's parser takes no abbreviation, and every spelling the MLX servers' argparse resolves to a
reserved flag is refused (checked against the pinned servers' own `--help`)."""

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


def cand(runtime: str, **kw: Any) -> Candidate:
    return msgspec.convert({"id": "c", "runtime": runtime, "model": "/models/m", **kw}, Candidate)


def refused(runtime: str, args: list[str]) -> list[tuple[str, str | None]]:
    return [(e.code, e.field) for e in get_adapter(runtime).checks.validate(cand(runtime, args=args))
            if e.code == "reserved_arg"]


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


def test_llama_server_takes_no_abbreviation(llama_server_bin: Path) -> None:
    """Why llama-server's reserved flags are matched exactly: its parser refuses a prefix of a flag."""
    out = subprocess.run([str(llama_server_bin), "--hos", "0.0.0.0"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "--hos" in out.stdout + out.stderr


def _long_options(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", help_text))


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
