"""The daemon commands: ping, validate (offline), submit, jobs, status, tail, cancel.

Imports stay light at module level (click and the exit codes): `benchctl ping` loads only the stdlib
socket client. Heavier pieces (msgspec schemas, rich, runtime adapters) are imported inside the
command that needs them.

Exit codes (the shared contract): 0 ok / job succeeded, 1 job failed, 2 bad input, 3 daemon
unreachable (one line on how to start it), 4 job cancelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from benchctl import exitcodes
from benchctl.commands.common import (
    _call,
    _client,
    _fail,
    _print_json,
    config,
    decoded,
    eta_text,
    json_option,
    planned_text,
    progress_of,
    socket_option,
    state_dir_option,
)
from benchd.stats.notation import fmt_duration, plural

if TYPE_CHECKING:
    from benchd.schemas import Job

# --------------------------------------------------------------------------------------------- ping


@click.command()
@socket_option
@json_option
def ping(socket_path: str | None, as_json: bool) -> None:
    """Check that benchd answers on its socket."""
    health = _call(lambda: _client(socket_path).health())  # read raw: no schema import on the fast path
    if as_json:
        _print_json(health)
        return
    running = f", running {health['running_job']}" if health.get("running_job") else ""
    warn = f"; STORE ERROR: {health['store_error']}" if health.get("store_error") else ""
    click.echo(f"benchd {health['version']} pid {health['pid']} up {fmt_duration(health['uptime_s'])}, "
               f"{health['queue_depth']} queued{running}{warn}")


# ----------------------------------------------------------------------------------------- validate

#: Planning assumptions for `validate`'s duration estimate (NOT measurements; override with the flags).
ASSUMED_GEN_TPS = 20.0
ASSUMED_PROMPT_TPS = 200.0
ASSUMED_STARTUP_S = 10.0


def check_sweep(path: str) -> tuple[Any, list[str]]:
    """Load the file, expand its candidate matrices and check each binary and model exists; returns
    (the expanded sweep or None, problems). See `check_sweep_matrices`."""
    sweep, problems, _ = check_sweep_matrices(path)
    return sweep, problems


def check_sweep_matrices(path: str) -> tuple[Any, list[str], list[Any]]:
    """(the expanded sweep or None, problems, one `matrix.Expansion` per candidate with a matrix).

    Every problem found is listed, not the first only: when the file does not decode, each field and
    each candidate is checked on its own, and the candidates that decode still get their path, binary
    and adapter checks. The sweep is None then (nothing to plan or submit), as it is when a matrix is
    refused. A matrix's candidates are checked under their base's index in the file."""
    import msgspec

    from benchctl.problemtext import field_name
    from benchctl.sweepfile import read_sweep_dict, schema_problems
    from benchd.config import Config
    from benchd.engine.sweepcheck import expand, local_problems
    from benchd.errors import BenchdError
    from benchd.schemas import Sweep

    data = read_sweep_dict(path)
    problems: list[str] = []
    try:
        try:
            sweep: Any = msgspec.convert(data, Sweep)
            candidates = list(enumerate(sweep.candidates))
        except msgspec.ValidationError:
            sweep = None
            found, candidates = schema_problems(data)
            problems += [f"{path}: {p}" for p in found]
    except RecursionError as exc:
        raise BenchdError("malformed", f"{path}: values nested too deeply", None) from exc
    base = Sweep(name="x", contexts=[1], gen_tokens=1, candidates=[c for _, c in candidates] or [])  \
        if sweep is None and candidates and len({c.id for _, c in candidates}) == len(candidates) else sweep
    got = expand(base) if base is not None else None
    matrices = got.matrices if got is not None else []
    if got is not None and got.problems:
        problems += [f"{path}: {field_name(p.field or '$', data)}: {p.message}" for p in got.problems]
        sweep = None
    elif got is not None:
        index = {c.id: i for i, c in candidates}
        candidates = [(index[c.from_matrix.base if c.from_matrix else c.id], c) for c in got.sweep.candidates]
        sweep = got.sweep if sweep is not None else None
    problems += [f"{path}: {p}" for p in local_problems(candidates, Config.resolve().cache_dir, sweep)]
    return sweep, problems, matrices


def plan_warnings(sweep: Any) -> list[str]:
    """What the probe plan guarantees cannot be answered: a fixed probe count below the cell verdict's
    minimum leaves every cell 'too few' (and every comparison short of its noise)."""
    from benchd.stats.cells import CI_MIN_N

    pp = sweep.probe_plan()
    if pp.max >= CI_MIN_N:
        return []
    return [f"probes = {pp.max}: every cell's verdict will be 'too few' (the 95 % CI of a cell's median needs "
            f"{CI_MIN_N} ok probes); set probes = \"auto\" or at least {CI_MIN_N}"]


def _matrix_json(matrices: list[Any], sweep: Any = None) -> list[dict[str, Any]]:
    by_id = {c.id: c for c in sweep.candidates} if sweep is not None else {}
    return [{"base": m.base, "keys": m.keys, "combinations": m.combinations,
             "candidates": [{"id": i, "values": by_id[i].from_matrix.values, "args": by_id[i].from_matrix.args}
                            if i in by_id else {"id": i} for i in m.ids],
             "left_out": [{"id": i, "why": why} for i, why in m.left_out]} for m in matrices]


def _racing_text(sweep: Any) -> str:
    """Whether the sweep races (docs/measuring.md#racing) and why."""
    from benchd.engine.plan import requested_order, round_plan
    from benchd.engine.racing import race_looks
    from benchd.schemas.sweep import RACING_DEFAULT_ABOVE
    from benchd.stats.stop import looks

    asked = "asked for" if sweep.racing is not None else f"the default with {plural(len(sweep.candidates), 'candidate')}"
    if not sweep.racing_on():
        if sweep.racing and (len(sweep.candidates) < 2 or sweep.order == "sequential"):
            return f"racing off (asked for, but {'one candidate' if len(sweep.candidates) < 2 else 'order sequential'} "\
                   "has no rounds to look at): every candidate runs every probe"
        unasked = "" if sweep.racing is not None else " with adaptive probes"
        return f"racing off ({asked}; on above {RACING_DEFAULT_ABOVE} candidates{unasked}): every candidate runs every round"
    at = ", ".join(map(str, looks(*race_looks(sweep, round_plan(sweep, requested_order(sweep))))))
    fixed = "" if sweep.probe_plan().adaptive else f"; the survivors run all {sweep.probe_plan().min} probes"
    return (f"racing on ({asked}): at the looks after rounds {at} a dominated candidate leaves (no later round, no "
            f"larger context, no tail){fixed}")


def _matrix_lines(matrices: list[Any], sweep: Any) -> list[str]:
    """`validate`'s account of each matrix: the candidates it expanded into (with what each adds) and
    the combinations left out, with why."""
    by_id = {c.id: c for c in sweep.candidates}
    out = []
    for m in matrices:
        out.append(f"  matrix {m.base}: {' x '.join(m.keys)} = {plural(m.combinations, 'combination')}, "
                   f"{plural(len(m.ids), 'candidate')}" + (f", {len(m.left_out)} left out" if m.left_out else ""))
        for ident in m.ids:
            point = by_id[ident].from_matrix
            adds = " ".join(point.args)
            fields = ", ".join(f"{k} {v}" for k, v in point.values.items() if k in ("spec", "ctx_size"))
            out.append(f"    {ident:<40} + {'; '.join(x for x in (adds, fields) if x) or '(nothing: every switch off)'}")
        out += [f"    left out: {ident}: {why}" for ident, why in m.left_out]
    return out


def _external_lines(cand: Any, sweep: Any) -> list[str]:
    """What `validate` says of an external candidate: the server detected at its url now, its memory
    source, its API-key variable, and the contexts one of its slots cannot hold."""
    import asyncio

    from benchd.engine.sweepcheck import external_problems
    from benchd.servers.runtimes.base import CTX_MARGIN_TOKENS
    from benchd.servers.runtimes.openai import detect

    if external_problems(cand):
        return [f"external server at {cand.url}: not asked (its settings are refused: see the problems)"]
    try:
        found = asyncio.run(detect(cand))
    except Exception as exc:  # validate's problems already name it
        return [f"external server at {cand.url}: not detected ({type(exc).__name__})"]
    slots = (f", {found.slot_ctx} tokens per slot" + (f" x {plural(found.total_slots, 'slot')}" if found.total_slots else "")
             if found.slot_ctx else "")
    out = [f"external {found.kind} {found.version or '(version not reported)'} at {found.url}{slots}; "
           "benchd does not start it",
           f"memory from pid {cand.pid}" if cand.pid else
           f"memory from process {cand.process!r} (resolved at submit)" if cand.process else
           "no pid / process: its memory is not sampled"]
    if cand.api_key_env:
        out.append(f"API key from ${cand.api_key_env} (never recorded)")
    big = [c for c in sweep.contexts if found.slot_ctx and c + sweep.gen_tokens + CTX_MARGIN_TOKENS > found.slot_ctx]
    if big:
        out.append(f"contexts {', '.join(map(str, big))} will fail: over the {found.slot_ctx} tokens a slot holds")
    return out


def _print_problems(problems: list[str]) -> None:
    for prob in problems:
        click.echo(f"problem: {prob}", err=True)


def _pinning(sweep: Any) -> list[str]:
    """`pin_client`: the cores each candidate's server and the probe client would get on THIS machine."""
    if not sweep.pin_client:
        return []
    from benchd.servers import affinity
    from benchd.servers.runtimes import get_adapter

    out = ["pin_client: the server on its own cores, benchd's probe client on the others (Linux):"]
    for cand in sweep.candidates:
        p = affinity.plan(True, *get_adapter(cand.runtime).launcher.server_threads(cand))
        what = f"server cores {p.server_cpus}, client cores {p.client_cpus}" if p.applied else f"not pinned: {p.reason}"
        out.append(f"  {cand.id:<32} {what}")
    return out


def plan(sweep: Any, gen_tps: float, prompt_tps: float, startup_s: float,
         task_s: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Planned cells and a duration estimate from stated rates (the estimate is no measurement of this sweep)."""
    import msgspec

    from benchd.engine.plan import design_text, plan_problems, requested_order, starts_per_context
    from benchd.store import planned_probes

    pp = sweep.probe_plan()
    probes = ("default" if sweep.probes is None else
              sweep.probes if isinstance(sweep.probes, (int, str)) else msgspec.to_builtins(sweep.probes))
    cells = [{"candidate": cand.id, "context": ctx, "warmup": sweep.warmup, "probes": probes,
              "probes_min": pp.min, "probes_max": pp.max} for cand in sweep.candidates for ctx in sweep.contexts]
    sentinel = sweep.sentinel_on()
    order = requested_order(sweep)
    per_round = order == "interleaved" and sweep.starts_mode() == "round"  # every probe on a start of its own

    def cost(per_cell: int) -> tuple[int, float]:
        """Requests and seconds of generation + prompt work when every cell runs `per_cell` probes (the
        warm-up requests after every start: one start per probe with `starts = "round"`)."""
        requests, work_s = 0, 0.0
        warm = sweep.warmup * (per_cell if per_round else 1)
        for ctx in sweep.contexts:
            n = (per_cell + warm) * len(sweep.candidates) + (per_cell if sentinel and ctx == min(sweep.contexts) else 0)
            requests += n
            work_s += n * (sweep.gen_tokens / gen_tps + ctx / prompt_tps)
        if sweep.sustained.tokens:
            requests += len(sweep.candidates)
            work_s += len(sweep.candidates) * sweep.sustained.tokens / gen_tps
        return requests, work_s

    (req_lo, work_lo), (req_hi, work_hi) = cost(pp.min), cost(pp.max)
    evals = eval_plan(sweep, gen_tps, prompt_tps, task_s or {})
    for e in evals:
        req_lo += e["tasks"]
        req_hi += e["tasks"]
        work_lo += e["estimate_s"]["low"]
        work_hi += e["estimate_s"]["high"]
    kld = kld_plan(sweep, prompt_tps, startup_s)
    if kld:
        work_lo += kld["estimate_s"]["low"]
        work_hi += kld["estimate_s"]["high"]
    cd = sweep.cooldown
    cooldown_min = req_lo * (cd.seconds if cd.policy == "fixed" else 0.0)
    cooldown_max = req_hi * (cd.seconds if cd.policy == "fixed" else cd.max_seconds)
    ready_starts = 2 * sweep.ready.starts * len(sweep.candidates)  # cold + warm, for the time-to-ready axis
    shown = order if len(sweep.candidates) > 1 or order == "sequential" else "sequential"
    lo_ctx, hi_ctx = starts_per_context(sweep, shown)  # a start per round (starts = "round") or per block
    cells_n = len(sweep.candidates) * len(sweep.contexts)
    startups = cells_n * lo_ctx + (1 if sentinel else 0) + ready_starts
    startups_max = cells_n * hi_ctx + (1 if sentinel else 0) + ready_starts
    return {
        "design": {"order": order, "asked": sweep.order, "rounds": sweep.rounds, "text": design_text(sweep),
                   "notes": plan_problems(sweep)},
        "cells": cells,
        "rows": planned_probes(sweep),
        "rows_max": planned_probes(sweep, "max"),
        "requests": req_lo,
        "requests_max": req_hi,
        "adaptive": pp.adaptive and {"min": pp.min, "max": pp.max, "target_ci_pct": pp.target_ci_pct,
                                     "metric": pp.metric, "throttle_pct": pp.throttle_pct},
        "ready_starts": ready_starts and {"cold": ready_starts // 2, "warm": ready_starts // 2},
        "sentinel": sentinel and {"candidate": sweep.candidates[0].id, "context": min(sweep.contexts),
                                  "drift_pct": sweep.sentinel_drift_pct},
        "evals": evals,
        "kld": kld,
        "estimate_s": {"low": round(work_lo + startups * startup_s + cooldown_min),
                       "high": round(work_hi + startups_max * startup_s + cooldown_max)},
        "assumptions": {
            "gen_tps": gen_tps, "prompt_tps": prompt_tps, "startup_s_per_server": startup_s,
            "servers_started": startups, "servers_started_max": startups_max,
            "starts": sweep.starts_mode() if order == "interleaved" else None,
            "cooldown": f"{cd.policy}, before every request",
            "note": "planning figures, not measurements of this sweep: `measured` says which an earlier runbook gave",
        },
    }


#: Planning assumptions per public suite task: (prompt tokens, typical answer tokens, answer budget).
ASSUMED_EVAL_TOKENS = {"code": (200, 150, 768), "tools": (600, 60, 512)}


def eval_plan(sweep: Any, gen_tps: float, prompt_tps: float, task_s: Mapping[str, float]) -> list[dict[str, Any]]:
    """Per public suite: tasks per candidate and the seconds they may take for all candidates: from a task's
    measured median seconds (`task_s`, an earlier runbook's) or its assumed typical answer, to a
    budget-long answer; capped by `eval_budget_s`. A running job's ETA uses its own seconds per task."""
    from benchd.engine import suites

    out = []
    for suite in sweep.evals:
        limit = sweep.eval_limit.of(suite)
        total = suites.TASK_COUNTS[suite]
        tasks = min(limit, total) if limit is not None else total
        prompt, typical, budget = ASSUMED_EVAL_TOKENS[suite]
        per = [prompt / prompt_tps + n / gen_tps for n in (typical, budget)]
        if (measured := task_s.get(suite)) is not None:
            per = [measured, max(measured, per[1])]
        secs = [tasks * x for x in per]
        if sweep.eval_budget_s is not None:
            secs = [min(x, sweep.eval_budget_s) for x in secs]
        n = len(sweep.candidates)
        out.append({"suite": suite, "tasks": tasks * n, "tasks_per_candidate": tasks, "task_s_measured": measured,
                    "estimate_s": {"low": round(secs[0] * n), "high": round(secs[1] * n)}})
    return out


#: Bytes per token assumed for a `[kld]` corpus whose tokens cannot be counted here (an assumption).
ASSUMED_BYTES_PER_TOKEN = 4


def kld_plan(sweep: Any, prompt_tps: float, startup_s: float) -> dict[str, Any] | None:
    """The `[kld]` step's runs and their seconds: each run evaluates its chunks at the assumed prompt rate
    after a model load (`startup_s`); low: one run each, the reference's included; high: every candidate's
    run repeated KLD_ATTEMPTS times. The corpus's tokens are counted with the reference's tokenizer (else
    bytes / ASSUMED_BYTES_PER_TOKEN, said so). None without `[kld]`."""
    import subprocess

    from benchd.config import Config
    from benchd.engine import kld
    from benchd.errors import BenchdError

    if sweep.kld.reference is None:
        return None
    path, _ = kld.corpus_path(sweep)
    ref = next(c for c in sweep.candidates if c.id == sweep.kld.reference)
    try:
        if sweep.kld.tokens is not None:
            tokens, source = sweep.kld.tokens, "kld.tokens"
        else:
            tokens = kld.count_tokens(ref, path, Config.resolve().cache_dir)
            source = "counted with the reference's tokenizer"
    except (ValueError, BenchdError, OSError, subprocess.TimeoutExpired):  # validate says why, apart
        try:
            tokens = path.stat().st_size // ASSUMED_BYTES_PER_TOKEN
        except OSError:
            return None
        source = f"assumed {ASSUMED_BYTES_PER_TOKEN} bytes a token (not counted here)"
    runs = kld.planned_runs(sweep, tokens)
    secs = {purpose: sum(n / prompt_tps + startup_s for _c, _x, n, p in runs if p == purpose)
            for purpose in ("reference logits", "scoring")}
    low = secs["reference logits"] + secs["scoring"]
    high = secs["reference logits"] + kld.KLD_ATTEMPTS * secs["scoring"]
    return {"runs": len(runs), "tokens_evaluated": sum(r[2] for r in runs), "corpus_tokens": tokens,
            "corpus_tokens_source": source, "estimate_s": {"low": round(low), "high": round(high)},
            "assumption": f"{prompt_tps:g} tok/s prompt processing per run plus {startup_s:g} s to load the model; "
                          f"up to {kld.KLD_ATTEMPTS} runs a candidate (docs/kld.md#why-a-run-may-be-repeated)"}


def _settings(sweep: Any) -> dict[str, Any]:
    """What the sweep asks of every request beyond the grid (thinking, EOS, eval thinking, image probes)."""
    v = sweep.vision
    return {"thinking": sweep.thinking, "ignore_eos": sweep.ignore_eos, "eval_thinking": sweep.eval_thinking,
            "eval_reasoning_budget": sweep.eval_reasoning_budget, "evals": list(sweep.evals),
            "eval_limit": {s: sweep.eval_limit.of(s) for s in sweep.evals}, "eval_budget_s": sweep.eval_budget_s,
            "vision": {"candidates": [c.id for c in sweep.candidates if c.vision], "images": v.images,
                       "resolutions": [list(r) for r in v.resolutions],
                       "context": v.context if v.context is not None else min(sweep.contexts)},
            "session": {"turns": sweep.session.turns, "append_tokens": sweep.session.append_tokens,
                        "gen_tokens": sweep.session_gen_tokens()},
            "concurrency": list(sweep.concurrency)}


def _measured_pace(sweep: Any, state: str | None, p: dict[str, Any]) -> dict[str, Any] | None:
    """The newest earlier sweep of the same candidates in the state dir: its rows and time, scaled by rows to
    this sweep's plan (`benchd.results.pace`); None when there is none."""
    from benchd.results.pace import previous_pace

    pace = previous_pace(sweep, config(state=state))
    if pace is None:
        return None
    low, high = pace.scaled(p["rows"]), pace.scaled(p["rows_max"])
    span = fmt_duration(low) if p["rows"] == p["rows_max"] else f"{fmt_duration(low)}-{fmt_duration(high)}"
    grid = f"it differed in {', '.join(pace.differs)}" if pace.differs else "the same grid"
    text = (f"measured pace: runbook {pace.runbook} (finished {pace.finished_at[:16].replace('T', ' ')} UTC) ran "
            f"these candidates, {pace.rows} rows in {fmt_duration(pace.seconds)}; at that pace this sweep takes ~{span} "
            f"({grid}; scaled by rows, not a measurement of this sweep)")
    return {"runbook": pace.runbook, "finished_at": pace.finished_at, "rows": pace.rows, "seconds": pace.seconds,
            "differs": pace.differs, "estimate_s": {"low": round(low), "high": round(high)}, "text": text}


def _rate(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


class EstimateRates(NamedTuple):
    """What `validate`'s estimate runs on, and which of it an earlier runbook measured (`measured`)."""

    gen_tps: float
    prompt_tps: float
    startup_s: float
    task_s: dict[str, float]
    measured: str | None


def _estimate_rates(sweep: Any, state: str | None, gen_tps: float | None, prompt_tps: float | None) -> EstimateRates:
    """The flags, else the slowest cell medians, time to ready and eval seconds a task these models (any
    server args) had in the state dir's runbooks (`benchd.results.pace`), else the assumed ones; and whence.
    A flag sets a what-if rate: the eval seconds measured at other rates are then left out."""
    from benchd.results.pace import measured_rates

    got = measured_rates(sweep, config(state=state))
    gen = gen_tps or (got.gen_tps if got else ASSUMED_GEN_TPS)
    prompt = prompt_tps or (got.prompt_tps if got and got.prompt_tps else ASSUMED_PROMPT_TPS)
    startup = got.ready_s if got and got.ready_s else ASSUMED_STARTUP_S
    task_s = {s: v for s, v in got.task_s.items() if s in sweep.evals} if got and not (gen_tps or prompt_tps) else {}
    which = [w for w, flag, v in (("decode", gen_tps, got.gen_tps), ("prompt", prompt_tps, got.prompt_tps),
                                  ("start", None, got.ready_s)) if flag is None and v] if got else []
    which += [f"{s} seconds a task" for s in task_s]
    if got is None or not which:
        return EstimateRates(gen, prompt, startup, task_s, None)
    beyond = (f"; this sweep goes to {max(sweep.contexts)}, where they are slower: the estimate is low"
              if max(sweep.contexts) > got.context else "")
    where = f"runbook{'s' if len(got.runbooks) > 1 else ''} {', '.join(got.runbooks)}"
    return EstimateRates(gen, prompt, startup, task_s,
                         f"measured ({', '.join(which)}): the slowest of these models in {where}, at contexts up "
                         f"to {got.context}{beyond}; the rest assumed")


@click.command()
@click.argument("sweep_file", type=click.Path(dir_okay=False))
@click.option("--gen-tps", type=click.FloatRange(min=0.01), default=None,
              help=f"Decode rate for the estimate [default: the slowest these models reached in a runbook of the "
                   f"state dir, else {ASSUMED_GEN_TPS:g}].")
@click.option("--prompt-tps", type=click.FloatRange(min=0.01), default=None,
              help=f"Prompt-processing rate for the estimate [default: measured as --gen-tps, else "
                   f"{ASSUMED_PROMPT_TPS:g}].")
@state_dir_option(help="State dir whose runbooks give a measured pace (default: $BENCHD_STATE_DIR or the "
                       "platform default).")
@json_option
def validate(sweep_file: str, gen_tps: float | None, prompt_tps: float | None, as_json: bool,
             state_dir: str | None) -> None:
    """Check a sweep file (offline) and show its planned cells and an estimated duration (beside it, the
    measured pace of the newest earlier sweep of the same candidates, when the state dir has one)."""
    sweep, problems, matrices = check_sweep_matrices(sweep_file)
    if sweep is None:
        if as_json:
            _print_json({"file": sweep_file, "ok": False, "problems": problems, "matrices": _matrix_json(matrices)})
        else:
            click.echo(f"{sweep_file}: {plural(len(problems), 'problem')}; nothing planned until they are fixed")
            _print_problems(problems)
        raise SystemExit(exitcodes.BAD_INPUT)
    rates = _estimate_rates(sweep, state_dir, gen_tps, prompt_tps)
    p = plan(sweep, rates.gen_tps, rates.prompt_tps, rates.startup_s, rates.task_s)
    p["assumptions"]["measured"] = rates.measured
    warnings = plan_warnings(sweep)
    pace = _measured_pace(sweep, state_dir, p)
    if as_json:
        _print_json({"file": sweep_file, "ok": not problems, "problems": problems, "warnings": warnings,
                     "measured_pace": pace,
                     "pin_client": sweep.pin_client,
                     "settings": _settings(sweep), "matrices": _matrix_json(matrices, sweep),
                     "racing": _racing_text(sweep), **p})
    else:
        pp = sweep.probe_plan()
        count = f"{pp.min}-{pp.max} probes (auto)" if pp.adaptive else plural(pp.min, "probe")
        click.echo(f"{sweep_file}: sweep {sweep.name!r}: {plural(len(sweep.candidates), 'candidate')} x "
                   f"{plural(len(sweep.contexts), 'context')}, {count} + {sweep.warmup} warmup each, "
                   f"gen_tokens {sweep.gen_tokens}")
        click.echo(f"  {p['design']['text']}")
        for line in _matrix_lines(matrices, sweep):
            click.echo(line)
        click.echo(f"  {_racing_text(sweep)}")
        for note in p["design"]["notes"]:
            click.echo(f"  note: {note}")
        for warning in warnings:
            click.echo(f"  warning: {warning}")
        if pp.adaptive and (len(sweep.candidates) == 1 or p["design"]["order"] == "sequential"):
            click.echo(f"  probes: each cell stops once the 95 % CI of the median {pp.metric} is within "
                       f"±{pp.target_ci_pct:g} % (after {pp.min}, at most {pp.max}); throttle-suspect below "
                       f"{pp.throttle_pct:g} % of the running median")
        for cell in p["cells"]:
            n = f"{cell['probes_min']}-{cell['probes_max']}" if pp.adaptive else str(cell["probes_min"])
            click.echo(f"  {cell['candidate']:<32} ctx {cell['context']:>8}  {n} probes")
        for cand in sweep.candidates:
            if cand.spec is not None:
                click.echo(f"  {cand.id}: spec kind {cand.spec.kind}"
                           + (f", draft {cand.spec.draft_model}" if cand.spec.draft_model else ""))
            if cand.external:
                for line in _external_lines(cand, sweep):
                    click.echo(f"  {cand.id}: {line}")
        if sweep.sustained.tokens:
            runs = sweep.sustained.runs
            click.echo(f"  + {'one' if runs == 1 else runs} sustained generation{'s' if runs > 1 else ''} of "
                       f"{sweep.sustained.tokens} tokens per candidate")
        if sweep.session.turns:
            click.echo(f"  + one session per cell: {sweep.session.turns} turns, {sweep.session.append_tokens} tokens "
                       f"appended per turn, {sweep.session_gen_tokens()} generated per turn (prompt cache on)")
        for level in sweep.parallel_levels():
            click.echo(f"  + concurrency {level}: a server start of its own per candidate and context, batches of "
                       f"{level} simultaneous requests")
        if sweep.ready.starts:
            click.echo(f"  + time to ready: {sweep.ready.starts} cold and {plural(sweep.ready.starts, 'warm server start')} "
                       "per candidate, after its probes")
        for line in _pinning(sweep):
            click.echo(line)
        st = _settings(sweep)
        click.echo(f"thinking {st['thinking']}; ignore_eos {str(st['ignore_eos']).lower()}; evals: thinking "
                   f"{st['eval_thinking']}, +{st['eval_reasoning_budget']} tokens when cut off while reasoning")
        vis = st["vision"]
        if vis["candidates"]:
            sizes = ", ".join(f"{w}x{h}" for w, h in vis["resolutions"])
            click.echo(f"  + image probes for {', '.join(vis['candidates'])}: {plural(vis['images'], 'image')} of {sizes} "
                       f"in a {vis['context']}-token prompt, each beside the same prompt without images")
        for cand in sweep.candidates:
            if cand.mmproj is not None:
                click.echo(f"  {cand.id}: mmproj {cand.mmproj}")
        if sweep.evals:
            limits = ", ".join(f"{s} {n if n is not None else 'all'} tasks" for s, n in st["eval_limit"].items())
            budget = f"; at most {st['eval_budget_s']:g} s per candidate per suite" if st["eval_budget_s"] else ""
            click.echo(f"  + eval suites per candidate: {limits}{budget}")
        if p["kld"]:
            kp = p["kld"]
            click.echo(f"  + KL divergence against {sweep.kld.reference}: {kp['runs']} scoring runs, "
                       f"{kp['tokens_evaluated']} tokens evaluated (corpus {kp['corpus_tokens']} tokens, "
                       f"{kp['corpus_tokens_source']}), {fmt_duration(kp['estimate_s']['low'])}-"
                       f"{fmt_duration(kp['estimate_s']['high'])} in the estimate")
        if p["sentinel"]:
            s = p["sentinel"]
            click.echo(f"  + drift sentinel: {s['candidate']} ctx {s['context']} run again at the end "
                       f"(drift beyond ±{s['drift_pct']:g} % is reported)")
        a = p["assumptions"]
        est = p["estimate_s"]
        span = fmt_duration(est["low"]) if est["low"] == est["high"] else f"{fmt_duration(est['low'])}-{fmt_duration(est['high'])}"
        rows = f"{p['rows']}" if p["rows"] == p["rows_max"] else f"{p['rows']}-{p['rows_max']}"
        lo, hi = a["servers_started"], a["servers_started_max"]
        starts = plural(lo, "server start") if lo == hi else f"{lo}-{hi} server starts"
        each = "" if hi == 1 else " each"
        click.echo(f"{rows} rows; estimated duration {span} (assuming {_rate(a['gen_tps'])} tok/s decode, "
                   f"{_rate(a['prompt_tps'])} tok/s prompt, {starts} at {_rate(a['startup_s_per_server'])} s{each}; "
                   f"cooldown {a['cooldown']}; {rates.measured or 'assumptions, not measurements'})")
        if pace is not None:
            click.echo(pace["text"])
        _print_problems(problems)
    if problems:
        raise SystemExit(exitcodes.BAD_INPUT)


# ------------------------------------------------------------------------------------------- submit


def resolve_at(value: str, now: datetime) -> str:
    """`--at` → RFC 3339 UTC. `HH:MM` is local time, the next occurrence after `now` (aware, local tz);
    anything else is ISO 8601 (a time without an offset is local). Raises ValueError."""
    text = value.strip()
    local_now = now.astimezone()
    if len(text) in (4, 5) and ":" in text and "T" not in text and "-" not in text:
        hh, mm = text.split(":", 1)
        if not (hh.isdigit() and mm.isdigit() and len(mm) == 2):
            raise ValueError(f"--at {value!r}: expected HH:MM")
        hour, minute = int(hh), int(mm)
        if not (0 <= hour < 24 and 0 <= minute < 60):
            raise ValueError(f"--at {value!r}: no such time of day")
        # Wall-clock arithmetic in the local zone: a DST change moves the instant, not the HH:MM.
        naive = local_now.replace(tzinfo=None, hour=hour, minute=minute, second=0, microsecond=0)
        if naive <= local_now.replace(tzinfo=None):
            naive += timedelta(days=1)
        target = naive.astimezone()  # naive → the local zone at that date (handles DST offsets)
    else:
        try:
            target = datetime.fromisoformat(text)
        except ValueError as exc:
            raise ValueError(f"--at {value!r}: expected HH:MM or an ISO 8601 time ({exc})") from exc
        if target.tzinfo is None:
            target = target.astimezone()
    from datetime import UTC

    return target.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@click.command()
@click.argument("sweep_file", type=click.Path(dir_okay=False))
@click.option("--at", "at", default=None, metavar="HH:MM|ISO-8601", help="Not before this time (HH:MM = local).")
@click.option("--when", "when", multiple=True, type=click.Choice(["idle", "ac-power"]),
              help="Wait until the machine is idle / on AC power (repeatable).")
@click.option("--follow", is_flag=True, help="Follow the job's progress until it ends (like `tail`).")
@socket_option
@json_option
def submit(sweep_file: str, at: str | None, when: tuple[str, ...], follow: bool, socket_path: str | None,
           as_json: bool) -> None:
    """Queue a sweep; prints the job id alone on the first line."""
    from benchctl.sweepfile import sweep_to_dict

    sweep, problems = check_sweep(sweep_file)
    if problems or sweep is None:
        _print_problems(problems)
        raise SystemExit(exitcodes.BAD_INPUT)
    not_before = None
    if at is not None:
        try:
            not_before = resolve_at(at, datetime.now().astimezone())
        except ValueError as exc:
            raise _fail(f"error: {exc}", exitcodes.BAD_INPUT) from exc
    client = _client(socket_path)
    from benchd.schemas import Job

    answer = _call(lambda: client.submit(sweep_to_dict(sweep), not_before, list(when)))
    job = decoded(Job, answer)
    click.echo(job.id)
    if as_json and not follow:
        _print_json(answer)
    elif not follow:
        extra = f", not before {job.not_before}" if job.not_before else ""
        click.echo(f"queued {job.name!r}: {planned_text(progress_of(job))} rows planned{extra}", err=True)
    if follow:
        from benchctl.commands.tail import follow_job

        raise SystemExit(follow_job(client, job.id, as_json))


# --------------------------------------------------------------------------------------- jobs/status


def _job_line(job: Job) -> str:
    prog = progress_of(job)
    why = job.waiting_reason or job.error or ""
    if job.state == "running" and prog.eta_s is not None:
        why = f"eta {eta_text(prog)}"
    return (f"{job.id:<26} {job.state:<11} {prog.done:>5}/{planned_text(prog):<5} "
            f"{job.created_at[:19]:<20} {job.name[:28]:<28} {why}")


@click.command()
@click.option("--state", type=click.Choice(["queued", "waiting", "running", "succeeded", "failed", "cancelled",
                                            "interrupted"]), default=None)
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
@socket_option
@json_option
def jobs(state: str | None, limit: int, socket_path: str | None, as_json: bool) -> None:
    """List jobs, newest first (and why a job waits).

    With the daemon down it reads the state dir's job store itself (read-only) and says so on stderr;
    a job stored as running is then one whose daemon stopped mid-job (noted as such)."""
    from benchctl.client import Unreachable

    def ask() -> Any:
        try:
            return _client(socket_path).jobs(state=state, limit=limit)
        except Unreachable as exc:
            return _offline_jobs(socket_path, state, limit, exc)

    answer = _call(ask)
    if as_json:
        _print_json(answer)
        return
    from benchd.schemas import JobList

    page = decoded(JobList, answer)
    notes = {j["id"]: j["offline_note"] for j in answer["jobs"] if j.get("offline_note")}  # offline.read_jobs's
    click.echo(f"{'ID':<26} {'STATE':<11} {'ROWS':^11} {'CREATED (UTC)':<20} {'NAME':<28} WHY")
    for job in page.jobs:
        click.echo(_job_line(job))
        if job.id in notes:
            click.echo(f"{'':<26} note: {notes[job.id]}")
    if not page.jobs:
        click.echo("(no jobs)")


def _offline_jobs(socket_path: str | None, state: str | None, limit: int, exc: Exception) -> dict[str, Any]:
    """`jobs` without a daemon: the store read directly, one stderr line saying so; exit 3 when there is
    no store to read either (nothing was ever queued on this state dir, or it is another one)."""
    from benchctl.commands.common import config
    from benchctl.commands.offline import offline_line, read_jobs
    from benchd.errors import BenchdError

    cfg = config(socket_path)
    try:
        page = read_jobs(cfg, state, limit)
    except (BenchdError, OSError) as err:
        detail = err.message if isinstance(err, BenchdError) else f"{type(err).__name__}: {err}"
        raise _fail(f"{exc}; and it cannot be read offline: {detail}", exitcodes.UNREACHABLE,
                    slug="unreachable") from err
    click.echo(offline_line(cfg, f"the job store {cfg.db_path}"), err=True)
    return page


@click.command()
@click.argument("job_id", required=False)
@socket_option
@json_option
def status(job_id: str | None, socket_path: str | None, as_json: bool) -> None:
    """Show a job (default: the running one, else the newest), and a pending or regressed recheck of the lock."""
    from benchctl.commands.recheck import recheck_lines
    from benchd.schemas import Health, Job, JobList, RecheckStatus

    client = _client(socket_path)
    recheck_status = _call(lambda: _recheck_status(client))
    rechecks = recheck_lines(decoded(RecheckStatus, recheck_status) if recheck_status else None)
    if job_id is None:
        running = decoded(Health, _call(client.health)).running_job
        if running:
            job_id = running
        else:
            page = decoded(JobList, _call(lambda: client.jobs(limit=1)))
            if not page.jobs:
                raise _fail("\n".join([*rechecks, "no jobs yet"]), exitcodes.OK)
            job_id = page.jobs[0].id
    answer = _call(lambda: client.job(job_id))
    if as_json:
        _print_json({**answer, "recheck": recheck_status})
        return
    job = decoded(Job, answer)
    prog = progress_of(job)
    lines = [
        f"job       {job.id}  ({job.name})",
        f"state     {job.state}" + (f"  - {job.waiting_reason}" if job.waiting_reason else ""),
        f"progress  {prog.done}/{planned_text(prog)} rows" + (f", eta {eta_text(prog)}" if prog.eta_s is not None else ""),
        f"created   {job.created_at}",
    ]
    for key, value in (("not before", job.not_before), ("started at", job.started_at),
                       ("finished at", job.finished_at), ("error", job.error), ("runbook id", job.runbook_id)):
        if value:
            lines.append(f"{key:<9} {value}")
    if job.when:
        lines.append(f"when      {', '.join(job.when)}")
    click.echo("\n".join([*lines, *rechecks]))


def _recheck_status(client: Any) -> dict[str, Any]:
    """The daemon's recheck status; empty from a daemon older than rechecks (404), so `status` still works."""
    from benchctl.client import ApiError

    try:
        return client.recheck_status()  # type: ignore[no-any-return]
    except ApiError as exc:
        if exc.status == 404:
            return {}
        raise


@click.command()
@click.argument("job_id")
@socket_option
@json_option
def cancel(job_id: str, socket_path: str | None, as_json: bool) -> None:
    """Cancel a queued or running job (a running one stops within 2 s)."""
    job = _call(lambda: _client(socket_path).cancel(job_id))
    if as_json:
        _print_json(job)
    else:
        click.echo(f"{job['id']}: {job['state']}")


__all__ = ["cancel", "check_sweep", "jobs", "ping", "plan", "resolve_at", "status", "submit", "validate"]
