"""Schema problems a person can act on (`benchctl.problemtext`, used by `validate`'s every-problem pass):
the bad value beside the rule, the allowed values of an enum with "did you mean", and "did you mean"
plus the allowed fields for an unknown field, at every depth of the sweep."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest

from benchctl.sweepfile import schema_problems
from benchd.schemas import Sweep


def _sweep(**over: Any) -> dict[str, Any]:
    cand = {"id": "a", "runtime": "llama-server", "model": "/m", **over.pop("cand", {})}
    return {"name": "x", "contexts": [1], "gen_tokens": 1, "candidates": [cand], **over}


def test_every_problem_names_value_allowed_values_and_a_near_field() -> None:
    problems, _ = schema_problems(_sweep(colr=1, order="interleave", gen_tokens="many", contexts=[1, -5],
                                         cand={"runtime": "llama-srv"}))
    text = "\n".join(problems)
    assert "unknown field `colr`; did you mean" not in text  # nothing near: no guess, the list instead
    assert "unknown field `colr` (allowed: candidates, concurrency, contexts," in text
    assert ("order: 'interleave' is not allowed; did you mean 'interleaved'? (allowed: 'blocked', 'interleaved', "
            "'sequential')") in problems
    assert "gen_tokens: Expected `int`, got 'many'" in problems
    assert "contexts[1]: Expected `int` >= 1, got -5" in problems
    assert "candidates[0] (a).runtime: 'llama-srv' is not allowed; did you mean 'llama-server'?" in text
    assert "colr: unknown field `colr`" in text  # an unknown field is named as the field it would be
    nested, _ = schema_problems(_sweep(cand={"spec": {"kind": "draft", "draft_modle": "/d"}}))
    assert nested == ["candidates[0] (a).spec.draft_modle: unknown field `draft_modle`; did you mean `draft_model`? "
                      "(allowed: draft_max, draft_model, kind)"]


def test_every_bad_item_of_a_list_is_named_and_a_whole_list_problem_still_shows() -> None:
    """msgspec stops at a list's first bad item; each item is checked alone, so all of them show at once.
    A list whose items are each fine but wrong together (repeats) keeps its one whole-list problem."""
    problems, _ = schema_problems(_sweep(contexts=[256, -5, 1e9, 512]))
    assert problems == ["contexts[1]: Expected `int` >= 1, got -5", "contexts[2]: Expected `int`, got 1000000000.0"]
    repeated, _ = schema_problems(_sweep(contexts=[256, 256], colr=[1, 2]))
    assert [p for p in repeated if "repeat" in p] == ["contexts: must not repeat"]  # named, not "(top level)"
    assert len([p for p in repeated if "colr" in p]) == 1  # an unknown list field: one problem, not one per item


def test_an_invalid_candidate_shows_every_field_problem_at_once() -> None:
    """A bad id does not hide the candidate's other problems: each field is checked alone, and a missing
    required field is named; a valid candidate beside it is kept."""
    data = _sweep(cand={"id": "Bad id!", "runtime": "llama-srv", "args": "-fa", "colr": 1})
    data["candidates"] += [{"runtime": "llama-server", "model": "/m"}, {"id": "b", "runtime": "llama-server"}]
    problems, valid = schema_problems(data)
    assert [p.split(":")[0] for p in problems] == [
        "candidates[0] (Bad id!).id", "candidates[0] (Bad id!).runtime", "candidates[0] (Bad id!).args",
        "candidates[0] (Bad id!).colr", "candidates[1].id"]
    assert problems[-1] == "candidates[1].id: missing (a required field)"
    assert [(i, c.id) for i, c in valid] == [(2, "b")]


def test_one_field_style() -> None:
    """Every problem names its field one way: dots and [index], a candidate's id beside its index."""
    from benchctl.problemtext import field_name

    data = {"candidates": [{"id": "a"}, {"id": 7}], "cooldown": {}}
    assert field_name("$", data) == "(top level)"
    assert field_name("$.contexts[1]", data) == "contexts[1]"
    assert field_name("$.cooldown.max_seconds", data) == "cooldown.max_seconds"
    assert field_name("$.candidates[0].spec.draft_model", data) == "candidates[0] (a).spec.draft_model"
    assert field_name("$.candidates[1].args[2]", data) == "candidates[1].args[2]"  # no usable id: the index alone
    assert field_name("$.candidates[5]", data) == "candidates[5]"


def test_a_dict_entry_is_named_by_its_key() -> None:
    """msgspec says `margins[...]` for "some value of this dict" and "at `key` in `$.env`" for a refused key;
    the problem names the entry (the one value, or the keys, the schema refuses)."""
    problems, _ = schema_problems(_sweep(margins={"gen_tps": 5, "ttft_ms": 500},
                                         cand={"env": {"OK": "1", "B-2": "x"}, "matrix": {"-t": ["1"], "-ub": []}}))
    assert "margins.ttft_ms: Expected `float` <= 100.0, got 500" in problems
    assert any(p.startswith("candidates[0] (a).env: key 'B-2': Expected `str` matching regex") for p in problems)
    two, _ = schema_problems(_sweep(margins={"gen_tps": 500, "ttft_ms": 500}))
    assert two == ["margins[...]: Expected `float` <= 100.0"]  # not one culprit: msgspec's words stand


def test_a_rule_across_fields_carries_its_value_once() -> None:
    """The API answers a struct's rule with the value that broke it; validate, which adds a bad value to a
    rule, does not add it twice."""
    bad = _sweep(probes={"min": 10, "max": 8}, cooldown={"seconds": 9, "max_seconds": 1})
    problems, _ = schema_problems(bad)
    assert "probes.min: must be <= max (8), got 10" in problems
    assert "cooldown.max_seconds: must be >= seconds (9), got 1" in problems
    with pytest.raises(msgspec.ValidationError, match=r"min: must be <= max \(8\), got 10"):
        msgspec.convert(bad, Sweep)


@pytest.mark.parametrize("bad", [
    {"name": "x\n"}, {"cand": {"id": "a\n"}}, {"cand": {"env": {"A\n": "v"}}}, {"cand": {"spec": {"kind": "draft\n"}}},
])
def test_a_final_newline_does_not_pass_a_pattern(bad: dict[str, Any]) -> None:
    """msgspec matches a pattern with `re.search`, whose `$` also matches before a final newline: every pattern
    ends `$(?!\\n)`, so an id, name or env key with a newline at its end is refused like any other bad one."""
    with pytest.raises(msgspec.ValidationError, match="matching regex"):
        msgspec.convert(_sweep(**bad), Sweep)
    from benchd.schemas import CLOCK_TIME_PATTERN, JOB_ID_PATTERN, RUNBOOK_ID_PATTERN, RecheckSettings

    assert not any(re.search(p, v + "\n") for p, v in ((JOB_ID_PATTERN, "20261207-094629-e80345e1a6"),
                                                       (RUNBOOK_ID_PATTERN, "2026-12-07-20261207-094629-e80345e1a6"),
                                                       (CLOCK_TIME_PATTERN, "03:00")))
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"at": "03:00\n"}, RecheckSettings)
