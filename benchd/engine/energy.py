"""Per-probe energy figures from counter samples at the phase boundaries, and per-window energy of a
sustained run; each figure names its source or is null with the reason (docs/measuring.md#energy-per-probe)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from benchd.probe_result import ProbeResult
from benchd.schemas import ENERGY_FIELDS
from benchd.sensors.energy.reader import Delta, EnergyReader, NullReader, Sample, describe
from benchd.servers.runtimes.base import Normalized

#: A baseline over less than this is a guess, not a measurement.
MIN_IDLE_S = 0.5
#: Above this share of the stream in the first read, the prompt/generation boundary is not observable.
BUNCHED_MAX = 0.25


class PhaseMarks:
    """Counter samples at named instants; the probe client calls it with "start", "first", "end"."""

    def __init__(self, reader: EnergyReader) -> None:
        self.reader = reader
        self.samples: dict[str, Sample] = {}
        self.missing: str | None = None  # why a boundary sample was dropped after the fact

    def __call__(self, name: str) -> None:
        if name not in self.samples:
            self.samples[name] = self.reader.sample()


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(x, digits)


def _phase(reader: EnergyReader, marks: PhaseMarks, a: str, b: str) -> Delta | str:
    if a not in marks.samples or b not in marks.samples:
        missing = "the first token" if "first" not in marks.samples else "the end of the stream"
        return marks.missing or f"no counter sample at {missing} (the stream never reached it)"
    d = reader.delta(marks.samples[a], marks.samples[b])
    return d if d.total_j is not None and not still(d) else _why(d)


def still(d: Delta) -> bool:
    """A package never draws 0 W: a counter that did not move over a phase was not updated within it."""
    return d.total_j == 0 and d.seconds > 0


def _why(d: Delta) -> str:
    if d.total_j is None:
        return d.reason or "no total"
    return (f"the counter did not move over {d.seconds * 1000:.1f} ms (the phase is shorter than the "
            "counter's update interval)")


def probe_energy(
    reader: EnergyReader,
    marks: PhaseMarks,
    idle: Delta | None,
    prompt_tokens: int | None,
    gen_tokens: int | None,
) -> tuple[dict[str, object], dict[str, str], dict[str, str]]:
    """(row fields, sources, null reasons) for one probe's energy."""
    if not reader.available:
        why = f"energy not measured: {reader.reason}"
        return dict.fromkeys(ENERGY_FIELDS), {}, dict.fromkeys(ENERGY_FIELDS, why)
    f = _Figures(reader.source)
    f.baseline(idle)
    for phase, (a, b), tokens, per_tok in (("prompt", ("start", "first"), prompt_tokens, "prompt tokens"),
                                           ("gen", ("first", "end"), None if gen_tokens is None else gen_tokens - 1,
                                            "completion tokens - 1")):
        f.phase(phase, _phase(reader, marks, a, b), tokens, per_tok)
    f.fields["energy_channels"] = f.channels or None
    if f.channels:
        f.sources["energy_channels"] = f"{f.src}; joules per channel and phase, idle watts per channel"
    return f.fields, f.sources, f.reasons


def _no_baseline(idle: Delta | None) -> str | None:
    """Why `idle` cannot be the idle baseline (None when it can)."""
    if idle is None:
        return "no cooldown sample"
    if idle.total_j is None:
        return _why(idle)
    if idle.seconds < MIN_IDLE_S:
        return f"the cooldown lasted {idle.seconds:.2f} s, under the {MIN_IDLE_S:g} s a baseline needs"
    return _why(idle) if still(idle) else None


class _Figures:
    """One probe's energy fields, sources, null reasons and per-channel joules, filled phase by phase."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.fields: dict[str, object] = dict.fromkeys(ENERGY_FIELDS)
        self.sources = {k: src for k in ("energy_prompt_j", "energy_gen_j", "prompt_watts", "gen_watts")}
        self.reasons: dict[str, str] = {}
        self.channels: dict[str, dict[str, float]] = {}
        self.base_w: float | None = None

    def baseline(self, idle: Delta | None) -> None:
        why = _no_baseline(idle)
        if why is not None:
            self.reasons.update({k: f"no idle baseline: {why}" for k in ENERGY_FIELDS
                                 if k == "idle_watts" or k.endswith("_above_idle")})
            return
        assert idle is not None
        self.base_w = idle.watts
        self.fields["idle_watts"] = _round(self.base_w)
        self.sources["idle_watts"] = f"{self.src}; mean over the {idle.seconds:.1f} s cooldown before the probe"
        self.channels["idle_watts"] = {k: round(v / idle.seconds, 6) for k, v in idle.channels.items()}

    def phase(self, phase: str, got: Delta | str, tokens: int | None, per_tok: str) -> None:
        names = (f"energy_{phase}_j", f"{phase}_watts", f"j_per_{phase}_token")
        above = (f"{phase}_watts_above_idle", f"j_per_{phase}_token_above_idle")
        if isinstance(got, str):
            for k in (*names, *above):
                self.reasons.setdefault(k, got)
            return
        assert got.total_j is not None
        self.channels[phase] = {k: round(v, 6) for k, v in got.channels.items()}
        self.fields[names[0]] = _round(got.total_j)
        self.fields[names[1]] = _round(got.watts)
        if self.base_w is not None and got.watts is not None:
            self.fields[above[0]] = _round(got.watts - self.base_w)
        self._per_token(phase, got, tokens, per_tok)

    def _per_token(self, phase: str, got: Delta, tokens: int | None, per_tok: str) -> None:
        names = (f"j_per_{phase}_token", f"j_per_{phase}_token_above_idle")
        if not tokens or tokens <= 0:
            for k in names:
                self.reasons[k] = f"no {per_tok} to divide by ({tokens})"
            return
        assert got.total_j is not None
        self.fields[names[0]] = _round(got.total_j / tokens, 9)
        self.sources[names[0]] = f"{self.src}; {phase} phase J / {per_tok}"
        if self.base_w is not None:
            self.fields[names[1]] = _round((got.total_j - self.base_w * got.seconds) / tokens, 9)
            self.sources[names[1]] = f"{self.src}; ({phase} J - idle W × {phase} s) / {per_tok}"


class EnergyTrace:
    """Counter samples at the reader's `trace_hz`, from an asyncio task, while a sustained generation runs."""

    def __init__(self, reader: EnergyReader, hz: float | None = None) -> None:
        self.reader, self.period = reader, 1.0 / (hz or reader.trace_hz)
        self.samples: list[Sample] = []
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.samples.append(self.reader.sample())
            await asyncio.sleep(self.period)

    def start(self) -> None:
        if self.reader.available:
            self.task = asyncio.create_task(self._run())

    def stop(self) -> None:
        """Cancel the sampling task (also when the probe itself was cancelled) and take the last sample."""
        if self.task is not None:
            self.task.cancel()
            self.task = None
            self.samples.append(self.reader.sample())


def window_energy(
    reader: EnergyReader, samples: Sequence[Sample], chunk_times: Sequence[float], window: int, period_s: float
) -> tuple[list[float] | None, str]:
    """Joules per window of `window` tokens (those of `metrics.sustained_windows`) and their source, or
    None and why (a window shorter than two sampling periods is not measured)."""
    if not reader.available:
        return None, f"energy not measured: {reader.reason}"
    if len(samples) < 2:
        return None, "fewer than two counter samples during the run"
    cum = _cumulative_j(reader, samples)
    if isinstance(cum, str):
        return None, cum
    ts = [s.t for s in samples]
    bounds = _window_bounds(chunk_times, window)
    if len(bounds) < 2:
        return None, f"{len(chunk_times)} content chunks: not one full window of {window} tokens"
    shortest = min(b - a for a, b in pairwise(bounds))
    if shortest < 2 * period_s:
        return None, (f"a window lasted {shortest * 1000:.0f} ms, under two counter sampling periods "
                      f"({2 * period_s * 1000:.0f} ms): too short to split energy by window")
    out = [round(_energy_at(ts, cum, b) - _energy_at(ts, cum, a), 6) for a, b in pairwise(bounds)]
    return out, f"{reader.source}; counter sampled every {period_s * 1000:.0f} ms, interpolated at window ends"


def _window_bounds(chunk_times: Sequence[float], window: int) -> list[float]:
    """The first chunk's time, then the time of each chunk that completes a window."""
    if not chunk_times:
        return []
    return [chunk_times[0]] + [chunk_times[i] for i in range(window - 1, len(chunk_times), window)]


def _energy_at(ts: Sequence[float], cum: Sequence[float], t: float) -> float:
    """Cumulative joules at `t`, interpolated linearly between samples."""
    i = max(1, min(len(ts) - 1, next((k for k, x in enumerate(ts) if x >= t), len(ts) - 1)))
    t0, t1 = ts[i - 1], ts[i]
    return cum[i - 1] + (cum[i] - cum[i - 1]) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)


def _cumulative_j(reader: EnergyReader, samples: Sequence[Sample]) -> list[float] | str:
    """Joules since the first sample at each sample, or why not."""
    cum = [0.0]
    for a, b in pairwise(samples):
        d = reader.delta(a, b)
        if d.total_j is None:
            return d.reason or "no total"
        cum.append(cum[-1] + d.total_j)
    return cum


def row_energy(
    reader: EnergyReader, marks: PhaseMarks, idle: Delta | None, prompt_tokens: int | None, gen_tokens: int | None,
    trace: EnergyTrace | None = None, chunk_times: Sequence[float] = (), window: int = 0,
) -> tuple[dict[str, object], dict[str, str], dict[str, str]]:
    """Everything energy puts in a row: the phase figures, and `window_j` for a sustained run (docs/metrics.md)."""
    late = _late_tokens(reader, marks, chunk_times, gen_tokens)
    fields, sources, reasons = probe_energy(reader, marks, idle, prompt_tokens,
                                            None if gen_tokens is None else gen_tokens - late)
    for name in ("j_per_gen_token", "j_per_gen_token_above_idle") if late else ():
        if name in sources:
            sources[name] += f" (the first read carried {late + 1} tokens: over completion tokens - {late + 1})"
    if trace is not None:
        windows, text = window_energy(reader, trace.samples, chunk_times, window, trace.period)
        fields["window_j"] = windows
        (reasons if windows is None else sources)["window_j"] = text
    return fields, sources, reasons


def _late_tokens(reader: EnergyReader, marks: PhaseMarks, chunk_times: Sequence[float], gen_tokens: int | None) -> int:
    """Tokens of the first read after the first (out of the generation phase); drops the first mark if bunched."""
    k = sum(1 for t in chunk_times if t == chunk_times[0]) if chunk_times else 0
    if k > 1 and reader.available and k > BUNCHED_MAX * len(chunk_times):
        marks.samples.pop("first", None)
        marks.missing = (f"the first token arrived in one read with {k - 1} more of {len(chunk_times)}, so the "
                         "first-token boundary is too late to split energy into prompt and generation")
    return k - 1 if k > 1 and gen_tokens is not None and "first" in marks.samples else 0


@dataclass(frozen=True)
class EnergyFigures:
    """What energy adds to one row: fields, their sources, and the reasons of the null ones."""

    fields: dict[str, object]
    sources: dict[str, str]
    reasons: dict[str, str]


class ProbeEnergy:
    """One probe's recording: `with` it around the request, pass `client_marks` to the client (None without a
    counter: nothing is read in the stream), then `row()`."""

    def __init__(self, reader: EnergyReader, idle: Delta | None, sustained: bool) -> None:
        self.reader, self.idle = reader, idle
        self.marks = PhaseMarks(reader)
        self.client_marks = self.marks if reader.available else None
        self.trace = EnergyTrace(reader) if sustained else None

    def __enter__(self) -> ProbeEnergy:
        if self.trace is not None:
            self.trace.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.trace is not None:  # also when the probe was cancelled: the task must not outlive it
            self.trace.stop()

    def row(self, norm: Normalized, result: ProbeResult, window: int) -> EnergyFigures:
        """The figures, from the adapter's token counts and the stream's chunk times."""
        return EnergyFigures(*row_energy(self.reader, self.marks, self.idle, norm.prompt_tokens, norm.gen_tokens,
                                         self.trace, result.chunk_times, window))


class EnergySession:
    """The job's energy counter: reopened at every server start, sampled around each cooldown (idle baseline)."""

    def __init__(self, open_reader: Callable[[], EnergyReader] | None = None) -> None:
        from benchd.sensors.energy.choose import open_reader as default

        self.open_reader = open_reader or default
        self.reader: EnergyReader = NullReader("no server started yet")

    def restart(self) -> dict[str, object]:
        """Reopen the reader; returns its description for the `server_ready` event (runbook provenance)."""
        self.reader.close()
        self.reader = self.open_reader()
        return describe(self.reader)

    def close(self) -> None:
        self.reader.close()

    def sample(self) -> Sample | None:
        """A counter sample (None without a counter): the idle baseline's start (the cooldown), closed by `since`."""
        return self.reader.sample() if self.reader.available else None

    def since(self, start: Sample | None) -> Delta | None:
        """The energy from `start` to now (the cooldown's idle baseline)."""
        return None if start is None else self.reader.delta(start, self.reader.sample())

    def probe(self, idle: Delta | None, sustained: bool) -> ProbeEnergy:
        return ProbeEnergy(self.reader, idle, sustained)
