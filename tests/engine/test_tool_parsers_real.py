"""Each runtime's own tool-call parser on the scripted tool-calling models, graded by benchd's tool path.

Every variant of `benchctl.tinymodels.toolscript` is asked as a BFCL task is asked (`suiterun.run_tool_task`:
the variant's function as OpenAI `tools`, `tool_choice: "auto"`, `parallel_tool_calls` for the parallel one),
streamed (what a sweep sends) and non-streamed, and the failure class of each is pinned per runtime, with
the parser the adapter records. What the pinned sources do (read there, confirmed here):
- llama-server (`peg-native`, `GET /slots` `params.chat_format`): with tools and `tool_choice: auto` the
  lazy grammar takes over at `<tool_call>`, so the scripted invalid JSON and unknown function cannot come
  out. `bad_json`: the grammar refuses the text that would leave the arguments object open; the model runs
  to `max_tokens` and the server's parser still returns the call it read, closed: graded a pass, finish
  `length`. `unknown_function`: the grammar forces the declared name; the arguments generated after it are
  not the script's: `argument_mismatch` on `city`.
- mlx_lm.server (`mlx_lm.tool_parsers.json_tools`): `ToolCallFormatter` drops a call `json.loads`
  rejects with a `Failed to parse tool call` warning while `finish_reason` stays `tool_calls`:
  `dropped_call` quoting that line; an unknown function is returned as generated: `wrong_function`.
- mlx_vlm.server (`mlx_vlm.tools.parsers.json_tools`): streamed, `ToolCallDeltaState.feed` sends the
  partial call as it arrives and re-raises the parse error at `</tool_call>`: an error event mid-stream,
  `server_error` with the logged exception; non-streamed, `process_tool_calls` keeps unparsable text in
  `content`: `leaked_markup`. Unknown function: `wrong_function`.
Every runtime parses the code-edit argument (quotes, backslashes, newlines) and both parallel calls.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from benchctl.tinymodels import toolscript
from benchd.engine import suiterun, suites
from benchd.schemas import Candidate, EvalResult, Sweep
from benchd.servers.runtimes import get_adapter

pytestmark = [pytest.mark.slow]

RUNTIMES = ("llama-server", "mlx_lm.server", "mlx_vlm.server")
#: (streamed class, non-streamed class) per runtime and variant; None is a pass.
EXPECTED: dict[str, dict[str, tuple[str | None, str | None]]] = {
    "llama-server": {"valid": (None, None), "bad_json": (None, None),
                     "unknown_function": ("argument_mismatch", "argument_mismatch"),
                     "code_edit": (None, None), "parallel": (None, None)},
    "mlx_lm.server": {"valid": (None, None), "bad_json": ("dropped_call", "dropped_call"),
                      "unknown_function": ("wrong_function", "wrong_function"),
                      "code_edit": (None, None), "parallel": (None, None)},
    "mlx_vlm.server": {"valid": (None, None), "bad_json": ("server_error", "leaked_markup"),
                       "unknown_function": ("wrong_function", "wrong_function"),
                       "code_edit": (None, None), "parallel": (None, None)},
}
PARSER = {"llama-server": "llama-server chat format peg-native",
          "mlx_lm.server": "mlx_lm mlx_lm.tool_parsers.json_tools",
          "mlx_vlm.server": "mlx_vlm mlx_vlm.tools.parsers.json_tools"}


def _task(variant: str) -> suites.Task:
    v = toolscript.VARIANTS[variant]
    question = [[{"role": "user", "content": "Use the tool."}]]
    return suites.Task(suite="tools", id=f"scripted_{variant}", category=v.category,
                       data={"function": list(v.functions), "question": question}, answer=list(v.answer))


def _ask(runtime: str, url: str, model: Path, variant: str, log: Path | None,
         command: list[str]) -> tuple[list[EvalResult], str | None]:
    adapter = get_adapter(runtime)
    cand = Candidate(id="scripted", runtime=runtime, model=str(model))  # type: ignore[arg-type]
    sweep = Sweep(name="tool-parsers", contexts=[256], gen_tokens=8, candidates=[cand])

    async def go() -> tuple[list[EvalResult], str | None]:
        out = [await suiterun.run_tool_task("job", adapter, url, cand, _task(variant), sweep, 120.0,
                                            log_path=log, stream=stream) for stream in (True, False)]
        return out, await adapter.tools.tool_parser(url, cand, command)

    return asyncio.run(go())


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("variant", list(toolscript.VARIANTS))
def test_each_variant_gets_its_runtimes_class(runtime: str, variant: str, tool_models: Any, server_factory: Any,
                                              request: pytest.FixtureRequest) -> None:
    m = tool_models(variant)
    if runtime == "llama-server":
        server, model = server_factory.llama(m.target, ["-t", "1"]), m.target
        command: list[str] = []
    else:
        server, model = server_factory.mlx(runtime, m.mlx_dir), m.mlx_dir
        command = request.getfixturevalue("mlx_argv")[runtime]  # the interpreter mlx_lm's query runs in
    with server as url:
        (streamed, plain), parser = _ask(runtime, url, model, variant, server_factory.last_log, command)
    want = EXPECTED[runtime][variant]
    for result, expected, how in ((streamed, want[0], "streamed"), (plain, want[1], "non-streamed")):
        assert (result.failure, result.passed) == (expected, expected is None), (how, result.detail)
        assert result.category == toolscript.VARIANTS[variant].category
    assert parser == PARSER[runtime], parser
    assert streamed.sources["failure"].endswith("(streamed)") and "(streamed)" not in plain.sources["failure"]
    if (runtime, variant) == ("llama-server", "bad_json"):
        assert streamed.completion_tokens == plain.completion_tokens == suiterun.TOOL_MAX_TOKENS
        assert "finish_reason length" in streamed.detail and "finish_reason length" in plain.detail
    if (runtime, variant) == ("llama-server", "unknown_function"):
        assert streamed.parameter == plain.parameter == "city"
    if (runtime, variant) == ("mlx_lm.server", "bad_json"):
        assert "Failed to parse tool call" in streamed.detail and "Failed to parse tool call" in plain.detail
    if (runtime, variant) == ("mlx_vlm.server", "bad_json"):
        assert "error event" in streamed.detail and "log:" in streamed.detail
        assert "<tool_call>" in plain.detail


def test_a_sweep_records_each_runtimes_parser_per_candidate(tool_models: Any, eval_suites: Path, tmp_path: Path) -> None:
    """A sweep on the `valid` variant asks BFCL tasks (the model answers every prompt with its call): every
    tool result and each candidate's summary carry the parser that ran, exactly as the runtime names it."""
    from benchd.config import Config
    from benchd.engine.scheduler import run_job
    from benchd.results.runbook import build_runbook
    from benchd.schemas import Cooldown, EvalLimit, Sustained
    from benchd.store import Store

    m = tool_models("valid")
    cands = [Candidate(id="llama", runtime="llama-server", model=str(m.target), args=["-t", "1"]),
             Candidate(id="mlx-lm", runtime="mlx_lm.server", model=str(m.mlx_dir)),
             Candidate(id="mlx-vlm", runtime="mlx_vlm.server", model=str(m.mlx_dir))]
    sweep = Sweep(name="tool-parsers", contexts=[256], gen_tokens=8, probes=1, warmup=0, eval_tier="none",
                  evals=["tools"], eval_limit=EvalLimit(tools=2), sustained=Sustained(tokens=0),
                  cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0), candidates=cands)
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=eval_suites)
    config.state_dir.mkdir(parents=True)
    store = Store(config.db_path)
    job, _ = store.create_job(sweep)
    asyncio.run(run_job(job.id, sweep, store, config, lambda e: None))
    rb = build_runbook(config, store, job.id)
    for cand in cands:
        got = [e for e in rb.evals if e.candidate == cand.id and e.tier == "tools"]
        assert len(got) == 2 and {e.parser for e in got} == {PARSER[cand.runtime]}, [(e.task, e.parser) for e in got]
        assert all(e.sources.get("parser") == "adapter.tool_parser" and "parser" not in e.null_reasons for e in got)
        summary = next(s for s in rb.eval_summary if s.candidate == cand.id and s.tier == "tools")
        assert summary.parser == PARSER[cand.runtime]
