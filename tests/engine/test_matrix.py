"""The candidate matrix (issue 38): one candidate per combination, ids derived from the base id and the
values, what each adds recorded; reserved flags, values outside the pinned build's choices, collisions and
more than 64 candidates refused; a combination the runtime refuses as a whole left out with why."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest

from benchd.engine import matrix, sweepcheck
from benchd.schemas import CANDIDATE_ID_PATTERN, Sweep


def sweep(*cands: dict[str, Any], **kw: Any) -> Sweep:
    return msgspec.convert({"name": "m", "contexts": [64], "gen_tokens": 4, "candidates": list(cands), **kw}, Sweep)


def base(**kw: Any) -> dict[str, Any]:
    return {"id": "qwen", "runtime": "llama-server", "model": "/m.gguf", "args": ["-t", "2"], **kw}


def test_every_combination_in_file_order_with_readable_ids_and_its_record() -> None:
    got = matrix.expand(sweep(base(matrix={"-ub": ["256", 512], "-fa": ["on", "off"]}), {
        "id": "other", "runtime": "llama-server", "model": "/o.gguf"}))
    assert not got.problems
    ids = [c.id for c in got.sweep.candidates]
    assert ids == ["qwen.ub256.fa-on", "qwen.ub256.fa-off", "qwen.ub512.fa-on", "qwen.ub512.fa-off", "other"]
    assert all(re.match(CANDIDATE_ID_PATTERN, i) for i in ids)
    first = got.sweep.candidates[0]
    assert first.args == ["-t", "2", "-ub", "256", "-fa", "on"]  # the base's args, then what the point adds
    assert first.from_matrix is not None and first.from_matrix.base == "qwen"
    assert first.from_matrix.values == {"-ub": "256", "-fa": "on"} and first.from_matrix.args == ["-ub", "256", "-fa", "on"]
    assert not first.matrix
    assert [(m.base, m.keys, m.combinations) for m in got.matrices] == [("qwen", ["-ub", "-fa"], 4)]
    again = matrix.expand(got.sweep)  # idempotent: the engine's call on a stored (expanded) sweep
    assert again.sweep == got.sweep and not again.matrices
    assert sweepcheck.expand is matrix.expand  # the one expansion the sweep check exports
    assert sweepcheck.submit_problems(got.sweep) == []


def test_spec_ctx_size_and_switches_are_keys() -> None:
    got = matrix.expand(sweep(base(matrix={
        "spec": [False, {"draft_model": "/models/draft-noisy.gguf", "draft_max": 8}],
        "ctx_size": [4096, 8192], "--mlock": [True, False], "-t": ["-1"]}, args=[])))
    assert not got.problems
    by_id = {c.id: c for c in got.sweep.candidates}
    assert sorted(by_id)[:2] == ["qwen.nospec.ctx4096.mlock.tm1", "qwen.nospec.ctx4096.no-mlock.tm1"]
    drafted = by_id["qwen.spec-draft-draft-noisy-n8.ctx8192.mlock.tm1"]
    assert drafted.spec is not None and drafted.spec.draft_model == "/models/draft-noisy.gguf"
    assert drafted.ctx_size == 8192 and drafted.args == ["--mlock", "-t", "-1"]
    assert drafted.from_matrix is not None and drafted.from_matrix.values["spec"].startswith("kind draft")
    plain = by_id["qwen.nospec.ctx4096.no-mlock.tm1"]
    assert plain.spec is None and plain.args == ["-t", "-1"] and plain.ctx_size == 4096


def test_a_combination_the_pinned_build_refuses_is_left_out_and_recorded() -> None:
    """The pinned llama.cpp refuses a quantized V cache with -fa off (src/llama-context.cpp); a quantized
    K cache alone starts without flash attention, so it stays."""
    got = matrix.expand(sweep(base(matrix={"-fa": ["off", "on"], "-ctv": ["f16", "q8_0"], "-ctk": ["q8_0"]})))
    assert not got.problems
    assert [c.id for c in got.sweep.candidates] == ["qwen.fa-off.ctv-f16.ctk-q8_0", "qwen.fa-on.ctv-f16.ctk-q8_0",
                                                    "qwen.fa-on.ctv-q8_0.ctk-q8_0"]
    (ident, why), = got.matrices[0].left_out
    assert ident == "qwen.fa-off.ctv-q8_0.ctk-q8_0" and "quantized V cache" in why and "flash attention" in why
    (line,) = got.sweep.deferred
    assert line.axis == f"candidate {ident}" and "left out of 'qwen'" in line.reason
    # the same combination as plain args is a problem of the candidate (its server would not start)
    plain = sweep(base(args=["-fa", "off", "-ctv", "q4_0"]))
    assert [p.code for p in sweepcheck.submit_problems(plain)] == ["refused_combination"]
    # every combination refused: nothing to run is a problem
    none_left = matrix.expand(sweep(base(matrix={"-fa": ["off"], "-ctv": ["q8_0"]})))
    assert [p.code for p in none_left.problems] == ["matrix_empty"]


@pytest.mark.parametrize(("mat", "code", "field", "words"), [
    ({"-c": ["4096"]}, "reserved_arg", "$.candidates[0].matrix.-c", "use `ctx_size`"),
    ({"--port": ["1"]}, "reserved_arg", "$.candidates[0].matrix.--port", "free port"),
    ({"-t": ["4"]}, "matrix_conflict", "$.candidates[0].matrix.-t", "set by the candidate itself"),
    ({"-fa": ["on", "maybe"]}, "matrix_value", "$.candidates[0].matrix.-fa[1]", "'maybe' is not a value of -fa"),
    ({"-ctk": ["q8_0", "q3_k"]}, "matrix_value", "$.candidates[0].matrix.-ctk[1]", "kv_cache_types"),
    ({"-ub": ["256", "lots"]}, "matrix_value", "$.candidates[0].matrix.-ub[1]", "takes an integer"),
    ({"-ub": ["0"]}, "matrix_value", "$.candidates[0].matrix.-ub[0]", ">= 1"),
    ({"-fa": [True]}, "matrix_value", "$.candidates[0].matrix.-fa[0]", "takes a value"),
    ({"-ub": ["256", 256]}, "matrix_value", "$.candidates[0].matrix.-ub[1]", "repeated"),
    ({"-ub": []}, "matrix_value", "$.candidates[0].matrix.-ub", "'-ub' has no values"),
    ({"ctx_size": ["big"]}, "matrix_value", "$.candidates[0].matrix.ctx_size[0]", "not an integer"),
    ({"-ub": [{"kind": "mtp"}]}, "matrix_value", "$.candidates[0].matrix.-ub[0]", "`spec` only"),
    ({"-a": ["x", "X"]}, "matrix_id_collision", "$.candidates", "derived twice"),
    ({"--some-flag": ["v" * 60]}, "matrix_id", "$.candidates[0].matrix", "at most 63"),
])
def test_refusals_name_the_field(mat: dict[str, Any], code: str, field: str, words: str) -> None:
    got = matrix.expand(sweep(base(matrix=mat)))
    assert [(p.code, p.field) for p in got.problems] == [(code, field)], got.problems
    assert words in got.problems[0].message
    assert got.sweep.candidates[0].id == "qwen"  # refused: the sweep is returned as it came


def test_more_than_64_candidates_are_refused_with_the_count() -> None:
    one = matrix.expand(sweep(base(matrix={"-ub": [str(n) for n in range(1, 14)], "-b": [str(n) for n in range(1, 6)]})))
    assert [p.code for p in one.problems] == ["too_many_candidates"]
    assert "expands to 65 candidates" in one.problems[0].message
    two = matrix.expand(sweep(base(matrix={"-ub": [str(n) for n in range(1, 41)]}),
                              base(id="b", args=[], matrix={"-ub": [str(n) for n in range(1, 31)]})))
    assert [p.code for p in two.problems] == ["too_many_candidates"]
    assert "expand to 70 candidates (qwen: 40, b: 30" in two.problems[0].message


def test_an_expanded_id_may_not_repeat_a_listed_one() -> None:
    got = matrix.expand(sweep(base(matrix={"-ub": ["256"]}), {"id": "qwen.ub256", "runtime": "llama-server",
                                                                 "model": "/o.gguf"}))
    assert [p.code for p in got.problems] == ["matrix_id_collision"] and "listed" in got.problems[0].message


def test_external_and_mlx_refusals() -> None:
    ext = matrix.expand(sweep({"id": "e", "runtime": "openai", "url": "http://127.0.0.1:1", "request_model": "m",
                               "matrix": {"-t": ["1"]}}))
    assert [p.code for p in ext.problems] == ["matrix_external"]
    mlx = matrix.expand(sweep({"id": "x", "runtime": "mlx_lm.server", "model": "/d", "matrix": {"--model": ["/y"]}}))
    assert [p.code for p in mlx.problems] == ["reserved_arg"]
    # an mlx ctx_size point expands, and the adapter's own check refuses it as for any candidate
    ctx = matrix.expand(sweep({"id": "x", "runtime": "mlx_lm.server", "model": "/d", "matrix": {"ctx_size": [4096]}}))
    assert not ctx.problems
    assert [p.code for p in sweepcheck.submit_problems(ctx.sweep)] == ["unsupported_ctx_size"]


def test_own_binary_is_not_held_to_the_pinned_choices() -> None:
    """Another build may take other values (a newer KV type): only the pinned build's choices are known."""
    got = matrix.expand(sweep(base(binary="/opt/llama/llama-server", matrix={"-ctk": ["turbo3"], "-fa": ["off"],
                                                                             "-ctv": ["q8_0"]})))
    assert not got.problems and len(got.sweep.candidates) == 1 and not got.matrices[0].left_out
