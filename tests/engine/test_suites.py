"""The public eval suites from their packages: loading from the cached wheels, the fixed subsets, the BFCL
grader against BFCL's own possible answers, and HumanEval's programs in the sandbox.

The wheels come from the cache (`eval_suites` fixture: `benchctl evals fetch`, as `make setup` runs it).
"""

from __future__ import annotations

import copy
import itertools
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from benchd.engine import bfcl, humaneval, suites, sweepcheck
from benchd.errors import BenchdError
from benchd.schemas import Candidate, Sweep

# BFCL's own checker rejects these possible answers fed back as calls in this version (an answer that is
# not of its parameter's declared type, a required parameter the answer leaves out, a standardised string
# that differs from the answer): the grader must agree with it.
BFCL_SELF_REJECTED = {
    "simple_python_96", "multiple_119", "parallel_multiple_12", "parallel_multiple_26", "live_simple_106-63-0",
    "live_simple_112-68-0", "live_simple_165-98-0", "live_simple_189-114-0",
}


@pytest.fixture(scope="module")
def tools(eval_suites: Path) -> suites.SuiteData:
    return suites.load("tools", eval_suites)


@pytest.fixture(scope="module")
def code(eval_suites: Path) -> suites.SuiteData:
    return suites.load("code", eval_suites)


# -------------------------------------------------------------------------------------- provenance

def test_suites_load_from_the_cached_wheels_with_their_provenance(tools: suites.SuiteData,
                                                                 code: suites.SuiteData, eval_suites: Path) -> None:
    assert len(code.tasks) == suites.TASK_COUNTS["code"]
    assert len(tools.tasks) == suites.TASK_COUNTS["tools"]
    assert {t.category for t in tools.tasks} == set(suites.BFCL_CATEGORIES)
    assert all(t.answer is None for t in tools.tasks if t.category == "irrelevance")
    assert all(t.answer for t in tools.tasks if t.category != "irrelevance")
    for data in (code, tools):
        prov = data.provenance(["x"])
        pkg = data.package
        with zipfile.ZipFile(pkg.cache_path(eval_suites)) as zf:
            meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            text = zf.read(meta).decode()
            has_license_file = any(n.endswith(".dist-info/LICENSE") for n in zf.namelist())
            assert all(f in zf.namelist() for f in data.files)
        assert f"Version: {pkg.version}" in text
        assert prov["package"] == pkg.name and prov["version"] == pkg.version and prov["task_ids"] == ["x"]
        assert len(prov["sha256"]) == 64
        if pkg.suite == "tools":  # recorded exactly as the package states it
            assert "License: Apache 2.0" in text and not has_license_file
            assert prov["license"].startswith("Apache 2.0")
        else:
            assert "License:" not in text and has_license_file
            assert prov["license"].startswith("MIT")


def test_the_sweep_check_refuses_missing_data_at_submit(tmp_path: Path, eval_suites: Path) -> None:
    sweep = Sweep(name="s", contexts=[256], gen_tokens=8, evals=["code", "tools"],
                  candidates=[Candidate(id="a", runtime="llama-server", model="/m.gguf")])
    [problem] = sweepcheck.eval_data_problems(sweep, tmp_path)
    assert problem.field == "$.evals" and "benchctl evals fetch" in problem.message
    assert any(p.field == "$.evals" for p in sweepcheck.submit_problems(sweep, tmp_path))
    assert sweepcheck.eval_data_problems(sweep, eval_suites) == []


def test_missing_data_names_the_fetch_command(tmp_path: Path) -> None:
    assert suites.missing(["code", "tools"], tmp_path) == ["code", "tools"]
    with pytest.raises(BenchdError) as exc:
        suites.require(["tools"], tmp_path)
    assert exc.value.code == "eval_data_missing" and exc.value.field == "evals"
    assert "benchctl evals fetch" in str(exc.value)
    with pytest.raises(BenchdError) as unknown:
        suites.load("nope", tmp_path)
    assert unknown.value.field == "evals"


# ------------------------------------------------------------------------------------------- subsets

def test_subsets_are_fixed_stratified_and_even(tools: suites.SuiteData, code: suites.SuiteData) -> None:
    a, b = suites.subset(tools, 60), suites.subset(tools, 60)
    assert [t.id for t in a] == [t.id for t in b] and len(a) == 60
    per_cat = {c: sum(t.category == c for t in a) for c in suites.BFCL_CATEGORIES}
    sizes = {c: sum(t.category == c for t in tools.tasks) for c in suites.BFCL_CATEGORIES}
    for c in suites.BFCL_CATEGORIES:  # each category's share within one task of proportional
        assert abs(per_cat[c] - 60 * sizes[c] / len(tools.tasks)) < 1.0 + 1e-9
    small = suites.subset(tools, 3)
    assert len(small) == 3
    assert len(suites.subset(tools, None)) == len(tools.tasks) == len(suites.subset(tools, 10**6))
    c40 = suites.subset(code, 40)
    idx = [list(code.tasks).index(t) for t in c40]
    gaps = {j - i for i, j in itertools.pairwise(idx)}
    assert len(c40) == 40 and idx[0] == 0 and max(gaps) - min(gaps) <= 1


# ------------------------------------------------------------------------------------- BFCL grader

def test_tools_convert_bfcl_types_and_dotted_names(tools: suites.SuiteData) -> None:
    openapi = {"string", "integer", "number", "boolean", "array", "object"}

    def types(schema: dict[str, Any]) -> list[str]:
        out = [schema["type"]] if "type" in schema else []
        for sub in schema.get("properties", {}).values():
            out += types(sub)
        if isinstance(schema.get("items"), dict):
            out += types(schema["items"])
        return out

    dotted = 0
    for t in tools.tasks:
        converted = bfcl.openai_tools(t.data["function"])
        for fn, orig in zip(converted, t.data["function"], strict=True):
            name = fn["function"]["name"]
            assert "." not in name
            assert bfcl.original_name(name, t.data["function"]) == orig["name"]
            dotted += "." in orig["name"]
            assert set(types(fn["function"]["parameters"])) <= openapi, t.id
    assert dotted > 0
    assert "." in next(t for t in tools.tasks if t.id == "parallel_0").data["function"][0]["name"]  # unchanged


def test_every_possible_answer_passes_when_fed_back(tools: suites.SuiteData) -> None:
    rejected = {}
    for t in tools.tasks:
        if t.answer is None:
            continue
        v = bfcl.grade(t.category, t.data["function"], t.answer, bfcl.reference_calls(t.answer))
        if not v.passed:
            rejected[t.id] = v
    assert set(rejected) == BFCL_SELF_REJECTED
    assert all(v.failure == "argument_mismatch" for v in rejected.values())


def _mutants(t: suites.Task) -> list[tuple[str, list[bfcl.Call], str, str | None]]:
    """(what, calls, expected class, expected parameter) for one simple task."""
    call = bfcl.reference_calls(t.answer or [])[0]
    fn = t.data["function"][0]
    props = fn["parameters"]["properties"]
    out: list[tuple[str, list[bfcl.Call], str, str | None]] = [
        ("unknown function", [bfcl.Call("no_such_function", call.arguments)], "wrong_function", None),
        ("extra parameter", [bfcl.Call(call.name, {**call.arguments, "zz_extra": 1})], "argument_mismatch", "zz_extra"),
        ("two calls", [call, call], "extra_call", None),
        ("no call", [], "no_call", None),
    ]
    required = [p for p in fn["parameters"].get("required", []) if p in call.arguments]
    if required:
        p = required[0]
        args = {k: v for k, v in call.arguments.items() if k != p}
        out.append(("missing required", [bfcl.Call(call.name, args)], "argument_mismatch", p))
        wrong = [1, 2] if props[p]["type"] in ("string", "integer", "float", "boolean", "dict") else "x"
        out.append(("wrong type", [bfcl.Call(call.name, {**call.arguments, p: wrong})], "argument_mismatch", p))
    return out


def test_mutated_answers_fail_with_the_right_class(tools: suites.SuiteData) -> None:
    checked = 0
    for t in tools.tasks:
        if t.category not in ("simple_python", "live_simple") or t.id in BFCL_SELF_REJECTED:
            continue
        for what, calls, cls, param in _mutants(t):
            v = bfcl.grade(t.category, t.data["function"], t.answer, calls)
            assert not v.passed and v.failure == cls, (t.id, what, v)
            if param is not None:
                assert v.parameter == param, (t.id, what, v)
            checked += 1
    assert checked > 0


def test_parallel_calls_match_in_any_order_and_irrelevance_wants_none(tools: suites.SuiteData) -> None:
    t = next(t for t in tools.tasks if t.category == "parallel" and t.answer and len(t.answer) == 2
             and t.id not in BFCL_SELF_REJECTED)
    calls = bfcl.reference_calls(t.answer or [])
    assert bfcl.grade(t.category, t.data["function"], t.answer, list(reversed(calls))).passed
    bad = [calls[0], bfcl.Call(calls[1].name, {k: "wrong value" for k in calls[1].arguments})]
    v = bfcl.grade(t.category, t.data["function"], t.answer, bad)
    assert v.failure == "argument_mismatch" and v.parameter in calls[1].arguments
    irr = next(t for t in tools.tasks if t.category == "irrelevance")
    assert bfcl.grade(irr.category, irr.data["function"], None, []).passed
    some = bfcl.Call(bfcl.openai_name(irr.data["function"][0]["name"]), {})
    assert bfcl.grade(irr.category, irr.data["function"], None, [some]).failure == "extra_call"


def test_int_for_float_and_standardised_strings_pass(tools: suites.SuiteData) -> None:
    t = next(t for t in tools.tasks if t.category == "simple_python" and t.answer
             and any(isinstance(v[0], float) and v[0] == int(v[0]) for v in next(iter(t.answer[0].values())).values()
                     if v and v[0] != ""))
    call = bfcl.reference_calls(t.answer or [])[0]
    as_int = {k: int(v) if isinstance(v, float) and v == int(v) else v for k, v in call.arguments.items()}
    assert bfcl.grade(t.category, t.data["function"], t.answer, [bfcl.Call(call.name, as_int)]).passed
    s = next(t for t in tools.tasks if t.id == "parallel_0")
    calls = [bfcl.Call(c.name, {**c.arguments, "artist": c.arguments["artist"].upper().replace(" ", "  ")})
             for c in bfcl.reference_calls(s.answer or [])]
    assert bfcl.grade(s.category, s.data["function"], s.answer, calls).passed


def test_nested_dict_parameters_are_checked_key_by_key(tools: suites.SuiteData) -> None:
    t = next(t for t in tools.tasks if t.answer and t.id not in BFCL_SELF_REJECTED and t.category == "simple_python"
             and any(isinstance(v[0], dict) for v in next(iter(t.answer[0].values())).values() if v))
    call = bfcl.reference_calls(t.answer or [])[0]
    assert bfcl.grade(t.category, t.data["function"], t.answer, [call]).passed
    key = next(k for k, v in call.arguments.items() if isinstance(v, dict))
    broken = copy.deepcopy(call.arguments)
    broken[key]["zz_unknown_key"] = 1
    v = bfcl.grade(t.category, t.data["function"], t.answer, [bfcl.Call(call.name, broken)])
    assert v.failure == "argument_mismatch" and v.parameter == key and "zz_unknown_key" in v.detail


# ---------------------------------------------------------------------------------------- HumanEval

FULL = "Sure:\n```python\n{imports}{prompt}{body}```\nThat is it."


def test_completion_rule_on_both_answer_shapes() -> None:
    task = {"prompt": "import math\n\n\ndef area(r: float) -> float:\n    \"\"\"Area of a circle.\"\"\"\n",
            "entry_point": "area", "test": "def check(f):\n    assert abs(f(1.0) - math.pi) < 1e-9\n",
            "canonical_solution": "    return math.pi * r * r\n"}
    body = "```python\n    return math.pi * r * r\n```"
    assert humaneval.completion(body, "area") == "    return math.pi * r * r\n"
    full = "<think>hm</think>```python\nimport math\n\ndef area(r):\n    return math.pi * r ** 2\n```"
    comp = humaneval.completion(full, "area")
    assert comp.startswith("\nimport math") and "def area(r)" in comp
    for answer in (body, full, "def area(r):\n    return math.pi * r * r\n"):
        assert humaneval.grade(task, answer).passed, answer
    # the answer's own import is kept, the prompt's helper too
    helper = dict(task, prompt="def _sq(x):\n    return x * x\n\n\ndef area(r: float) -> float:\n    \"\"\"A.\"\"\"\n",
                  test="import math\ndef check(f):\n    assert abs(f(1.0) - math.pi) < 1e-9\n")
    assert humaneval.grade(helper, "```python\nimport math\ndef area(r):\n    return math.pi * _sq(r)\n```").passed


@pytest.mark.slow
def test_canonical_solutions_pass_in_both_shapes(code: suites.SuiteData) -> None:
    for t in code.tasks:
        d = t.data
        r = humaneval.grade(d, "```python\n" + d["canonical_solution"] + "```")
        assert r.passed, (t.id, r.detail)
    for t in suites.subset(code, 20):
        d = t.data
        r = humaneval.grade(d, FULL.format(imports="", prompt=d["prompt"], body=d["canonical_solution"]))
        assert r.passed, (t.id, r.detail)


def test_wrong_answer_fails_and_endless_loop_is_killed(code: suites.SuiteData) -> None:
    d = code.tasks[0].data
    entry = d["entry_point"]
    wrong = humaneval.grade(d, f"```python\ndef {entry}(*args):\n    return None\n```")
    assert not wrong.passed and not wrong.detail.startswith("timeout") and wrong.failure == "wrong_answer"
    loop = humaneval.grade(d, f"```python\ndef {entry}(*args):\n    while True:\n        pass\n```", timeout_s=1.0)
    assert not loop.passed and loop.detail.startswith("timeout") and loop.failure == "timeout"
    empty = humaneval.grade(d, "")
    assert not empty.passed and empty.failure == "no_code"


def test_jsonl_rows_keep_bfcl_question_shape(tools: suites.SuiteData) -> None:
    for t in tools.tasks:
        q = t.data["question"]
        assert isinstance(q, list) and isinstance(q[0], list) and all("role" in m for m in q[0]), t.id
    json.dumps(tools.tasks[0].data)
