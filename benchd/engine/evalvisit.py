"""The eval tier's tasks and the public suites through a candidate's server, each result stored as it lands
(a resumed job skips the tasks it holds). Reasons: docs/evals.md.
"""

from __future__ import annotations

import time

import msgspec

from benchd.config import Config
from benchd.engine import evalrun, evals, suiterun, suites
from benchd.engine.recorder import Recorder
from benchd.schemas import Candidate, EvalResult, Sweep
from benchd.servers.runtimes.base import RuntimeAdapter
from benchd.servers.server import Server


class EvalVisits:
    """A candidate's evals on its last server start."""

    def __init__(self, job: str, sweep: Sweep, config: Config, recorder: Recorder) -> None:
        self.job, self.sweep, self.config, self.recorder = job, sweep, config, recorder
        self.timeout_s = sweep.effective_probe_timeout_s()
        self.evals_done = {(e.candidate, e.task) for e in recorder.store.results.evals(job)}

    def pending(self, cand: Candidate) -> bool:
        """Does the candidate still owe an eval task (the tier's or a suite's)?"""
        if any((cand.id, t.id) not in self.evals_done for t in evals.tasks(self.sweep.eval_tier)):
            return True
        return any((cand.id, t.id) not in self.evals_done for s in self.sweep.evals for t in self.suite_tasks(s))

    def suite_tasks(self, suite: str) -> list[suites.Task]:
        """The suite's fixed subset for this sweep (loaded from the cache; checked at submit)."""
        return suites.subset(suites.load(suite, self.config.cache_dir), self.sweep.eval_limit.of(suite))

    async def run_evals(self, adapter: RuntimeAdapter, server: Server, cand: Candidate) -> None:
        """The eval tier's tasks through the candidate's server (each result stored as it lands)."""
        for task in evals.tasks(self.sweep.eval_tier):
            if (cand.id, task.id) not in self.evals_done:
                self.recorder.store.results.put_eval(await evalrun.run_task(self.job, adapter, server.base_url, cand, task,
                                                           self.sweep, self.timeout_s))
                self.evals_done.add((cand.id, task.id))
        for suite in self.sweep.evals:
            await self.run_suite(adapter, server, cand, suite)

    async def run_suite(self, adapter: RuntimeAdapter, server: Server, cand: Candidate, suite: str) -> None:
        """One public suite through the server, each result stored as it lands, until `eval_budget_s`."""
        tasks = self.suite_tasks(suite)
        if not any((cand.id, t.id) not in self.evals_done for t in tasks):
            return
        data = suites.load(suite, self.config.cache_dir)
        self.recorder.emit("eval_suite", **data.provenance([t.id for t in tasks]))
        spent = self._spent(cand, suite)
        parser: str | None = None
        asked = suite == "code"  # the code suite makes no tool request
        for task in (t for t in tasks if (cand.id, t.id) not in self.evals_done):
            if self._budget_reached(cand, suite, spent) or not server.running:
                return
            t0 = time.monotonic()
            result = await self._ask(adapter, server, cand, suite, task, parser)
            if not asked:
                asked = True
                parser = await adapter.tools.tool_parser(server.base_url, cand, server.command)
                result = _with_parser(result, parser)
            self.recorder.store.results.put_eval(result)
            self.evals_done.add((cand.id, task.id))
            spent += time.monotonic() - t0

    def _spent(self, cand: Candidate, suite: str) -> float:
        return sum(e.task_s or 0.0 for e in self.recorder.store.results.evals(self.job)
                   if e.candidate == cand.id and e.tier == suite)

    def _budget_reached(self, cand: Candidate, suite: str, spent: float) -> bool:
        budget = self.sweep.eval_budget_s
        if budget is None or spent < budget:
            return False
        self.recorder.emit("eval_budget_reached", candidate=cand.id, suite=suite, budget_s=budget)
        return True

    async def _ask(self, adapter: RuntimeAdapter, server: Server, cand: Candidate, suite: str, task: suites.Task,
                   parser: str | None) -> EvalResult:
        if suite == "code":
            return await suiterun.run_code_task(self.job, adapter, server.base_url, cand, task, self.sweep,
                                                self.timeout_s)
        return await suiterun.run_tool_task(self.job, adapter, server.base_url, cand, task, self.sweep,
                                            self.timeout_s, log_path=server.log_path, parser=parser)


def _with_parser(result: EvalResult, parser: str | None) -> EvalResult:
    if parser is None:
        return result
    return msgspec.structs.replace(result, parser=parser, sources={**result.sources, "parser": "adapter.tool_parser"},
                                   null_reasons={k: v for k, v in result.null_reasons.items() if k != "parser"})
