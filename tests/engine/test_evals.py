"""The eval grader on known right and wrong answers, an endless loop, and a network attempt.

Random-weight test models fail every task, so the grader itself is what these tests exercise; the
engine tests drive real servers through the tiers.
"""

from __future__ import annotations

import sys
import time

import pytest

from benchd.engine.evals import EvalTask, extract_code, grade, pass_rate, tasks, to_result
from benchd.servers import sandbox

RIGHT = {
    "is-palindrome": """Here you go:
```python
def is_palindrome(s: str) -> bool:
    t = [c.lower() for c in s if c.isalnum()]
    return t == t[::-1]
```
""",
    "fibonacci": "```python\ndef fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n```",
    "flatten": """```py
def flatten(xs):
    out = []
    for x in xs:
        if isinstance(x, list):
            out.extend(flatten(x))
        else:
            out.append(x)
    return out
```""",
    "merge-intervals": """```python
def merge_intervals(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
```""",
    "to-roman": """<think>classic greedy</think>
```python
def to_roman(n):
    vals = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
            (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = ""
    for v, s in vals:
        while n >= v:
            out += s
            n -= v
    return out
```""",
}


def by_id(tier: str, task_id: str) -> EvalTask:
    return next(t for t in tasks(tier) if t.id == task_id)


def test_tiers():
    assert tasks("none") == []
    assert len(tasks("smoke")) == 5 and all(t.kind == "answer" for t in tasks("smoke"))
    assert len(tasks("standard")) == 5 and all(t.kind == "python" for t in tasks("standard"))
    assert len({t.id for t in tasks("smoke") + tasks("standard")}) == 10
    with pytest.raises(ValueError):
        tasks("hard")
    assert tasks("smoke")[0].messages()[0]["role"] == "user"


@pytest.mark.parametrize(
    "task_id,answer,passed",
    [
        ("arith-17-25", "42", True),
        ("arith-17-25", "17 + 25 = 42.", True),
        ("arith-17-25", "<think>17+25 is 41? no, 42</think>\n42", True),
        ("arith-17-25", "43", False),
        ("arith-17-25", "420", False),
        ("arith-17-25", "<think>it is 42", False),  # never answered
        ("arith-17-25", "", False),
        ("capital-france", "Paris.", True),
        ("capital-france", "paris", True),
        ("capital-france", "Parisian", False),
        ("capital-france", "Lyon", False),
        ("capital-france", " ".join(["Paris"] + ["word"] * 60), False),  # not terse
        ("reverse-stressed", "desserts", True),
        ("reverse-stressed", "stressed", False),
        ("sequence-doubling", "32", True),
        ("sequence-doubling", "64", False),
        ("letters-benchmark", "9", True),
        ("letters-benchmark", "10", False),
    ],
)
def test_smoke_checkers(task_id, answer, passed):
    ok, detail, sandboxed, limits, _ = grade(by_id("smoke", task_id), answer)
    assert ok is passed, detail
    assert sandboxed is None and detail and limits is None  # no code ran


@pytest.mark.parametrize("task_id", sorted(RIGHT))
def test_standard_right_answers_pass_sandboxed(task_id):
    ok, detail, sandboxed, limits, _ = grade(by_id("standard", task_id), RIGHT[task_id])
    assert ok, detail
    assert limits is not None and "RLIMIT_CPU" in limits and "RLIMIT_FSIZE=16 MiB" in limits
    assert sandboxed is sandbox.detect().isolated is True


@pytest.mark.parametrize(
    "task_id,answer,fragment",
    [
        ("fibonacci", "```python\ndef fib(n):\n    return n\n```", "fib(10)"),
        ("is-palindrome", "```python\ndef is_palindrome(s):\n    return s == s[::-1]\n```", "Panama"),
        ("flatten", "I cannot help with that.", "no code block"),
        ("to-roman", "```python\ndef to_roman(n) return 'I'\n```", "SyntaxError"),
        ("merge-intervals", "```python\ndef merge_intervals(x):\n    raise RuntimeError('boom')\n```", "boom"),
    ],
)
def test_standard_wrong_answers_fail_with_reason(task_id, answer, fragment):
    ok, detail, *_ = grade(by_id("standard", task_id), answer)
    assert not ok
    assert fragment in detail


def test_endless_loop_times_out():
    answer = "```python\ndef fib(n):\n    while True:\n        pass\n```"
    t0 = time.monotonic()
    ok, detail, *_ = grade(by_id("standard", "fibonacci"), answer, timeout_s=1.0)
    assert not ok and "timeout" in detail
    assert time.monotonic() - t0 < 30  # the 1 s timeout held, not a hang


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS gets no RLIMIT_AS (see test_darwin_gets_no_address_space_limit)")
def test_memory_blowup_is_limited():
    answer = "```python\ndef fib(n):\n    x = bytearray(4 << 30)\n    return 0\n```"
    ok, detail, _, limits, _ = grade(by_id("standard", "fibonacci"), answer)
    assert not ok and "MemoryError" in detail
    assert limits is not None and "RLIMIT_AS=1024 MiB" in limits and "not applied" not in limits


def test_darwin_gets_no_address_space_limit():
    """Issue 14, finding 1: xnu refuses RLIMIT_AS below the process's size, so on macOS it is left out
    and the record says so (the other limits still apply)."""
    limits, skipped = sandbox.planned_limits(11, platform="darwin")
    assert "RLIMIT_AS" not in limits and "RLIMIT_AS" in skipped and "macOS" in skipped["RLIMIT_AS"]
    assert limits["RLIMIT_CPU"] == (11, 12) and limits["RLIMIT_CORE"] == (0, 0)
    linux, none = sandbox.planned_limits(11, platform="linux")
    assert linux["RLIMIT_AS"] == (sandbox.MEMORY_LIMIT_BYTES,) * 2 and none == {}
    line = sandbox.describe_limits(limits, skipped, {})
    assert line.startswith("applied: RLIMIT_CPU=11 s") and "not applied: RLIMIT_AS not set on macOS" in line


def test_a_refused_limit_is_reported_and_the_answer_still_runs(monkeypatch):
    """The macOS failure reproduced here: soft above hard makes setrlimit raise the very error xnu gives
    for an address-space limit below the current size (`ValueError: current limit exceeds maximum
    limit`). Before the fix the bootstrap died with it and every answer failed."""
    real = sandbox.planned_limits

    def refused_as(cpu_s, platform=None):
        limits, skipped = real(cpu_s, platform)
        return {**limits, "RLIMIT_AS": (2 << 30, 1 << 30)}, skipped

    monkeypatch.setattr(sandbox, "planned_limits", refused_as)
    ok, detail, _, limits, _ = grade(by_id("standard", "fibonacci"), RIGHT["fibonacci"])
    assert ok, detail
    assert limits is not None and "RLIMIT_AS refused by the kernel (ValueError: current limit exceeds maximum limit)" in limits
    assert "RLIMIT_CPU=" in limits.split(";")[0] and "RLIMIT_AS=" not in limits.split(";")[0]
    wrong = "```python\ndef fib(n):\n    raise RuntimeError('boom')\n```"
    ok, detail, _, _, _ = grade(by_id("standard", "fibonacci"), wrong)
    assert not ok and "boom" in detail  # the refusal line never hides the answer's own error


def test_no_sandbox_refuses_to_run_code(monkeypatch):
    """Without a working sandbox the answer's code does not run at all, unless the sweep says
    eval_sandbox = "none": then it runs with rlimits only and says sandboxed=False."""
    monkeypatch.setattr(sandbox, "detect", lambda: sandbox.Sandbox("none", None, "no sandbox works here: test"))
    ok, detail, sandboxed, limits, failure = grade(by_id("standard", "fibonacci"), RIGHT["fibonacci"])
    assert not ok and detail.startswith("not run: no sandbox works here") and sandboxed is None and limits is None
    assert failure == "sandbox_unavailable"
    ok, _, sandboxed, limits, _ = grade(by_id("standard", "fibonacci"), RIGHT["fibonacci"], unsandboxed=True)
    assert ok and sandboxed is False and limits is not None


def test_extract_code_prefers_the_block_defining_entry():
    text = "```bash\npip install x\n```\n```python\nimport math\n```\n```python\ndef fib(n):\n    return 1\n```"
    assert extract_code(text, "fib") == "def fib(n):\n    return 1\n"
    assert extract_code("def fib(n):\n    return 1\n", "fib") == "def fib(n):\n    return 1\n"
    assert extract_code("no code", "fib") is None


def test_results_and_pass_rate():
    t = by_id("smoke", "arith-17-25")
    r1 = to_result("job-00001", "cand", t, grade(t, "42"))
    r2 = to_result("job-00001", "cand", t, grade(t, "41"))
    assert r1.passed and not r2.passed and r1.tier == "smoke" and r1.task == "arith-17-25" and r1.limits is None
    code = by_id("standard", "fibonacci")
    r3 = to_result("job-00001", "cand", code, grade(code, RIGHT["fibonacci"]))
    assert r3.passed and r3.limits is not None and r3.limits.startswith("applied: ")
    assert pass_rate([r1, r2]) == 0.5 and pass_rate([]) is None


async def test_grade_from_a_thread():
    """The engine grades via asyncio.to_thread while the loop runs; no preexec_fn, so this is safe."""
    import asyncio

    t = by_id("standard", "fibonacci")
    results = await asyncio.gather(*(asyncio.to_thread(grade, t, RIGHT["fibonacci"]) for _ in range(2)))
    assert all(r.passed for r in results)
