"""Memory sampler against real child processes (Linux /proc); the macOS readers are in test_memory_darwin.py."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap

import msgspec
import pytest

from benchd.sensors.memory import linux as memory_linux
from benchd.sensors.memory import sampler as memory
from benchd.sensors.memory import sources as memory_sources
from benchd.sensors.memory.readers import PeakOf, ProcMem
from tests.testlib import until

MB = 1024 * 1024

linux_only = pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")

# A child that allocates N MiB on command, touches every page, frees it, and says "done".
CHILD = textwrap.dedent(
    """
    import sys
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "alloc":
            n = int(cmd[1]) * 1024 * 1024
            buf = bytearray(n)
            buf[::4096] = b"\\x01" * (n // 4096)   # touch every page
            del buf                                 # free: large blocks go back to the kernel (munmap)
        elif cmd[0] == "spawn":
            import subprocess
            kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        elif cmd[0] == "map":  # map a file read-only and touch every page (what llama-server does with a GGUF)
            import mmap
            fh = open(" ".join(cmd[1:]), "rb")
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            sum(mapped[i] for i in range(0, len(mapped), 4096))
        elif cmd[0] == "quit":
            break
        print("done", flush=True)
    """
)


class Child:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def cmd(self, line: str) -> None:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write((line + "\n").encode())
        await self.proc.stdin.drain()
        out = await asyncio.wait_for(self.proc.stdout.readline(), 20)
        assert out.strip() == b"done", out

    def rss(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")


@pytest.fixture
async def child():
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    c = Child(proc)
    await c.cmd("noop")  # wait until the interpreter is up
    yield c
    import psutil

    with __import__("contextlib").suppress(psutil.NoSuchProcess):
        for k in psutil.Process(proc.pid).children(recursive=True):
            k.kill()
    if proc.returncode is None:
        proc.kill()
    await proc.wait()


@linux_only
async def test_per_probe_peak_exact_and_reset(child: Child) -> None:
    s = memory.MemorySampler(child.proc.pid, rate_hz=20)

    # Probe 1: 200 MiB allocated, touched, freed while sampling.
    base = child.rss()
    s.reset_peak()
    await s.start()
    await child.cmd("alloc 200")
    await until(lambda: len(s._series) >= 2, "two samples of probe 1")
    r1 = await s.stop()
    expected = base + 200 * MB
    assert r1.source == "kernel:VmHWM" and r1.exact and r1.processes == 1, r1.source_note
    assert r1.peak_bytes is not None
    assert abs(r1.peak_bytes - expected) <= 0.05 * expected, (r1.peak_bytes, expected)
    assert r1.rss_anon_bytes is not None and r1.rss_file_bytes is not None
    assert r1.swap_in_bytes is not None and r1.swap_out_bytes is not None

    # Probe 2, after a reset: only 20 MiB this time; the kernel peak must drop accordingly.
    base2 = child.rss()
    s.reset_peak()
    await s.start()
    await child.cmd("alloc 20")
    r2 = await s.stop()
    assert r2.peak_bytes is not None
    assert r2.peak_bytes < r1.peak_bytes - 150 * MB
    assert abs(r2.peak_bytes - (base2 + 20 * MB)) <= 0.05 * (base2 + 20 * MB)
    msgspec.json.encode(r2)  # serializable as-is


@linux_only
async def test_series_rate_is_what_the_series_shows_and_never_above_the_request(child: Child) -> None:
    """The achieved rate is computed from the periodic samples actually taken (the series' points before
    the final read at stop), and the sampler never samples faster than asked: late ticks skip their missed
    slots instead of bursting. How close to the request a busy machine lets it get is not asserted."""
    rates = (10.0, 25.0)
    samplers = [memory.MemorySampler(child.proc.pid, rate_hz=rate) for rate in rates]
    for s in samplers:  # both at once: one 1.5 s window
        await s.start()
    await asyncio.sleep(1.5)
    for rate, s in zip(rates, samplers, strict=True):
        r = await s.stop()
        ts = [t for t, _ in r.series]
        assert ts == sorted(ts) and all(b > 0 for _, b in r.series)
        periodic = ts[:-1]  # the last point is stop()'s final read
        assert len(periodic) >= 2, r.series  # a hang guard: 1.5 s at 10-25 Hz
        assert r.rate_hz_achieved == pytest.approx((len(periodic) - 1) / (periodic[-1] - periodic[0]))
        assert r.rate_hz_achieved <= rate * 1.01, r.rate_hz_achieved


@linux_only
async def test_tree_sum_is_upper_bound_and_vanishing_child_survives(child: Child) -> None:
    await child.cmd("spawn")
    s = memory.MemorySampler(child.proc.pid, rate_hz=20, tree_refresh_s=0.1)
    s.reset_peak()
    await s.start()
    await until(lambda: len(s._seen) >= 2, "the sampler reads the child and its kid")
    import psutil

    kids = psutil.Process(child.proc.pid).children(recursive=True)
    assert kids
    for k in kids:  # a process of the tree vanishes mid-probe
        k.kill()
    await until(lambda: s._vanished, "the sampler sees the kid gone")
    r = await s.stop()
    assert r.processes == 2
    assert r.source == "kernel:VmHWM" and not r.exact
    assert "upper bound" in r.source_note and "exited mid-probe" in r.source_note
    assert r.peak_bytes is not None and r.sampled_peak_bytes is not None
    assert r.peak_bytes >= r.sampled_peak_bytes


@linux_only
async def test_peak_only_is_exact_and_runs_nothing_during_the_probe(child: Child) -> None:
    """The engine's recorded probes: the kernel peak, read at the ends; no sampling task in between."""
    s = memory.MemorySampler(child.proc.pid, rate_hz=20, series=False)
    base = child.rss()
    s.reset_peak()
    await s.start()
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("memory-sampler")]
    await child.cmd("alloc 200")  # answered after the pages were touched and freed: the kernel peak keeps them
    r = await s.stop()
    expected = base + 200 * MB
    assert r.source == "kernel:VmHWM" and r.exact and r.peak_bytes is not None
    assert abs(r.peak_bytes - expected) <= 0.05 * expected, (r.peak_bytes, expected)
    assert len(r.series) == 2 and r.rate_hz_achieved is None and "no series" in r.null_reasons["rate_hz_achieved"]
    assert r.rss_anon_bytes is not None and "no series" in r.split_note


@linux_only
async def test_async_with_samples_the_block_and_stops_whatever_ends_it(child: Child) -> None:
    """`async with sampler:` is the engine's one set-up: peak reset, sampled block, result after it; a block
    that raises (or is cancelled) leaves the sampler stopped with no result, and it can sample again."""
    s = memory.MemorySampler(child.proc.pid, rate_hz=20)
    base = child.rss()
    async with s:
        await child.cmd("alloc 100")  # answered after the pages were touched and freed: the kernel peak keeps them
    expected = base + 100 * MB
    assert s.result.peak_bytes is not None and abs(s.result.peak_bytes - expected) <= 0.05 * expected
    first = s.result
    fresh = memory.MemorySampler(child.proc.pid, rate_hz=20)
    with pytest.raises(ValueError, match="probe failed"):
        async with fresh:
            raise ValueError("probe failed")
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("memory-sampler")]  # stopped
    with pytest.raises(RuntimeError, match="no sampled block"):
        fresh.result  # noqa: B018
    entered = asyncio.Event()
    task = asyncio.create_task(_sample_until_cancelled(s, entered))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("memory-sampler")]
    assert s.result is first  # the cancelled block left no result of its own
    async with s:
        await child.cmd("alloc 10")
    assert s.result is not first and s.result.peak_bytes is not None


async def _sample_until_cancelled(s: memory.MemorySampler, entered: asyncio.Event) -> None:
    async with s:
        entered.set()
        await asyncio.Event().wait()  # never set: only the cancellation ends the block


@linux_only
async def test_peak_only_without_a_usable_kernel_peak_samples_the_series(child: Child) -> None:
    class NoReset(memory_linux.LinuxProc):
        """Double for a kernel that refuses clear_refs (e.g. another user's process): the only way here."""

        def reset(self, pid: int) -> str | None:
            return "cannot write /proc/X/clear_refs: Permission denied"

    s = memory.MemorySampler(child.proc.pid, rate_hz=20, series=False, backend=NoReset())
    s.reset_peak()
    await s.start()
    await until(lambda: len(s._series) >= 4, "four samples")
    r = await s.stop()
    assert r.source == "psutil:rss" and not r.exact and len(r.series) >= 4 and r.rate_hz_achieved is not None


async def test_root_gone_gives_nulls_with_reasons() -> None:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await proc.wait()
    s = memory.MemorySampler(proc.pid, rate_hz=10)
    await s.start()
    await asyncio.sleep(0)  # one turn of the loop: the sampler's first tick runs (it finds nothing to read)
    r = await s.stop()
    assert r.peak_bytes is None and "peak_bytes" in r.null_reasons
    assert r.series == [] and r.processes == 0 and not r.exact


@linux_only
async def test_reset_failure_falls_back_to_sampled_rss(child: Child) -> None:
    class NoReset(memory_linux.LinuxProc):
        """Double for a kernel that refuses clear_refs (e.g. another user's process): the only way here."""

        def reset(self, pid: int) -> str | None:
            return "cannot write /proc/X/clear_refs: Permission denied"

    s = memory.MemorySampler(child.proc.pid, rate_hz=20, backend=NoReset())
    s.reset_peak()
    await s.start()
    await until(lambda: len(s._series) >= 2, "two samples")
    r = await s.stop()
    assert r.source == "psutil:rss" and not r.exact
    assert r.peak_bytes == r.sampled_peak_bytes and "Permission denied" in r.source_note


def test_describe_sources_lists_each_source() -> None:
    rows = memory_sources.describe_sources()
    names = {r["name"] for r in rows}
    assert "psutil:rss" in names and "psutil:swap_memory sin/sout" in names
    assert all("available" in r for r in rows)
    assert all(r["available"] or r.get("reason") for r in rows)
    if sys.platform.startswith("linux"):
        assert {"kernel:VmHWM", "kernel:clear_refs", "kernel:smaps"} <= names


@pytest.mark.darwin
@pytest.mark.skipif(sys.platform != "darwin", reason="needs macOS")
async def test_darwin_live_peak(child: Child) -> None:  # pragma: no cover - macOS only
    s = memory.MemorySampler(child.proc.pid, rate_hz=20)
    s.reset_peak()
    await s.start()
    await child.cmd("alloc 200")
    r = await s.stop()
    assert r.source == "darwin:phys_footprint" and r.peak_bytes is not None
    assert r.peak_bytes >= 200 * MB


# ---------------------------------------------------------------------------- axis components (issue 14)


@linux_only
def test_smaps_counts_the_resident_pages_of_a_mapped_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A real mapping of a real file in this process: smaps says how much of it is in RAM."""
    import mmap

    f = tmp_path / "weights.bin"
    f.write_bytes(b"\x01" * (8 * MB))
    with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for off in range(0, 8 * MB, 4096):  # touch every page
            mm[off]
        got = memory_linux.LinuxProc().mapped_file_bytes(os.getpid(), [str(f)])
        other = memory_linux.LinuxProc().mapped_file_bytes(os.getpid(), [str(tmp_path / "nope.bin")])
        by_dir = memory_linux.LinuxProc().mapped_file_bytes(os.getpid(), [str(tmp_path)])  # an MLX model dir
    assert got == 8 * MB and other == 0 and by_dir == 8 * MB


def test_smaps_parser_on_a_captured_excerpt() -> None:
    text = (
        b"55d0c3a00000-55d0c3a21000 rw-p 00000000 00:00 0                          [heap]\n"
        b"Rss:                 132 kB\n"
        b"7f3a10000000-7f3a13010000 r--s 00000000 08:01 1835012                    /models/my model.gguf\n"
        b"Size:              49216 kB\n"
        b"Rss:               49216 kB\n"
        b"VmFlags: rd sh mr mw me ms sd\n"
        b"7f3a14000000-7f3a14001000 r--p 00000000 08:01 1835013                    /models/other.gguf (deleted)\n"
        b"Rss:                   4 kB\n"
    )
    assert memory_linux.parse_smaps_rss(text, ["/models/my model.gguf"]) == 49216 * 1024
    assert memory_linux.parse_smaps_rss(text, ["/models"]) == (49216 + 4) * 1024
    assert memory_linux.parse_smaps_rss(text, []) == 0


class FootprintLike(memory_linux.LinuxProc):
    """Double: the macOS accounting (a footprint that leaves mapped files out, its own peak) fed with
    Linux counters (RssAnon as the footprint), to check the sampler's macOS axis on a real process here."""

    peak_of: PeakOf = "footprint"
    source = current_source = "test:footprint"
    footprint_source = "test:footprint"
    resident_source = "test:resident (sampled max)"

    def read(self, pid: int) -> ProcMem | None:
        m = super().read(pid)
        if m is None or m.anon is None:
            return None
        return ProcMem(m.anon, None, None, None, resident=m.resident, footprint=m.anon)


@linux_only
async def test_footprint_axis_adds_the_mapped_model_files(child: Child, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = tmp_path / "model.gguf"
    model.write_bytes(b"\x02" * (16 * MB))
    await child.cmd(f"map {model}")
    s = memory.MemorySampler(child.proc.pid, rate_hz=20, backend=FootprintLike(), model_paths=[str(model)])
    s.reset_peak()
    await s.start()
    await until(lambda: len(s._series) >= 2, "two samples")
    r = await s.stop()
    assert r.model_resident_bytes == 16 * MB and r.footprint_peak_bytes is not None
    assert r.peak_bytes == r.footprint_peak_bytes + 16 * MB
    assert r.source == "psutil:rss+mapped-model-files" or r.source.endswith("+mapped-model-files")
    assert "mapped model files" in r.source_note
    assert r.sources["model_resident_bytes"] == "kernel:smaps Rss of the model files"

    class Unreadable(FootprintLike):
        def mapped_file_bytes(self, pid: int, paths: list[str]) -> int:
            raise OSError("proc_pidinfo: EPERM")

    s = memory.MemorySampler(child.proc.pid, rate_hz=20, backend=Unreadable(), model_paths=[str(model)])
    await s.start()
    await until(lambda: len(s._series) >= 2, "two samples")
    r = await s.stop()
    assert r.model_resident_bytes is None and "EPERM" in r.null_reasons["model_resident_bytes"]
    assert r.resident_peak_bytes is not None and r.peak_bytes == max(r.footprint_peak_bytes or 0, r.resident_peak_bytes)
    assert not r.exact and "lower bound" in r.source_note


@linux_only
async def test_no_model_paths_is_a_null_with_reason(child: Child) -> None:
    s = memory.MemorySampler(child.proc.pid, rate_hz=20)
    await s.start()
    await until(lambda: len(s._series) >= 2, "two samples")
    r = await s.stop()
    assert r.model_resident_bytes is None and r.null_reasons["model_resident_bytes"] == "no model files given to the sampler"
    assert r.resident_peak_bytes == r.peak_bytes and r.footprint_peak_bytes is not None
    assert r.sources["swap_in_bytes"] == "psutil:swap_memory sin/sout"
