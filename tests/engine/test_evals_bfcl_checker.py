"""benchd's BFCL grader against BFCL's own AST checker, on every task of the pinned suite.

BFCL's checker is imported from the `bfcl-eval` wheel that `benchctl evals fetch` put in the cache (read
as a zip, in a subprocess: its `constants.model_config` pulls every model SDK, so only that module is
replaced, by a one-model table with `underscore_to_dot`, as BFCL sets for OpenAI-style function calling).
No BFCL code is copied into the project. Cases per task: the possible answer's first values, and mutants
that hit the three rules that once differed (the dotted name, a nested type failure, `""`/`[]` for an
optional value), plus dropped, emptied and wrongly typed parameters.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchd.engine import bfcl, suites

RUNNER = r'''
import json, sys, types
sys.path.insert(0, sys.argv[1])
stub = types.ModuleType("bfcl_eval.constants.model_config")
class Config:
    underscore_to_dot = True
stub.MODEL_CONFIG_MAPPING = {"benchd/fc": Config()}
sys.modules["bfcl_eval.constants.model_config"] = stub
from bfcl_eval.constants.enums import Language
from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
out = []
for case in json.load(sys.stdin):
    try:
        out.append(bool(ast_checker(case["functions"], case["output"], case["answer"], Language.PYTHON,
                                    case["category"], "benchd_fc")["valid"]))
    except Exception as exc:  # BFCL's checker crashes on some inputs: compared as "no verdict"
        out.append(None)
json.dump(out, sys.stdout)
'''


def _mutants(task: suites.Task) -> list[tuple[str, list[bfcl.Call]]]:
    assert task.answer is not None
    ref = bfcl.reference_calls(task.answer)
    out: list[tuple[str, list[bfcl.Call]]] = [("reference", ref)]
    first = ref[0]
    fn = next((f for f in task.data["function"] if bfcl.openai_name(f["name"]) == first.name), None)
    dotted = next(iter(task.answer[0]))
    if "." in dotted:
        out.append(("dotted name", [bfcl.Call(dotted, first.arguments), *ref[1:]]))
    props = (fn or {}).get("parameters", {}).get("properties", {})
    allowed = next(iter(task.answer[0].values()))
    for param in sorted(set(props) | set(allowed)):
        kind = props.get(param, {}).get("type")
        variants: dict[str, Any] = {"empty string": "", "empty list": [], "nested wrong type": [{"k": [1]}],
                                    "dict": {"x": 1}, "number": 7}
        if kind in ("array", "tuple"):
            inner = props[param].get("items", {}).get("type")
            variants["inner wrong type"] = [1.5] if inner == "string" else ["x"]
        for what, value in variants.items():
            args = copy.deepcopy(first.arguments)
            args[param] = value
            out.append((f"{param} = {what}", [bfcl.Call(first.name, args), *ref[1:]]))
        if param in first.arguments:
            args = {k: v for k, v in first.arguments.items() if k != param}
            out.append((f"{param} dropped", [bfcl.Call(first.name, args), *ref[1:]]))
    return out


@pytest.fixture(scope="module")
def wheel(eval_suites: Path) -> Path:
    return suites.PACKAGES["tools"].cache_path(eval_suites)


def test_the_grader_agrees_with_bfcls_checker_on_every_task(wheel: Path, eval_suites: Path) -> None:
    data = suites.load("tools", eval_suites)
    cases: list[dict[str, Any]] = []
    ours: list[bool] = []
    labels: list[str] = []
    for task in data.tasks:
        if task.answer is None:  # irrelevance: BFCL checks "no call decoded", not the AST
            continue
        for label, calls in _mutants(task):
            cases.append({"functions": task.data["function"], "category": task.category, "answer": task.answer,
                          "output": [{c.name: c.arguments} for c in calls]})
            ours.append(bfcl.grade(task.category, task.data["function"], task.answer, calls).passed)
            labels.append(f"{task.id}: {label}")
    proc = subprocess.run([sys.executable, "-I", "-c", RUNNER, str(wheel)], input=json.dumps(cases),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs: list[bool | None] = json.loads(proc.stdout)
    assert len(theirs) == len(ours)
    judged = [(o, t, lab) for o, t, lab in zip(ours, theirs, labels, strict=True) if t is not None]
    differ = [lab for o, t, lab in judged if o != t]
    assert len(judged) > 10_000 and len(judged) >= 0.95 * len(cases)
    assert differ == [], f"{len(differ)} of {len(judged)} differ, e.g. {differ[:10]}"
    # the three rules are exercised, both ways
    assert any("dotted name" in lab for lab in labels)
    assert any(t is True and "empty list" in lab for _, t, lab in judged)
    assert any(t is False and "inner wrong type" in lab for _, t, lab in judged)
