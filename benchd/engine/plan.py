"""The measurement design of a sweep: in which order the probes visit the candidates (pure, no I/O;
a resumed job draws the same orders again). docs/measuring.md#measurement-design."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from benchd.schemas import ProbePlan, Sweep

#: Rounds (server starts per candidate and context) a blocked sweep runs when `rounds` is not given.
DEFAULT_ROUNDS = 3


def job_seed(job: str) -> int:
    """The seed of a job's round orders (recorded in the runbook): stable across resumes."""
    return int(hashlib.sha256(job.encode()).hexdigest()[:8], 16)


def round_order(candidates: Sequence[str], *, seed: int, context: int, round_: int) -> list[str]:
    """The visiting order of one interleaved round: a fresh shuffle, the same on every resume."""
    order = list(candidates)
    random.Random(f"{seed}/{context}/{round_}").shuffle(order)
    return order


def block_order(candidates: Sequence[str], round_: int) -> list[str]:
    """The order of one blocked round: the sweep's order on even rounds, reversed on odd ones."""
    return list(candidates) if round_ % 2 == 0 else list(reversed(candidates))


def requested_order(sweep: Sweep) -> str:
    """The order the sweep asks for (interleaved when it does not say)."""
    return sweep.order or "interleaved"


@dataclass(frozen=True)
class RoundPlan:
    """How many rounds a context runs (`min_rounds`..`max_rounds`), `per_round` probes each, `stop` the rule."""

    order: str
    min_rounds: int
    max_rounds: int
    per_round: int
    stop: str
    #: A fixed count spread over blocked rounds: this many probes in all per candidate and context.
    total: int | None = None

    def block_size(self, round_: int) -> int:
        """Probes per candidate in round `round_` (a fixed `total` spread evenly, earlier rounds first)."""
        if self.total is None:
            return self.per_round
        return self.total // self.min_rounds + (1 if round_ < self.total % self.min_rounds else 0)

    def text(self) -> str:
        """The plan as a range, for `validate` and `tail`."""
        span = f"{self.min_rounds}" if self.min_rounds == self.max_rounds else f"{self.min_rounds}-{self.max_rounds}"
        unit = "probe" if self.per_round == 1 else f"block of {self.per_round} probes"
        return f"{span} rounds (one {unit} per candidate each); {self.stop}"


def round_plan(sweep: Sweep, order: str) -> RoundPlan:
    """The rounds of one context under `order` (sequential: one "round" per probe of each candidate)."""
    plan = sweep.probe_plan()
    many = len(sweep.candidates) > 1
    if order == "blocked":
        rounds = sweep.rounds or DEFAULT_ROUNDS
        per = max(1, math.ceil(plan.min / rounds))
        if not plan.adaptive:
            starts = min(rounds, plan.min)
            return RoundPlan(order, rounds, rounds, per, f"fixed: {plan.min} probes over {starts} server starts "
                             f"per candidate and context", total=plan.min)
        top = max(rounds, math.ceil(plan.max / per))
        stop = (f"after {rounds}, until every pair's {plan.metric} verdict is resolved (different or tied)"
                if many else f"{rounds} blocks, then until the CI of the median is within ±{plan.target_ci_pct:g} %")
        return RoundPlan(order, rounds, top, per, stop)
    if not plan.adaptive:
        return RoundPlan(order, plan.min, plan.max, 1, f"fixed: {plan.min} probes")
    if many and order == "interleaved":
        stop = f"after {plan.min}, until every pair's {plan.metric} verdict is resolved (different or tied)"
    else:
        stop = f"after {plan.min}, until the CI of the median is within ±{plan.target_ci_pct:g} %"
    return RoundPlan(order, plan.min, plan.max, 1, stop)


def design_text(sweep: Sweep) -> str:
    """The design as `validate` shows it: the order (and its fallback) and the rounds as a range."""
    order = requested_order(sweep)
    how = "asked for" if sweep.order else "the default"
    fallback = (", blocked instead if the servers do not fit in memory side by side"
                if order == "interleaved" and len(sweep.candidates) > 1 else "")
    shown = "sequential" if len(sweep.candidates) == 1 else order
    if order == "sequential":
        return "order sequential (asked for): one candidate after the other; comparisons not drift-protected"
    if order == "interleaved" and sweep.starts_mode() == "round":
        fallback = ""  # one server at a time: nothing has to fit side by side
    return f"order {order} ({how}{fallback}): {round_plan(sweep, shown).text()}{starts_text(sweep)}"


def starts_per_context(sweep: Sweep, order: str) -> tuple[int, int]:
    """(fewest, most) server starts per candidate and context the rounds make."""
    rp = round_plan(sweep, order)
    if order == "blocked":
        plan = sweep.probe_plan()
        return (min(rp.min_rounds, plan.min), min(rp.min_rounds, plan.min)) if not plan.adaptive else (
            rp.min_rounds, rp.max_rounds)
    if order == "interleaved" and sweep.starts_mode() == "round":
        return rp.min_rounds, rp.max_rounds
    return 1, 1


def starts_text(sweep: Sweep) -> str:
    """`; a fresh server start per candidate every round (3-12 starts per candidate and context)`."""
    order = requested_order(sweep)
    if order != "interleaved":
        return ""
    if sweep.starts_mode() == "once":
        return "; one server start per candidate, resident for every round (its rounds share that start)"
    lo, hi = starts_per_context(sweep, order)
    span = f"{lo}" if lo == hi else f"{lo}-{hi}"
    return f"; a fresh server start per candidate every round ({span} starts per candidate and context)"


@dataclass(frozen=True)
class _Asked:
    """What the design notes read of a sweep."""

    sweep: Sweep
    order: str
    plan: ProbePlan
    rounds: int


#: (applies, note) pairs: what `validate` says about a design that is not an error.
_DESIGN_NOTES: tuple[tuple[Callable[[_Asked], bool], Callable[[_Asked], str]], ...] = (
    (lambda a: len(a.sweep.candidates) == 1 and a.order != "sequential",
     lambda a: f"order {a.order} with one candidate: nothing to interleave, the probes run as in sequential"),
    (lambda a: a.order == "blocked" and a.rounds == 2,
     lambda a: "rounds = 2: two block medians per candidate can almost never be called different "
               "(the signed-rank guard needs more pairs); use 3 or more"),
    (lambda a: a.order == "blocked" and not a.plan.adaptive and a.plan.min < a.rounds,
     lambda a: f"probes = {a.plan.min} < rounds = {a.rounds}: only {a.plan.min} blocks (server starts) per "
               "candidate and context"),
    (lambda a: a.sweep.starts is not None and a.order != "interleaved",
     lambda a: f"starts = \"{a.sweep.starts}\" is used by order \"interleaved\" only (blocked starts once per "
               "block, sequential once per server group)"),
    (lambda a: a.order == "interleaved" and a.sweep.starts_mode() == "once" and len(a.sweep.candidates) > 1,
     lambda a: "starts = \"once\": every round of a candidate shares one server start, so a pair's verdict "
               "rests on one start a side (a start's luck under load reads as the candidate's speed)"),
    (lambda a: a.sweep.rounds is not None and a.order != "blocked",
     lambda a: f"rounds = {a.sweep.rounds} is used by order \"blocked\" only (this sweep runs {a.order})"),
)


def plan_problems(sweep: Sweep) -> list[str]:
    """What `validate` says about the design that is not an error."""
    asked = _Asked(sweep, requested_order(sweep), sweep.probe_plan(), sweep.rounds or DEFAULT_ROUNDS)
    return [note(asked) for applies, note in _DESIGN_NOTES if applies(asked)]
