"""Schema problems a person can act on (`benchctl.problemtext`, used by `validate`'s every-problem pass):
the bad value beside the rule, the allowed values of an enum with "did you mean", and "did you mean"
plus the allowed fields for an unknown field, at every depth of the sweep."""

from __future__ import annotations

from typing import Any

from benchctl.sweepfile import schema_problems


def _sweep(**over: Any) -> dict[str, Any]:
    cand = {"id": "a", "runtime": "llama-server", "model": "/m", **over.pop("cand", {})}
    return {"name": "x", "contexts": [1], "gen_tokens": 1, "candidates": [cand], **over}


def test_every_problem_names_value_allowed_values_and_a_near_field() -> None:
    problems, _ = schema_problems(_sweep(colr=1, order="interleave", gen_tokens="many", contexts=[1, -5],
                                         cand={"runtime": "llama-srv"}))
    text = "\n".join(problems)
    assert "unknown field `colr`; did you mean" not in text  # nothing near: no guess, the list instead
    assert "unknown field `colr` (allowed: candidates, concurrency, contexts," in text
    assert ("'interleave' is not allowed; did you mean 'interleaved'? (allowed: 'blocked', 'interleaved', "
            "'sequential') (at `$.order`)") in text
    assert "Expected `int`, got 'many' (at `$.gen_tokens`)" in text
    assert "Expected `int` >= 1, got -5 (at `$.contexts[1]`)" in text
    assert "'llama-srv' is not allowed; did you mean 'llama-server'?" in text and "(at `$.candidates[0].runtime`)" in text
    nested, _ = schema_problems(_sweep(cand={"spec": {"kind": "draft", "draft_modle": "/d"}}))
    assert nested == ["unknown field `draft_modle`; did you mean `draft_model`? (allowed: draft_max, draft_model, kind) "
                      "(at `$.candidates[0].spec`)"]
