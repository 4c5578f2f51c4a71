"""Memory of a server's whole process tree during one probe: a time series, the kernel's exact peak, and
the memory axis. Per probe: `async with sampler:` around it, then `sampler.result`.
Reasons and facts: docs/measuring.md#memory-sampler."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from types import TracebackType

import msgspec
import psutil

from benchd.sensors.memory import linux as memory_linux
from benchd.sensors.memory.readers import Backend, real_paths
from benchd.sensors.memory.sources import default_backend, read_swap


class MemoryResult(msgspec.Struct, kw_only=True, frozen=True):
    """One probe's memory facts. Every null has a reason in `null_reasons`."""

    peak_bytes: int | None
    source: str
    exact: bool
    source_note: str
    series: list[tuple[float, int]]  # (time.monotonic() seconds, tree bytes)
    rate_hz_requested: float
    rate_hz_achieved: float | None
    sampled_peak_bytes: int | None  # max of the series: a lower bound on the true peak
    rss_anon_bytes: int | None  # at the sampled peak (the tick with the largest tree total)
    rss_file_bytes: int | None  # RssFile + RssShmem (all non-anonymous pages), at the sampled peak
    swap_in_bytes: int | None  # system-wide swap-in delta over the probe (`swap_source`)
    swap_out_bytes: int | None
    processes: int  # distinct pids sampled
    split_note: str = ""  # where rss_anon/rss_file were read (the row's sources)
    null_reasons: dict[str, str] = {}
    #: The two components of the axis, per OS (docs/measuring.md#memory-sampler), and the mapped model files' share.
    footprint_peak_bytes: int | None = None
    resident_peak_bytes: int | None = None
    model_resident_bytes: int | None = None
    #: Where each component and the swap figures came from: {field: source}.
    sources: dict[str, str] = {}


class MemorySampler:
    """Samples `root_pid` and its descendants at `rate_hz` on the running event loop."""

    def __init__(
        self,
        root_pid: int,
        rate_hz: float = 10.0,
        *,
        tree_refresh_s: float = 1.0,
        backend: Backend | None = None,
        model_paths: Sequence[str] = (),
        series: bool = True,
    ) -> None:
        if rate_hz <= 0:
            raise ValueError("rate_hz must be > 0")
        self.root_pid = root_pid
        self.rate_hz = rate_hz
        self.tree_refresh_s = tree_refresh_s
        self.series = series
        self._running = False
        self._ticking = series  # whether this probe's sampling runs a timer (decided at start)
        self.backend: Backend = backend or default_backend()
        self.model_paths = real_paths(model_paths)
        self._task: asyncio.Task[None] | None = None
        self._reset_errors: dict[int, str] = {}
        self._reset_pids: set[int] = set()
        self._reset_pending = True
        self._result_of_block: MemoryResult | None = None

    async def __aenter__(self) -> MemorySampler:
        """Reset the peak and sample while the block runs."""
        self.reset_peak()
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        """Stop, whatever ended the block (shielded); keep the result of a block that ended normally."""
        if kind is None:
            self._result_of_block = await self.stop()
            return
        with contextlib.suppress(Exception):
            await asyncio.shield(self.stop())

    @property
    def result(self) -> MemoryResult:
        """The result of the last `async with` block that ended normally."""
        if self._result_of_block is None:
            raise RuntimeError("no sampled block has ended")
        return self._result_of_block

    # ------------------------------------------------------------------------------------- tree

    def tree(self) -> set[int]:
        """Root plus its live descendants now (empty when the root is gone); Linux walks /proc children files."""
        kids_proc = memory_linux.proc_tree(self.root_pid)
        if kids_proc is not None:
            return kids_proc
        try:
            root = psutil.Process(self.root_pid)
            kids = root.children(recursive=True)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return set()
        return {self.root_pid, *(k.pid for k in kids)}

    def reset_peak(self) -> None:
        """Reset the kernel peak of every process in the tree, so the next probe measures only itself."""
        self._reset_errors = {}
        self._reset_pids = self.tree()
        for pid in self._reset_pids:
            err = self.backend.reset(pid)
            if err is not None:
                self._reset_errors[pid] = err
        self._reset_pending = False

    # ---------------------------------------------------------------------------------- sampling

    async def start(self) -> None:
        """Begin sampling; resets the peak first if `reset_peak()` was not called since the last stop."""
        if self._running:
            raise RuntimeError("sampler already running")
        if self._reset_pending:
            self.reset_peak()
        self._pids = self.tree()
        self._seen: set[int] = set()
        self._vanished: set[int] = set()
        self._peaks: dict[int, int] = {}
        self._footprints: dict[int, int] = {}  # sampled max per pid
        self._residents: dict[int, int] = {}  # sampled max per pid
        self._model: tuple[int | None, str] = (None, "not read")
        self._read_errors: dict[int, str] = {}
        self._series: list[tuple[float, int]] = []
        self._best: tuple[int, int | None, int | None] | None = None
        self._periodic = 0
        self._first_t: float | None = None
        self._last_t: float | None = None
        self._error: str | None = None
        self._swap0 = read_swap()
        self._last_refresh = time.monotonic()
        self._ticking = self.series
        if not self.series:  # peak only: read the tree once now; tick only if the kernel peak is unusable
            self._tick(self._last_refresh)
            kernel_ok = bool(self._seen) and all(p in self._peaks for p in self._seen)
            self._ticking = not kernel_ok or any(p in self._seen for p in self._reset_errors)
        self._running = True
        if self._ticking:
            self._task = asyncio.create_task(self._run(), name=f"memory-sampler-{self.root_pid}")

    async def _run(self) -> None:
        period = 1.0 / self.rate_hz
        t0 = time.monotonic()
        k = 0
        try:
            while True:
                now = time.monotonic()
                if now - self._last_refresh >= self.tree_refresh_s:
                    self._refresh(now)
                if self._tick(now):
                    self._periodic += 1
                    self._first_t = self._first_t if self._first_t is not None else now
                    self._last_t = now
                k += 1
                target = t0 + k * period
                now = time.monotonic()
                if target <= now:  # fell behind (loop busy): skip the missed slots, never burst
                    k = int((now - t0) / period) + 1
                    target = t0 + k * period
                await asyncio.sleep(target - now)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never let a sampling bug take the probe down; say so in the result
            self._error = f"sampler stopped early: {type(exc).__name__}: {exc}"

    def _refresh(self, now: float) -> None:
        self._last_refresh = now
        live = self.tree()
        self._vanished |= self._pids - live
        self._pids = live

    def _tick(self, now: float) -> bool:
        """Read every process once; returns whether anything was read (a point in the series)."""
        total = 0
        anon: int | None = 0
        file_: int | None = 0
        got = False
        for pid in list(self._pids):
            try:
                m = self.backend.read(pid)
            except OSError as exc:
                self._read_errors[pid] = str(exc)
                m = None
            if m is None:
                self._pids.discard(pid)
                self._vanished.add(pid)
                continue
            got = True
            self._seen.add(pid)
            total += m.current
            anon, file_ = _plus(anon, m.anon), _plus(file_, m.file)
            for peaks, value in ((self._peaks, m.peak), (self._footprints, m.footprint),
                                 (self._residents, m.resident)):
                if value is not None:
                    peaks[pid] = max(peaks.get(pid, 0), value)
        if got:
            self._series.append((now, total))
            if self._best is None or total > self._best[0]:
                self._best = (total, anon, file_)
        return got

    async def stop(self) -> MemoryResult:
        """Stop sampling and return the probe's result (a final read catches the last moment)."""
        if not self._running:
            raise RuntimeError("sampler not running")
        self._running = False
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        now = time.monotonic()
        self._refresh(now)
        self._tick(now)
        # off the loop: its cost grows with the model (smaps and the region walk cover every mapped page)
        self._model = await asyncio.to_thread(self._read_model_files)
        swap1 = read_swap()
        self._reset_pending = True
        return self._result(swap1)

    def _read_model_files(self) -> tuple[int | None, str]:
        """Resident bytes of the mapped model files over the live tree, or (None, why not)."""
        if not self.model_paths:
            return None, "no model files given to the sampler"
        total = 0
        for pid in sorted(self._pids):
            try:
                total += self.backend.mapped_file_bytes(pid, self.model_paths)
            except OSError as exc:
                return None, f"cannot read the mappings of pid {pid}: {exc}"
        return total, "mapped"

    # ------------------------------------------------------------------------------------ result

    def _result(self, swap1: tuple[int, int, str] | tuple[None, None, str]) -> MemoryResult:
        reasons: dict[str, str] = {}
        sources: dict[str, str] = {}
        b = self.backend
        seen = self._seen
        kernel_ok, peak, source, exact, note = self._peak(reasons)
        if self._error:
            reasons["series"] = self._error
        if self._read_errors:
            reasons["read_errors"] = "; ".join(f"pid {p}: {e}" for p, e in sorted(self._read_errors.items()))
        rate = self._rate_achieved(reasons)
        anon, file_ = self._split(reasons)
        sin, sout = _swap(self._swap0, swap1, sources, reasons)
        fp, res, model = self._components(kernel_ok, seen, sources, reasons)
        if b.peak_of == "footprint" and peak is not None:  # macOS: add the weights the footprint leaves out
            peak, source, exact, note = _with_model_files(peak, source, exact, note, res, model, reasons)

        return MemoryResult(
            peak_bytes=peak,
            source=source,
            exact=exact,
            source_note=note,
            series=list(self._series),
            rate_hz_requested=self.rate_hz,
            rate_hz_achieved=rate,
            sampled_peak_bytes=self._best[0] if self._best else None,
            rss_anon_bytes=anon,
            rss_file_bytes=file_,
            swap_in_bytes=sin,
            swap_out_bytes=sout,
            processes=len(seen),
            split_note=(f"{b.current_source} split at the sampled peak ({self.rate_hz:g} Hz series)" if self._ticking
                        else f"{b.current_source} split read at the probe's start or end, whichever tree total was larger (no series)"),
            null_reasons=reasons,
            footprint_peak_bytes=fp,
            resident_peak_bytes=res,
            model_resident_bytes=model,
            sources=sources,
        )

    def _peak(self, reasons: dict[str, str]) -> tuple[bool, int | None, str, bool, str]:
        """(kernel peak usable, peak, source, exact, note): the kernel's, else the sampled series' max."""
        b = self.backend
        gone = self._vanished & self._seen
        seen = self._seen
        kernel_ok = bool(seen) and all(p in self._peaks for p in seen)
        reset_failed = {p: e for p, e in self._reset_errors.items() if p in seen}
        if not kernel_ok or reset_failed:
            return self._sampled_peak(reasons, reset_failed)
        return True, sum(self._peaks[p] for p in seen), b.source, len(seen) == 1 and not gone, self._kernel_note(gone)

    def _kernel_note(self, gone: set[int]) -> str:
        seen, source = self._seen, self.backend.source
        unreset = {p for p in seen if p not in self._reset_pids and p in self._peaks}
        if len(seen) == 1:
            note = f"kernel peak of the single process since reset ({source}): exact"
        else:
            note = (
                f"sum of {len(seen)} processes' kernel peaks since reset ({source}): an upper bound "
                "on the tree's simultaneous peak"
            )
        if unreset:
            note += f"; {len(unreset)} process(es) joined the tree after the reset (peak since their start)"
        if gone:
            when = f"up to 1/{self.rate_hz:g} s before exit" if self._ticking else "at the probe's start: no series"
            note += f"; {len(gone)} process(es) exited mid-probe, their peak is the last one read ({when})"
        return note

    def _sampled_peak(self, reasons: dict[str, str], reset_failed: dict[int, str]
                      ) -> tuple[bool, int | None, str, bool, str]:
        """`_peak` from the sampled series' max, the kernel peak being unusable."""
        b = self.backend
        why = (
            "; ".join(sorted(set(reset_failed.values())))
            if reset_failed
            else ("no process sampled" if not self._seen else f"{b.source} has no per-process kernel peak")
        )
        sampled = self._best[0] if self._best else None
        if sampled is None:
            reasons["peak_bytes"] = why
        source = "psutil:rss" if b.current_source.startswith("kernel:") else b.current_source
        return False, sampled, source, False, (f"max of the sampled series at {self.rate_hz:g} Hz (misses spikes "
                                               f"between ticks); kernel peak unusable: {why}")

    def _rate_achieved(self, reasons: dict[str, str]) -> float | None:
        if self._periodic >= 2 and self._first_t is not None and self._last_t is not None and self._last_t > self._first_t:
            return (self._periodic - 1) / (self._last_t - self._first_t)
        reasons["rate_hz_achieved"] = (f"fewer than two periodic samples ({self._periodic})" if self._ticking else
                                       "no series: peak only (the kernel peak is exact; the series runs for sustained runs)")
        return None

    def _split(self, reasons: dict[str, str]) -> tuple[int | None, int | None]:
        """(RssAnon, RssFile) at the sampled peak, each null with a reason where the backend has none."""
        b = self.backend
        anon = self._best[1] if self._best else None
        file_ = self._best[2] if self._best else None
        if anon is None:
            reasons["rss_anon_bytes"] = f"{b.current_source} has no RssAnon/RssFile split" if self._seen else "no process sampled"
        if file_ is None:
            reasons["rss_file_bytes"] = reasons.get("rss_anon_bytes", f"{b.current_source} has no RssFile")
        return anon, file_

    def _component(self, name: str, peak_of: str, sampled: dict[int, int], src: str, kernel: int | None,
                   seen: set[int], sources: dict[str, str], reasons: dict[str, str]) -> int | None:
        """One component's peak: the kernel's when it is that kind, else the sampled per-process maxima."""
        b = self.backend
        if b.peak_of == peak_of and kernel is not None:
            sources[name] = src
            return kernel
        if seen and all(p in sampled for p in seen):
            sources[name] = (src if b.peak_of != peak_of else f"{b.current_source} (sampled max)") + (
                "" if self._ticking else " (max of the reads at the probe's start and end: no series)")
            return sum(sampled[p] for p in seen)
        reasons[name] = f"{src}: not available" if seen else "no process sampled"
        return None

    def _components(self, kernel_ok: bool, seen: set[int], sources: dict[str, str], reasons: dict[str, str]
                    ) -> tuple[int | None, int | None, int | None]:
        """(footprint peak, resident peak, model files resident), each with its source or null reason."""
        b = self.backend
        kernel = sum(self._peaks[p] for p in seen) if kernel_ok else None
        out = [self._component(name, peak_of, sampled, src, kernel, seen, sources, reasons)
               for name, peak_of, sampled, src in (
                   ("footprint_peak_bytes", "footprint", self._footprints, b.footprint_source),
                   ("resident_peak_bytes", "resident", self._residents, b.resident_source))]
        model, why = self._model
        if model is None:
            reasons["model_resident_bytes"] = why
        else:
            sources["model_resident_bytes"] = b.mapped_source
        return out[0], out[1], model


def _swap(swap0: tuple[int, int, str] | tuple[None, None, str], swap1: tuple[int, int, str] | tuple[None, None, str],
          sources: dict[str, str], reasons: dict[str, str]) -> tuple[int | None, int | None]:
    """(swapped in, swapped out) over the probe, from the counters at its start and end."""
    (in0, out0, _), (in1, out1, swap_src) = swap0, swap1
    if in0 is not None and out0 is not None and in1 is not None and out1 is not None:
        sources["swap_in_bytes"] = sources["swap_out_bytes"] = swap_src
        return max(0, in1 - in0), max(0, out1 - out0)
    reasons["swap_in_bytes"] = reasons["swap_out_bytes"] = swap_src
    return None, None


def _with_model_files(peak: int, source: str, exact: bool, note: str, res: int | None, model: int | None,
                      reasons: dict[str, str]) -> tuple[int, str, bool, str]:
    """macOS: the footprint peak plus the mapped model files (or, unread, a lower bound)."""
    if model is not None:
        return (peak + model, f"{source}+mapped-model-files", exact,
                note + (f"; plus {model} B of mapped model files resident at the probe's end (clean file-backed "
                        "pages, which the footprint leaves out)"))
    return (max(peak, res or 0), source, False,
            note + (f"; lower bound: max(footprint peak, resident peak), the mapped model files could not be "
                    f"read ({reasons.get('model_resident_bytes')})"))


def _plus(total: int | None, value: int | None) -> int | None:
    """A sum that stays unknown once one term is."""
    return total + value if total is not None and value is not None else None
