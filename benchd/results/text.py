"""What every writer shares: one value formatter, the axes' labels, verdict text, sentences, the machine line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from benchd.schemas import CellVerdict, MachineInfo
from benchd.stats.axes import AXES
from benchd.stats.comparison import ADVICE_MIN_N, tasks_needed
from benchd.stats.notation import fmt_bytes, n_more, plural, ratio_amount, ratio_interval

#: Axis -> (label, unit scale, unit) for people; an axis this table lacks reads as its own name.
AXIS_LABELS: dict[str, tuple[str, float, str]] = {a.name: (a.label, a.scale, a.unit) for a in AXES.values()}
#: Speed axes: where the candidate is faster or slower (`B is 3.7× slower than A at generation`).
SPEED_WHERE = {"gen_tps": "at generation", "prompt_tps": "at prompt processing", "ttft_ms": "to the first token",
               "session_ttft_ms": "to the first token of a warm turn", "ready_s": "to start"}
#: Amount axes: what the candidate uses more or less of (`B uses 2.0× more peak memory than A`).
AMOUNT_WHAT = {"mem_peak_bytes": "peak memory", "j_per_gen_token": "energy per generated token"}
#: A candidate's state in a context, one word each, for every writer (text, Markdown, the page, its legend).
STATE_WORDS = {"frontier": "frontier", "dominated": "dominated", "tied": "tied", "unresolved": "undecided",
               "excluded": "excluded", "trade-off": "trade-off"}


def axis_word(axis: str) -> str:
    """An axis's label without its unit (`generation speed`); an unknown axis reads as its name with spaces."""
    metric, _, param = axis.partition("@")
    if param and metric == "image_ttft_ms":
        return f"time to first token with {param} images"
    if param and metric == "agg_gen_tps":
        return f"generation speed at {plural(int(param), 'parallel stream')}" if param.isdigit() else axis
    return AXIS_LABELS.get(axis, (axis.replace("_", " "), 1.0, ""))[0]


def fmt_value(metric: str, v: object) -> str:
    """A metric's value for people (bytes binary, ratios 3 decimals, else 1 decimal or 3 significant
    digits, trailing zeros kept: `0.110` beside `0.111`); anything not a number reads `null`."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return "null"
    if metric.endswith("_bytes"):
        return fmt_bytes(v)
    if metric in ("eval_pass_rate", "code_pass_rate", "tool_pass_rate", "sustain_ratio"):
        return f"{v:.3f}"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:#.3g}" if isinstance(v, float) else f"{v}"


def fmt_with_unit(axis: str, v: float | None) -> str:
    """`fmt_value` with the axis's unit: `1596.0 tok/s`, `24.4 ms`, `20.15 MiB`, `0.702`, `null`."""
    spec = AXES.get(axis)
    text = fmt_value(axis, v)
    return text if axis.endswith("_bytes") or spec is None or not spec.unit or v is None else f"{text} {spec.unit}"


def margin_words(margin_pct: float, margins: Mapping[str, float]) -> str:
    """`margin ±2 %`, with the axes whose margin differs: `margin ±2 % (gen_tps ±10 %)`."""
    other = ", ".join(f"{k} ±{v:g} %" for k, v in sorted(margins.items()) if v != margin_pct)
    return f"margin ±{margin_pct:g} %" + (f" ({other})" if other else "")


def fmt_or_null(v: float | None, template: str, scale: float = 1) -> str:
    """`template` filled with v / scale (`"{:.1f} ms"`), or `null` when v is None."""
    return "null" if v is None else template.format(v / scale)


def fmt_range(metric: str, low: float | None, high: float | None) -> str:
    """`low–high` (an interval or a spread) in the metric's format, or `null` when either end is missing."""
    return f"{fmt_value(metric, low)}–{fmt_value(metric, high)}" if low is not None and high is not None else "null"


def fmt_median(median: float, low: float | None, high: float | None, n: int) -> str:
    """`1.23 (1.01–1.50, n 3)`, or `1.23 (n 1)`: a median of seconds with its spread and count."""
    spread = f"{low:.2f}–{high:.2f}, " if n > 1 and low is not None and high is not None else ""
    return f"{median:.2f} ({spread}n {n})"


def fmt_counts(counts: Mapping[str, int]) -> str:
    """`wrong_function 3, no_call 1`: commonest first, `-` when empty."""
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) or "-"


def _verdict_word(v: CellVerdict) -> str:
    word: str = v.verdict or "null"
    drift = v.trend.drift_pct if v.trend is not None else None
    if word == "unsteady" and v.ci_half_width_pct is not None:
        return f"unsteady ±{v.ci_half_width_pct:.1f}%"
    if word == "drifting" and drift is not None:
        return f"drifting {drift:+.1f}%"
    return word


def verdict_text(v: CellVerdict | str | None, *, detail: bool = False) -> str:
    """A cell verdict: `steady`, `unsteady ±3.1%`, `drifting -6.2%`, `too few` or `null`; `detail` adds
    `after N probes (reasons)` or `no verdict: why`. A string is already in words."""
    if isinstance(v, str):
        return v
    if v is None or v.verdict is None:
        return f"no verdict: {(v.reason if v is not None else None) or 'not measured'}" if detail else "null"
    word = _verdict_word(v)
    if not detail:
        return word
    return f"{word} after {v.probes_used} probes ({_verdict_reasons(v)})"


def _verdict_reasons(v: CellVerdict) -> str:
    extra = [v.reason]
    if v.throttle_suspects:
        extra.append(f"{v.throttle_suspects} throttle-suspect")
    if v.invalidated:
        extra.append(f"{v.invalidated} invalidated and re-run")
    return "; ".join(x for x in extra if x)


def _os_words(m: MachineInfo) -> str | None:
    return " ".join(x for x in (m.os, m.os_version or m.kernel, m.arch) if x) or None


def machine_line(m: MachineInfo) -> str:
    parts = [m.hardware_model or m.chip or m.cpu_model, f"{m.cores_logical} logical cores" if m.cores_logical else None,
             fmt_bytes(m.memory_bytes, 1) + " RAM" if m.memory_bytes else None, _os_words(m),
             f"power {m.power_source}" if m.power_source else None]
    return ", ".join(p for p in parts if p) or "unknown machine"


class VerdictFields(Protocol):
    """What a sentence reads of one comparison: B against A on `axis`, `ratio` B/A and its interval."""

    @property
    def axis(self) -> str: ...
    @property
    def better(self) -> str: ...
    @property
    def verdict(self) -> str: ...
    @property
    def ratio(self) -> float | None: ...
    @property
    def ci_low(self) -> float | None: ...
    @property
    def ci_high(self) -> float | None: ...
    @property
    def alpha(self) -> float: ...
    @property
    def margin_pct(self) -> float: ...
    @property
    def n_a(self) -> int: ...
    @property
    def n_b(self) -> int: ...
    @property
    def paired(self) -> bool: ...
    @property
    def guard_p(self) -> float | None: ...
    @property
    def method(self) -> str: ...
    @property
    def rounds_to_resolve(self) -> int | None: ...
    @property
    def starts(self) -> int | None: ...
    @property
    def lever(self) -> str | None: ...


def _predicate(axis: str, better: str, amount: str, up: bool, other: str) -> str:
    """`is 3.7× slower than A at generation`, `uses 12 % less peak memory than A`, `'s … is … higher than A's`."""
    metric = axis.partition("@")[0]
    where = SPEED_WHERE.get(axis) or {"image_ttft_ms": f"to the first token with {axis.partition('@')[2]} images",
                                      "agg_gen_tps": f"at {axis.partition('@')[2]} parallel streams"}.get(metric)
    if where is not None:
        fast = up == (better == "higher")
        return f"is {amount} {'faster' if fast else 'slower'} than {other} {where}"
    if axis in AMOUNT_WHAT:
        return f"uses {amount} {'more' if up else 'less'} {AMOUNT_WHAT[axis]} than {other}"
    return f"has a {amount} {'higher' if up else 'lower'} {axis_word(axis)} than {other}"


def _word(axis: str, better: str, up: bool) -> str:
    """`faster`/`slower` on a speed axis, `more`/`less` on an amount, else `higher`/`lower`."""
    metric = axis.partition("@")[0]
    if axis in SPEED_WHERE or metric in ("image_ttft_ms", "agg_gen_tps"):
        return "faster" if up == (better == "higher") else "slower"
    if axis in AMOUNT_WHAT:
        return "more" if up else "less"
    return "higher" if up else "lower"


def _topic(axis: str) -> str:
    """`at generation`, `on peak memory`: what a tie or an open question is about."""
    metric, _, param = axis.partition("@")
    if axis in SPEED_WHERE:
        return SPEED_WHERE[axis]
    if metric == "agg_gen_tps":
        return f"at {param} parallel streams"
    return f"on {axis_word(axis)}"


def _design(v: VerdictFields, r: float, medians: Sequence[float | None] | None) -> list[str]:
    """How the ratio was formed and what the medians say (the table beside it shows medians)."""
    if v.method.startswith(("exact McNemar", "Newcombe")):
        parts = [f"over {plural(v.n_a, 'shared task')}"]
    elif v.paired:
        parts = [f"geometric mean over {plural(v.n_a, 'paired round')}{_starts(v)}"]
    else:
        parts = [f"geometric means of {v.n_a:,} and {plural(v.n_b, 'value')}{_starts(v)}"]
    if medians is not None and len(medians) == 2 and medians[0] and medians[1]:
        m = medians[1] / medians[0]
        said = "medians equal" if m == 1 else f"medians {ratio_amount(m)[0]} {_word(v.axis, v.better, m >= 1)}"
        if said != f"medians {ratio_amount(r)[0]} {_word(v.axis, v.better, r >= 1)}":  # only where they tell another story
            parts.append(said)
    return parts


def _starts(v: VerdictFields) -> str:
    """` on 8 server starts a side`, ` on one server start a side`, or nothing when unknown."""
    n = v.starts
    if n is None:
        return ""
    return " on one server start a side" if n == 1 else f" on {n:,} server starts a side"


def _oriented(v: VerdictFields, ratio: float, subject: str) -> tuple[float, float | None, float | None]:
    """(ratio, CI low, CI high) with the subject's value on top."""
    if subject == "b":
        return ratio, v.ci_low, v.ci_high
    if v.ci_low is None or v.ci_high is None:
        return 1 / ratio, v.ci_low, v.ci_high
    return 1 / ratio, 1 / v.ci_high, 1 / v.ci_low


def _ratio_detail(v: VerdictFields, ratio: tuple[float, float | None, float | None],
                  medians: Sequence[float | None] | None, at: str) -> str:
    r, lo, hi = ratio
    design = _design(v, r, medians)
    if v.method.startswith("exact ratio"):
        design = ["exact, no spread", *design[1:]]
    elif lo is not None and hi is not None:
        design[0] += f", {(1 - v.alpha) * 100:.4g} % CI {ratio_interval(r, lo, hi, signed=v.verdict != 'different')}"
    return "; ".join([*design, at])


def comparison_sentence(v: VerdictFields, a: str, b: str, *, medians: Sequence[float | None] | None = None,
                        subject: str = "b") -> str:
    """One comparison in a sentence whose subject is a candidate: `tiny-mlx is 3.7× slower than tiny-gguf
    at generation (geometric mean over 3 paired rounds, 95 % CI 1.1–13×; medians 3.1×; α = 0.0167)`.
    `v` is B against A; `subject` "a" inverts it; `medians` (A's, B's) adds their ratio where it differs."""
    if subject == "a":
        a, b = b, a
        medians = None if medians is None else list(reversed(medians))
    at = f"α = {v.alpha:.3g}"
    if v.method.startswith(("exact McNemar", "Newcombe")):
        return _outcome_sentence(v, a, b, medians, at)
    if v.ratio is None:
        return f"{b} against {a} {_topic(v.axis)}: {v.verdict} ({at})"
    r, lo, hi = _oriented(v, v.ratio, subject)
    detail = _ratio_detail(v, (r, lo, hi), medians, at)
    if v.verdict == "different":
        amount, up = ratio_amount(r)
        return f"{b} {_predicate(v.axis, v.better, amount, up, a)} ({detail})"
    if v.verdict == "tied":
        return f"{b} and {a} are tied {_topic(v.axis)}: within ±{v.margin_pct:g} % ({detail})"
    amount, up = ratio_amount(r)
    estimate = "" if r == 1 else f"{b} is {amount} {_word(v.axis, v.better, up)} by the estimate, but "
    return f"{b} against {a} {_topic(v.axis)} is unresolved: {estimate}{_open_question(v, lo, hi)} ({detail})"


def _open_question(v: VerdictFields, lo: float | None, hi: float | None) -> str:
    """Why an unresolved comparison is open and what would decide it."""
    if lo is None or hi is None:
        return "its noise is unknown (one value on a side)"
    m = 1 + v.margin_pct / 100
    n = v.rounds_to_resolve
    if lo > m or hi < 1 / m:
        why = (f"the rank test does not confirm it (p = {v.guard_p:.2g}: the values overlap), though the interval "
               f"clears ±{v.margin_pct:g} %")
    else:
        why = f"the interval overlaps ±{v.margin_pct:g} %"
    unit = "shared tasks" if v.method.startswith(("exact McNemar", "Newcombe")) else "rounds"
    more = "" if n is None else n_more(n, unit if v.lever in (None, "rounds", "tasks") else v.lever)
    few = min(v.n_a, v.n_b) < ADVICE_MIN_N  # no advice before the spread is known
    then = ("" if few and n is None else
            f"; at the spread so far about {more} would give an even chance of deciding it"
            if n is not None else
            "; no count up to 10,000 more would decide it" if v.method.startswith(("paired", "Welch")) else "")
    return why + then


def _outcome_sentence(v: VerdictFields, a: str, b: str, rates: Sequence[float | None] | None, at: str) -> str:
    """A pass-rate comparison (per-task outcomes): in percentage points, with both rates when known."""
    pa, pb = (rates[0], rates[1]) if rates is not None and len(rates) == 2 else (None, None)
    tasks = plural(v.n_a, "shared task")
    known = pa is not None and pb is not None
    detail = f"{pb * 100:.0f} % vs {pa * 100:.0f} % over {tasks}" if known else f"over {tasks}"  # type: ignore[operator]
    label = axis_word(v.axis)
    if v.verdict == "different" and known:
        pp = (pb - pa) * 100  # type: ignore[operator]
        return f"{b}'s {label} is {abs(pp):.0f} pp {'higher' if pp > 0 else 'lower'} than {a}'s ({detail}; {at})"
    if v.verdict == "tied":
        return f"{b} and {a} are tied on {label}: within ±{v.margin_pct:g} pp ({detail}; {at})"
    need = tasks_needed(v.margin_pct, v.alpha)
    tie = f"; a tie within ±{v.margin_pct:g} pp needs at least {need}" if v.n_a < need else ""
    return f"{b} against {a} on {label} is {v.verdict}: more shared tasks would decide it{tie} ({detail}; {at})"


class DominanceFields(Protocol):
    """What a sentence reads of one pair's dominance verdict (A = `names[0]`, B = `names[1]`)."""

    @property
    def winner(self) -> str | None: ...
    @property
    def better_on(self) -> list[str]: ...
    @property
    def worse_on(self) -> list[str]: ...
    @property
    def tied_on(self) -> list[str]: ...
    @property
    def not_worse_on(self) -> list[str]: ...
    @property
    def unresolved_on(self) -> list[str]: ...
    @property
    def blocked_on(self) -> list[str]: ...
    @property
    def not_compared(self) -> Mapping[str, object]: ...
    @property
    def status(self) -> str: ...
    @property
    def k(self) -> int: ...
    @property
    def alpha(self) -> float: ...
    @property
    def alpha_axis(self) -> float: ...


def and_list(words: Sequence[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _axes_words(axes: Sequence[str]) -> str:
    return and_list([axis_word(x) for x in axes])


def dominance_sentence(d: DominanceFields, a: str, b: str) -> str:
    """One pair's Pareto relation, candidates as subjects: `A dominates B: better on generation speed;
    tied on peak memory (α = 0.05 over 3 axes, 0.0167 each)`."""
    at = (f"α = {d.alpha:.3g} over {plural(d.k, 'axis', 'axes')}, {d.alpha_axis:.3g} each" if d.k else
          f"α = {d.alpha:.3g}, no axis to compare")
    return f"{_relation_text(d, a, b)} ({at})"


def _held_words(d: DominanceFields) -> str:
    return and_list([axis_word(x) for x in d.unresolved_on]
                     + [f"{axis_word(x)} (not compared at this size)" for x in d.blocked_on])


def _not_worse_words(d: DominanceFields, lead: str) -> str:
    return f"{lead}not worse on {_axes_words(d.not_worse_on)} (one-sided, α = {d.alpha:.3g})" if d.not_worse_on else ""


def _winner_text(d: DominanceFields, w: str, loser: str) -> str:
    text = f"{w} dominates {loser}: better on {_axes_words(d.better_on)}"
    text += f"; tied on {_axes_words(d.tied_on)}" if d.tied_on else ""
    text += _not_worse_words(d, "; ")
    left_out = [x for x in d.not_compared if x not in (*d.better_on, *d.tied_on)]  # a different one still counts
    return text + (f"; not compared at this size: {_axes_words(left_out)}" if left_out else "")


def _relation_text(d: DominanceFields, a: str, b: str) -> str:
    if d.winner is not None:
        return _winner_text(d, *((a, b) if d.winner == "a" else (b, a)))
    if d.status == "undecided":  # the wins so far (one side's only, or it would be a trade-off) before what holds
        won = [f"{w} is better on {_axes_words(on)}{_not_worse_words(d, ' and ')}; "
               for w, on in ((a, d.better_on), (b, d.worse_on)) if on]
        return f"neither {a} nor {b} is dominated yet: {''.join(won)}unresolved on {_held_words(d)}"
    if d.better_on and d.worse_on:  # without a winner: A's wins and B's wins
        return f"{a} is better on {_axes_words(d.better_on)}, {b} on {_axes_words(d.worse_on)}: a trade-off"
    if not d.k:
        return f"{a} and {b} share no axis to compare"
    if d.status == "equivalent" and len(d.tied_on) < d.k:
        return f"{a} and {b} are not worse than each other on any axis compared: neither dominates"
    return f"{a} and {b} are tied on every axis compared: neither dominates"
