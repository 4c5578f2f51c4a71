"""The axis table: every axis a user can choose on; a new axis is one `register_axis` call.
Reasons and facts: docs/measuring.md#the-axis-table."""

from __future__ import annotations

from typing import Literal, NamedTuple

Direction = Literal["higher", "lower"]
#: Where an axis's samples come from: probe rows, per-task outcomes, per candidate, or rows beside the probes.
Source = Literal["probe", "outcomes", "candidate", "cell"]


class Axis(NamedTuple):
    """An axis: direction, words, Pareto / `compare` use, label and unit (values × `scale`), margin (% of the
    ratio; pass rates: pp), `core`, and where its samples come from."""

    name: str
    better: Direction
    words: tuple[str, str]
    pareto: bool
    compare: bool
    outcomes: bool
    label: str = ""
    unit: str = ""
    scale: float = 1.0
    margin_pct: float = 2.0
    core: bool = False
    source: Source = "probe"
    #: A counter (bytes): zero spread on both sides is an exact value, not rounding.
    counter: bool = False
    #: What adds samples to this axis (None: nothing in the sweep does).
    lever: str | None = "rounds"


#: The axis table, in display order.
AXES: dict[str, Axis] = {}


def register_axis(name: str, better: Direction, *, words: tuple[str, str] = ("higher", "lower"),
                  pareto: bool = True, compare: bool = True, outcomes: bool = False, label: str = "",
                  unit: str = "", scale: float = 1.0, margin_pct: float | None = None, core: bool = False,
                  source: Source | None = None, counter: bool = False, lever: str | None = "") -> Axis:
    """Add (or replace) an axis in the table; returns it. The margin defaults to 2 % (5 pp for outcomes)."""
    if better not in ("higher", "lower"):
        raise ValueError(f"axis {name}: better must be 'higher' or 'lower', not {better!r}")
    margin = margin_pct if margin_pct is not None else (5.0 if outcomes else 2.0)
    src: Source = source or ("outcomes" if outcomes else "probe")
    lev = lever if lever != "" else ("tasks" if outcomes else "rounds")
    AXES[name] = axis = Axis(name, better, words, pareto, compare, outcomes, label or name.replace("_", " "),
                             unit, scale, margin, core, src, counter, lev)
    return axis


_SPEED = ("faster", "slower")
register_axis("gen_tps", "higher", words=_SPEED, label="generation speed", unit="tok/s", core=True)
register_axis("prompt_tps", "higher", words=_SPEED, label="prompt processing", unit="tok/s", core=True)
register_axis("ttft_ms", "lower", words=("slower", "faster"), label="time to first token", unit="ms", core=True)
register_axis("mem_peak_bytes", "lower", words=("larger", "smaller"), label="peak memory", unit="MiB",
              scale=1 / (1 << 20), core=True, counter=True)
register_axis("eval_pass_rate", "higher", compare=False, outcomes=True, label="eval pass rate", core=True)
register_axis("code_pass_rate", "higher", compare=False, outcomes=True, label="HumanEval pass rate")
register_axis("tool_pass_rate", "higher", compare=False, outcomes=True, label="BFCL tool-call pass rate")
#: Public eval suite -> the axis it is compared on.
SUITE_AXES: dict[str, str] = {"code": "code_pass_rate", "tools": "tool_pass_rate"}
register_axis("sustain_ratio", "higher", compare=False, label="sustain ratio", core=True, margin_pct=10.0,
              source="candidate", lever="[sustained] runs")  # why 10 %: docs/measuring.md#the-one-comparison
register_axis("j_per_gen_token", "lower", words=("more energy per token", "less energy per token"),
              label="energy per generated token", unit="J", core=True)
#: Time to ready over a candidate's warm starts (per candidate: `compare_ready`; cold starts apart).
register_axis("ready_s", "lower", words=("slower to start", "faster to start"), compare=False,
              label="time to ready", unit="s", margin_pct=10.0, source="candidate",
              lever="[ready] starts")
#: KL divergence against `[kld] reference`, per candidate (docs/kld.md#the-kld-axis).
register_axis("kld", "lower", words=("more quality lost", "less quality lost"), compare=False,
              label="KL divergence vs the reference", unit="nats", margin_pct=10.0, source="candidate",
              lever="chunks ([kld] tokens or a longer corpus)")
#: Session probes: the median TTFT of turns >= 2 on a warm prompt cache.
register_axis("session_ttft_ms", "lower", words=("slower", "faster"), label="warm-turn time to first token", unit="ms",
              source="cell")
#: Parallel requests: the aggregate gen tok/s of N simultaneous streams, one axis per level ("agg_gen_tps@N").
LEVEL_AXIS_PREFIX = "agg_gen_tps@"


#: Image probes: the median TTFT per resolution ("image_ttft_ms@512x512"), one axis each.
IMAGE_AXIS_PREFIX = "image_ttft_ms@"


def image_axis(width: int, height: int) -> Axis:
    """The axis of one image resolution (registered the first time it is seen)."""
    name = f"{IMAGE_AXIS_PREFIX}{width}x{height}"
    return AXES.get(name) or register_axis(name, "lower", words=("slower", "faster"), unit="ms", source="cell")


def level_axis(n: int) -> Axis:
    """The axis of concurrency level `n` (registered the first time a level is seen)."""
    name = f"{LEVEL_AXIS_PREFIX}{n}"
    return AXES.get(name) or register_axis(name, "higher", words=_SPEED, unit="tok/s", source="cell")


def pareto_axes() -> list[Axis]:
    return [a for a in AXES.values() if a.pareto]


def core_axes() -> list[Axis]:
    """The axes every Pareto view names (skipped with why where unmeasured), in display order."""
    return [a for a in AXES.values() if a.pareto and a.core]


def probe_axes() -> list[Axis]:
    """The core axes a probe row carries (what the stop rule and the view compare per round)."""
    return [a for a in core_axes() if a.source == "probe"]


def compare_metrics() -> list[Axis]:
    return [a for a in AXES.values() if a.compare]


def direction(axis: str) -> Direction:
    """The axis's better direction ('higher' for an axis the table lacks)."""
    return AXES[axis].better if axis in AXES else "higher"


def margin(axis: str, overrides: dict[str, float] | None = None) -> float:
    """The axis's margin: the sweep's override, else the table's (2 % for an axis the table lacks)."""
    if overrides and axis in overrides:
        return overrides[axis]
    return AXES[axis].margin_pct if axis in AXES else 2.0
